/* test_request.c - request validation, defaults, cache key, SHA-256. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/request.h"
#include "common/result.h"
#include "common/sha256.h"

static void test_sha256_vectors(void **state)
{
    (void)state;
    char hex[65];
    kg_sha256_hex("", 0, hex);
    assert_string_equal(
        hex,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    kg_sha256_hex("abc", 3, hex);
    assert_string_equal(
        hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* two-block message (FIPS 180-4 example) */
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    kg_sha256_hex(m, strlen(m), hex);
    assert_string_equal(
        hex,
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a' fed in uneven pieces */
    kg_sha256 s;
    uint8_t dig[32];
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    kg_sha256_init(&s);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        kg_sha256_update(&s, chunk, n);
        left -= n;
    }
    kg_sha256_final(&s, dig);
    kg_sha256_tohex(dig, hex);
    assert_string_equal(
        hex,
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* A deterministic test pattern. */
static void pattern(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)((i * 7 + 3) % 251);
}

/*
 * The SHA instructions (when this CPU has them) and the portable code
 * agree with Python's hashlib, for every length around the block and
 * padding boundaries and for input fed in odd pieces.
 */
static void test_sha256_paths(void **state)
{
    (void)state;
    size_t n = 100000;
    uint8_t *b = malloc(n), dig[32], d2[32];
    assert_non_null(b);
    pattern(b, n);
    char hex[65];
    for (int accel = 0; accel < 2; accel++) {
        kg_sha256 s, all;
        kg_sha256_init(&s);
        if (!accel)
            s.accel = 0;
        kg_sha256_update(&s, b, n);
        kg_sha256_final(&s, dig);
        kg_sha256_tohex(dig, hex);
        /* hashlib.sha256(bytes((i*7+3)%251 for i in range(100000))) */
        assert_string_equal(hex, "5889ab642baa09c41570b8888cbf45f3762152cea24"
                                 "90ea6b150208a99c92b10");
        /* sha256 over the digests of the prefixes of length 0..299 */
        kg_sha256_init(&all);
        for (size_t len = 0; len < 300; len++) {
            kg_sha256_init(&s);
            if (!accel)
                s.accel = 0;
            /* in pieces of 1, 2, 3... bytes */
            for (size_t off = 0, k = 1; off < len; off += k, k++)
                kg_sha256_update(&s, b + off, off + k > len ? len - off : k);
            kg_sha256_final(&s, d2);
            kg_sha256_update(&all, d2, 32);
        }
        kg_sha256_final(&all, dig);
        kg_sha256_tohex(dig, hex);
        assert_string_equal(hex, "9cd337883924caeaa48d05fbfe7491a714417cfe00c"
                                 "dd25f93d8f25b9a02638a");
    }
    free(b);
}

static json_t *parse(const char *s)
{
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    assert_non_null(j);
    return j;
}

static void test_defaults(void **state)
{
    (void)state;
    json_t *in = parse(
        "{\"reference_code\": \"r\", \"kernel_code\": \"k\", \"unknown\": 1}");
    kg_err err;
    int code = 0;
    json_t *out = kg_request_normalize(in, &code, NULL, &err);
    assert_non_null(out);
    assert_string_equal(json_string_value(json_object_get(out, "backend")),
                        "triton");
    assert_string_equal(json_string_value(json_object_get(out, "entry_point")),
                        "Model");
    assert_int_equal(
        json_integer_value(json_object_get(out, "num_correct_trials")), 5);
    assert_int_equal(
        json_integer_value(json_object_get(out, "num_perf_trials")), 100);
    assert_int_equal(json_integer_value(json_object_get(out, "num_warmup")), 3);
    assert_true(json_real_value(json_object_get(out, "atol")) == 1e-2);
    assert_true(json_real_value(json_object_get(out, "timeout")) == 300);
    assert_string_equal(json_string_value(json_object_get(out, "priority")),
                        "normal");
    assert_true(json_is_true(json_object_get(out, "enable_profiling")));
    assert_true(json_is_true(json_object_get(out, "run_hack_checks")));
    assert_true(json_is_false(json_object_get(out, "allow_tf32")));
    assert_null(json_object_get(out, "seed"));
    assert_null(json_object_get(out, "task_id"));
    assert_null(json_object_get(out, "unknown"));
    json_decref(out);
    json_decref(in);

    in = parse("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"strict\": true}");
    out = kg_request_normalize(in, &code, NULL, &err);
    assert_true(json_real_value(json_object_get(out, "rtol")) == 1e-4);
    json_decref(out);
    json_decref(in);
}

