/* test_report.c - the numbers of `kgym report` (src/agent/report_*.c) on
 * small rollout files whose answers are worked out by hand below: ties at
 * exactly p under >= and under > (--strict), a missing turn and an
 * invalid one (the last valid attempt carries on), a hacked kernel that
 * claims a speedup, best of history after a regression, hacking by
 * reason, groups with all rewards equal, the KernelBench baseline, and
 * bad files refused with one line naming the line. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/report.h"

static char dir[] = "/tmp/report-unit-XXXXXX";

/* One row: valid v; res is the result object's text or "null". */
static void row(FILE *f, const char *prob, int s, int t, int v,
                const char *reward, const char *res)
{
    fprintf(f,
            "{\"schema\":\"kgym.rollout/1\",\"problem\":\"%s\",\"sample\":%d,"
            "\"turn\":%d,\"valid\":%s,\"reward\":%s,\"result\":%s,"
            "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":300,"
            "\"choices\":3}}\n",
            prob, s, t, v ? "true" : "false", reward, res);
}

/* A correct result with speedup sp, coverage cov, kernel_ms km, eval 2 s. */
static char *pass(double sp, double cov, double km)
{
    static char buf[8][300];
    static int i;
    char *b = buf[i++ % 8];
    snprintf(b, 300,
             "{\"correct\":true,\"hacked\":false,\"speedup\":%g,\"coverage\""
             ":%g,\"hack_reasons\":[],\"kernel_ms\":%g,\"eval_s\":2}",
             sp, cov, km);
    return b;
}

static const char *WRONG = "{\"correct\":false,\"hacked\":false,\"speedup\":"
                           "null,\"hack_reasons\":[],\"eval_s\":1}";
/* a hacked kernel that claims to be fast: never counted as fast */
static const char *HACKED_FAST =
    "{\"correct\":true,\"hacked\":true,\"speedup\":5.0,\"hack_reasons\":["
    "\"timer_tamper\",\"no_custom_kernel\"],\"eval_s\":1}";

/*
 * level1/P, 3 samples x 3 turns (reward 1 + min(speedup, 3)):
 *   s0: t0 pass 1.0 | t1 pass 1.5 | t2 pass 1.2 (a regression)
 *   s1: t0 hacked (claims 5.0) | t1 no row | t2 pass 2.0
 *   s2: t0 mismatch | t1 not valid | t2 pass 3.0
 * level2/Q, 2 samples x 1 turn, both mismatch (reward 0: a flat group).
 */
static char *write_main(void)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/main.jsonl", dir);
    FILE *f = fopen(path, "w");
    row(f, "level1/P", 0, 0, 1, "2.0", pass(1.0, 0.9, 4.0));
    row(f, "level1/P", 0, 1, 1, "2.5", pass(1.5, 0.8, 2.0));
    row(f, "level1/P", 0, 2, 1, "2.2", pass(1.2, 0.5, 3.0));
    row(f, "level1/P", 1, 0, 1, "0", HACKED_FAST);
    row(f, "level1/P", 1, 2, 1, "3.0", pass(2.0, 0.7, 1.0));
    row(f, "level1/P", 2, 0, 1, "0", WRONG);
    row(f, "level1/P", 2, 1, 0, "null", "null");
    row(f, "level1/P", 2, 2, 1, "4.0", pass(3.0, 1.0, 1.0));
    row(f, "level2/Q", 0, 0, 1, "0", WRONG);
    row(f, "level2/Q", 1, 0, 1, "0", WRONG);
    fclose(f);
    return path;
}

static json_t *turn(json_t *run, const char *lv, int t)
{
    char k[16];
    snprintf(k, sizeof k, "%d", t);
    json_t *o = json_object_get(
        json_object_get(json_object_get(json_object_get(run, "levels"), lv),
                        "turns"),
        k);
    assert_non_null(o);
    return o;
}

/* turn t's map kind at each p of rp_ps, against want (NAN: null) */
static void expect(json_t *run, const char *lv, int t, const char *kind,
                   const double want[RP_NP])
{
    json_t *m = json_object_get(turn(run, lv, t), kind);
    for (int j = 0; j < RP_NP; j++) {
        json_t *v = json_object_get(m, rp_pkeys[j]);
        if (isnan(want[j])) {
            if (!json_is_null(v))
                fail_msg("%s turn %d %s p=%s: want null", lv, t, kind,
                         rp_pkeys[j]);
        } else if (!json_is_number(v) ||
                   fabs(json_number_value(v) - want[j]) > 1e-12)
            fail_msg("%s turn %d %s p=%s: got %g, want %g", lv, t, kind,
                     rp_pkeys[j], json_number_value(v), want[j]);
    }
}

