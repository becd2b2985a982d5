/* client_wait.c - the client commands' wait for results (client_wait.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client_wait.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/results_poll.h"

#define REQ_TIMEOUT_MS 30000L
#define LONG_WAIT_S 60.0 /* the longest wait asked of the server at once */

static int pending(const json_t *const *results, char *const *errors, int i)
{
    return !results[i] && !errors[i];
}

/*
 * One GET /results/{id} of every task still pending (a server without
 * POST /results/batch). Returns how many are still pending.
 */
static int get_each(kg_client *c, const char *const *ids, json_t **results,
                    char **errors, int n)
{
    int left = 0;
    for (int i = 0; i < n; i++) {
        if (!pending((const json_t *const *)results, errors, i))
            continue;
        char path[160];
        snprintf(path, sizeof path, "/results/%s", ids[i]);
        kg_client_resp r;
        kg_err err = {{0}};
        int rc =
            kg_client_request(c, "GET", path, NULL, REQ_TIMEOUT_MS, &r, &err);
        if (rc == 0 && r.status == 200 && json_is_object(r.json)) {
            results[i] = json_incref(r.json);
        } else if (rc == 0 && r.status != 202 && r.status < 500) {
            char e[400];
            errors[i] = strdup(kg_client_error_text(&r, e, sizeof e));
        } else {
            left++;
            if (rc)
                kg_warn("%s (retrying)", err.msg);
        }
        kg_client_resp_free(&r);
    }
    return left;
}

/*
 * One round of POST /results/batch for the tasks still pending (one long
 * poll of up to wait_s when they fit in one request). Returns how many
 * are still pending, or -1 when the server has no such endpoint.
 */
static int poll_round(kg_client *c, const char *const *ids, json_t **results,
                      char **errors, int n, double wait_s)
{
    const char **todo = malloc((size_t)n * sizeof *todo);
    int *at = malloc((size_t)n * sizeof *at), m = 0, left = 0;
    json_t **res = calloc((size_t)n, sizeof *res);
    char *unknown = calloc((size_t)n, 1);
    for (int i = 0; todo && at && i < n; i++)
        if (pending((const json_t *const *)results, errors, i)) {
            todo[m] = ids[i];
            at[m++] = i;
        }
    if (m > KG_RESULTS_MAX_IDS)
        wait_s = 0; /* several requests: none may hold the others up */
    for (int b = 0; todo && at && res && unknown && b < m;
         b += KG_RESULTS_MAX_IDS) {
        int k = m - b < KG_RESULTS_MAX_IDS ? m - b : KG_RESULTS_MAX_IDS;
        kg_err err = {{0}};
        int rc = kg_results_poll(c, todo + b, (size_t)k, wait_s, REQ_TIMEOUT_MS,
                                 res + b, unknown + b, &err);
        if (rc == KG_ENOTFOUND) {
            left = -1;
            break;
        }
        if (rc == KG_EUNAVAIL)
            kg_warn("%s (retrying)", err.msg);
        for (int j = b; j < b + k; j++) {
            int i = at[j];
            if (res[j])
                results[i] = res[j];
            else if (unknown[j] && (errors[i] = malloc(160)))
                snprintf(errors[i], 160,
                         "404 not_found: task_id %s: no such "
                         "task",
                         ids[i]);
            else if (rc == KG_EINVAL)
                errors[i] = strdup(err.msg);
            res[j] = NULL;
            left += pending((const json_t *const *)results, errors, i);
        }
    }
    if (!todo || !at || !res || !unknown)
        left = m; /* out of memory: asked again */
    free(todo);
    free(at);
    free(res);
    free(unknown);
    return left;
}

int kg_cli_wait_all(kg_client *c, const char *const *ids, json_t **results,
                    char **errors, int n, double timeout_s)
{
    double t0 = kg_now_ms() / 1e3, pause = 0.1;
    int by_batch = 1, before = n + 1;
    for (;;) {
        double now = kg_now_ms() / 1e3;
        double wait = timeout_s > 0 ? timeout_s - (now - t0) : LONG_WAIT_S;
        wait = wait > LONG_WAIT_S ? LONG_WAIT_S : wait < 0 ? 0 : wait;
        int left = by_batch ? poll_round(c, ids, results, errors, n, wait) : -1;
        if (left < 0) {
            if (by_batch)
                kg_info("the server has no POST /results/batch: asking for "
                        "each result on its own");
            by_batch = 0;
            left = get_each(c, ids, results, errors, n);
        }
        if (!left)
            return 0;
        /* a long poll paces itself; a round that came back at once with
           nothing new (GET /results/{id} each, a server away) waits */
        int idle = left >= before && kg_now_ms() / 1e3 - now < 0.05;
        before = left;
        if (timeout_s > 0 &&
            kg_now_ms() / 1e3 - t0 + (idle ? pause : 0) >= timeout_s) {
            kg_error("%d task(s) not finished after %.0f s", left, timeout_s);
            return 1;
        }
        if (idle) {
            kg_sleep_ms((long)(pause * 1000));
            pause = pause * 1.5 > 1 ? 1 : pause * 1.5;
        }
    }
}
