/* report_read.c - a `kgym rollout` JSONL read for `kgym report`
 * (report.h): each line checked to be one of the rollout's rows
 * (docs/agent.md, "Rows"), the fields the report uses kept. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/report.h"

#define RP_MAX_TURN 4096

const double rp_ps[RP_NP] = {0.0, 1.0, 1.2, 1.5, 2.0, 3.0};
const char *const rp_pkeys[RP_NP] = {"0.0", "1.0", "1.2", "1.5", "2.0", "3.0"};

static void row_free(rp_row *r)
{
    free(r->problem);
    free(r->level);
    for (int i = 0; i < r->nreasons; i++)
        free(r->reasons[i]);
    free(r->reasons);
}

void rp_run_free(rp_run *run)
{
    for (size_t i = 0; i < run->n; i++)
        row_free(&run->rows[i]);
    free(run->rows);
    free(run->name);
    free(run->path);
    memset(run, 0, sizeof *run);
}

/* A number field that may be null or absent: NAN then. -1 if it is
 * something else. */
static int opt_num(const json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);
    *out = NAN;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return 0;
}

#define BAD(...) kg_errf(err, KG_EPARSE, __VA_ARGS__)

/* The result object's fields into r; 0 or an error naming the field. */
static int take_result(rp_row *r, const json_t *res, const char *where,
                       kg_err *err)
{
    json_t *c = json_object_get(res, "correct"),
           *h = json_object_get(res, "hacked"),
           *hr = json_object_get(res, "hack_reasons");
    if (!json_is_boolean(c) || !json_is_boolean(h))
        return BAD("%s: result.correct and result.hacked must be booleans",
                   where);
    double sp, cov, km, es;
    if (opt_num(res, "speedup", &sp) || opt_num(res, "coverage", &cov) ||
        opt_num(res, "kernel_ms", &km) || opt_num(res, "eval_s", &es))
        return BAD("%s: result.speedup, coverage, kernel_ms and eval_s must "
                   "be numbers or null",
                   where);
    if (hr && !json_is_array(hr))
        return BAD("%s: result.hack_reasons must be a list", where);
    r->hacked = json_is_true(h);
    r->correct = json_is_true(c) && !r->hacked;
    if (r->correct && !(isfinite(sp) && sp >= 0))
        return BAD("%s: result.correct is true but result.speedup is not a "
                   "number >= 0",
                   where);
    r->speedup = r->correct ? sp : NAN;
    r->coverage = cov;
    r->kernel_ms = km;
    r->eval_s = es;
    size_t nr = json_array_size(hr);
    if (nr) {
        r->reasons = calloc(nr, sizeof *r->reasons);
        if (!r->reasons)
            return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < nr; i++) {
        const char *s = json_string_value(json_array_get(hr, i));
        if (!s)
            return BAD("%s: result.hack_reasons[%zu] is not a string", where,
                       i);
        if (!(r->reasons[r->nreasons++] = strdup(s)))
            return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    return 0;
}

/* One parsed line into r. */
static int take_row(rp_row *r, const json_t *row, const char *where,
                    kg_err *err)
{
    if (!json_is_object(row))
        return BAD("%s: not a JSON object", where);
    const char *schema = json_string_value(json_object_get(row, "schema"));
    if (!schema || strcmp(schema, "kgym.rollout/1"))
        return BAD("%s: not a kgym rollout row (schema is not "
                   "\"kgym.rollout/1\")",
                   where);
    const char *prob = json_string_value(json_object_get(row, "problem"));
    json_t *s = json_object_get(row, "sample"),
           *t = json_object_get(row, "turn");
    json_t *v = json_object_get(row, "valid");
    if (!prob || !*prob)
        return BAD("%s: problem must be a non-empty string", where);
    if (!json_is_integer(s) || json_integer_value(s) < 0 ||
        json_integer_value(s) > 1000000)
        return BAD("%s: sample must be an integer in 0..1000000", where);
    if (!json_is_integer(t) || json_integer_value(t) < 0 ||
        json_integer_value(t) >= RP_MAX_TURN)
        return BAD("%s: turn must be an integer in 0..%d", where,
                   RP_MAX_TURN - 1);
    if (!json_is_boolean(v))
        return BAD("%s: valid must be a boolean", where);
    r->sample = (int)json_integer_value(s);
    r->turn = (int)json_integer_value(t);
    r->valid = json_is_true(v);
    if (opt_num(row, "reward", &r->reward))
        return BAD("%s: reward must be a number or null", where);
    if (r->valid && !isfinite(r->reward))
        return BAD("%s: a valid row needs a finite reward", where);
    r->speedup = r->coverage = r->kernel_ms = r->eval_s = r->tokens = NAN;
    json_t *res = json_object_get(row, "result");
    if (res && !json_is_null(res)) {
        if (!json_is_object(res))
            return BAD("%s: result must be an object or null", where);
        int rc = take_result(r, res, where, err);
        if (rc)
            return rc;
    }
    if (!r->valid) /* not scored: nothing of it counts */
        r->correct = r->hacked = 0;
    json_t *u = json_object_get(row, "usage");
    if (u && !json_is_null(u)) {
        double ct, ch;
        if (!json_is_object(u) || opt_num(u, "completion_tokens", &ct) ||
            opt_num(u, "choices", &ch))
            return BAD("%s: usage must be an object with numeric "
                       "completion_tokens and choices",
                       where);
        /* a turn-0 request of n: K counts its K choices' tokens */
        r->tokens = isfinite(ch) && ch >= 1 ? ct / ch : ct;
    }
    json_t *rb = json_object_get(row, "reference_backend");
    if (rb && !json_is_null(rb)) {
        const char *b = json_string_value(rb);
        if (!b)
            return BAD("%s: reference_backend must be a string", where);
        /* KernelGym's spellings too (docs/design.md) */
        r->compiled_ref = !strcmp(b, "torch_compile") ||
                          !strcmp(b, "torch-compile") || !strcmp(b, "compile");
    }
    const char *slash = strchr(prob, '/');
    r->problem = strdup(prob);
    r->level = slash ? strndup(prob, (size_t)(slash - prob)) : strdup("all");
    if (!r->problem || !r->level)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    return 0;
}

static int same_key(const rp_row *a, const rp_row *b)
{
    return a->sample == b->sample && a->turn == b->turn &&
           !strcmp(a->problem, b->problem);
}

/* The run's name: the file's name without directories and ".jsonl". */
static char *stem(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 6 && !strcmp(b + n - 6, ".jsonl"))
        n -= 6;
    return strndup(b, n);
}

