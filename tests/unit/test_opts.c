/* test_opts.c - the commands' table-driven option parser (src/cli/opts.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/opts.h"

struct seen {
    int json, n, npos, nother;
    const char *ref, *pos[4];
    int count;
    double timeout;
    char cands[4][32], other[4][64];
};

static int add_cand(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct seen *s = ctx;
    (void)name;
    if (!strcmp(v, "bad"))
        return kg_errf(err, KG_EINVAL, "--cand %s: refused", v);
    snprintf(s->cands[s->n++], sizeof s->cands[0], "%s", v);
    return 0;
}

static int add_pos(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct seen *s = ctx;
    assert_null(name);
    if (s->npos == 2)
        return kg_errf(err, KG_EINVAL, "%s: one too many", v);
    s->pos[s->npos++] = v;
    return 0;
}

static int add_other(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct seen *s = ctx;
    (void)err;
    snprintf(s->other[s->nother++], sizeof s->other[0], "%s=%s", name,
             v ? v : "(null)");
    return 0;
}

static int parse(kg_opts *spec, struct seen *s, const char **args, kg_err *err)
{
    const kg_opt opts[] = {
        KG_OPT_F("--json", &s->json),
        KG_OPT_S("--ref", &s->ref),
        KG_OPT_I("--count", &s->count, 0, 32),
        KG_OPT_D("--timeout", &s->timeout, 0, HUGE_VAL),
        KG_OPT_FN("--cand", add_cand),
        KG_OPT_END,
    };
    char *argv[32];
    int argc = 0;
    argv[argc++] = "kgym";
    while (*args)
        argv[argc++] = (char *)*args++;
    spec->opts = opts;
    spec->ctx = s;
    memset(s, 0, sizeof *s);
    memset(err, 0, sizeof *err);
    return kg_opts_parse(spec, argc, argv, err);
}

static void test_every_kind_is_set(void **state)
{
    (void)state;
    struct seen s;
    kg_err err;
    kg_opts spec = {0};
    const char *a[] = {"--json", "--ref", "r.py", "--count=7", "--timeout",
                       "1.5", "--cand", "a.py", "--cand=b.py", NULL};
    assert_int_equal(parse(&spec, &s, a, &err), 0);
    assert_int_equal(s.json, 1);
    assert_string_equal(s.ref, "r.py");
    assert_int_equal(s.count, 7);
    assert_true(s.timeout == 1.5);
    assert_int_equal(s.n, 2); /* a repeated CALL sees each value */
    assert_string_equal(s.cands[0], "a.py");
    assert_string_equal(s.cands[1], "b.py");
}

static void test_a_value_may_start_with_a_dash(void **state)
{
    (void)state;
    struct seen s;
    kg_err err;
    kg_opts spec = {0};
    const char *a[] = {"--ref", "--json", "--ref", "-", NULL};
    assert_int_equal(parse(&spec, &s, a, &err), 0);
    assert_string_equal(s.ref, "-");
    assert_int_equal(s.json, 0);
}

static void expect_error(const char **a, int code, const char *msg)
{
    struct seen s;
    kg_err err;
    kg_opts spec = {.hint = " (kgym x --help)"};
    assert_int_equal(parse(&spec, &s, a, &err), code);
    assert_string_equal(err.msg, msg);
}

static void test_refusals_name_the_option(void **state)
{
    (void)state;
    const char *unknown[] = {"--json", "--frob", "1", NULL};
    expect_error(unknown, KG_ENOTFOUND, "unknown flag --frob (kgym x --help)");
    const char *single[] = {"-x", NULL};
    expect_error(single, KG_ENOTFOUND, "unknown flag -x (kgym x --help)");
    const char *pos[] = {"stray", NULL};
    expect_error(pos, KG_ENOTFOUND, "stray: unexpected argument");
    const char *missing[] = {"--json", "--ref", NULL};
    expect_error(missing, KG_EINVAL, "--ref: needs a value");
    const char *novalue[] = {"--json=1", NULL};
    expect_error(novalue, KG_EINVAL, "--json: takes no value");
    const char *range[] = {"--count", "33", NULL};
    expect_error(range, KG_EINVAL,
                 "--count: expected an integer from 0 to 32, got '33'");
    const char *frac[] = {"--count", "1.5", NULL};
    expect_error(frac, KG_EINVAL,
                 "--count: expected an integer from 0 to 32, got '1.5'");
    const char *text[] = {"--count", "", NULL};
    expect_error(text, KG_EINVAL,
                 "--count: expected an integer from 0 to 32, got ''");
    const char *neg[] = {"--timeout", "-1", NULL};
    expect_error(neg, KG_EINVAL,
                 "--timeout: expected a number of at least 0, got '-1'");
    const char *nan[] = {"--timeout", "nan", NULL};
    expect_error(nan, KG_EINVAL,
                 "--timeout: expected a number of at least 0, got 'nan'");
    const char *tail[] = {"--timeout", "3s", NULL};
    expect_error(tail, KG_EINVAL,
                 "--timeout: expected a number of at least 0, got '3s'");
    const char *cb[] = {"--cand", "bad", NULL};
    expect_error(cb, KG_EINVAL, "--cand bad: refused");
}

