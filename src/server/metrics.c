/* metrics.c - request counters, latency histograms, Prometheus text. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgym/dynbuf.h"
#include "server/metrics.h"

/* Upper bounds of the latency buckets, seconds (+Inf is implicit). */
static const double BUCKETS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                 0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                 5,      10,    30,     60};
#define NBUCKETS (sizeof BUCKETS / sizeof BUCKETS[0])

/* Status classes counted per route: 2xx, 4xx, 5xx, other. */
#define NCLASS 4

struct route_stats {
    atomic_ullong bucket[NBUCKETS + 1]; /* non-cumulative; last is +Inf */
    atomic_ullong sum_us;
    atomic_ullong by_code[600]; /* per HTTP status */
};

struct kg_metrics {
    struct route_stats r[KG_ROUTE_COUNT];
    atomic_ullong cache_hits;
    atomic_ullong results_refused;
};

static const char *const ROUTES[KG_ROUTE_COUNT] = {
    "evaluate",         "evaluate_batch",
    "status",           "results",
    "results_batch",    "cancel",
    "health",           "metrics",
    "queue_status",     "workers_status",
    "worker_register",  "worker_unregister",
    "worker_heartbeat", "worker_lease",
    "worker_result",    "other",
};

const char *kg_route_name(int route)
{
    return route >= 0 && route < KG_ROUTE_COUNT ? ROUTES[route] : "other";
}

kg_metrics *kg_metrics_new(void)
{
    return calloc(1, sizeof(kg_metrics)); /* zero is a valid atomic state */
}

void kg_metrics_free(kg_metrics *m)
{
    free(m);
}

void kg_metrics_observe(kg_metrics *m, int route, int status, double seconds)
{
    if (!m)
        return;
    if (route < 0 || route >= KG_ROUTE_COUNT)
        route = KG_ROUTE_OTHER;
    struct route_stats *r = &m->r[route];
    size_t b = 0;
    while (b < NBUCKETS && seconds > BUCKETS[b])
        b++;
    atomic_fetch_add_explicit(&r->bucket[b], 1, memory_order_relaxed);
    double us = seconds > 0 ? seconds * 1e6 : 0;
    atomic_fetch_add_explicit(&r->sum_us, (unsigned long long)us,
                              memory_order_relaxed);
    if (status < 100 || status >= 600)
        status = 599;
    atomic_fetch_add_explicit(&r->by_code[status], 1, memory_order_relaxed);
}

void kg_metrics_cache_hit(kg_metrics *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->cache_hits, 1, memory_order_relaxed);
}

void kg_metrics_result_refused(kg_metrics *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->results_refused, 1,
                                  memory_order_relaxed);
}

/* The store's counts (when it answered the scrape). The page is written
 * into a kg_dynbuf (kgym/dynbuf.h): a failed append stops the rest and the
 * render returns NULL. */
static void render_store(kg_dynbuf *b, const kg_metrics_snapshot *s)
{
    const kg_store_counts *k = &s->counts;
    kg_dynbuf_printf(b,
                     "# HELP kgym_store_up 1 when the task store answered the "
                     "scrape\n# TYPE kgym_store_up gauge\nkgym_store_up %d\n",
                     s->store_up ? 1 : 0);
    if (!s->store_up)
        return;
    kg_dynbuf_printf(
        b,
        "# HELP kgym_queue_depth Tasks waiting for a worker, by "
        "priority\n# TYPE kgym_queue_depth gauge\n");
    for (int i = 0; i < KG_NPRIO; i++)
        kg_dynbuf_printf(b, "kgym_queue_depth{priority=\"%s\"} %lld\n",
                         kg_priority_name(i), k->pending[i]);
    kg_dynbuf_printf(b, "# HELP kgym_tasks Tasks in the store, by status\n"
                        "# TYPE kgym_tasks gauge\n");
    for (int i = 0; i < KG_NSTATUS; i++)
        kg_dynbuf_printf(
            b,
            "kgym_tasks{status=\"%s\"} %lld\n", kg_task_status_name(i),
            k->by_status[i]);
    kg_dynbuf_printf(
        b,
        "# HELP kgym_tasks_by_verdict Finished tasks in the "
        "store, by verdict\n# TYPE kgym_tasks_by_verdict gauge\n");
    for (int i = 0; i < KG_NVERDICT; i++)
        kg_dynbuf_printf(b, "kgym_tasks_by_verdict{verdict=\"%s\"} %lld\n",
                         kg_verdict_name(i), k->by_verdict[i]);
    kg_dynbuf_printf(b,
                     "# HELP kgym_workers Registered workers, by liveness\n"
                     "# TYPE kgym_workers gauge\n"
                     "kgym_workers{state=\"alive\"} %lld\n"
                     "kgym_workers{state=\"dead\"} %lld\n",
                     k->workers_alive, k->workers_dead);
    kg_dynbuf_printf(b,
                     "# HELP kgym_lease_expiries_total Leases that expired (or "
                     "whose holder died) and were requeued or failed\n"
                     "# TYPE kgym_lease_expiries_total counter\n"
                     "kgym_lease_expiries_total %lld\n",
                     k->lease_expiries);
}

