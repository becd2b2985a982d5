/* kernelbench.h - KernelBench's tree read as is, for `kgym selfcheck` and
 * `kgym eval --kernelbench`: its problems (DIR/levelN/<N>_<Name>.py), the
 * candidates paired with them by name, the JSONL of results (written as
 * they arrive, read back to resume) and the summary table. */
#ifndef KGYM_CLI_KERNELBENCH_H
#define KGYM_CLI_KERNELBENCH_H

#include <stdio.h>

#include <jansson.h>

#include "kgym/kgym.h"

#define KB_MAX_LEVEL 9
#define KB_MAX_PROBLEMS 4096
/* The levels KernelBench publishes as its benchmark; later ones (level4
 * loads models from a hub) run only when --level names them. */
#define KB_DEFAULT_LEVELS 3

/* One problem of the tree. Owned by its kb_tree. */
typedef struct kb_problem {
    char *path; /* the reference file */
    char *cand; /* its candidate (eval mode; NULL: none found / selfcheck) */
    char *name; /* the file's stem, "19_ReLU" */
    int level;
    long number; /* N of <N>_<Name>, for the order; -1: none */
} kb_problem;

typedef struct kb_tree {
    char root[3072]; /* the folder holding level1.. (DIR or DIR/KernelBench) */
    kb_problem *p;
    int n;
    unsigned skipped; /* bit N: levelN is present but not read (default) */
} kb_tree;

/*
 * Reads the problems of DIR: every *.py of DIR/levelN for each N set in
 * levels (bit N; 0: the level folders present up to KB_DEFAULT_LEVELS,
 * the others noted in tree->skipped), whose stem, file name or
 * "levelN/stem" matches one of the comma-separated globs (NULL: all),
 * ordered by level then N. DIR may also be KernelBench's checkout (its
 * problems in DIR/KernelBench/levelN). Errors (KG_ENOTFOUND: no DIR, no
 * level folder, no problem matched; KG_EIO) name the path. tree is the
 * caller's to kb_tree_free.
 */
int kb_tree_read(kb_tree *tree, const char *dir, unsigned levels,
                 const char *globs, kg_err *err);

/* Pairs each problem with CANDDIR/levelN/<file>, else CANDDIR/<file>
 * (a flat folder). Returns how many have a candidate. */
int kb_tree_pair(kb_tree *tree, const char *canddir);

void kb_tree_free(kb_tree *tree);

/* "1,2,3" -> bits 1..3 in *levels; 0, or KG_EINVAL with the reason. */
int kb_parse_levels(const char *s, unsigned *levels, kg_err *err);

/* The JSONL line of one result (new reference): problem, level, file,
 * candidate, verdict, speedup, kernel_runtime, reference_runtime,
 * runtime_stats, error_code, error, hack_reasons, seconds. */
json_t *kb_line(const kb_problem *p, const json_t *result);

/* What the summary keeps of a line. */
typedef struct kb_rec {
    int level;
    char name[256];
    char verdict[32];
    double speedup; /* < 0: none */
    double held_s;  /* the device held alone (timing, profiling); < 0: none */
    double calls_s; /* of it, both sides' timed calls' own time; < 0: none */
} kb_rec;

typedef struct kb_recs {
    kb_rec *r;
    int n, cap;
} kb_recs;

/* Adds (or replaces: the newest line of a problem wins) the record of a
 * JSONL line. 0, or KG_EPARSE when the line lacks problem or level. */
int kb_recs_put(kb_recs *recs, const json_t *line);

/* Adds (or replaces) a record. 0 or KG_ENOMEM. */
int kb_recs_add(kb_recs *recs, const kb_rec *rec);

/* The record of (level, name), or NULL. */
const kb_rec *kb_recs_find(const kb_recs *recs, int level, const char *name);

void kb_recs_free(kb_recs *recs);

/*
 * Reads an existing JSONL (for --resume) into recs; a line that does not
 * parse (the last one, cut by an interrupt) is skipped with a warning.
 * *ends_clean is 0 when the file's last byte is not a newline (the next
 * line must start on a new one). A missing file is no error (nothing done
 * yet). 0, or KG_EIO naming the file.
 */
int kb_jsonl_load(const char *path, kb_recs *recs, int *ends_clean,
                  kg_err *err);

/* The summary table of recs (counts per level and verdict, the speedup
 * distribution; self: the self-speedup bands and outliers; the time the
 * device was held alone, which bounds a run on one device) on f. */
void kb_summary(FILE *f, const kb_recs *recs, int self);

#endif