static void expect_bad(const char *body, const char *field, const char *frag)
{
    json_t *in = parse(body);
    kg_err err = {{0}};
    int code = 0;
    const char *bad = NULL;
    json_t *out = kg_request_normalize(in, &code, &bad, &err);
    assert_null(out);
    assert_int_equal(code, KG_EINVAL);
    if (field) {
        assert_non_null(bad);
        assert_string_equal(bad, field);
    }
    assert_non_null(strstr(err.msg, frag));
    json_decref(in);
}

static void test_bad_requests(void **state)
{
    (void)state;
    expect_bad("[1,2]", NULL, "JSON object");
    expect_bad("{\"kernel_code\": \"k\"}", "reference_code", "required");
    expect_bad("{\"reference_code\": 1, \"kernel_code\": \"k\"}",
               "reference_code", "string");
    expect_bad("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"backend\": \"rocm\"}",
               "backend", "triton|cuda|cpu");
    expect_bad("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"num_perf_trials\": 0}",
               "num_perf_trials", "1..10000");
    expect_bad("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"num_correct_trials\": 2.5}",
               "num_correct_trials", "integer");
    expect_bad(
        "{\"reference_code\": \"r\", \"kernel_code\": \"k\", \"atol\": -1}",
        "atol", "atol");
    expect_bad("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"enable_profiling\": 1}",
               "enable_profiling", "true or false");
    expect_bad("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"task_id\": \"a b\"}",
               "task_id", "A-Za-z0-9");
    expect_bad("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
               "\"entry_point\": \"1x\"}",
               "entry_point", "identifier");
    expect_bad("{\"reference_code\": \"\", \"kernel_code\": \"k\"}",
               "reference_code", "length");

    /* kernel_code over 256 KiB */
    size_t n = KG_MAX_KERNEL_CODE + 1;
    char *big = malloc(n + 64);
    assert_non_null(big);
    strcpy(big, "{\"reference_code\": \"r\", \"kernel_code\": \"");
    size_t off = strlen(big);
    memset(big + off, 'x', n);
    strcpy(big + off + n, "\"}");
    expect_bad(big, "kernel_code", "length");
    free(big);
}

static void test_cache_key(void **state)
{
    (void)state;
    kg_err err;
    int code;
    json_t *a_in = parse("{\"reference_code\": \"r\", \"kernel_code\": \"k\", "
                         "\"priority\": \"high\"}");
    json_t *b_in = parse(
        "{\"reference_code\": \"r\", \"kernel_code\": \"k\", \"timeout\": 20}");
    json_t *c_in =
        parse("{\"reference_code\": \"r\", \"kernel_code\": \"k2\"}");
    json_t *d_in = parse(
        "{\"reference_code\": \"r\", \"kernel_code\": \"k\", \"seed\": 7}");
    json_t *a = kg_request_normalize(a_in, &code, NULL, &err);
    json_t *b = kg_request_normalize(b_in, &code, NULL, &err);
    json_t *c = kg_request_normalize(c_in, &code, NULL, &err);
    json_t *d = kg_request_normalize(d_in, &code, NULL, &err);
    char ka[65], kb[65], kc[65], kd[65];
    assert_int_equal(kg_request_cache_key(a, ka, &err), 0);
    assert_int_equal(kg_request_cache_key(b, kb, &err), 0);
    assert_int_equal(kg_request_cache_key(c, kc, &err), 0);
    assert_int_equal(kg_request_cache_key(d, kd, &err), 0);
    assert_string_equal(
        ka, kb); /* priority and timeout do not change the outcome */
    assert_string_not_equal(ka, kc);
    assert_string_not_equal(ka, kd);
    json_decref(a), json_decref(b), json_decref(c), json_decref(d);
    json_decref(a_in), json_decref(b_in), json_decref(c_in), json_decref(d_in);
}

/* The key of a request body (normalized first) into out. */
static void key_of(const char *body, char out[65])
{
    json_t *in = parse(body);
    kg_err err = {{0}};
    int code = 0;
    json_t *n = kg_request_normalize(in, &code, NULL, &err);
    if (!n)
        print_error("%s: %s\n", body, err.msg);
    assert_non_null(n);
    assert_int_equal(kg_request_cache_key(n, out, &err), 0);
    assert_int_equal(strlen(out), 64);
    json_decref(n);
    json_decref(in);
}