/* This server's own: cache hits, parked polls, local workers. */
static void render_server(kg_dynbuf *b, kg_metrics *m,
                          const kg_metrics_snapshot *s)
{
    kg_dynbuf_printf(
        b,
        "# HELP kgym_cache_hits_total Submissions answered from the "
        "result cache by this server\n"
        "# TYPE kgym_cache_hits_total counter\n"
        "kgym_cache_hits_total %llu\n",
        atomic_load_explicit(&m->cache_hits, memory_order_relaxed));
    kg_dynbuf_printf(
        b,
        "# HELP kgym_results_refused_total Worker results refused for "
        "breaking the result contract\n"
        "# TYPE kgym_results_refused_total counter\n"
        "kgym_results_refused_total %llu\n",
        atomic_load_explicit(&m->results_refused, memory_order_relaxed));
    if (s->parked_polls >= 0)
        kg_dynbuf_printf(b,
                         "# HELP kgym_long_polls_waiting Worker lease requests "
                         "parked waiting for work\n"
                         "# TYPE kgym_long_polls_waiting gauge\n"
                         "kgym_long_polls_waiting %lld\n",
                         s->parked_polls);
    if (s->parked_results >= 0)
        kg_dynbuf_printf(
            b,
            "# HELP kgym_result_polls_waiting Result requests (POST "
            "/results/batch) parked waiting for a task to finish\n"
            "# TYPE kgym_result_polls_waiting gauge\n"
            "kgym_result_polls_waiting %lld\n",
            s->parked_results);

    if (s->local.present)
        kg_dynbuf_printf(
            b,
            "# HELP kgym_local_workers Workers started by this server "
            "(--workers), by state\n"
            "# TYPE kgym_local_workers gauge\n"
            "kgym_local_workers{state=\"configured\"} %d\n"
            "kgym_local_workers{state=\"running\"} %d\n"
            "kgym_local_workers{state=\"given_up\"} %d\n"
            "# HELP kgym_local_worker_restarts_total Local workers "
            "restarted after they died\n"
            "# TYPE kgym_local_worker_restarts_total counter\n"
            "kgym_local_worker_restarts_total %lld\n",
            s->local.configured, s->local.running, s->local.given_up,
            s->local.restarts);
}

/* Requests counted by route and status. */
static void render_requests(kg_dynbuf *b, kg_metrics *m)
{
    kg_dynbuf_printf(
        b,
        "# HELP kgym_http_requests_total HTTP requests by route and "
        "status\n# TYPE kgym_http_requests_total counter\n");
    for (int r = 0; r < KG_ROUTE_COUNT; r++)
        for (int c = 100; c < 600; c++) {
            unsigned long long v =
                atomic_load_explicit(&m->r[r].by_code[c], memory_order_relaxed);
            if (v)
                kg_dynbuf_printf(
                    b,
                    "kgym_http_requests_total{route=\"%s\",code=\"%d\"} "
                    "%llu\n",
                    ROUTES[r], c, v);
        }
}

/* The latency histograms, by route. */
static void render_durations(kg_dynbuf *b, kg_metrics *m)
{
    kg_dynbuf_printf(
        b,
        "# HELP kgym_http_request_duration_seconds Time from the "
        "request's first byte to the reply's last, by route\n"
        "# TYPE kgym_http_request_duration_seconds histogram\n");
    for (int r = 0; r < KG_ROUTE_COUNT; r++) {
        struct route_stats *rs = &m->r[r];
        unsigned long long cum = 0;
        for (size_t i = 0; i <= NBUCKETS; i++) {
            cum += atomic_load_explicit(&rs->bucket[i], memory_order_relaxed);
            if (i < NBUCKETS)
                kg_dynbuf_printf(
                    b,
                    "kgym_http_request_duration_seconds_bucket{route=\"%"
                    "s\",le=\"%g\"} %llu\n",
                    ROUTES[r], BUCKETS[i], cum);
            else
                kg_dynbuf_printf(
                    b,
                    "kgym_http_request_duration_seconds_bucket{route=\"%"
                    "s\",le=\"+Inf\"} %llu\n",
                    ROUTES[r], cum);
        }
        /* _count is the +Inf bucket, so the two always agree */
        kg_dynbuf_printf(
            b,
            "kgym_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
            "kgym_http_request_duration_seconds_count{route=\"%s\"} "
            "%llu\n",
            ROUTES[r],
            (double)atomic_load_explicit(&rs->sum_us, memory_order_relaxed) /
            1e6,
            ROUTES[r], cum);
    }
}

char *kg_metrics_render(kg_metrics *m, const kg_metrics_snapshot *s,
                        size_t *len)
{
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    if (kg_dynbuf_reserve(&b, 16384))
        return NULL;
    render_store(&b, s);
    render_server(&b, m, s);
    render_requests(&b, m);
    render_durations(&b, m);
    return kg_dynbuf_take(&b, len);
}
