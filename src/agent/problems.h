/*
 * problems.h - the problems a rollout works on, from one of three shapes:
 *  - a KernelBench tree (DIR/levelN/ *.py, or KernelBench's checkout):
 *    names "level1/1_GELU" (src/corpus/kernelbench.c reads it);
 *  - a folder of reference files (every DIR/ *.py) or one .py file: names are the
 *    file stems;
 *  - a JSONL in the common RL dataset shape, one problem a line:
 *    reward_model.ground_truth (the reference code), extra_info.entry_point
 *    (optional), prompt (a string or a list of chat messages: used as the
 *    first turn with --dataset-prompt), the name from extra_info.name,
 *    problem_id or index, else "line<N>".
 * A problem that does not load (unreadable, not UTF-8, over 512 KiB, no
 * `class <entry point>` or no `def get_inputs`) is reported with kg_warn
 * and skipped; the others go on.
 */
#ifndef KGYM_AGENT_PROBLEMS_H
#define KGYM_AGENT_PROBLEMS_H

#include <jansson.h>

#include "kgym/kgym.h"

typedef struct kg_problem {
    char *name;        /* unique within the set */
    char *reference;   /* the reference program */
    char *entry_point; /* NULL: the default ("Model") */
    json_t *prompt;    /* the dataset's prompt, or NULL */
} kg_problem;

typedef struct kg_problems {
    kg_problem *p;
    int n, cap;
    int skipped; /* problems reported and left out */
} kg_problems;

/*
 * Loads the problems of path into ps (the caller's to kg_problems_free).
 * 0, or KG_ENOTFOUND (no such path; no problem loaded at all) / KG_EIO /
 * KG_ENOMEM with the reason in err.
 */
int kg_problems_load(kg_problems *ps, const char *path, kg_err *err);
void kg_problems_free(kg_problems *ps);

#endif