#define BASE "\"reference_code\": \"ab\", \"kernel_code\": \"c\""

/*
 * The key is stable (field order, defaults spelled out or not, a fixed
 * value pinned so an accidental change of the encoding shows) and changes
 * with every field that changes an evaluation's outcome, and only with
 * those.
 */
static void test_cache_key_fields(void **state)
{
    (void)state;
    char base[65], k[65];
    key_of("{" BASE "}", base);
    /* pinned (computed independently with Python's hashlib and struct
       from the encoding in request.c); changing the encoding orphans
       every stored cache entry */
    assert_string_equal(
        base,
        "896e23083678feeaa775b6860e06c306ef7c532258c54faa6371a3ce71e870a8");
    key_of("{\"kernel_code\": \"c\", \"reference_code\": \"ab\"}", k);
    assert_string_equal(k, base);
    key_of("{" BASE ", \"backend\": \"triton\", \"num_perf_trials\": 100, "
           "\"atol\": 0.01, \"seed\": null}",
           k);
    assert_string_equal(k, base);
    /* not outcome-changing */
    static const char *const same[] = {"\"task_id\": \"t1\"", "\"timeout\": 20",
                                       "\"priority\": \"high\"",
                                       "\"force_refresh\": true"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{" BASE ", %s}", same[i]);
        key_of(body, k);
        assert_string_equal(k, base);
    }
    /* outcome-changing: each one alone gives a key of its own */
    static const char *const diff[] = {
        "{\"reference_code\": \"ab2\", \"kernel_code\": \"c\"}",
        "{\"reference_code\": \"ab\", \"kernel_code\": \"c2\"}",
        /* the boundary between the codes moves */
        "{\"reference_code\": \"a\", \"kernel_code\": \"bc\"}",
        "{" BASE ", \"backend\": \"cpu\"}",
        "{" BASE ", \"entry_point\": \"Other\"}",
        "{" BASE ", \"num_correct_trials\": 6}",
        "{" BASE ", \"num_perf_trials\": 101}",
        "{" BASE ", \"num_warmup\": 4}",
        "{" BASE ", \"atol\": 0.02}",
        "{" BASE ", \"rtol\": 0.02}",
        "{" BASE ", \"strict\": true, \"atol\": 0.01, \"rtol\": 0.01}",
        "{" BASE ", \"reference_backend\": \"torch_compile\"}",
        "{" BASE ", \"enable_profiling\": false}",
        "{" BASE ", \"run_hack_checks\": false}",
        "{" BASE ", \"allow_tf32\": true}",
        "{" BASE ", \"seed\": 0}",
        "{" BASE ", \"seed\": 1}",
        "{" BASE ", \"speedup_recheck_bound\": 11}",
    };
    size_t nd = sizeof diff / sizeof diff[0];
    char keys[sizeof diff / sizeof diff[0]][65];
    for (size_t i = 0; i < nd; i++) {
        key_of(diff[i], keys[i]);
        if (!strcmp(keys[i], base))
            print_error("same key as the base: %s\n", diff[i]);
        assert_string_not_equal(keys[i], base);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(keys[i], keys[j]);
    }
}

/* kg_result_check on a result written as JSON text: its rc, err in *msg. */
static int check_text(const char *text, const char **msg)
{
    static kg_err err;
    json_error_t je;
    json_t *r = json_loads(text, 0, &je);
    assert_non_null(r);
    err.msg[0] = 0;
    int rc = kg_result_check(r, &err);
    json_decref(r);
    *msg = err.msg;
    return rc;
}

/* The result contract a worker's result must meet (docs/design.md). */
/* A retried or rerun task's new seed: replaces the client's, fresh each
 * time, within the schema's 53 bits; nothing else changes. */
static void test_reseed(void **state)
{
    (void)state;
    json_t *req = json_pack("{s:s, s:I, s:i}", "reference_code", "x",
                            "seed", (json_int_t)7, "num_perf_trials", 5);
    assert_non_null(req);
    json_int_t seen[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(kg_request_reseed(req), 0);
        json_t *s = json_object_get(req, "seed");
        assert_true(json_is_integer(s));
        seen[i] = json_integer_value(s);
        assert_true(seen[i] >= 0 && seen[i] <= ((json_int_t)1 << 53) - 1);
        assert_true(seen[i] != 7);
        for (int j = 0; j < i; j++)
            assert_true(seen[j] != seen[i]);
    }
    assert_int_equal(json_object_size(req), 3);
    assert_string_equal(
        json_string_value(json_object_get(req, "reference_code")), "x");
    assert_int_equal(
        json_integer_value(json_object_get(req, "num_perf_trials")), 5);
    json_decref(req);
    assert_int_equal(kg_request_reseed(NULL), -1);
}