static int add_row(rp_run *run, const json_t *j, const char *where, long *dups,
                   kg_err *err)
{
    rp_row r = {0};
    int rc = take_row(&r, j, where, err);
    if (rc) {
        row_free(&r);
        return rc;
    }
    for (size_t i = run->n; i-- > 0;)
        if (same_key(&run->rows[i], &r)) { /* a redone turn: the later wins */
            row_free(&run->rows[i]);
            run->rows[i] = r;
            (*dups)++;
            return 0;
        }
    if (run->n == run->cap) {
        size_t cap = run->cap ? 2 * run->cap : 256;
        rp_row *nr = realloc(run->rows, cap * sizeof *nr);
        if (!nr) {
            row_free(&r);
            return kg_errf(err, KG_ENOMEM, "out of memory");
        }
        run->rows = nr;
        run->cap = cap;
    }
    run->rows[run->n++] = r;
    return 0;
}

int rp_read(rp_run *run, const char *path, kg_err *err)
{
    memset(run, 0, sizeof *run);
    FILE *f = fopen(path, "r");
    if (!f)
        return kg_errf(err, errno == ENOENT ? KG_ENOTFOUND : KG_EIO, "%s: %s",
                       path, strerror(errno));
    run->path = strdup(path);
    run->name = stem(path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0, dups = 0;
    int rc =
        run->path && run->name ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        no++;
        char where[300];
        snprintf(where, sizeof where, "%s line %ld", path, no);
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue; /* a blank line */
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, 0, &je);
        if (!j)
            rc = BAD("%s: not JSON (column %d: %s)", where, je.column, je.text);
        else
            rc = add_row(run, j, where, &dups, err);
        json_decref(j);
    }
    if (rc == 0 && ferror(f))
        rc = kg_errf(err, KG_EIO, "%s: %s", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc == 0 && run->n == 0)
        rc = BAD("%s: no rollout rows (empty file)", path);
    if (rc == 0 && dups)
        fprintf(stderr,
                "kgym report: %s: %ld rows repeat an earlier (problem, sample, "
                "turn); the later ones are used\n",
                path, dups);
    if (rc == 0) {
        size_t nc = 0;
        for (size_t i = 0; i < run->n; i++)
            nc += run->rows[i].compiled_ref;
        run->baseline = nc == 0        ? "eager"
                        : nc == run->n ? "torch_compile"
                                       : "mixed";
    }
    if (rc)
        rp_run_free(run);
    return rc;
}
