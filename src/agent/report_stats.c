/* report_stats.c - the numbers of one run for `kgym report` (report.h,
 * docs/report.md): per level and turn, Fast@p last-turn and best-of-history
 * (libkgym's kg_rl_fastp), Fast@p among correct attempts, hacking ratio by
 * reason, mean reward and coverage, geometric-mean speedup, the groups that
 * give no gradient, and what the feedback cost. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/report.h"
#include "kgym/rl.h"

static json_t *num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* strcmp, except that runs of digits compare as numbers: level2 before
 * level10, 9_X before 10_X (KernelBench's names). */
static int natcmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            while (*a == '0')
                a++;
            while (*b == '0')
                b++;
            size_t na = strspn(a, "0123456789"), nb = strspn(b, "0123456789");
            if (na != nb)
                return na < nb ? -1 : 1;
            int c = strncmp(a, b, na);
            if (c)
                return c;
            a += na;
            b += nb;
        } else if (*a != *b) {
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        } else {
            a++;
            b++;
        }
    }
    return (unsigned char)*a - (unsigned char)*b;
}

static int cmp_rows(const void *a, const void *b)
{
    const rp_row *x = *(const rp_row *const *)a, *y = *(const rp_row *const *)b;
    int c = natcmp(x->level, y->level);
    if (!c)
        c = natcmp(x->problem, y->problem);
    if (!c)
        c = (x->sample > y->sample) - (x->sample < y->sample);
    if (!c)
        c = (x->turn > y->turn) - (x->turn < y->turn);
    return c;
}

/* One level's rows laid out as S trajectories by T turns. */
struct grid {
    int S, T;
    const rp_row **cell; /* S x T, NULL where a turn has no row */
    const char **prob;   /* S: each trajectory's problem */
    uint8_t *valid, *correct, *hacked;
    double *speedup;
};

static void grid_free(struct grid *g)
{
    free(g->cell);
    free(g->prob);
    free(g->valid);
    free(g->correct);
    free(g->hacked);
    free(g->speedup);
}

/* rows[0..n) grouped by problem and sample, each sorted by turn. */
static int grid_make(struct grid *g, const rp_row **rows, size_t n)
{
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(rows[i]->problem, rows[i - 1]->problem) ||
            rows[i]->sample != rows[i - 1]->sample)
            g->S++;
        if (rows[i]->turn + 1 > g->T)
            g->T = rows[i]->turn + 1;
    }
    size_t c = (size_t)g->S * (size_t)g->T;
    g->cell = calloc(c, sizeof *g->cell);
    g->prob = calloc((size_t)g->S, sizeof *g->prob);
    g->valid = calloc(c, 1);
    g->correct = calloc(c, 1);
    g->hacked = calloc(c, 1);
    g->speedup = calloc(c, sizeof *g->speedup);
    if (!g->cell || !g->prob || !g->valid || !g->correct || !g->hacked ||
        !g->speedup)
        return -1;
    int s = -1;
    for (size_t i = 0; i < n; i++) {
        const rp_row *r = rows[i];
        if (i == 0 || strcmp(r->problem, rows[i - 1]->problem) ||
            r->sample != rows[i - 1]->sample)
            g->prob[++s] = r->problem;
        size_t x = (size_t)s * g->T + (size_t)r->turn;
        g->cell[x] = r;
        g->valid[x] = (uint8_t)r->valid;
        g->correct[x] = (uint8_t)r->correct;
        g->hacked[x] = (uint8_t)r->hacked;
        /* a correct attempt without a speedup (no --baseline time) is
         * fast at p = 0 only */
        g->speedup[x] = isfinite(r->speedup) ? r->speedup : 0.0;
    }
    return 0;
}

/* speedup passes threshold j: >= p, or > p under strict (p > 0). */
static int passes(double sp, int j, int strict)
{
    if (!isfinite(sp))
        return j == 0;
    return strict && j > 0 ? sp > rp_ps[j] : sp >= rp_ps[j];
}

static json_t *pmap(const double *v, int T, int t)
{
    json_t *o = json_object();
    for (int j = 0; j < RP_NP; j++)
        json_object_set_new(o, rp_pkeys[j], num(v[(size_t)j * T + t]));
    return o;
}

/* {"total", "mean", "n"} of the finite x's. */
static json_t *sum_obj(double total, long n)
{
    return json_pack("{s:o, s:o, s:I}", "total", num(n ? total : NAN), "mean",
                     num(n ? total / n : NAN), "n", (json_int_t)n);
}

/* Turn t's object. cur[s] is each trajectory's current attempt (its row at
 * t if valid, else its last valid one before), updated here. */
