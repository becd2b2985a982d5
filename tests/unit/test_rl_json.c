/*
 * test_rl_json.c - kg_rl_json, the JSON layer over the RL math that the
 * command line and the Python bindings share: exact output, where options
 * come from, which name a message gives, the non-finite and 64-bit forms,
 * and the error contract. The subcommands' arithmetic is test_rl.c's; the
 * whole input language is tests/python/test_rl_*.py's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kgym/rl_json.h"
#include "../../lib/json_util.h"

/* Runs sub on input with options (may be NULL) and checks the output. */
static void ok(const char *sub, const char *input, const char *options,
               const char *want)
{
    char *out = (char *)1;
    kg_err err = {""};
    int rc = kg_rl_json(sub, input, strlen(input), options, &out, &err);
    if (rc)
        print_error("%s %s: %s\n", sub, input, err.msg);
    assert_int_equal(rc, 0);
    assert_non_null(out);
    if (strcmp(out, want))
        print_error("%s %s:\n got %s\nwant %s\n", sub, input, out, want);
    assert_string_equal(out, want);
    kg_rl_json_free(out);
}

/* Runs sub, which must fail with code and exactly the message want. */
static void fails(const char *sub, const char *input, const char *options,
                  int code, const char *want)
{
    char *out = (char *)1;
    kg_err err = {""};
    int rc = kg_rl_json(sub, input, strlen(input), options, &out, &err);
    assert_null(out);
    if (rc != code || strcmp(err.msg, want))
        print_error("%s %s: rc %d, \"%s\"\n want rc %d, \"%s\"\n", sub, input,
                    rc, err.msg, code, want);
    assert_int_equal(rc, code);
    assert_string_equal(err.msg, want);
}

static void test_output(void **state)
{
    (void)state;
    ok("advantages", "{\"returns\": [[3],[1],[1]]}", NULL,
       "{\"advantages\": [[2.0], [-1.0], [-1.0]]}");
    ok("returns", "{\"rewards\": [[1, null, 4]]}", "{}",
       "{\"returns\": [[5.0, null, 4.0]]}");
    ok("reward", "{\"verdict\": \"problem_error\"}", NULL,
       "{\"reward\": null}");
    ok("select", "{\"rewards\": [1, 3, 2, 3, 0], \"w\": 2}", NULL,
       "{\"selected\": [1, 3]}");
}

/* A flag's text wins over an option value, which wins over the input. */
static void test_options_precedence(void **state)
{
    (void)state;
    const char *in = "{\"rewards\": [[1, 1, 1]], \"gamma\": 0.5}";
    ok("returns", in, NULL, "{\"returns\": [[1.75, 1.5, 1.0]]}");
    ok("returns", in, "{\"gamma\": 1}", "{\"returns\": [[3.0, 2.0, 1.0]]}");
    ok("returns", in, "{\"gamma\": 1, \"--gamma\": \"0\"}",
       "{\"returns\": [[1.0, 1.0, 1.0]]}");
    ok("returns", in, "{\"gamma\": null}", "{\"returns\": [[1.75, 1.5, 1.0]]}");
    /* the bad field is never read */
    ok("returns", "{\"rewards\": [[1]], \"gamma\": \"x\"}", "{\"gamma\": 1}",
       "{\"returns\": [[1.0]]}");
    ok("advantages", "{\"returns\": [[1], [3]], \"eps\": 0}",
       "{\"--estimator\": \"grpo\", \"--norm-std\": true}",
       "{\"advantages\": [[-1.0], [1.0]]}");
}

