/*
 * rl_json_fastp.c - the fastp subcommand of kgym rl (rl_json.c): groups the
 * input's attempts into trajectories (level, problem, sample) by turn and
 * computes Fast@p over all of them and per level (kg_rl_fastp).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kgym/rl.h"
#include "kgym/rl_json.h"
#include "rl_json_impl.h"

/* ---- Fast@p ------------------------------------------------------------ */

struct attempt {
    long long level, sample, turn;
    int pint;         /* problem is an integer (else a string) */
    long long pnum;   /* problem, if an integer */
    const char *pstr; /* problem, if a string (borrowed from the input) */
    size_t plen, idx; /* idx: position in "attempts" */
    struct turn tu;
};

static int cmp_ll(long long a, long long b)
{
    return (a > b) - (a < b);
}

/* Orders by trajectory (level, problem, sample), then turn, then input
 * position; levels come out contiguous and in order. */
static int cmp_attempt(const void *pa, const void *pb)
{
    const struct attempt *a = pa, *b = pb;
    int r = cmp_ll(a->level, b->level);
    if (r)
        return r;
    if (a->pint != b->pint)
        return a->pint ? -1 : 1;
    if (a->pint) {
        r = cmp_ll(a->pnum, b->pnum);
    } else {
        size_t m = a->plen < b->plen ? a->plen : b->plen;
        r = memcmp(a->pstr, b->pstr, m);
        if (!r)
            r = cmp_ll((long long)a->plen, (long long)b->plen);
    }
    if (r || (r = cmp_ll(a->sample, b->sample)) ||
        (r = cmp_ll(a->turn, b->turn)))
        return r;
    return cmp_ll((long long)a->idx, (long long)b->idx);
}

static int same_trajectory(const struct attempt *a, const struct attempt *b)
{
    return a->level == b->level && a->pint == b->pint &&
           a->sample == b->sample &&
           (a->pint ? a->pnum == b->pnum
                    : a->plen == b->plen && !memcmp(a->pstr, b->pstr, a->plen));
}

static int cmp_long_long(const void *pa, const void *pb)
{
    return cmp_ll(*(const long long *)pa, *(const long long *)pb);
}

static int read_attempt(const json_t *a, size_t i, struct attempt *at,
                        kg_err *err)
{
    char prefix[48], name[96];
    snprintf(prefix, sizeof prefix, "attempts[%zu]", i);
    if (!json_is_object(a))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an object, got %s", prefix,
                       kg_json_type_name(a));
    at->idx = i;
    at->sample = 0;
    static const char *const ints[] = {"level", "problem", "sample", "turn"};
    for (size_t k = 0; k < 4; k++) {
        const json_t *v = json_object_get(a, ints[k]);
        kg_rlj_path(name, sizeof name, prefix, ints[k]);
        if (!v || json_is_null(v)) {
            if (k == 2)
                continue; /* sample defaults to 0 */
            return kg_errf(err, KG_EINVAL, "field \"%s\": missing", name);
        }
        if (k == 1 && json_is_string(v)) {
            at->pint = 0;
            at->pstr = json_string_value(v);
            at->plen = json_string_length(v);
            continue;
        }
        if (k == 1 && !json_is_integer(v)) {
            char got[32];
            if (!json_is_real(v) ||
                kg_json_format_real(got, sizeof got, json_real_value(v)) < 0)
                snprintf(got, sizeof got, "%s", kg_json_type_name(v));
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": expected a string or an integer, "
                           "got %s",
                           name, got);
        }
        long long *dst[] = {&at->level, &at->pnum, &at->sample, &at->turn};
        int rc = kg_json_as_int(v, name, LLONG_MIN, LLONG_MAX, dst[k], err);
        if (rc < 0)
            return rc;
        if (k == 1)
            at->pint = 1;
    }
    return kg_rlj_read_turn(a, prefix, "attempt", 0, &at->tu, err);
}

/* "1.2" for 1.2, "2" for 2.0: the key of a p in the output. */
static void p_key(char *buf, size_t size, double p)
{
    int n = kg_json_format_real(buf, size, p);
    if (n >= 2 && !strcmp(buf + n - 2, ".0"))
        buf[n - 2] = '\0';
}

/*
 * The metrics of S trajectories (rows of the S x T arrays) as
 * {"last": {p: [T]}, "best": {p: [T]}, "hacking_ratio": [T], "n": S}.
 * S == 0 gives empty lists without calling the library. Caller owns *res.
 */