static json_t *turn_obj(const struct grid *g, int t, const double *last,
                        const double *best, const double *hack,
                        const rp_row **cur, int strict)
{
    long nrows = 0, nvalid = 0, ncor = 0, nrew = 0, ncov = 0, nsp = 0;
    long nev = 0, ntok = 0;
    double rew = 0, cov = 0, lsp = 0, ev = 0, tok = 0;
    json_t *hacked = json_object(), *sps = json_array(), *pts = json_array();
    for (int s = 0; s < g->S; s++) {
        const rp_row *r = g->cell[(size_t)s * g->T + t];
        if (!r)
            continue;
        nrows++;
        if (isfinite(r->eval_s))
            nev++, ev += r->eval_s;
        if (isfinite(r->tokens))
            ntok++, tok += r->tokens;
        if (!r->valid)
            continue;
        cur[s] = r;
        nvalid++;
        nrew++, rew += r->reward;
        if (r->hacked) {
            for (int k = 0; k < (r->nreasons ? r->nreasons : 1); k++) {
                const char *why = r->nreasons ? r->reasons[k] : "unnamed";
                json_t *c = json_object_get(hacked, why);
                json_object_set_new(hacked, why,
                                    json_integer(1 + json_integer_value(c)));
            }
        }
        if (!r->correct)
            continue;
        ncor++;
        if (isfinite(r->coverage))
            ncov++, cov += r->coverage;
        if (isfinite(r->speedup) && r->speedup > 0) {
            nsp++, lsp += log(r->speedup);
            json_array_append_new(sps, json_real(r->speedup));
            if (isfinite(r->coverage))
                json_array_append_new(
                    pts, json_pack("[f, f]", r->coverage, r->speedup));
        }
    }
    const char *why;
    json_t *c;
    json_object_foreach(hacked, why, c) json_object_set_new(
        hacked, why, json_real((double)json_integer_value(c) / nvalid));
    /* Fast@p among the correct current attempts */
    json_t *fc = json_object();
    long ccur = 0, k[RP_NP] = {0};
    for (int s = 0; s < g->S; s++) {
        if (!cur[s] || !cur[s]->correct)
            continue;
        ccur++;
        for (int j = 0; j < RP_NP; j++)
            k[j] += passes(cur[s]->speedup, j, strict);
    }
    for (int j = 0; j < RP_NP; j++)
        json_object_set_new(fc, rp_pkeys[j],
                            num(ccur ? (double)k[j] / ccur : NAN));
    return json_pack(
        "{s:i, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o, s:o}",
        "n", g->S, "n_rows", (json_int_t)nrows, "n_valid", (json_int_t)nvalid,
        "n_correct", (json_int_t)ncor, "fast_p", pmap(last, g->T, t),
        "fast_p_best", pmap(best, g->T, t), "fast_p_correct", fc,
        "hacked_ratio", num(nvalid ? hack[t] : NAN), "hacked", hacked,
        "mean_reward", num(nrew ? rew / nrew : NAN), "mean_coverage",
        num(ncov ? cov / ncov : NAN), "geomean_speedup",
        num(nsp ? exp(lsp / nsp) : NAN), "speedups", sps, "coverage_speedup",
        pts, "eval_s", sum_obj(ev, nev), "tokens", sum_obj(tok, ntok));
}

/* Groups (problem, turn) with at least one valid reward, all equal: GRPO
 * and TRLOO give every sample of such a group a zero advantage. Sets the
 * level's "flat_groups" and each turn's "flat_share". */
static void flat_groups(json_t *level, const struct grid *g)
{
    long flat = 0, groups = 0;
    json_t *probs = json_object(), *turns = json_object_get(level, "turns");
    for (int t = 0; t < g->T; t++) {
        long tf = 0, tg = 0;
        for (int s0 = 0; s0 < g->S;) {
            int s1 = s0;
            while (s1 < g->S && !strcmp(g->prob[s1], g->prob[s0]))
                s1++;
            int nv = 0, same = 1;
            double first = 0;
            for (int s = s0; s < s1; s++) {
                const rp_row *r = g->cell[(size_t)s * g->T + t];
                if (!r || !r->valid)
                    continue;
                if (nv++ == 0)
                    first = r->reward;
                else if (r->reward != first)
                    same = 0;
            }
            if (nv > 0) {
                tg++;
                if (same) {
                    tf++;
                    json_t *l = json_object_get(probs, g->prob[s0]);
                    if (!l)
                        json_object_set_new(probs, g->prob[s0],
                                            l = json_array());
                    json_array_append_new(l, json_integer(t));
                }
            }
            s0 = s1;
        }
        char key[16];
        snprintf(key, sizeof key, "%d", t);
        json_object_set_new(json_object_get(turns, key), "flat_share",
                            num(tg ? (double)tf / tg : NAN));
        flat += tf;
        groups += tg;
    }
    json_object_set_new(level, "flat_groups",
                        json_pack("{s:o, s:I, s:I, s:o}", "share",
                                  num(groups ? (double)flat / groups : NAN),
                                  "flat", (json_int_t)flat, "groups",
                                  (json_int_t)groups, "problems", probs));
}

