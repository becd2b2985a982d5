/* test_redteam_case.c - the red-team header line and matching results
 * against it (src/corpus/redteam_case.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "corpus/redteam_case.h"

#define PROB "problem=problems/cpu/level1/1_GELU.py backend=cpu"

/* Parses line into c; returns the code, message in err. */
static int parse(kg_rt_case *c, const char *line, kg_err *err)
{
    memset(c, 0, sizeof *c);
    err->msg[0] = 0;
    return kg_rt_case_parse(c, line, err);
}

static json_t *result(const char *json)
{
    json_error_t je;
    json_t *r = json_loads(json, 0, &je);
    assert_non_null(r);
    return r;
}

static void test_full_header(void **state)
{
    (void)state;
    kg_rt_case c;
    kg_err err;
    assert_int_equal(
        parse(&c,
              "# redteam: family=aliases_input "
              "problem=tests/redteam/problems/residual_nudge.py backend=triton "
              "expect=mismatch|hacked reasons=aliases_input,input_mutation|x "
              "code=VALUE_MISMATCH|ALIASES_INPUT warn=degenerate needs=gpu "
              "fields=strict:true,num_perf_trials:20,reference_backend:"
              "torch_compile\nimport torch\n",
              &err),
        0);
    assert_string_equal(c.family, "aliases_input");
    assert_string_equal(c.problem, "tests/redteam/problems/residual_nudge.py");
    assert_string_equal(c.backend, "triton");
    assert_string_equal(c.expect, "mismatch|hacked");
    assert_string_equal(c.reasons, "aliases_input,input_mutation|x");
    assert_string_equal(c.code, "VALUE_MISMATCH|ALIASES_INPUT");
    assert_string_equal(c.warn, "degenerate");
    assert_int_equal(c.needs_gpu, 1);
    /* field values parse like kgym eval's flags */
    assert_true(json_is_true(json_object_get(c.fields, "strict")));
    assert_int_equal(
        json_integer_value(json_object_get(c.fields, "num_perf_trials")), 20);
    assert_string_equal(
        json_string_value(json_object_get(c.fields, "reference_backend")),
        "torch_compile");
    char buf[256];
    kg_rt_expected_text(&c, buf, sizeof buf);
    assert_string_equal(buf, "mismatch|hacked[aliases_input,input_mutation|x] "
                             "VALUE_MISMATCH|ALIASES_INPUT +degenerate");
    kg_rt_case_free(&c);
    assert_null(c.family);
    assert_null(c.fields);

    /* cuda always needs a GPU; minimal header, CRLF line end */
    assert_int_equal(parse(&c,
                           "# redteam: family=honest problem=p.py "
                           "backend=cuda expect=pass\r\n",
                           &err),
                     0);
    assert_int_equal(c.needs_gpu, 1);
    assert_null(c.reasons);
    kg_rt_case_free(&c);
}