static double numat(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

static json_t *stats_of(const char *path, int strict)
{
    rp_run run;
    kg_err err = {{0}};
    assert_int_equal(rp_read(&run, path, &err), 0);
    json_t *st = rp_stats(&run, strict, &err);
    rp_run_free(&run);
    assert_non_null(st);
    return st;
}

#define T3 (1.0 / 3)
#define T23 (2.0 / 3)

static void test_fastp_ge(void **state)
{
    (void)state;
    json_t *st = stats_of(write_main(), 0);
    assert_string_equal(json_string_value(json_object_get(st, "comparison")),
                        ">=");
    assert_string_equal(json_string_value(json_object_get(st, "baseline")),
                        "eager");
    /*                     p=0  1    1.2  1.5  2    3 */
    expect(st, "level1", 0, "fast_p", (double[]){T3, T3, 0, 0, 0, 0});
    expect(st, "level1", 0, "fast_p_best", (double[]){T3, T3, 0, 0, 0, 0});
    /* among correct: s0 alone (the hacked one is not correct) */
    expect(st, "level1", 0, "fast_p_correct", (double[]){1, 1, 0, 0, 0, 0});
    /* t1: s1 has no row, s2 is not valid: both carry turn 0 (not fast);
     * s0's 1.5 ties p = 1.5 */
    expect(st, "level1", 1, "fast_p", (double[]){T3, T3, T3, T3, 0, 0});
    expect(st, "level1", 1, "fast_p_best", (double[]){T3, T3, T3, T3, 0, 0});
    expect(st, "level1", 1, "fast_p_correct", (double[]){1, 1, 1, 1, 0, 0});
    /* t2: 1.2, 2.0, 3.0, each a tie at its own p */
    expect(st, "level1", 2, "fast_p", (double[]){1, 1, 1, T23, T23, T3});
    /* best of history: s0's 1.5 at t1 beats its 1.2 at t2 */
    expect(st, "level1", 2, "fast_p_best", (double[]){1, 1, 1, 1, T23, T3});
    expect(st, "level1", 2, "fast_p_correct",
           (double[]){1, 1, 1, T23, T23, T3});
    expect(st, "level2", 0, "fast_p", (double[]){0, 0, 0, 0, 0, 0});
    expect(st, "level2", 0, "fast_p_correct",
           (double[]){NAN, NAN, NAN, NAN, NAN, NAN});

    json_t *t0 = turn(st, "level1", 0), *t1 = turn(st, "level1", 1),
           *t2 = turn(st, "level1", 2);
    assert_int_equal(json_integer_value(json_object_get(t0, "n")), 3);
    assert_int_equal(json_integer_value(json_object_get(t1, "n_rows")), 2);
    assert_int_equal(json_integer_value(json_object_get(t1, "n_valid")), 1);
    assert_true(fabs(numat(t0, "hacked_ratio") - T3) < 1e-12);
    assert_true(fabs(numat(json_object_get(t0, "hacked"), "timer_tamper") -
                     T3) < 1e-12);
    assert_true(fabs(numat(json_object_get(t0, "hacked"), "no_custom_kernel") -
                     T3) < 1e-12);
    assert_true(numat(t1, "hacked_ratio") == 0);
    assert_true(fabs(numat(t0, "mean_reward") - 2.0 / 3) < 1e-12);
    assert_true(fabs(numat(t2, "mean_reward") - 9.2 / 3) < 1e-12);
    assert_true(fabs(numat(t2, "geomean_speedup") - cbrt(7.2)) < 1e-12);
    assert_true(fabs(numat(t2, "mean_coverage") - 2.2 / 3) < 1e-12);
    /* cost: eval_s 2 per pass, 1 per mismatch/hack, none without a
     * result; 300 tokens over 3 choices = 100 per row */
    json_t *ev = json_object_get(t0, "eval_s"),
           *tk = json_object_get(t0, "tokens");
    assert_true(numat(ev, "total") == 4.0);
    assert_true(numat(tk, "mean") == 100.0);
    assert_true(numat(json_object_get(t1, "eval_s"), "total") == 2.0);

    /* flat groups: level1 t1 (s0 alone valid); t0 and t2 differ;
     * level2 t0 (0 and 0) */
    json_t *fg = json_object_get(
        json_object_get(json_object_get(st, "levels"), "level1"),
        "flat_groups");
    assert_int_equal(json_integer_value(json_object_get(fg, "flat")), 1);
    assert_int_equal(json_integer_value(json_object_get(fg, "groups")), 3);
    json_t *pl = json_object_get(json_object_get(fg, "problems"), "level1/P");
    assert_int_equal(json_array_size(pl), 1);
    assert_int_equal(json_integer_value(json_array_get(pl, 0)), 1);
    assert_true(fabs(numat(t1, "flat_share") - 1.0) < 1e-12);
    assert_true(numat(t0, "flat_share") == 0);
    fg = json_object_get(
        json_object_get(json_object_get(st, "levels"), "level2"),
        "flat_groups");
    assert_true(numat(fg, "share") == 1.0);
    json_decref(st);
}

static void test_fastp_strict(void **state)
{
    (void)state;
    json_t *st = stats_of(write_main(), 1);
    assert_string_equal(json_string_value(json_object_get(st, "comparison")),
                        ">");
    /* a tie at exactly p is not fast under >; p = 0 stays correctness */
    expect(st, "level1", 0, "fast_p", (double[]){T3, 0, 0, 0, 0, 0});
    expect(st, "level1", 1, "fast_p", (double[]){T3, T3, T3, 0, 0, 0});
    expect(st, "level1", 2, "fast_p", (double[]){1, 1, T23, T23, T3, 0});
    expect(st, "level1", 2, "fast_p_best", (double[]){1, 1, 1, T23, T3, 0});
    expect(st, "level1", 2, "fast_p_correct",
           (double[]){1, 1, T23, T23, T3, 0});
    json_decref(st);
}

static void test_baseline(void **state)
{
    (void)state;
    char base[128];
    snprintf(base, sizeof base, "%s/base.json", dir);
    FILE *f = fopen(base, "w");
    /* P's baseline mean 4 ms: s0's kernels (4, 2, 3 ms) are 1, 2, 1.33x */
    fputs("{\"level1\": {\"P.py\": {\"mean\": 4.0, \"hardware\": \"H100\"}},"
          " \"level2\": {}}",
          f);
    fclose(f);
    rp_run run;
    kg_err err = {{0}};
    char label[256];
    assert_int_equal(rp_read(&run, write_main(), &err), 0);
    assert_int_equal(rp_baseline_apply(&run, base, label, sizeof label, &err),
                     0);
    assert_non_null(strstr(label, "other hardware (H100)"));
    run.baseline = label;
    json_t *st = rp_stats(&run, 0, &err);
    rp_run_free(&run);
    /* t2: s0 4/3 = 1.33, s1 4/1 = 4, s2 4/1 = 4 */
    expect(st, "level1", 2, "fast_p", (double[]){1, 1, 1, T23, T23, T23});
    expect(st, "level1", 1, "fast_p", (double[]){T3, T3, T3, T3, T3, 0});
    json_decref(st);

    /* a problem the file lacks: still correct, fast at no p > 0 */
    f = fopen(base, "w");
    fputs("{\"level1\": {\"Other.py\": {\"mean\": 1.0}}}", f);
    fclose(f);
    assert_int_equal(rp_read(&run, write_main(), &err), 0);
    assert_int_equal(rp_baseline_apply(&run, base, label, sizeof label, &err),
                     0);
    assert_int_equal(run.no_baseline, 5);
    st = rp_stats(&run, 0, &err);
    rp_run_free(&run);
    expect(st, "level1", 2, "fast_p", (double[]){1, 0, 0, 0, 0, 0});
    json_decref(st);

    f = fopen(base, "w");
    fputs("[1, 2]", f);
    fclose(f);
    assert_int_equal(rp_read(&run, write_main(), &err), 0);
    assert_int_not_equal(
        rp_baseline_apply(&run, base, label, sizeof label, &err), 0);
    assert_non_null(strstr(err.msg, "not KernelBench's baseline timing"));
    rp_run_free(&run);
}

static void test_diff(void **state)
{
    (void)state;
    json_t *a = stats_of(write_main(), 0), *b = stats_of(write_main(), 1);
    json_t *d = rp_diff(a, b);
    /* B - A at t2: > loses the ties at 1.2, 2 and 3 */
    expect(d, "level1", 2, "fast_p", (double[]){0, 0, -T3, 0, -T3, -T3});
    json_decref(a);
    json_decref(b);
    json_decref(d);
}

/* bad files: one line naming the file and line */
static void bad(const char *text, const char *want)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad.jsonl", dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    rp_run run;
    kg_err err = {{0}};
    assert_int_not_equal(rp_read(&run, path, &err), 0);
    if (!strstr(err.msg, want))
        fail_msg("got \"%s\", want \"%s\"", err.msg, want);
    assert_null(strchr(err.msg, '\n'));
}