static int fastp_group(struct ctx *c, json_t **res, const uint8_t *correct,
                       const uint8_t *hacked, const double *speedup,
                       const uint8_t *valid, int S, int T, const double *ps,
                       int P)
{
    static const struct argmap map[] = {{"ps", "p"}, {0, 0}};
    int rc = 0;
    size_t nl = (size_t)P * (size_t)T;
    double *last = calloc(nl + 1, sizeof *last);
    double *best = calloc(nl + 1, sizeof *best);
    double *hack = calloc((size_t)T + 1, sizeof *hack);
    json_t *g = json_object(), *jl = json_object(), *jb = json_object();
    *res = NULL;
    if (!last || !best || !hack || !g || !jl || !jb) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    if (S > 0 && T > 0) {
        rc = kg_rl_fastp(last, best, hack, correct, hacked, speedup, valid, S,
                         T, ps, P, &c->err);
        if (rc) {
            kg_rlj_lib_error(c, rc, map, "attempts");
            goto done;
        }
    }
    if (json_object_set(g, "last", jl) || json_object_set(g, "best", jb)) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    for (int j = 0; j < P; j++) {
        char key[48];
        json_t *a, *b;
        p_key(key, sizeof key, ps[j]);
        if ((rc = kg_json_real_array(&a, last + (size_t)j * T, NULL, (size_t)T,
                                     "last", &c->err)))
            goto done;
        if (json_object_set_new(jl, key, a)) {
            rc = kg_rlj_out_of_memory(c);
            goto done;
        }
        if ((rc = kg_json_real_array(&b, best + (size_t)j * T, NULL, (size_t)T,
                                     "best", &c->err)))
            goto done;
        if (json_object_set_new(jb, key, b)) {
            rc = kg_rlj_out_of_memory(c);
            goto done;
        }
    }
    json_t *h;
    if ((rc = kg_json_real_array(&h, hack, NULL, (size_t)T, "hacking_ratio",
                                 &c->err)))
        goto done;
    if (json_object_set_new(g, "hacking_ratio", h) ||
        json_object_set_new(g, "n", json_integer(S))) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    *res = g;
    g = NULL;
done:
    free(last);
    free(best);
    free(hack);
    json_decref(g);
    json_decref(jl);
    json_decref(jb);
    return rc;
}

/* The p list: --p "1,1.2" or a "p" array; no duplicates. */
static int read_ps(struct ctx *c, double **ps, size_t *np)
{
    static const double def[] = {1.0, 1.2, 1.5, 2.0};
    const char *arg = NULL;
    int rc = kg_rlj_flag_text(c, "p", &arg);
    if (rc < 0)
        return rc;
    const json_t *v = json_object_get(kg_rlj_source(c, "p"), "p");
    *ps = NULL;
    *np = 0;
    if (arg) {
        size_t n = 1;
        for (const char *s = arg; *s; s++)
            n += *s == ',';
        *ps = calloc(n, sizeof **ps);
        if (!*ps)
            return kg_rlj_out_of_memory(c);
        char *copy = strdup(arg);
        if (!copy)
            return kg_rlj_out_of_memory(c);
        /* every item between commas is a number: "", ",,," or "1,,2"
         * are refused, never read as fewer thresholds */
        size_t k = 0;
        for (char *tok = copy, *next; tok; tok = next) {
            next = strchr(tok, ',');
            if (next)
                *next++ = '\0';
            if (!*tok) {
                free(copy);
                return kg_errf(&c->err, KG_EINVAL,
                               "option --p: item %zu is empty (want a "
                               "comma-separated list of numbers, e.g. "
                               "1,1.2,1.5,2)",
                               k + 1);
            }
            if ((rc = kg_rlj_parse_number(tok, "--p", &(*ps)[k++], &c->err)) <
                0) {
                free(copy);
                return rc;
            }
        }
        free(copy);
        *np = k;
    } else if (v && !json_is_null(v)) {
        if ((rc = kg_json_as_vector(v, "p", 0, ps, NULL, np, &c->err)) < 0)
            return rc;
    } else {
        *ps = malloc(sizeof def);
        if (!*ps)
            return kg_rlj_out_of_memory(c);
        memcpy(*ps, def, sizeof def);
        *np = 4;
    }
    if (*np > INT_MAX)
        return kg_errf(&c->err, KG_EINVAL, "field \"p\": too many values");
    if (*np == 0)
        return kg_errf(&c->err, KG_EINVAL, "field \"p\": no value");
    /* a speedup threshold: 0 (KernelBench's fast_0, correct at all) up */
    for (size_t a = 0; a < *np; a++)
        if (!((*ps)[a] >= 0 && (*ps)[a] <= KG_RLJ_MAX)) {
            char num[32];
            snprintf(num, sizeof num, "%g", (*ps)[a]);
            return kg_errf(&c->err, KG_EINVAL,
                           "field \"p\": value %zu must be a finite number "
                           "in [0, %g], got %s",
                           a + 1, KG_RLJ_MAX, num);
        }
    for (size_t a = 0; a < *np; a++) {
        for (size_t b = 0; b < a; b++) {
            if ((*ps)[a] == (*ps)[b]) {
                char num[32];
                kg_json_format_real(num, sizeof num, (*ps)[a]);
                return kg_errf(&c->err, KG_EINVAL, "%s: duplicate value %s",
                               arg ? "option --p" : "field \"p\"", num);
            }
        }
    }
    return 0;
}

