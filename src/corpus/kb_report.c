/* kb_report.c - the results of a KernelBench run: the records the summary
 * keeps, the JSONL read back for --resume, and the summary table
 * (kernelbench.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus/kernelbench.h"
#include "kgym/schema.h"
#include "common/log.h"

/* The verdicts' columns: the schema's verdicts (kgym/schema.h). */
#define NVERDICTS ((int)kg_schema_nverdicts())
#define VERDICT(v) kg_schema_verdict((size_t)(v))

const kb_rec *kb_recs_find(const kb_recs *recs, int level, const char *name)
{
    for (int i = 0; i < recs->n; i++)
        if (recs->r[i].level == level && !strcmp(recs->r[i].name, name))
            return &recs->r[i];
    return NULL;
}

int kb_recs_add(kb_recs *recs, const kb_rec *rec)
{
    kb_rec *r = (kb_rec *)kb_recs_find(recs, rec->level, rec->name);
    if (!r) {
        if (recs->n == recs->cap) {
            int cap = recs->cap ? 2 * recs->cap : 64;
            kb_rec *g = realloc(recs->r, (size_t)cap * sizeof *g);
            if (!g)
                return KG_ENOMEM;
            recs->r = g;
            recs->cap = cap;
        }
        r = &recs->r[recs->n++];
    }
    *r = *rec;
    return 0;
}

/* The timed calls' own time in s: mean x n of each side of runtime_stats
 * (ms); -1 when a side lacks them. */
static double calls_s(const json_t *stats)
{
    double s = 0;
    for (int i = 0; i < 2; i++) {
        json_t *side = json_object_get(stats, i ? "reference" : "kernel");
        json_t *mean = json_object_get(side, "mean");
        json_t *n = json_object_get(side, "n");
        if (!json_is_number(mean) || !json_is_integer(n))
            return -1;
        s += json_number_value(mean) * (double)json_integer_value(n) / 1e3;
    }
    return s;
}

int kb_recs_put(kb_recs *recs, const json_t *line)
{
    const char *name = json_string_value(json_object_get(line, "problem"));
    json_t *lv = json_object_get(line, "level");
    if (!name || !json_is_integer(lv))
        return KG_EPARSE;
    kb_rec r = {.level = (int)json_integer_value(lv)};
    snprintf(r.name, sizeof r.name, "%s", name);
    const char *v = json_string_value(json_object_get(line, "verdict"));
    snprintf(r.verdict, sizeof r.verdict, "%s", v ? v : "none");
    json_t *sp = json_object_get(line, "speedup");
    r.speedup = json_is_number(sp) ? json_number_value(sp) : -1;
    json_t *held = json_object_get(
        json_object_get(json_object_get(line, "phases"), "lock_held"),
        "exclusive");
    r.held_s = json_is_number(held) ? json_number_value(held) / 1e3 : -1;
    r.calls_s = calls_s(json_object_get(line, "runtime_stats"));
    return kb_recs_add(recs, &r);
}

void kb_recs_free(kb_recs *recs)
{
    free(recs->r);
    memset(recs, 0, sizeof *recs);
}

