/* report.h - `kgym report` (docs/report.md): rollout rows read into runs
 * (report_read.c), KernelBench baseline timings (report_baseline.c), the
 * numbers of a run as report.json's run object (report_stats.c), run
 * differences (report_diff.c), the terminal tables (report_table.c), the
 * command (cmd_report.c). */
#ifndef KGYM_AGENT_REPORT_H
#define KGYM_AGENT_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "kgym/kgym.h"

/* report.json's level that holds every row, when a run has two levels or
 * more (a level's name is the part of a problem's name before its '/') */
#define RP_ALL_LEVELS "all levels"

#define RP_NP 6 /* the thresholds: 0 (correct), 1, 1.2, 1.5, 2, 3 */
extern const double rp_ps[RP_NP];
extern const char *const rp_pkeys[RP_NP]; /* "0.0", "1.0", "1.2", ... */

typedef struct rp_row {
    char *problem; /* "level1/19_ReLU" */
    char *level;   /* "level1"; "all" for a name without a '/' */
    int sample, turn;
    int valid, correct, hacked;
    double speedup;                   /* NAN unless correct and not hacked */
    double coverage;                  /* NAN when absent */
    double reward;                    /* NAN when null */
    double kernel_ms, eval_s, tokens; /* NAN when absent */
    char **reasons;
    int nreasons;
    int compiled_ref; /* reference_backend was torch_compile */
} rp_row;

typedef struct rp_run {
    char *name, *path;
    rp_row *rows;
    size_t n, cap;
    const char *baseline; /* "eager", "torch_compile", "mixed", or the
                             --baseline label */
    long no_baseline;     /* correct rows the --baseline file has no time for */
} rp_run;

/* Reads a kgym rollout JSONL into run (name = file stem). Every line must
 * be a row (kgym.rollout/1) with its fields of the right type; an empty
 * file is an error. A row repeating (problem, sample, turn) replaces the
 * earlier one. */
int rp_read(rp_run *run, const char *path, kg_err *err);
void rp_run_free(rp_run *run);

/* Loads a KernelBench baseline timing JSON ({"level1": {"1_X.py": {"mean":
 * ms, "hardware": ...}}}) and recomputes the speedup of each correct row as
 * mean / kernel_ms; a row without a time there (or without kernel_ms) has
 * no speedup (counted in run->no_baseline). label gets what the report
 * says the baseline was. */
int rp_baseline_apply(rp_run *run, const char *path, char *label, size_t n,
                      kg_err *err);

/* The run object of report.json (new reference). strict: speedup > p
 * instead of >= p (p > 0; p = 0 is correctness either way). */
json_t *rp_stats(const rp_run *run, int strict, kg_err *err);

/* B - A for every level and turn both hold (new reference). */
json_t *rp_diff(const json_t *a, const json_t *b);

/* The terminal tables of report.json (runs, then diffs). */
void rp_print(FILE *f, const json_t *report);

#endif
