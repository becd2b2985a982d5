/* test_request.c - request validation, defaults, cache key, SHA-256. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/request.h"
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_cache_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
