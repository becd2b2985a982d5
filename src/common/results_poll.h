/*
 * results_poll.h - POST /results/batch from C (docs/api.md): the results
 * of many tasks in one request, and a wait at the server (a long poll)
 * until one of them is in. Used by `kgym rollout` and the client commands
 * (`kgym wait`, `kgym submit --wait`).
 */
#ifndef KGYM_RESULTS_POLL_H
#define KGYM_RESULTS_POLL_H

#include <jansson.h>
#include <stddef.h>

#include "common/http_client.h"
#include "kgym/kgym.h"

#define KG_RESULTS_MAX_IDS 1000 /* the server's cap on ids per request */

/*
 * One POST /results/batch for ids[0..n) (1 <= n <= KG_RESULTS_MAX_IDS),
 * waiting up to wait_s (0..120) at the server for one of them to finish;
 * timeout_ms is the request's own limit beyond that wait. results[i]
 * (the caller's array of n) gets a new reference to the result of each
 * finished task, and unknown[i] (likewise) 1 for an id the server does
 * not know; the other entries are left as they are. Returns how many
 * finished or are unknown (>= 0); KG_ENOTFOUND when the server has no
 * such endpoint (an older one answers 405: ask GET /results/{id});
 * KG_EUNAVAIL when it did not answer or failed (5xx); KG_EINVAL when it
 * refused the request (4xx). err says why.
 */
int kg_results_poll(kg_client *c, const char *const *ids, size_t n,
                    double wait_s, long timeout_ms, json_t **results,
                    char *unknown, kg_err *err);

#endif
