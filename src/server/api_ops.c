/* api_ops.c - the operator views: /health, /queue, /workers, /metrics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"
#include "common/log.h"
#include "common/request.h"
#include "common/result.h"
#include "server/api_impl.h"
#include "server/supervise.h"

/* ---- operator views --------------------------------------------------- */

/* What the supervisor of local workers sees, or NULL without one. */
static json_t *local_workers_view(kg_api *api)
{
    if (!api->super)
        return NULL;
    kg_super_stats st;
    kg_super_stats_get(api->super, &st);
    return json_pack("{s:i, s:i, s:I, s:i}", "configured", st.configured,
                     "running", st.running, "restarts", (json_int_t)st.restarts,
                     "given_up", st.given_up);
}

void kg_api_h_health(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_store_counts c;
    kg_err err;
    int rc = kg_store_counts_get(api->store, &c, &err);
    if (rc) {
        kg_api_store_error(rep, rc, &err);
        json_object_set_new(rep->json, "status", json_string("unavailable"));
    } else {
        rep->status = 200;
        rep->json =
            json_pack("{s:s, s:s, s:s}", "status", "ok", "store",
                      kg_store_backend(api->store), "version", KG_VERSION);
    }
    json_t *lw = local_workers_view(api);
    if (lw)
        json_object_set_new(rep->json, "local_workers", lw);
}

void kg_api_h_queue(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_store_counts c;
    kg_err err;
    int rc = kg_store_counts_get(api->store, &c, &err);
    if (rc) {
        kg_api_store_error(rep, rc, &err);
        return;
    }
    json_t *pend = json_object(), *st = json_object(), *ver = json_object();
    long long total = 0;
    for (int i = 0; i < KG_NPRIO; i++) {
        json_object_set_new(pend, kg_priority_name(i),
                            json_integer(c.pending[i]));
        total += c.pending[i];
    }
    for (int i = 0; i < KG_NSTATUS; i++)
        json_object_set_new(st, kg_task_status_name(i),
                            json_integer(c.by_status[i]));
    for (int i = 0; i < KG_NVERDICT; i++)
        json_object_set_new(ver, kg_verdict_name(i),
                            json_integer(c.by_verdict[i]));
    rep->status = 200;
    rep->json = json_pack("{s:I, s:o, s:I, s:o, s:o, s:I, s:I, s:I}",
                          "queue_depth", (json_int_t)total, "pending", pend,
                          "running", (json_int_t)c.by_status[KG_TASK_RUNNING],
                          "tasks", st, "verdicts", ver, "lease_expiries",
                          (json_int_t)c.lease_expiries, "workers_alive",
                          (json_int_t)c.workers_alive, "workers_dead",
                          (json_int_t)c.workers_dead);
}

void kg_api_h_workers(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_worker *w = NULL;
    size_t n = 0;
    kg_err err;
    int rc = kg_store_worker_list(api->store, &w, &n, &err);
    if (rc) {
        kg_api_store_error(rep, rc, &err);
        return;
    }
    json_t *arr = json_array();
    size_t alive = 0;
    for (size_t i = 0; i < n; i++) {
        alive += w[i].alive != 0;
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s, s:b, s:i, s:I, s:I}", "worker_id",
                           w[i].id, "device", w[i].device, "host", w[i].host,
                           "alive", w[i].alive, "running", w[i].running,
                           "registered_ms", (json_int_t)w[i].registered_ms,
                           "last_seen_ms", (json_int_t)w[i].last_seen_ms));
    }
    free(w);
    rep->status = 200;
    rep->json = json_pack("{s:I, s:I, s:o}", "total", (json_int_t)n, "alive",
                          (json_int_t)alive, "workers", arr);
}

void kg_api_h_metrics(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_metrics_snapshot s;
    memset(&s, 0, sizeof s);
    kg_err err;
    s.store_up = kg_store_counts_get(api->store, &s.counts, &err) == 0;
    s.parked_polls = api->http ? kg_http_parked(api->http, KG_PARK_LEASE) : -1;
    s.parked_results =
        api->http ? kg_http_parked(api->http, KG_PARK_RESULTS) : -1;
    if (api->super) {
        kg_super_stats st;
        kg_super_stats_get(api->super, &st);
        s.local.present = 1;
        s.local.configured = st.configured;
        s.local.running = st.running;
        s.local.given_up = st.given_up;
        s.local.restarts = st.restarts;
    }
    size_t len = 0;
    char *text = kg_metrics_render(api->metrics, &s, &len);
    if (!text) {
        kg_http_error(rep, 500, "internal", NULL, "out of memory");
        return;
    }
    rep->status = 200;
    rep->text = text;
    rep->text_len = len;
    rep->content_type = "text/plain; version=0.0.4; charset=utf-8";
}