static void test_bad_input(void **state)
{
    (void)state;
    bad("", "no rollout rows (empty file)");
    bad("\n\n", "no rollout rows (empty file)");
    bad("{\"schema\":\"kgym.rollout/1\"\n", "line 1: not JSON");
    bad("[1]\n", "line 1: not a JSON object");
    bad("{\"schema\":\"other\"}\n", "line 1: not a kgym rollout row");
    char two[1200];
    snprintf(two, sizeof two,
             "{\"schema\":\"kgym.rollout/1\",\"problem\":\"a\",\"sample\":0,"
             "\"turn\":0,\"valid\":false,\"reward\":null,\"result\":null}\n"
             "{\"schema\":\"kgym.rollout/1\",\"problem\":\"a\",\"sample\":0,"
             "\"turn\":\"1\",\"valid\":true,\"reward\":1}\n");
    bad(two, "line 2: turn must be an integer");
    bad("{\"schema\":\"kgym.rollout/1\",\"problem\":\"a\",\"sample\":0,"
        "\"turn\":0,\"valid\":true,\"reward\":null}\n",
        "line 1: a valid row needs a finite reward");
    bad("{\"schema\":\"kgym.rollout/1\",\"problem\":\"a\",\"sample\":0,"
        "\"turn\":0,\"valid\":true,\"reward\":1,\"result\":{\"correct\":true,"
        "\"hacked\":false,\"speedup\":null}}\n",
        "line 1: result.correct is true but result.speedup");
    bad("{\"schema\":\"kgym.rollout/1\",\"problem\":\"a\",\"sample\":0,"
        "\"turn\":0,\"valid\":true,\"reward\":1,\"result\":{\"correct\":true,"
        "\"hacked\":false,\"speedup\":1,\"hack_reasons\":[3]}}\n",
        "line 1: result.hack_reasons[0] is not a string");
    rp_run run;
    kg_err err = {{0}};
    assert_int_equal(rp_read(&run, "/nonexistent/r.jsonl", &err), KG_ENOTFOUND);
    assert_string_equal(err.msg,
                        "/nonexistent/r.jsonl: No such file or directory");
}