/* A flag's value is named as the flag, anything else as the field. */
static void test_message_names(void **state)
{
    (void)state;
    const char *in = "{\"rewards\": [[1]]}";
    fails("returns", in, "{\"--gamma\": \"abc\"}", KG_EINVAL,
          "option --gamma: expected a number, got \"abc\"");
    fails("returns", in, "{\"gamma\": \"abc\"}", KG_EINVAL,
          "field \"gamma\": expected a number, got string");
    fails("returns", "{\"rewards\": [[1]], \"gamma\": 2}", NULL, KG_EINVAL,
          "field \"gamma\": returns: gamma must be in [0, 1] (got 2)");
    fails("returns", in, "{\"--gamma\": \"2\"}", KG_EINVAL,
          "field \"gamma\": returns: gamma must be in [0, 1] (got 2)");
    fails("advantages", "{\"returns\": [[1]]}", "{\"--estimator\": \"ppo\"}",
          KG_EINVAL,
          "option --estimator: expected \"grpo\" or \"trloo\", got "
          "\"ppo\"");
    fails("advantages", "{\"returns\": [[1]], \"estimator\": \"ppo\"}", NULL,
          KG_EINVAL,
          "field \"estimator\": expected \"grpo\" or \"trloo\", got \"ppo\"");
    fails("fastp", "{\"attempts\": []}", "{\"--p\": \"1,2,1\"}", KG_EINVAL,
          "option --p: duplicate value 1.0");
    fails("reward", "{\"turns\": [{\"correct\": true, \"speedup\": 1}, 5]}",
          NULL, KG_EINVAL,
          "field \"turns[1]\": expected an object, got number");
}

/* "NaN", "Infinity", "-Infinity" are numbers, for the checks to judge. */
static void test_nonfinite_strings(void **state)
{
    (void)state;
    fails("returns", "{\"rewards\": [[1, \"NaN\"]]}", NULL, KG_ENONFINITE,
          "field \"rewards\": returns: R[1] (rollout 0, turn 1) is not finite");
    ok("returns", "{\"rewards\": [[\"NaN\", 1]], \"valid\": [[false, true]]}",
       NULL, "{\"returns\": [[null, 1.0]]}");
    fails("reward", "{\"correct\": true, \"speedup\": 50, \"cap\": \"Infinity\"}",
          NULL, KG_EINVAL,
          "field \"cap\": must be a finite number in [0, 1e+06], got inf");
    fails("select", "{\"rewards\": [1, \"-Infinity\"]}", NULL, KG_ENONFINITE,
          "field \"rewards\": select: reward[1] is not finite");
    fails("select", "{\"rewards\": [1, \"nan\"]}", NULL, KG_EINVAL,
          "field \"rewards\": entry 1: expected a number, got string");
}

/* The seed takes [0, 2^64): a JSON integer, a string of digits, a flag. */
static void test_seed(void **state)
{
    (void)state;
    const char *cov = "{\"coverage\": [0.31, 0.35, 0.38, 0.32], \"seed\": "
                      "\"18446744073709551615\"}";
    char *a, *b;
    assert_int_equal(kg_rl_json("prs", cov, strlen(cov), NULL, &a, NULL), 0);
    const char *bare = "{\"coverage\": [0.31, 0.35, 0.38, 0.32]}";
    assert_int_equal(kg_rl_json("prs", bare, strlen(bare),
                                "{\"--seed\": \"18446744073709551615\"}", &b,
                                NULL),
                     0);
    assert_string_equal(a, b);
    kg_rl_json_free(a);
    kg_rl_json_free(b);
    ok("prs", "{\"coverage\": [0.5], \"seed\": \"007\"}", "{\"s\": 0.1}",
       "{\"keep_prob\": [1.0], \"keep\": [true]}");
    const char *range = "field \"seed\": -1 is out of range [0, "
                        "18446744073709551615]";
    fails("prs", "{\"coverage\": [0.5], \"seed\": -1}", NULL, KG_EINVAL, range);
    fails("prs", "{\"coverage\": [0.5], \"seed\": \"-1\"}", NULL, KG_EINVAL,
          range);
    fails("prs", "{\"coverage\": [0.5], \"seed\": \"18446744073709551616\"}",
          NULL, KG_EINVAL,
          "field \"seed\": 18446744073709551616 is out of range [0, "
          "18446744073709551615]");
    fails("prs", "{\"coverage\": [0.5], \"seed\": \"1e3\"}", NULL, KG_EINVAL,
          "field \"seed\": expected an integer, got \"1e3\"");
    fails("prs", "{\"coverage\": [0.5], \"seed\": 1.5}", NULL, KG_EINVAL,
          "field \"seed\": expected an integer, got 1.5");
    fails("prs", "{\"coverage\": [0.5]}", "{\"--seed\": \"-1\"}", KG_EINVAL,
          "option --seed: expected an integer in [0, 2^64), got \"-1\"");
}