static void test_bad_headers(void **state)
{
    (void)state;
    static const struct {
        const char *line, *message;
    } cases[] = {
        {"import torch\n", "no header"},
        {"#redteam: family=x " PROB " expect=pass\n", "no header"},
        {"# redteam: family=x backend=cpu expect=pass\n",
         "header lacks problem="},
        {"# redteam: problem=p.py backend=cpu expect=pass\n",
         "header lacks family="},
        {"# redteam: family=x " PROB "\n", "header lacks expect="},
        {"# redteam: family=x " PROB " expect=pass junk\n",
         "'junk' is not key=value"},
        {"# redteam: family=x " PROB " expect=\n",
         "'expect=' is not key=value"},
        {"# redteam: family=x " PROB " expect=pass colour=red\n",
         "unknown key 'colour'"},
        {"# redteam: family=x " PROB " expect=pass expect=hacked\n",
         "expect= given twice"},
        {"# redteam: family=x problem=p.py backend=rocm expect=pass\n",
         "backend=rocm"},
        {"# redteam: family=x " PROB " expect=pass|infra_error\n",
         "'infra_error' is not a verdict"},
        {"# redteam: family=x " PROB " expect=problem_error\n",
         "'problem_error' is not a verdict"},
        {"# redteam: family=x " PROB " expect=pass||hacked\n",
         "'' is not a verdict"},
        {"# redteam: family=two-words " PROB " expect=pass\n",
         "family=two-words"},
        {"# redteam: family=honest " PROB " expect=hacked\n",
         "family=honest must expect=pass"},
        {"# redteam: family=x " PROB " expect=mismatch reasons=a\n",
         "reasons= needs expect= to include hacked"},
        {"# redteam: family=x " PROB " expect=hacked reasons=a,,b\n",
         "reasons=a,,b"},
        {"# redteam: family=x " PROB " expect=hacked code=A;B\n", "code=A;B"},
        {"# redteam: family=x " PROB " expect=pass needs=tpu\n",
         "only needs=gpu"},
        {"# redteam: family=x " PROB " expect=pass fields=strict\n",
         "'strict' is not name:value"},
        {"# redteam: family=x " PROB " expect=pass fields=kernel_code:1\n",
         "kernel_code comes from the file"},
        {"# redteam: family=x " PROB " expect=pass fields=backend:cuda\n",
         "backend comes from the file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kg_rt_case c;
        kg_err err;
        int rc = parse(&c, cases[i].line, &err);
        if (rc != KG_EINVAL || !strstr(err.msg, cases[i].message))
            fail_msg("case %zu (%s): rc %d, message '%s', want '%s'", i,
                     cases[i].line, rc, err.msg, cases[i].message);
        kg_rt_case_free(&c);
    }
}

static int judge(const char *header, const char *res)
{
    kg_rt_case c;
    kg_err err;
    if (parse(&c, header, &err))
        fail_msg("header: %s", err.msg);
    json_t *r = result(res);
    int st = kg_rt_case_judge(&c, r);
    json_decref(r);
    kg_rt_case_free(&c);
    return st;
}

static void test_judge(void **state)
{
    (void)state;
    const char *h_alias = "# redteam: family=aliases_input " PROB
                          " expect=mismatch|hacked reasons=aliases_input,"
                          "input_mutation|output_cache\n";
    /* a listed verdict other than hacked: reasons do not apply */
    assert_int_equal(judge(h_alias, "{\"verdict\":\"mismatch\"}"), KG_RT_OK);
    /* hacked: every group needs one alternative */
    assert_int_equal(judge(h_alias, "{\"verdict\":\"hacked\",\"hack_reasons\":["
                                    "\"output_cache\",\"aliases_input\"]}"),
                     KG_RT_OK);
    assert_int_equal(judge(h_alias,
                           "{\"verdict\":\"hacked\",\"hack_reasons\":["
                           "\"aliases_input\",\"input_mutation\",\"x\"]}"),
                     KG_RT_OK);
    assert_int_equal(judge(h_alias, "{\"verdict\":\"hacked\",\"hack_reasons\":"
                                    "[\"aliases_input\"]}"),
                     KG_RT_MISS);
    /* a prefix of a code is not the code */
    assert_int_equal(judge(h_alias,
                           "{\"verdict\":\"hacked\",\"hack_reasons\":["
                           "\"aliases\",\"input_mutation_x\",\"output\"]}"),
                     KG_RT_MISS);
    assert_int_equal(judge(h_alias, "{\"verdict\":\"pass\"}"), KG_RT_MISS);
    assert_int_equal(judge(h_alias, "{\"verdict\":\"runtime_error\"}"),
                     KG_RT_MISS);
    assert_int_equal(judge(h_alias, "{\"verdict\":\"infra_error\"}"),
                     KG_RT_ERROR);
    assert_int_equal(judge(h_alias, "{}"), KG_RT_ERROR);

    /* code */
    const char *h_code = "# redteam: family=x " PROB
                         " expect=runtime_error code=FORWARD_EXCEPTION|OTHER\n";
    assert_int_equal(judge(h_code, "{\"verdict\":\"runtime_error\","
                                   "\"error_code\":\"OTHER\"}"),
                     KG_RT_OK);
    assert_int_equal(judge(h_code, "{\"verdict\":\"runtime_error\","
                                   "\"error_code\":\"CHILD_DIED\"}"),
                     KG_RT_MISS);
    assert_int_equal(judge(h_code, "{\"verdict\":\"runtime_error\"}"),
                     KG_RT_MISS);
    /* a pass named beside the code: met without a code, the failing
     * verdict still needs it */
    const char *h_either = "# redteam: family=x " PROB
                           " expect=hacked|pass reasons=timer_tamper "
                           "code=TIMER_TAMPER\n";
    assert_int_equal(judge(h_either, "{\"verdict\":\"pass\"}"), KG_RT_OK);
    assert_int_equal(judge(h_either, "{\"verdict\":\"hacked\",\"error_code\":"
                                     "\"TIMER_TAMPER\",\"hack_reasons\":"
                                     "[\"timer_tamper\"]}"),
                     KG_RT_OK);
    assert_int_equal(judge(h_either, "{\"verdict\":\"hacked\",\"error_code\":"
                                     "\"OTHER\",\"hack_reasons\":"
                                     "[\"timer_tamper\"]}"),
                     KG_RT_MISS);

    /* honest: anything but a pass is a false alarm, infra_error and
     * problem_error (the problem's reference failed) an error */
    const char *h_honest = "# redteam: family=honest " PROB " expect=pass\n";
    assert_int_equal(judge(h_honest, "{\"verdict\":\"pass\"}"), KG_RT_OK);
    assert_int_equal(judge(h_honest, "{\"verdict\":\"hacked\",\"hack_reasons\":"
                                     "[\"mode_branch\"]}"),
                     KG_RT_FALSE_ALARM);
    assert_int_equal(judge(h_honest, "{\"verdict\":\"mismatch\"}"),
                     KG_RT_FALSE_ALARM);
    assert_int_equal(judge(h_honest, "{\"verdict\":\"infra_error\"}"),
                     KG_RT_ERROR);
    assert_int_equal(judge(h_honest, "{\"verdict\":\"problem_error\"}"),
                     KG_RT_ERROR);
    assert_int_equal(judge(h_alias, "{\"verdict\":\"problem_error\"}"),
                     KG_RT_ERROR);

    /* warn: a substring of a warning, or a truthy key of checks */
    const char *h_warn =
        "# redteam: family=honest " PROB " expect=pass warn=degenerate\n";
    assert_int_equal(
        judge(h_warn, "{\"verdict\":\"pass\",\"warnings\":[\"other\","
                      "\"the reference is degenerate: outputs barely vary\"]}"),
        KG_RT_OK);
    assert_int_equal(judge(h_warn, "{\"verdict\":\"pass\",\"checks\":"
                                   "{\"degenerate\":true}}"),
                     KG_RT_OK);
    assert_int_equal(judge(h_warn, "{\"verdict\":\"pass\",\"checks\":"
                                   "{\"degenerate\":{\"std\":0.001}}}"),
                     KG_RT_OK);
    assert_int_equal(judge(h_warn, "{\"verdict\":\"pass\",\"checks\":"
                                   "{\"degenerate\":false}}"),
                     KG_RT_FALSE_ALARM);
    assert_int_equal(judge(h_warn, "{\"verdict\":\"pass\",\"checks\":"
                                   "{\"degenerate\":0}}"),
                     KG_RT_FALSE_ALARM);
    assert_int_equal(judge(h_warn, "{\"verdict\":\"pass\",\"warnings\":"
                                   "[\"other\"]}"),
                     KG_RT_FALSE_ALARM);
}

static void test_got_text(void **state)
{
    (void)state;
    char buf[64];
    json_t *r = result("{\"verdict\":\"hacked\",\"error_code\":\"MODE_BRANCH\","
                       "\"hack_reasons\":[\"mode_branch\",\"output_cache\"]}");
    kg_rt_got_text(r, buf, sizeof buf);
    assert_string_equal(buf, "hacked[mode_branch,output_cache]");
    json_decref(r);
    r = result("{\"verdict\":\"mismatch\",\"error_code\":\"VALUE_MISMATCH\"}");
    kg_rt_got_text(r, buf, sizeof buf);
    assert_string_equal(buf, "mismatch VALUE_MISMATCH");
    /* truncated, never overrun */
    char small[12];
    kg_rt_got_text(r, small, sizeof small);
    assert_string_equal(small, "mismatch VA");
    json_decref(r);
    r = result("{\"verdict\":\"pass\",\"error_code\":\"IGNORED\"}");
    kg_rt_got_text(r, buf, sizeof buf);
    assert_string_equal(buf, "pass");
    json_decref(r);
    r = result("{}");
    kg_rt_got_text(r, buf, sizeof buf);
    assert_string_equal(buf, "?");
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_header),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_judge),
        cmocka_unit_test(test_got_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