static void test_help_stops_the_parse(void **state)
{
    (void)state;
    struct seen s;
    kg_err err;
    kg_opts spec = {0};
    const char *a[] = {"--json", "-h", "--frob", NULL};
    assert_int_equal(parse(&spec, &s, a, &err), KG_OPTS_HELP);
    assert_int_equal(s.json, 1);
    const char *b[] = {"--help", NULL};
    assert_int_equal(parse(&spec, &s, b, &err), KG_OPTS_HELP);
    /* the value of an option is not help */
    const char *c[] = {"--ref", "--help", NULL};
    assert_int_equal(parse(&spec, &s, c, &err), 0);
    assert_string_equal(s.ref, "--help");
}

static void test_positionals_and_fallback(void **state)
{
    (void)state;
    struct seen s;
    kg_err err;
    kg_opts spec = {.positional = add_pos, .other = add_other};
    const char *a[] = {"one", "--backend", "cpu", "--timeout", "2", "-",
                       "--seed=7", NULL};
    assert_int_equal(parse(&spec, &s, a, &err), 0);
    assert_int_equal(s.npos, 2);
    assert_string_equal(s.pos[0], "one");
    assert_string_equal(s.pos[1], "-");
    assert_int_equal(s.nother, 2);
    assert_string_equal(s.other[0], "--backend=cpu");
    assert_string_equal(s.other[1], "--seed=7");
    const char *b[] = {"x", "y", "z", NULL};
    assert_int_equal(parse(&spec, &s, b, &err), KG_EINVAL);
    assert_string_equal(err.msg, "z: one too many");
    const char *c[] = {"--backend", NULL};
    assert_int_equal(parse(&spec, &s, c, &err), KG_EINVAL);
    assert_string_equal(err.msg, "--backend: needs a value");
    const char *d[] = {"-b", "cpu", NULL}; /* single dash: not a field */
    assert_int_equal(parse(&spec, &s, d, &err), KG_ENOTFOUND);
}

static void test_pass_leaves_the_next_argument(void **state)
{
    (void)state;
    struct seen s;
    kg_err err;
    kg_opts spec = {.positional = add_pos, .other = add_other, .pass = 1};
    const char *a[] = {"--turns", "5", "--json", "--logprobs", NULL};
    assert_int_equal(parse(&spec, &s, a, &err), 0);
    assert_int_equal(s.json, 1);
    assert_int_equal(s.nother, 2);
    assert_string_equal(s.other[0], "--turns=5");
    assert_string_equal(s.other[1], "--logprobs=(null)");
    assert_int_equal(s.npos, 1);
    assert_string_equal(s.pos[0], "5");
}

static void test_number_helpers(void **state)
{
    (void)state;
    kg_err err = {{0}};
    long long n;
    double x;
    assert_int_equal(kg_opts_int("--seed", "1e3", 0, 1e6, &n, &err), 0);
    assert_int_equal(n, 1000);
    assert_int_equal(kg_opts_int("--seed", "9007199254740993", 0, HUGE_VAL,
                                 &n, &err),
                     KG_EINVAL);
    assert_int_equal(kg_opts_double("--x", "-inf", -HUGE_VAL, HUGE_VAL, &x,
                                    &err),
                     0);
    assert_int_equal(kg_opts_double("--x", "1e999", -1, 1, &x, &err),
                     KG_EINVAL);
    assert_string_equal(err.msg,
                        "--x: expected a number from -1 to 1, got '1e999'");
    assert_int_equal(kg_opts_double("--x", "abc", -HUGE_VAL, HUGE_VAL, &x,
                                    &err),
                     KG_EINVAL);
    assert_string_equal(err.msg, "--x: expected a number, got 'abc'");
}

/* An entry with a ctx of its own (KG_OPT_FN_ON) calls its fn on it, not
 * on the spec's: the entries several commands share. */
static void test_an_entry_may_carry_its_ctx(void **state)
{
    (void)state;
    struct seen own, spec_ctx;
    memset(&own, 0, sizeof own);
    memset(&spec_ctx, 0, sizeof spec_ctx);
    const kg_opt opts[] = {
        KG_OPT_FN_ON("--cand", add_cand, &own),
        KG_OPT_FN("--other", add_cand),
        KG_OPT_END,
    };
    char *argv[] = {"kgym", "--cand", "a.py", "--other", "b.py"};
    kg_opts spec = {.opts = opts, .ctx = &spec_ctx};
    kg_err err = {{0}};
    assert_int_equal(kg_opts_parse(&spec, 5, argv, &err), 0);
    assert_int_equal(own.n, 1);
    assert_string_equal(own.cands[0], "a.py");
    assert_int_equal(spec_ctx.n, 1);
    assert_string_equal(spec_ctx.cands[0], "b.py");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_is_set),
        cmocka_unit_test(test_a_value_may_start_with_a_dash),
        cmocka_unit_test(test_refusals_name_the_option),
        cmocka_unit_test(test_help_stops_the_parse),
        cmocka_unit_test(test_positionals_and_fallback),
        cmocka_unit_test(test_pass_leaves_the_next_argument),
        cmocka_unit_test(test_number_helpers),
        cmocka_unit_test(test_an_entry_may_carry_its_ctx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
