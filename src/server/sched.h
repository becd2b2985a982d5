/*
 * sched.h - the scheduler's policy on top of the store.
 *
 * The store (store.h) gives the mechanisms: atomic leases, deadlines,
 * requeue, retry with an avoided worker. The scheduler decides: how many
 * attempts a task gets, what an infra_error result means, how often the
 * sweep for expired leases and dead workers runs, what goes into the
 * result cache. The HTTP layer hands every worker result to
 * kg_sched_result and runs kg_sched_start once at server start.
 */
#ifndef KGYM_SCHED_H
#define KGYM_SCHED_H

#include <jansson.h>
#include <stdint.h>

#include "kgym/kgym.h"
#include "server/store.h"

typedef struct kg_sched_policy {
    /*
     * Leases a task may get: after the max_attempts-th lease expires (or
     * its holder dies), or its max_attempts-th attempt ends in
     * infra_error, the task is failed with the reason.
     */
    int max_attempts;
    /* After an infra_error, other workers get the task first for this. */
    int64_t infra_avoid_ms;
    /* Period of the background sweep (kg_store_requeue_expired). */
    int64_t sweep_ms;
} kg_sched_policy;

#define KG_SCHED_DEFAULT_MAX_ATTEMPTS 3
#define KG_SCHED_DEFAULT_INFRA_AVOID_MS 30000
#define KG_SCHED_DEFAULT_SWEEP_MS 1000

void kg_sched_policy_default(kg_sched_policy *p);

typedef struct kg_sched kg_sched;

/*
 * Makes a scheduler for store s (borrowed: it must outlive the scheduler).
 * p may be NULL (defaults). With background != 0 a thread runs the sweep
 * every sweep_ms (errors such as KG_EUNAVAIL are retried on the next
 * tick). *out is the caller's, released with kg_sched_stop.
 */
int kg_sched_start(kg_sched **out, kg_store *s, const kg_sched_policy *p,
                   int background, kg_err *err);
/* Stops the thread (if any) and frees the scheduler. NULL is fine. */
void kg_sched_stop(kg_sched *sc);

/* One sweep now; *out (may be NULL) gets what it did. */
int kg_sched_sweep(kg_sched *sc, kg_requeue_counts *out, kg_err *err);

/* Totals of the background sweeps since start (for logs and metrics). */
void kg_sched_totals(kg_sched *sc, kg_requeue_counts *out);

/*
 * A worker's result for task id (result borrowed). Policy:
 * - verdict infra_error with attempts left: the task goes back to pending,
 *   avoiding this worker for infra_avoid_ms; *outcome = KG_TASK_PENDING;
 * - infra_error on the last attempt: failed, the result kept, its
 *   error_code set to INFRA_RETRIES_EXHAUSTED when it had none;
 *   *outcome = KG_TASK_FAILED;
 * - anything else: completed; *outcome = KG_TASK_COMPLETED; the result is
 *   also put in the result cache under the task's cache key (if any).
 * Errors as kg_store_complete: KG_ESTATE when worker_id does not hold the
 * task (expired, cancelled), KG_ENOTFOUND when the task is unknown.
 * outcome may be NULL.
 */
int kg_sched_result(kg_sched *sc, const char *id, const char *worker_id,
                    const json_t *result, int *outcome, kg_err *err);

#endif