/* Every option's range, named by the flag that gave it (kgym rl exits 2). */
static void test_option_ranges(void **state)
{
    (void)state;
    const char *turn = "{\"correct\": true, \"speedup\": 1e308}";
    fails("reward", turn, "{\"--cap\": \"1e400\"}", KG_EINVAL,
          "field \"cap\": must be a finite number in [0, 1e+06], got inf");
    fails("reward", turn, "{\"--cap\": \"1e7\"}", KG_EINVAL,
          "field \"cap\": must be a finite number in [0, 1e+06], got 1e+07");
    fails("reward", turn, "{\"--penalty\": \"-1e300\"}", KG_EINVAL,
          "field \"penalty\": must be a finite number in [-1e+06, 1e+06], got "
          "-1e+300");
    fails("reward", turn, "{\"--w-pr\": \"1e300\"}", KG_EINVAL,
          "field \"w_pr\": must be a finite number in [0, 1e+06], got 1e+300");
    ok("reward", turn, "{\"--cap\": \"1e6\"}", "{\"reward\": 1000001.0}");
    const char *cov = "{\"coverage\": [0.3, 0.5]}";
    fails("prs", cov, "{\"--s\": \"0\"}", KG_EINVAL,
          "field \"s\": must be a finite number in (0, 1e+06], got 0");
    fails("prs", "{\"coverage\": [0.3], \"s\": -0.0}", NULL, KG_EINVAL,
          "field \"s\": must be a finite number in (0, 1e+06], got -0");
    fails("prs", cov, "{\"--tau\": \"1e300\"}", KG_EINVAL,
          "field \"tau\": must be a finite number in [0, 1], got 1e+300");
    const char *att = "{\"attempts\": [{\"level\": 1, \"problem\": \"a\", "
                      "\"turn\": 0, \"correct\": true, \"hacked\": false, "
                      "\"speedup\": 2}]}";
    fails("fastp", att, "{\"--p\": \"\"}", KG_EINVAL,
          "option --p: item 1 is empty (want a comma-separated list of "
          "numbers, e.g. 1,1.2,1.5,2)");
    fails("fastp", att, "{\"--p\": \",,,\"}", KG_EINVAL,
          "option --p: item 1 is empty (want a comma-separated list of "
          "numbers, e.g. 1,1.2,1.5,2)");
    fails("fastp", att, "{\"--p\": \"1,,2\"}", KG_EINVAL,
          "option --p: item 2 is empty (want a comma-separated list of "
          "numbers, e.g. 1,1.2,1.5,2)");
    fails("fastp", att, "{\"--p\": \"-1\"}", KG_EINVAL,
          "field \"p\": value 1 must be a finite number in [0, 1e+06], got -1");
    fails("fastp", att, "{\"p\": []}", KG_EINVAL, "field \"p\": no value");
    const char *ret = "{\"returns\": [[1], [2]]}";
    fails("advantages", ret, "{\"--eps\": \"-1\"}", KG_EINVAL,
          "field \"eps\": must be a finite number in [0, 1], got -1");
    const char *lp = "{\"train_logprobs\": [[0.1]], \"rollout_logprobs\": "
                     "[[0.1]]}";
    fails("mrs", lp, "{\"--lo\": \"-5\"}", KG_EINVAL,
          "field \"lo\": must be a finite number in [0, 1e+06], got -5");
    fails("mrs", lp, "{\"--veto\": \"2\"}", KG_EINVAL,
          "field \"veto\": must be a finite number in [0, 1], got 2");
}