int kb_jsonl_load(const char *path, kb_recs *recs, int *ends_clean,
                  kg_err *err)
{
    *ends_clean = 1;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT
                   ? 0
                   : kg_errf(err, KG_EIO, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        no++;
        *ends_clean = line[len - 1] == '\n';
        json_t *j = json_loadb(line, (size_t)len, 0, NULL);
        if (!j || kb_recs_put(recs, j))
            kg_warn("%s:%ld: not a result line (cut by an interrupt?): "
                    "skipped, its problem runs again",
                    path, no);
        json_decref(j);
    }
    int bad = ferror(f);
    free(line);
    fclose(f);
    if (bad)
        return kg_errf(err, KG_EIO, "%s: read error", path);
    return 0;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A verdict's column: its name's width, at least 5. */
static int colw(int v)
{
    int w = (int)strlen(VERDICT(v));
    return w > 5 ? w : 5;
}

/* The problems x verdicts count table, one row per level and a total. */
static void verdict_table(FILE *f, const kb_recs *recs)
{
    int levels[KB_MAX_LEVEL + 2] = {0};
    for (int i = 0; i < recs->n; i++)
        if (recs->r[i].level >= 1 && recs->r[i].level <= KB_MAX_LEVEL)
            levels[recs->r[i].level] = 1;
    levels[KB_MAX_LEVEL + 1] = 1; /* the total */
    fprintf(f, "%-7s %5s", "level", "total");
    for (int v = 0; v < NVERDICTS; v++)
        fprintf(f, " %*s", colw(v), VERDICT(v));
    fprintf(f, "\n");
    for (int lv = 1; lv <= KB_MAX_LEVEL + 1; lv++) {
        if (!levels[lv])
            continue;
        int cnt[KG_SCHEMA_MAX_VERDICTS] = {0}, tot = 0;
        for (int i = 0; i < recs->n; i++) {
            if (lv <= KB_MAX_LEVEL && recs->r[i].level != lv)
                continue;
            tot++;
            for (int v = 0; v < NVERDICTS; v++)
                if (!strcmp(recs->r[i].verdict, VERDICT(v)))
                    cnt[v]++;
        }
        char name[16];
        snprintf(name, sizeof name, lv <= KB_MAX_LEVEL ? "%d" : "all", lv);
        fprintf(f, "%-7s %5d", name, tot);
        for (int v = 0; v < NVERDICTS; v++)
            fprintf(f, " %*d", colw(v), cnt[v]);
        fprintf(f, "\n");
    }
}

/* The speedups of the passing problems: count, min, median, max; self:
 * the shares within [0.95, 1.05] and [0.90, 1.10] and the problems
 * outside the wider band (the outliers), most extreme first. */
static void speedups(FILE *f, const kb_recs *recs, int self)
{
    double *s = malloc(((size_t)recs->n + 1) * sizeof *s);
    if (!s)
        return;
    int n = 0, in5 = 0, in10 = 0;
    for (int i = 0; i < recs->n; i++) {
        double x = recs->r[i].speedup;
        if (x < 0)
            continue;
        s[n++] = x;
        in5 += x >= 0.95 && x <= 1.05;
        in10 += x >= 0.90 && x <= 1.10;
    }
    const char *what = self ? "self-speedup" : "speedup";
    if (n == 0) {
        fprintf(f, "%s: no problem passed\n", what);
        free(s);
        return;
    }
    qsort(s, (size_t)n, sizeof *s, cmp_dbl);
    double med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    fprintf(f, "%s of %d passing: min %.3fx median %.3fx max %.3fx\n", what, n,
            s[0], med, s[n - 1]);
    free(s);
    if (!self)
        return;
    fprintf(f, "within [0.95, 1.05]: %d of %d (%.1f%%); within [0.90, 1.10]: "
               "%d of %d (%.1f%%)\n",
            in5, n, 100.0 * in5 / n, in10, n, 100.0 * in10 / n);
    if (in5 == n)
        return;
    fprintf(f, "outside [0.95, 1.05]:");
    for (int i = 0; i < recs->n; i++) {
        double x = recs->r[i].speedup;
        if (x >= 0 && (x < 0.95 || x > 1.05))
            fprintf(f, " level%d/%s %.3fx", recs->r[i].level, recs->r[i].name,
                    x);
    }
    fprintf(f, "\n");
}

/* The device held alone, summed: timing and profiling hold it one task at
 * a time at any concurrency, so no run of these problems on one device
 * takes less; and how much of it the timed calls themselves were. */
static void held_alone(FILE *f, const kb_recs *recs)
{
    double held = 0, calls = 0;
    int n = 0, nc = 0;
    for (int i = 0; i < recs->n; i++) {
        if (recs->r[i].held_s < 0)
            continue;
        held += recs->r[i].held_s, n++;
        if (recs->r[i].calls_s >= 0)
            calls += recs->r[i].calls_s, nc++;
    }
    if (n == 0 || held <= 0)
        return;
    fprintf(f, "device held alone (timing, profiling): %.1f s over %d problems",
            held, n);
    if (nc)
        fprintf(f, "; the timed calls themselves %.1f s (%.0f%%)", calls,
                100.0 * calls / held);
    fprintf(f, "; on one device no concurrency runs them faster than "
               "%.1f problems per minute\n",
            n * 60.0 / held);
}

void kb_summary(FILE *f, const kb_recs *recs, int self)
{
    fprintf(f, "\n== %d problems\n", recs->n);
    verdict_table(f, recs);
    speedups(f, recs, self);
    int shown = 0;
    for (int i = 0; i < recs->n; i++) {
        if (!strcmp(recs->r[i].verdict, "pass"))
            continue;
        if (!shown++)
            fprintf(f, "not pass:");
        fprintf(f, " level%d/%s=%s", recs->r[i].level, recs->r[i].name,
                recs->r[i].verdict);
    }
    if (shown)
        fprintf(f, "\n");
    held_alone(f, recs);
    fflush(f);
}
