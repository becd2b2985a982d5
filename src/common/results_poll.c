/* results_poll.c - POST /results/batch from C (results_poll.h). */
#include <stdio.h>
#include <string.h>

#include "common/results_poll.h"

/* The index in ids[0..n) of id, or n. */
static size_t index_of(const char *const *ids, size_t n, const char *id)
{
    for (size_t i = 0; id && i < n; i++)
        if (!strcmp(ids[i], id))
            return i;
    return n;
}

/* Takes a 200 answer's "results" and "unknown" into results[] and
 * unknown[]. Returns how many it took. */
static int take(const json_t *body, const char *const *ids, size_t n,
                json_t **results, char *unknown)
{
    int got = 0;
    size_t k;
    json_t *v;
    json_array_foreach(json_object_get(body, "results"), k, v)
    {
        size_t i =
            index_of(ids, n, json_string_value(json_object_get(v, "task_id")));
        if (i < n && json_is_object(v) && !results[i]) {
            results[i] = json_incref(v);
            got++;
        }
    }
    json_array_foreach(json_object_get(body, "unknown"), k, v)
    {
        size_t i = index_of(ids, n, json_string_value(v));
        if (i < n && !unknown[i]) {
            unknown[i] = 1;
            got++;
        }
    }
    return got;
}

int kg_results_poll(kg_client *c, const char *const *ids, size_t n,
                    double wait_s, long timeout_ms, json_t **results,
                    char *unknown, kg_err *err)
{
    if (n == 0 || n > KG_RESULTS_MAX_IDS)
        return kg_errf(err, KG_EINVAL, "results: 1..%d ids, not %zu",
                       KG_RESULTS_MAX_IDS, n);
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, json_string(ids[i]));
    json_t *body = json_pack("{s:o, s:f}", "task_ids", list, "wait_s", wait_s);
    kg_client_resp resp;
    kg_err e = {{0}};
    int rc = kg_client_request(c, "POST", "/results/batch", body,
                               timeout_ms + (long)(wait_s * 1000), &resp, &e);
    json_decref(body);
    char why[400];
    if (rc) {
        rc = kg_errf(err, KG_EUNAVAIL, "POST /results/batch: %s", e.msg);
    } else if (resp.status == 200 && json_is_object(resp.json)) {
        rc = take(resp.json, ids, n, results, unknown);
    } else if (resp.status == 405) {
        rc =
            kg_errf(err, KG_ENOTFOUND, "the server has no POST /results/batch");
    } else {
        kg_client_error_text(&resp, why, sizeof why);
        rc = kg_errf(err,
                     resp.status >= 400 && resp.status < 500 ? KG_EINVAL
                                                             : KG_EUNAVAIL,
                     "POST /results/batch: %s", why);
    }
    kg_client_resp_free(&resp);
    return rc;
}
