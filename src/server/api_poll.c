/* api_poll.c - POST /results/batch: the results of many tasks in one
 * request, and a long poll until at least one of them has finished
 * (docs/api.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"
#include "common/log.h"
#include "common/request.h"
#include "server/api_impl.h"

const json_t *kg_api_check_poll_ids(const json_t *in, kg_api_error *e)
{
    const json_t *ids = json_object_get(in, "task_ids");
    if (!ids || json_is_null(ids)) {
        kg_api_set_error(e, 400, "missing_field", "task_ids",
                         "field \"task_ids\": required");
        return NULL;
    }
    if (!json_is_array(ids)) {
        kg_api_set_error(e, 400, "invalid_field", "task_ids",
                         "field \"task_ids\": must be an array of task ids");
        return NULL;
    }
    size_t n = json_array_size(ids);
    if (n > KG_API_MAX_POLL_IDS) {
        kg_api_set_error(e, 413, "field_too_large", "task_ids",
                         "field \"task_ids\": %zu ids, over the limit of %d", n,
                         KG_API_MAX_POLL_IDS);
        return NULL;
    }
    if (n == 0) {
        kg_api_set_error(e, 422, "invalid_value", "task_ids",
                         "field \"task_ids\": list 1..%d task ids",
                         KG_API_MAX_POLL_IDS);
        return NULL;
    }
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    const char **seen = calloc(cap, sizeof *seen);
    if (!seen) {
        kg_api_set_error(e, 500, "internal", NULL, "out of memory");
        return NULL;
    }
    const char *bad = NULL;
    for (size_t i = 0; i < n && !bad; i++) {
        const json_t *v = json_array_get(ids, i);
        const char *id = json_string_value(v);
        if (!id) {
            bad = "not a string";
            kg_api_set_error(e, 400, "invalid_field", "task_ids",
                             "field \"task_ids\": entry %zu is not a string",
                             i);
        } else if (strlen(id) != json_string_length(v) ||
                   !kg_task_id_valid(id)) {
            bad = "malformed";
            kg_api_set_error(e, 422, "invalid_value", "task_ids",
                             "field \"task_ids\": entry %zu is not a task id "
                             "(1..100 characters of [A-Za-z0-9._:-])",
                             i);
        } else if (kg_api_seen_add(seen, cap, id)) {
            bad = "twice";
            kg_api_set_error(e, 422, "duplicate_task_id", "task_ids",
                             "field \"task_ids\": %s is listed twice", id);
        }
    }
    free(seen);
    return bad ? NULL : ids;
}

/* Adds task id, finished or unknown to the store, to the answer `out`
 * (a cache-answered task is not in the store: read through the API).
 * Returns 0, or -1 with rep filled when the store failed. */
static int add_settled(kg_api *api, const char *id, json_t *out,
                       kg_http_reply *rep)
{
    kg_task t;
    kg_err err;
    int rc = kg_api_read_task(api, id, &t, &err);
    if (rc == KG_ENOTFOUND) {
        json_array_append_new(json_object_get(out, "unknown"), json_string(id));
        return 0;
    }
    if (rc) {
        kg_api_store_error(rep, rc, &err);
        return -1;
    }
    json_t *v = t.status >= KG_TASK_COMPLETED
                    ? kg_api_result_view(t.id, t.status, t.result)
                    : json_pack("{s:s, s:s}", "task_id", t.id, "status",
                                kg_task_status_name(t.status));
    json_array_append_new(json_object_get(out, t.status >= KG_TASK_COMPLETED
                                                   ? "results"
                                                   : "pending"),
                          v);
    kg_task_free(&t);
    return 0;
}

/*
 * Looks every listed task up: "results" gets the result view of each
 * finished one (as GET /results/{id} gives it), "pending" {task_id,
 * status} of the others, "unknown" the ids of no task, all in the order
 * asked. One read of every status (kg_store_status_many), then one read
 * per finished or unknown task. *settled gets how many are finished or
 * unknown, *waiting (a mask of kg_http_key_add) the pending ones.
 * Returns the answer, or NULL with rep filled when the store failed.
 */
static json_t *look_up(kg_api *api, const json_t *ids, int *settled,
                       uint64_t *waiting, kg_http_reply *rep)
{
    size_t n = json_array_size(ids);
    const char **idv = calloc(n, sizeof *idv);
    int *st = calloc(n, sizeof *st);
    json_t *out =
        json_pack("{s:[], s:[], s:[]}", "results", "pending", "unknown");
    kg_err err;
    int rc = idv && st && out ? 0 : kg_errf(&err, KG_ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++)
        idv[i] = json_string_value(json_array_get(ids, i));
    if (rc == 0)
        rc = kg_store_status_many(api->store, idv, n, st, &err);
    if (rc)
        kg_api_store_error(rep, rc, &err);
    *settled = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (st[i] == KG_TASK_PENDING || st[i] == KG_TASK_RUNNING) {
            json_array_append_new(json_object_get(out, "pending"),
                                  json_pack("{s:s, s:s}", "task_id", idv[i],
                                            "status",
                                            kg_task_status_name(st[i])));
            kg_http_key_add(waiting, idv[i]);
            continue;
        }
        rc = add_settled(api, idv[i], out, rep);
        ++*settled;
    }
    free(idv);
    free(st);
    if (rc) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/*
 * POST /results/batch {"task_ids": [...], "wait_s"?}: 200 with every
 * listed task that is finished or unknown; while none is, a park until
 * one finishes (a result or a cancellation through this server wakes it
 * at once; the ticker re-asks the store every RESULTS_RECHECK_S for what
 * other servers sharing the store did) or wait_s passes, then 200 with
 * no results. The deadline lives in req->slot across parks.
 */
void kg_api_h_results_batch(kg_api *api, const kg_http_req *req,
                            kg_http_reply *rep)
{
    json_t *in;
    kg_api_error e;
    if (kg_api_parse_body(req->body, req->body_len, &in, &e)) {
        kg_api_reply_error(rep, &e);
        return;
    }
    const json_t *ids = kg_api_check_poll_ids(in, &e);
    double wait = 0;
    if (!ids || (!req->resumed && kg_api_wait_field(in, &wait, &e))) {
        json_decref(in);
        kg_api_reply_error(rep, &e);
        return;
    }
    if (!req->resumed)
        *req->slot = req->now + wait;
    int settled;
    json_t *out = look_up(api, ids, &settled, rep->park_keys, rep);
    if (out && !settled && *req->slot > req->now) {
        rep->status = 0; /* park; `out` is the answer once it cannot */
        rep->park_until = *req->slot;
        rep->park_kind = KG_PARK_RESULTS;
    } else if (out) {
        rep->status = 200;
    }
    if (out)
        rep->json = out;
    json_decref(in);
}