/*
 * The input's "attempts" into *at (n of them, input order) and their turns
 * into *turns, both allocated n + 1 long and owned by the caller (set even
 * on error). An excluded attempt (problem_error) is left out, as if not
 * given.
 */
static int read_attempts(struct ctx *c, struct attempt **at, long long **turns,
                         size_t *n)
{
    const json_t *va = kg_rlj_need(c, "attempts");
    if (!va)
        return KG_EINVAL;
    if (!json_is_array(va))
        return kg_errf(&c->err, KG_EINVAL,
                       "field \"attempts\": expected an array, got %s",
                       kg_json_type_name(va));
    size_t total = json_array_size(va), kept = 0;
    *at = calloc(total + 1, sizeof **at);
    *turns = calloc(total + 1, sizeof **turns);
    if (!*at || !*turns)
        return kg_rlj_out_of_memory(c);
    for (size_t i = 0; i < total; i++) {
        struct attempt *a = &(*at)[kept];
        int rc = read_attempt(json_array_get(va, i), i, a, &c->err);
        if (rc < 0)
            return rc;
        if (!a->tu.excluded)
            (*turns)[kept] = a->turn, kept++;
    }
    *n = kept;
    return 0;
}

/*
 * Turns: the sorted distinct values (*T of them, in place). Trajectories:
 * runs of at once sorted (*S of them). An attempt that repeats an earlier
 * one's trajectory and turn is an error.
 */
static int group_attempts(struct ctx *c, struct attempt *at, size_t n,
                          long long *turns, size_t *S_out, size_t *T_out)
{
    qsort(turns, n, sizeof *turns, cmp_long_long);
    size_t T = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || turns[i] != turns[T - 1])
            turns[T++] = turns[i];
    qsort(at, n, sizeof *at, cmp_attempt);
    size_t S = 0, dup = SIZE_MAX, dup_at = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || !same_trajectory(&at[i - 1], &at[i]))
            S++;
        else if (at[i - 1].turn == at[i].turn && at[i].idx < dup) {
            dup = at[i].idx; /* the first attempt that repeats an earlier */
            dup_at = i;
        }
    }
    if (dup != SIZE_MAX) {
        const struct attempt *d = &at[dup_at];
        char prob[96];
        if (d->pint)
            snprintf(prob, sizeof prob, "%lld", d->pnum);
        else
            snprintf(prob, sizeof prob, "\"%.*s\"",
                     d->plen > 64 ? 64 : (int)d->plen, d->pstr);
        return kg_errf(&c->err, KG_EINVAL,
                       "field \"attempts[%zu]\": duplicate attempt (level "
                       "%lld, problem %s, sample %lld, turn %lld)",
                       dup, d->level, prob, d->sample, d->turn);
    }
    if (S > INT_MAX || T > INT_MAX || (T && S > SIZE_MAX / T))
        return kg_errf(&c->err, KG_EINVAL, "field \"attempts\": too many");
    *S_out = S;
    *T_out = T;
    return 0;
}

/* The S x T arrays kg_rl_fastp reads, one row per trajectory. */
struct grid {
    size_t S, T;
    uint8_t *correct, *hacked, *valid;
    double *speedup;
};

static int grid_alloc(struct grid *g)
{
    size_t n = g->S * g->T + 1;
    g->correct = calloc(n, 1);
    g->hacked = calloc(n, 1);
    g->valid = calloc(n, 1);
    g->speedup = calloc(n, sizeof *g->speedup);
    return g->correct && g->hacked && g->valid && g->speedup ? 0 : -1;
}

