/*
 * sched.c - the scheduler's policy (sched.h): retry limits, infra_error
 * retries on another worker, the periodic sweep, result caching.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/result.h"
#include "server/sched.h"

struct kg_sched {
    kg_store *store;
    kg_sched_policy p;
    int background;
    pthread_t thread;
    pthread_mutex_t mu; /* stop and totals */
    pthread_cond_t cv;
    int stop;
    kg_requeue_counts totals;
};

void kg_sched_policy_default(kg_sched_policy *p)
{
    p->max_attempts = KG_SCHED_DEFAULT_MAX_ATTEMPTS;
    p->infra_avoid_ms = KG_SCHED_DEFAULT_INFRA_AVOID_MS;
    p->sweep_ms = KG_SCHED_DEFAULT_SWEEP_MS;
}

int kg_sched_sweep(kg_sched *sc, kg_requeue_counts *out, kg_err *err)
{
    kg_requeue_counts c = {0, 0, 0};
    int rc = kg_store_requeue_expired(sc->store, sc->p.max_attempts, &c, err);
    if (rc == 0) {
        pthread_mutex_lock(&sc->mu);
        sc->totals.requeued += c.requeued;
        sc->totals.failed += c.failed;
        sc->totals.dead_workers += c.dead_workers;
        pthread_mutex_unlock(&sc->mu);
    }
    if (out)
        *out = c;
    return rc;
}

void kg_sched_totals(kg_sched *sc, kg_requeue_counts *out)
{
    pthread_mutex_lock(&sc->mu);
    *out = sc->totals;
    pthread_mutex_unlock(&sc->mu);
}

/*
 * The background sweep: every sweep_ms until stopped. A failing sweep
 * (store unreachable) is logged once per streak and tried again next tick.
 */
static void *sweep_main(void *arg)
{
    kg_sched *sc = arg;
    int failing = 0;
    pthread_mutex_lock(&sc->mu);
    while (!sc->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long long ns = ts.tv_nsec + (sc->p.sweep_ms % 1000) * 1000000LL;
        ts.tv_sec += (time_t)(sc->p.sweep_ms / 1000 + ns / 1000000000LL);
        ts.tv_nsec = (long)(ns % 1000000000LL);
        while (!sc->stop &&
               pthread_cond_timedwait(&sc->cv, &sc->mu, &ts) != ETIMEDOUT)
            ;
        if (sc->stop)
            break;
        pthread_mutex_unlock(&sc->mu);
        kg_err err;
        kg_requeue_counts c;
        int rc = kg_sched_sweep(sc, &c, &err);
        if (rc < 0 && !failing)
            kg_error("sched: sweep failed (%s): %s", kg_strerror(rc), err.msg);
        else if (rc == 0 && failing)
            kg_info("sched: sweeps work again");
        else if (rc == 0 && (c.requeued || c.failed))
            kg_info("sched: %d lease(s) requeued, %d task(s) failed, %d dead "
                    "worker(s)",
                    c.requeued, c.failed, c.dead_workers);
        failing = rc < 0;
        pthread_mutex_lock(&sc->mu);
    }
    pthread_mutex_unlock(&sc->mu);
    return NULL;
}

int kg_sched_start(kg_sched **out, kg_store *s, const kg_sched_policy *p,
                   int background, kg_err *err)
{
    *out = NULL;
    kg_sched *sc = calloc(1, sizeof *sc);
    if (!sc)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    sc->store = s;
    if (p)
        sc->p = *p;
    else
        kg_sched_policy_default(&sc->p);
    if (sc->p.max_attempts < 1 || sc->p.sweep_ms < 1 ||
        sc->p.infra_avoid_ms < 0) {
        free(sc);
        return kg_errf(err, KG_EINVAL,
                       "scheduler: max_attempts and sweep_ms must be >= 1");
    }
    pthread_mutex_init(&sc->mu, NULL);
    pthread_cond_init(&sc->cv, NULL);
    if (background) {
        if (pthread_create(&sc->thread, NULL, sweep_main, sc) != 0) {
            pthread_mutex_destroy(&sc->mu);
            pthread_cond_destroy(&sc->cv);
            free(sc);
            return kg_errf(err, KG_ENOMEM, "scheduler: no thread");
        }
        sc->background = 1;
    }
    *out = sc;
    return 0;
}

void kg_sched_stop(kg_sched *sc)
{
    if (!sc)
        return;
    if (sc->background) {
        pthread_mutex_lock(&sc->mu);
        sc->stop = 1;
        pthread_cond_signal(&sc->cv);
        pthread_mutex_unlock(&sc->mu);
        pthread_join(sc->thread, NULL);
    }
    pthread_mutex_destroy(&sc->mu);
    pthread_cond_destroy(&sc->cv);
    free(sc);
}

int kg_sched_result(kg_sched *sc, const char *id, const char *worker_id,
                    const json_t *result, int *outcome, kg_err *err)
{
    kg_task t;
    int rc;
    if (!json_is_object(result))
        return kg_errf(err, KG_EINVAL, "result: not an object");
    if ((rc = kg_store_get(sc->store, id, 0, &t, err)) < 0)
        return rc;
    if (t.status != KG_TASK_RUNNING || strcmp(t.worker, worker_id) != 0)
        return kg_errf(err, KG_ESTATE,
                       "task %s is %s and not held by worker %s", id,
                       kg_task_status_name(t.status), worker_id);
    /* stored, and cached, only as the contract allows: a figure a client
     * would reward from is never taken as sent; the task stays leased */
    if ((rc = kg_result_check(result, err)) < 0) {
        kg_task_free(&t);
        return rc;
    }
    const json_t *v = json_object_get(result, "verdict");
    int infra = json_is_string(v) && kg_verdict_parse(json_string_value(v)) ==
                                         KG_VERDICT_INFRA_ERROR;
    if (infra && t.attempts < sc->p.max_attempts) {
        rc = kg_store_retry(sc->store, id, worker_id, result,
                            sc->p.infra_avoid_ms, err);
        if (rc == 0 && outcome)
            *outcome = KG_TASK_PENDING;
        return rc;
    }
    if (infra) {
        json_t *r = json_deep_copy(result);
        if (!r)
            return kg_errf(err, KG_ENOMEM, "out of memory");
        if (!json_is_string(json_object_get(r, "error_code")))
            json_object_set_new(r, "error_code",
                                json_string("INFRA_RETRIES_EXHAUSTED"));
        json_object_set_new(r, "status", json_string("failed"));
        rc =
            kg_store_complete(sc->store, id, worker_id, KG_TASK_FAILED, r, err);
        json_decref(r);
        if (rc == 0 && outcome)
            *outcome = KG_TASK_FAILED;
        return rc;
    }
    rc = kg_store_complete(sc->store, id, worker_id, KG_TASK_COMPLETED, result,
                           err);
    if (rc < 0)
        return rc;
    if (outcome)
        *outcome = KG_TASK_COMPLETED;
    /* the cache is an optimisation: a failed put loses nothing */
    if (t.cache_key[0])
        (void)kg_store_cache_put(sc->store, t.cache_key, result, NULL);
    return 0;
}