/* a redone row replaces the earlier one; "all" is the level of a name
 * without a '/' */
static void test_repeat_and_level(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/rep.jsonl", dir);
    FILE *f = fopen(path, "w");
    row(f, "X", 0, 0, 1, "0", WRONG);
    row(f, "X", 0, 0, 1, "3.0", pass(2.0, 1, 1));
    fclose(f);
    json_t *st = stats_of(path, 0);
    expect(st, "all", 0, "fast_p", (double[]){1, 1, 1, 1, 1, 0});
    assert_int_equal(json_integer_value(json_object_get(st, "rows")), 1);
    json_decref(st);
}

/* write_main's run over every row (level1/P's 3 trajectories and level2/Q's
 * 2, whose one turn carries on): at turn 2 three of five are correct, at
 * 1.2, 2.0 and 3.0. Levels come in numeric order, then "all levels"; a run
 * of one level has no such row. */
static void test_all_levels(void **state)
{
    (void)state;
    json_t *st = stats_of(write_main(), 0);
    expect(st, RP_ALL_LEVELS, 0, "fast_p", (double[]){0.2, 0.2, 0, 0, 0, 0});
    expect(st, RP_ALL_LEVELS, 2, "fast_p",
           (double[]){0.6, 0.6, 0.6, 0.4, 0.4, 0.2});
    json_t *all = json_object_get(json_object_get(st, "levels"), RP_ALL_LEVELS);
    assert_int_equal(json_integer_value(json_object_get(all, "n")), 5);
    assert_int_equal(json_integer_value(json_object_get(all, "problems")), 2);
    json_decref(st);

    char path[128];
    snprintf(path, sizeof path, "%s/order.jsonl", dir);
    FILE *f = fopen(path, "w");
    row(f, "level10/A", 0, 0, 1, "0", WRONG);
    row(f, "level2/B", 0, 0, 1, "3.0", pass(2.0, 1, 1));
    row(f, "level2/B", 1, 0, 1, "0", WRONG);
    fclose(f);
    st = stats_of(path, 0);
    const char *want[] = {"level2", "level10", RP_ALL_LEVELS};
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(st, "levels"), key, v)
    {
        assert_true(k < 3);
        assert_string_equal(key, want[k++]);
    }
    assert_int_equal(k, 3);
    expect(st, RP_ALL_LEVELS, 0, "fast_p", (double[]){T3, T3, T3, T3, T3, 0});
    json_decref(st);

    snprintf(path, sizeof path, "%s/one.jsonl", dir);
    f = fopen(path, "w");
    row(f, "level2/B", 0, 0, 1, "0", WRONG);
    fclose(f);
    st = stats_of(path, 0);
    assert_int_equal(json_object_size(json_object_get(st, "levels")), 1);
    json_decref(st);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"main.jsonl", "base.json", "bad.jsonl", "rep.jsonl",
                           "order.jsonl", "one.jsonl"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fastp_ge),
        cmocka_unit_test(test_fastp_strict),
        cmocka_unit_test(test_baseline),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_repeat_and_level),
        cmocka_unit_test(test_all_levels),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
