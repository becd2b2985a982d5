/* report_table.c - the terminal tables of `kgym report` (report.h), read
 * off report.json: per run, level and turn the Fast@p rows (last turn,
 * best of history, among correct) beside hacking, reward, coverage,
 * speedup and cost; then B - A per pair of runs. */
#include <stdio.h>

#include "agent/report.h"

/* A number in width w, "-" for null. */
static void cell(FILE *f, const json_t *v, int w, const char *fmt)
{
    if (json_is_number(v))
        fprintf(f, fmt, w, json_number_value(v));
    else
        fprintf(f, "%*s", w, "-");
}

static void prow(FILE *f, const json_t *m, const char *sgn)
{
    for (int j = 0; j < RP_NP; j++)
        cell(f, json_object_get(m, rp_pkeys[j]), 7, *sgn ? "%+*.3f" : "%*.3f");
}

static void phead(FILE *f, const char *first)
{
    fprintf(f, "  %4s %5s %6s  %-8s", "turn", "n", first, "Fast@p");
    for (int j = 0; j < RP_NP; j++) {
        char h[16];
        snprintf(h, sizeof h, "p=%g", rp_ps[j]);
        fprintf(f, "%7s", h);
    }
}

static void flat_line(FILE *f, const json_t *lv)
{
    json_t *fg = json_object_get(lv, "flat_groups");
    fprintf(f,
            "  groups with all rewards equal (no GRPO/TRLOO gradient): %lld "
            "of %lld",
            (long long)json_integer_value(json_object_get(fg, "flat")),
            (long long)json_integer_value(json_object_get(fg, "groups")));
    const char *pk;
    json_t *turns;
    int first = 1;
    json_object_foreach(json_object_get(fg, "problems"), pk, turns)
    {
        fprintf(f, "%s%s [", first ? ": " : ", ", pk);
        for (size_t i = 0; i < json_array_size(turns); i++)
            fprintf(f, "%s%lld", i ? " " : "",
                    (long long)json_integer_value(json_array_get(turns, i)));
        fputc(']', f);
        first = 0;
    }
    fputc('\n', f);
}

static void run_table(FILE *f, const json_t *run)
{
    fprintf(f,
            "run %s (%s): %lld rows; speedup baseline: %s; Fast@p counts "
            "speedup %s p (p=0: correct)\n",
            json_string_value(json_object_get(run, "name")),
            json_string_value(json_object_get(run, "path")),
            (long long)json_integer_value(json_object_get(run, "rows")),
            json_string_value(json_object_get(run, "baseline")),
            json_string_value(json_object_get(run, "comparison")));
    json_int_t nb = json_integer_value(json_object_get(run, "no_baseline"));
    if (nb)
        fprintf(f,
                "  %lld correct attempts have no baseline time: correct, "
                "fast at no p > 0\n",
                (long long)nb);
    const char *lk, *tk;
    json_t *lv, *t;
    json_object_foreach(json_object_get(run, "levels"), lk, lv)
    {
        fprintf(f, "%s: %lld trajectories of %lld problems\n", lk,
                (long long)json_integer_value(json_object_get(lv, "n")),
                (long long)json_integer_value(json_object_get(lv, "problems")));
        phead(f, "valid");
        fprintf(f, "  %7s%8s%9s%8s%9s%9s\n", "hacked", "reward", "coverage",
                "gmean", "eval_s", "tokens");
        json_object_foreach(json_object_get(lv, "turns"), tk, t)
        {
            static const char *const kinds[] = {"fast_p", "fast_p_best",
                                                "fast_p_correct"};
            static const char *const names[] = {"last", "best", "correct"};
            for (int k = 0; k < 3; k++) {
                if (k == 0)
                    fprintf(
                        f, "  %4s %5lld %6lld  %-8s", tk,
                        (long long)json_integer_value(json_object_get(t, "n")),
                        (long long)json_integer_value(
                            json_object_get(t, "n_valid")),
                        names[k]);
                else
                    fprintf(f, "  %4s %5s %6s  %-8s", "", "", "", names[k]);
                prow(f, json_object_get(t, kinds[k]), "");
                if (k == 0) {
                    fputs("  ", f);
                    cell(f, json_object_get(t, "hacked_ratio"), 7, "%*.3f");
                    cell(f, json_object_get(t, "mean_reward"), 8, "%*.3f");
                    cell(f, json_object_get(t, "mean_coverage"), 9, "%*.3f");
                    cell(f, json_object_get(t, "geomean_speedup"), 8, "%*.3f");
                    cell(f,
                         json_object_get(json_object_get(t, "eval_s"), "mean"),
                         9, "%*.2f");
                    cell(f,
                         json_object_get(json_object_get(t, "tokens"), "mean"),
                         9, "%*.0f");
                }
                fputc('\n', f);
            }
        }
        json_object_foreach(json_object_get(lv, "turns"), tk, t)
        {
            json_t *h = json_object_get(t, "hacked");
            if (!json_object_size(h))
                continue;
            fprintf(f, "  turn %s hacked by reason:", tk);
            const char *why;
            json_t *x;
            json_object_foreach(h, why, x)
                fprintf(f, " %s %.3f", why, json_number_value(x));
            fputc('\n', f);
        }
        flat_line(f, lv);
        fprintf(f,
                "  cost: %.1f s of evaluation, %.0f generated tokens "
                "(eval_s and tokens above: means per attempt)\n",
                json_number_value(
                    json_object_get(json_object_get(lv, "eval_s"), "total")),
                json_number_value(
                    json_object_get(json_object_get(lv, "tokens"), "total")));
    }
}

static void diff_table(FILE *f, const json_t *d)
{
    fprintf(f, "difference %s - %s (B - A; Fast@p counts speedup %s p)\n",
            json_string_value(json_object_get(d, "b")),
            json_string_value(json_object_get(d, "a")),
            json_string_value(json_object_get(d, "comparison")));
    const char *lk, *tk;
    json_t *lv, *t;
    json_object_foreach(json_object_get(d, "levels"), lk, lv)
    {
        fprintf(f, "%s:\n  %4s  %-8s", lk, "turn", "Fast@p");
        for (int j = 0; j < RP_NP; j++) {
            char h[16];
            snprintf(h, sizeof h, "p=%g", rp_ps[j]);
            fprintf(f, "%7s", h);
        }
        fprintf(f, "  %7s%9s\n", "hacked", "reward");
        json_object_foreach(json_object_get(lv, "turns"), tk, t)
        {
            fprintf(f, "  %4s  %-8s", tk, "last");
            prow(f, json_object_get(t, "fast_p"), "+");
            fputs("  ", f);
            cell(f, json_object_get(t, "hacked_ratio"), 7, "%+*.3f");
            cell(f, json_object_get(t, "mean_reward"), 9, "%+*.3f");
            fprintf(f, "\n  %4s  %-8s", "", "best");
            prow(f, json_object_get(t, "fast_p_best"), "+");
            fputc('\n', f);
        }
    }
}

void rp_print(FILE *f, const json_t *report)
{
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(report, "runs"), i, x)
    {
        if (i)
            fputc('\n', f);
        run_table(f, x);
    }
    json_array_foreach(json_object_get(report, "diffs"), i, x)
    {
        fputc('\n', f);
        diff_table(f, x);
    }
}