static json_t *level_obj(const rp_row **rows, size_t n, int strict, kg_err *err)
{
    struct grid g;
    double ps[RP_NP];
    for (int j = 0; j < RP_NP; j++) /* > p is >= the next double above p */
        ps[j] = strict && j > 0 ? nextafter(rp_ps[j], INFINITY) : rp_ps[j];
    double *last = NULL, *best = NULL, *hack = NULL;
    const rp_row **cur = NULL;
    json_t *lv = NULL;
    if (grid_make(&g, rows, n) ||
        !(last = calloc((size_t)RP_NP * g.T, sizeof *last)) ||
        !(best = calloc((size_t)RP_NP * g.T, sizeof *best)) ||
        !(hack = calloc((size_t)g.T, sizeof *hack)) ||
        !(cur = calloc((size_t)g.S, sizeof *cur))) {
        kg_errf(err, KG_ENOMEM, "out of memory");
        goto out;
    }
    if (kg_rl_fastp(last, best, hack, g.correct, g.hacked, g.speedup, g.valid,
                    g.S, g.T, ps, RP_NP, err))
        goto out;
    json_t *turns = json_object();
    double ev = 0, tok = 0;
    long nev = 0, ntok = 0, nprob = 0;
    for (int t = 0; t < g.T; t++) {
        char key[16];
        snprintf(key, sizeof key, "%d", t);
        json_t *to = turn_obj(&g, t, last, best, hack, cur, strict);
        json_t *e = json_object_get(to, "eval_s"),
               *k = json_object_get(to, "tokens");
        nev += (long)json_integer_value(json_object_get(e, "n"));
        ev += json_number_value(json_object_get(e, "total"));
        ntok += (long)json_integer_value(json_object_get(k, "n"));
        tok += json_number_value(json_object_get(k, "total"));
        json_object_set_new(turns, key, to);
    }
    for (int s = 0; s < g.S; s++)
        nprob += s == 0 || strcmp(g.prob[s], g.prob[s - 1]);
    lv = json_pack("{s:i, s:I, s:i, s:o, s:o, s:o}", "n", g.S, "problems",
                   (json_int_t)nprob, "turn_count", g.T, "eval_s",
                   sum_obj(ev, nev), "tokens", sum_obj(tok, ntok), "turns",
                   turns);
    flat_groups(lv, &g);
out:
    free(last);
    free(best);
    free(hack);
    free(cur);
    grid_free(&g);
    return lv;
}

json_t *rp_stats(const rp_run *run, int strict, kg_err *err)
{
    const rp_row **rows = malloc(run->n * sizeof *rows);
    if (!rows) {
        kg_errf(err, KG_ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < run->n; i++)
        rows[i] = &run->rows[i];
    qsort(rows, run->n, sizeof *rows, cmp_rows);
    json_t *levels = json_object();
    size_t nlevels = 0;
    for (size_t i = 0; i <= run->n;) {
        /* each level in turn, then (i == n) every row when there are two
         * levels or more: the rows stay grouped by problem and sample */
        size_t j = i;
        const char *key = i < run->n ? rows[i]->level : RP_ALL_LEVELS;
        if (i < run->n)
            while (j < run->n && !strcmp(rows[j]->level, rows[i]->level))
                j++;
        else if (nlevels < 2)
            break;
        json_t *lv = i < run->n ? level_obj(rows + i, j - i, strict, err)
                                : level_obj(rows, run->n, strict, err);
        if (!lv) {
            json_decref(levels);
            free(rows);
            return NULL;
        }
        json_object_set_new(levels, key, lv);
        nlevels++;
        i = i < run->n ? j : run->n + 1;
    }
    free(rows);
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:o}", "name", run->name,
                     "path", run->path, "baseline", run->baseline, "comparison",
                     strict ? ">" : ">=", "rows", (json_int_t)run->n,
                     "no_baseline", (json_int_t)run->no_baseline, "levels",
                     levels);
}