static void test_errors(void **state)
{
    (void)state;
    char *out = (char *)1;
    kg_err err;
    assert_int_equal(kg_rl_json("nosuch", "{}", 2, NULL, &out, &err),
                     KG_EINVAL);
    assert_null(out);
    assert_string_equal(err.msg, "unknown subcommand \"nosuch\"");
    assert_int_equal(kg_rl_json("returns", "{}", 2, NULL, NULL, &err),
                     KG_EINVAL);
    assert_int_equal(kg_rl_json("returns", NULL, 0, NULL, &out, NULL),
                     KG_EINVAL);
    /* err may be NULL */
    assert_int_equal(kg_rl_json("returns", "{", 1, NULL, &out, NULL),
                     KG_EPARSE);
    assert_null(out);
    /* len bounds the input: what follows is not read */
    const char *in = "{\"rewards\": [2]} trailing";
    assert_int_equal(kg_rl_json("select", in, 16, NULL, &out, NULL), 0);
    assert_string_equal(out, "{\"selected\": [0]}");
    kg_rl_json_free(out);
    fails("returns", "{\"rewards\": [[1]]} x", NULL, KG_EPARSE,
          "bad JSON at line 1, column 20: end of file expected near 'x'");
    fails("returns", "3", NULL, KG_EINVAL,
          "input: expected a JSON object, got number");
    fails("returns", "{}", NULL, KG_EINVAL, "field \"rewards\": missing");
    fails("returns", "{\"rewards\": [[1]]}", "[1]", KG_EINVAL,
          "options: expected a JSON object, got array");
    fails("returns", "{\"rewards\": [[1]]}", "{\"tau\": 1}", KG_EINVAL,
          "options: \"tau\" is no option of returns");
    fails("returns", "{\"rewards\": [[1]]}", "{\"--gamma\": 1}", KG_EINVAL,
          "options: \"--gamma\": expected the flag's text (a string), got "
          "number");
    fails("returns", "{\"rewards\": [[1]]}", "{", KG_EPARSE,
          "options: bad JSON at line 1, column 1: string or '}' expected near "
          "end of file");
}

/* The one JSON writer in its two styles: Python's json.dumps (HTTP
 * replies, this layer's output) and the store's compact text. */
static void test_json_styles(void **state)
{
    (void)state;
    json_t *v = json_pack("{s:s, s:[f, f, f, f, I], s:b, s:n}", "s",
                          "q\" b\\ \n\t\r\b\f\x01 \xc3\xa9 \xf0\x9f\x98\x80",
                          "n", 0.1, 1e-5, 3.0, 1.0 / 3, (json_int_t)-42,
                          "t", 1, "z");
    char *py = kg_json_text(v, KG_JSON_PY);
    char *dumps = kg_json_dumps(v);
    char *compact = kg_json_text(v, KG_JSON_COMPACT);
    assert_string_equal(
        py, "{\"s\": \"q\\\" b\\\\ \\n\\t\\r\\b\\f\\u0001 \\u00e9 "
            "\\ud83d\\ude00\", \"n\": [0.1, 1e-05, 3.0, 0.3333333333333333, "
            "-42], \"t\": true, \"z\": null}");
    assert_string_equal(dumps, py);
    assert_string_equal(
        compact, "{\"s\":\"q\\\" b\\\\ \\n\\t\\r\\u0008\\u000c\\u0001 "
                 "\xc3\xa9 \xf0\x9f\x98\x80\",\"n\":[0.1,0.00001,3.0,"
                 "0.33333333333333331,-42],\"t\":true,\"z\":null}");
    free(py);
    free(dumps);
    free(compact);
    json_decref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output),
        cmocka_unit_test(test_options_precedence),
        cmocka_unit_test(test_message_names),
        cmocka_unit_test(test_nonfinite_strings),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_option_ranges),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_json_styles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
