/*
 * metrics.h - the server's Prometheus registry (GET /metrics).
 *
 * The HTTP layer records every request's route, status and latency here
 * (lock-free counters); the store's figures (queue depth, tasks by status
 * and verdict, workers, lease expiries) are read at scrape time and passed
 * in as a snapshot, so /metrics shows the store's truth, not a copy that
 * drifts when several servers share one Redis.
 */
#ifndef KGYM_SERVER_METRICS_H
#define KGYM_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "server/store.h"

/* Fixed route names, so label cardinality is bounded whatever the URL. */
enum kg_route {
    KG_ROUTE_EVALUATE,
    KG_ROUTE_EVALUATE_BATCH,
    KG_ROUTE_STATUS,
    KG_ROUTE_RESULTS,
    KG_ROUTE_RESULTS_BATCH,
    KG_ROUTE_CANCEL,
    KG_ROUTE_HEALTH,
    KG_ROUTE_METRICS,
    KG_ROUTE_QUEUE,
    KG_ROUTE_WORKERS,
    KG_ROUTE_W_REGISTER,
    KG_ROUTE_W_UNREGISTER,
    KG_ROUTE_W_HEARTBEAT,
    KG_ROUTE_W_LEASE,
    KG_ROUTE_W_RESULT,
    KG_ROUTE_OTHER, /* unknown path, bad method */
    KG_ROUTE_COUNT
};

const char *kg_route_name(int route);

typedef struct kg_metrics kg_metrics;

/* A new registry (caller frees with kg_metrics_free); NULL if out of
 * memory. */
kg_metrics *kg_metrics_new(void);
void kg_metrics_free(kg_metrics *m);

/* One finished request. Thread-safe, lock-free. */
void kg_metrics_observe(kg_metrics *m, int route, int status, double seconds);

/* One submission answered from the result cache. */
void kg_metrics_cache_hit(kg_metrics *m);

/* One worker result refused for breaking the result contract. */
void kg_metrics_result_refused(kg_metrics *m);

/* Figures read at scrape time. */
typedef struct kg_metrics_snapshot {
    int store_up;             /* 1: counts is filled */
    kg_store_counts counts;   /* the store's (see store.h) */
    long long parked_polls;   /* lease polls waiting now; < 0 unknown */
    long long parked_results; /* result polls waiting now; < 0 unknown */
    struct {                  /* kgym serve --workers (supervise.h) */
        int present;          /* 0: no local workers, nothing rendered */
        int configured, running, given_up;
        long long restarts;
    } local;
} kg_metrics_snapshot;

/*
 * Renders the Prometheus text exposition (version 0.0.4) of the registry
 * and the snapshot. Returns a malloc'd NUL-terminated string (caller
 * frees) and its length in *len, or NULL if out of memory.
 */
char *kg_metrics_render(kg_metrics *m, const kg_metrics_snapshot *s,
                        size_t *len);

#endif