static void grid_free(struct grid *g)
{
    free(g->correct);
    free(g->hacked);
    free(g->valid);
    free(g->speedup);
}

/* Fills g from the sorted attempts; turns: the T distinct turns. */
static void grid_fill(struct grid *g, const struct attempt *at, size_t n,
                      const long long *turns)
{
    size_t s = SIZE_MAX, T = g->T;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || !same_trajectory(&at[i - 1], &at[i]))
            s++;
        const long long *tp =
            bsearch(&at[i].turn, turns, T, sizeof *turns, cmp_long_long);
        size_t x = s * T + (size_t)(tp - turns);
        g->correct[x] = at[i].tu.correct;
        g->hacked[x] = at[i].tu.hacked;
        g->speedup[x] =
            at[i].tu.correct && !at[i].tu.hacked ? at[i].tu.speedup : 0.0;
        g->valid[x] = 1;
    }
}

/* Sets by_level[level] to the group of each level's rows. Levels are
 * contiguous blocks of rows, in order. */
static int fastp_levels(struct ctx *c, json_t *by_level, const struct grid *gr,
                        const struct attempt *at, size_t n, const double *ps,
                        size_t np)
{
    size_t row = 0, s0 = 0, T = gr->T;
    for (size_t i = 0; i <= n; i++) {
        int new_traj =
            i < n && (i == 0 || !same_trajectory(&at[i - 1], &at[i]));
        int new_level = i == n || (i > 0 && at[i].level != at[i - 1].level);
        if (i > 0 && new_level) {
            size_t o = s0 * T;
            json_t *g;
            int rc = fastp_group(c, &g, gr->correct + o, gr->hacked + o,
                                 gr->speedup + o, gr->valid + o,
                                 (int)(row - s0), (int)T, ps, (int)np);
            if (rc)
                return rc;
            char key[32];
            snprintf(key, sizeof key, "%lld", at[i - 1].level);
            if (json_object_set_new(by_level, key, g))
                return kg_rlj_out_of_memory(c);
            s0 = row;
        }
        row += (size_t)new_traj;
    }
    return 0;
}

/* c->out = {"p", "turns", "overall", "by_level"}. */
static int fastp_output(struct ctx *c, const double *ps, size_t np,
                        const long long *turns, size_t T, json_t *overall,
                        json_t *by_level)
{
    json_t *jp, *jt;
    int rc;
    if ((rc = kg_json_real_array(&jp, ps, NULL, np, "p", &c->err)) ||
        (rc = kg_rlj_set_out(c, "p", jp)))
        return rc;
    jt = json_array();
    for (size_t t = 0; jt && t < T; t++)
        if (json_array_append_new(jt, json_integer(turns[t])))
            break;
    if (jt && json_array_size(jt) != T) {
        json_decref(jt);
        jt = NULL;
    }
    if (!jt || json_object_set_new(c->out, "turns", jt))
        return kg_rlj_out_of_memory(c);
    if (json_object_set(c->out, "overall", overall) ||
        json_object_set(c->out, "by_level", by_level))
        return kg_rlj_out_of_memory(c);
    return 0;
}

int kg_rlj_fastp(struct ctx *c)
{
    double *ps = NULL;
    size_t np = 0, n = 0;
    struct attempt *at = NULL;
    long long *turns = NULL;
    struct grid gr = {0};
    json_t *overall = NULL, *by_level = NULL;
    int rc;

    if ((rc = read_ps(c, &ps, &np)) < 0 ||
        (rc = read_attempts(c, &at, &turns, &n)) < 0 ||
        (rc = group_attempts(c, at, n, turns, &gr.S, &gr.T)) < 0)
        goto done;
    by_level = json_object();
    if (grid_alloc(&gr) < 0 || !by_level) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    grid_fill(&gr, at, n, turns);
    rc = fastp_group(c, &overall, gr.correct, gr.hacked, gr.speedup, gr.valid,
                     (int)gr.S, (int)gr.T, ps, (int)np);
    if (rc)
        goto done;
    if ((rc = fastp_levels(c, by_level, &gr, at, n, ps, np)))
        goto done;
    rc = fastp_output(c, ps, np, turns, gr.T, overall, by_level);
done:
    free(ps);
    free(at);
    free(turns);
    grid_free(&gr);
    json_decref(overall);
    json_decref(by_level);
    return rc;
}
