/*
 * api_impl.h - what the API's files share (private to src/server/api*.c):
 * the kg_api object, the reply and check helpers of api.c, its task
 * views, and the endpoint handlers that kg_api_dispatch calls.
 */
#ifndef KGYM_SERVER_API_IMPL_H
#define KGYM_SERVER_API_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "server/api.h"

/*
 * Tasks answered from the result cache. The store cannot yet create a task
 * that is already completed, so until it can, such a task lives here (id ->
 * cache key; the result itself stays in the store's cache): bounded,
 * in memory, set-associative with the oldest entry of a set evicted.
 */
#define HIT_SETS 4096
#define HIT_WAYS 8

struct hit {
    char id[KG_MAX_TASK_ID + 1];
    char key[65];
    uint64_t stamp; /* 0: empty */
};

struct kg_api {
    kg_store *store;
    kg_sched *sched;
    kg_metrics *metrics;
    kg_http *http;
    struct kg_super *super; /* local workers, or NULL */
    kg_store_opts opts;
    pthread_mutex_t hits_lock;
    uint64_t hits_clock;
    struct hit *hits; /* HIT_SETS * HIT_WAYS */
};

/* ---- the cache-answered tasks (api.c) ---------------------------------- */

uint32_t kg_api_hash_id(const char *s); /* FNV-1a of a NUL-terminated id */
/* Adds id to an open-addressing set of cap slots (a power of two, at least
 * twice the ids; the caller zeroes it); 1 when it was there already: how a
 * request refuses the same id twice in one list. */
int kg_api_seen_add(const char **tab, size_t cap, const char *id);
void kg_api_hit_put(kg_api *api, const char *id, const char *key);
/* Copies the cache key of a cache-answered task id into key; 0 if none. */
int kg_api_hit_get(kg_api *api, const char *id, char key[65]);

/* ---- errors and checks (api.c) ----------------------------------------- */

/* Fills rep with the error e. */
void kg_api_reply_error(kg_http_reply *rep, const kg_api_error *e);
/* A store or scheduler failure that is not the request's fault. */
void kg_api_store_error(kg_http_reply *rep, int rc, const kg_err *err);
/* Fills e; returns -1. */
int kg_api_set_error(kg_api_error *e, int status, const char *code,
                     const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* Reads an optional string field of at most max bytes; -1 with e set. */
int kg_api_opt_string(const json_t *o, const char *key, size_t max,
                      int required, const char **out, kg_api_error *e);
/* A long poll's optional "wait_s" (0..KG_API_MAX_WAIT_S); -1 with e set. */
int kg_api_wait_field(const json_t *o, double *wait, kg_api_error *e);
/* A worker or task id field: required, kg_task_id_valid. */
int kg_api_id_field(const json_t *o, const char *key, const char **out,
                    kg_api_error *e);
/* A new task id: 32 hex digits (out holds 33 bytes). */
void kg_api_new_id(char *out);

/* ---- views of tasks (api.c; each returns a new object) ----------------- */

json_t *kg_api_status_view(const kg_task *t);
json_t *kg_api_result_view(const char *id, int status, const json_t *result);
json_t *kg_api_existing_view(const kg_task *t);
json_t *kg_api_cached_view(const char *id, const json_t *result);

/*
 * Reads task id (KG_GET_RESULT: with its result), also one answered from
 * the result cache, which is not in the store (a completed kg_task with
 * its result). 0, KG_ENOTFOUND, or another KG_E* code with err filled;
 * on 0 the caller releases *t with kg_task_free.
 */
int kg_api_read_task(kg_api *api, const char *id, kg_task *t, kg_err *err);

/* ---- the endpoints ----------------------------------------------------- */

/* api_client.c */
void kg_api_h_evaluate(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_batch(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_status(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_results(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_cancel(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
/* api_poll.c */
void kg_api_h_results_batch(kg_api *api, const kg_http_req *req,
                            kg_http_reply *rep);
/* api_ops.c */
void kg_api_h_health(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_queue(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_workers(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_metrics(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
/* api_worker.c */
void kg_api_h_register(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_unregister(kg_api *api, const kg_http_req *req,
                         kg_http_reply *rep);
void kg_api_h_heartbeat(kg_api *api, const kg_http_req *req,
                        kg_http_reply *rep);
void kg_api_h_lease(kg_api *api, const kg_http_req *req, kg_http_reply *rep);
void kg_api_h_result(kg_api *api, const kg_http_req *req, kg_http_reply *rep);

#endif