static void test_result_contract(void **state)
{
    (void)state;
    const char *m;
    static const char *const good[] = {
        "{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 1.5, "
        "\"kernel_runtime\": 2.0, \"reference_runtime\": 3.0}",
        /* the judge's clock may lower a speedup, never raise it */
        "{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 0.5, "
        "\"kernel_runtime\": 2.0, \"reference_runtime\": 3.0}",
        "{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": "
        "3.3333333333333335, \"kernel_runtime\": 0.3, \"reference_runtime\": "
        "1.0}",
        "{\"verdict\": \"mismatch\"}",
        "{\"verdict\": \"hacked\", \"correctness\": false, \"speedup\": null, "
        "\"decoy_kernel\": true, \"measured\": {\"speedup\": 20}}",
        "{\"verdict\": \"infra_error\", \"kernel_runtime\": null}",
        "{\"verdict\": \"problem_error\"}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (check_text(good[i], &m) != 0)
            fail_msg("refused %s: %s", good[i], m);
    static const struct {
        const char *text, *field;
    } bad[] = {
        {"{\"verdict\": \"pass\", \"speedup\": 1e308, \"correctness\": false, "
         "\"kernel_runtime\": -1}",
         "result.correctness"},
        {"{}", "result.verdict"},
        {"{\"verdict\": \"great\"}", "result.verdict"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 1.5}",
         "result.kernel_runtime"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 1.5, "
         "\"kernel_runtime\": -1, \"reference_runtime\": 3.0}",
         "result.kernel_runtime"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 1.5, "
         "\"kernel_runtime\": 2.0, \"reference_runtime\": 0}",
         "result.reference_runtime"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 50, "
         "\"kernel_runtime\": 2.0, \"reference_runtime\": 3.0}",
         "result.speedup"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": 1.5000001, "
         "\"kernel_runtime\": 2.0, \"reference_runtime\": 3.0}",
         "result.speedup"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": -1, "
         "\"kernel_runtime\": 2.0, \"reference_runtime\": 3.0}",
         "result.speedup"},
        {"{\"verdict\": \"pass\", \"correctness\": true, \"speedup\": null, "
         "\"kernel_runtime\": 2.0, \"reference_runtime\": 3.0}",
         "result.speedup"},
        {"{\"verdict\": \"hacked\", \"correctness\": false, \"speedup\": 20}",
         "result.speedup"},
        {"{\"verdict\": \"mismatch\", \"kernel_runtime\": 0.4}",
         "result.kernel_runtime"},
        {"{\"verdict\": \"timeout\", \"correctness\": true}",
         "result.correctness"},
        {"{\"verdict\": \"hacked\", \"decoy_kernel\": false}",
         "result.decoy_kernel"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (check_text(bad[i].text, &m) != KG_EINVAL)
            fail_msg("accepted %s", bad[i].text);
        if (strncmp(m, bad[i].field, strlen(bad[i].field)))
            fail_msg("%s: want %s, got %s", bad[i].text, bad[i].field, m);
    }
    /* finalize makes any result readable alone: a failing verdict's
     * figures move to measured, and the result then meets the contract */
    json_t *r = json_pack("{s:s, s:b, s:f, s:f}", "verdict", "hacked",
                          "correctness", 1, "speedup", 20.6, "kernel_runtime",
                          0.01);
    kg_result_finalize(r);
    assert_true(json_is_null(json_object_get(r, "speedup")));
    assert_true(json_is_null(json_object_get(r, "kernel_runtime")));
    assert_true(json_is_false(json_object_get(r, "correctness")));
    assert_true(json_is_true(json_object_get(r, "decoy_kernel")));
    assert_true(json_real_value(json_object_get(
                    json_object_get(r, "measured"), "speedup")) == 20.6);
    kg_err err;
    assert_int_equal(kg_result_check(r, &err), 0);
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_result_contract),
        cmocka_unit_test(test_reseed),
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_sha256_paths),
        cmocka_unit_test(test_cache_key_fields),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_cache_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
