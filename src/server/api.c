/* api.c - kgym serve's API core: the API object and its cache of
 * cache-answered tasks, request checks, task views and dispatch to the
 * endpoints of api_client.c, api_worker.c and api_ops.c (docs/api.md). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/json_util.h"
#include "common/log.h"
#include "common/request.h"
#include "common/result.h"
#include "server/api_impl.h"

kg_api *kg_api_new(kg_store *s, kg_sched *sc, const kg_store_opts *opts,
                   kg_metrics *metrics)
{
    kg_api *api = calloc(1, sizeof *api);
    if (!api)
        return NULL;
    api->hits = calloc((size_t)HIT_SETS * HIT_WAYS, sizeof *api->hits);
    if (!api->hits) {
        free(api);
        return NULL;
    }
    api->store = s;
    api->sched = sc;
    api->metrics = metrics;
    if (opts)
        api->opts = *opts;
    else
        kg_store_opts_default(&api->opts);
    pthread_mutex_init(&api->hits_lock, NULL);
    return api;
}

void kg_api_free(kg_api *api)
{
    if (!api)
        return;
    pthread_mutex_destroy(&api->hits_lock);
    free(api->hits);
    free(api);
}

void kg_api_set_http(kg_api *api, kg_http *h)
{
    api->http = h;
}

void kg_api_set_supervisor(kg_api *api, struct kg_super *sup)
{
    api->super = sup;
}

uint32_t kg_api_hash_id(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int kg_api_seen_add(const char **tab, size_t cap, const char *id)
{
    size_t i = kg_api_hash_id(id) & (cap - 1);
    while (tab[i]) {
        if (!strcmp(tab[i], id))
            return 1;
        i = (i + 1) & (cap - 1);
    }
    tab[i] = id;
    return 0;
}

void kg_api_hit_put(kg_api *api, const char *id, const char *key)
{
    struct hit *set = &api->hits[(kg_api_hash_id(id) % HIT_SETS) * HIT_WAYS];
    pthread_mutex_lock(&api->hits_lock);
    struct hit *victim = &set[0];
    for (int i = 0; i < HIT_WAYS; i++) {
        if (set[i].stamp && !strcmp(set[i].id, id)) {
            victim = &set[i];
            break;
        }
        if (set[i].stamp < victim->stamp)
            victim = &set[i];
    }
    snprintf(victim->id, sizeof victim->id, "%s", id);
    snprintf(victim->key, sizeof victim->key, "%s", key);
    victim->stamp = ++api->hits_clock;
    pthread_mutex_unlock(&api->hits_lock);
}

/* Copies the cache key of a cache-answered task id into key; 0 if none. */
int kg_api_hit_get(kg_api *api, const char *id, char key[65])
{
    struct hit *set = &api->hits[(kg_api_hash_id(id) % HIT_SETS) * HIT_WAYS];
    int found = 0;
    pthread_mutex_lock(&api->hits_lock);
    for (int i = 0; i < HIT_WAYS && !found; i++)
        if (set[i].stamp && !strcmp(set[i].id, id)) {
            memcpy(key, set[i].key, 65);
            found = 1;
        }
    pthread_mutex_unlock(&api->hits_lock);
    return found;
}

/* ---- errors ----------------------------------------------------------- */

void kg_api_reply_error(kg_http_reply *rep, const kg_api_error *e)
{
    kg_http_error(rep, e->status, e->code, e->field, "%s", e->message);
}

/* A store or scheduler failure that is not the request's fault. */
void kg_api_store_error(kg_http_reply *rep, int rc, const kg_err *err)
{
    if (rc == KG_EUNAVAIL || rc == KG_EIO)
        kg_http_error(rep, 503, "store_unavailable", NULL,
                      "task store unavailable: %s", err->msg);
    else
        kg_http_error(rep, 500, "internal", NULL, "%s: %s", kg_strerror(rc),
                      err->msg);
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
int kg_api_set_error(kg_api_error *e, int status, const char *code,
                     const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->code = code;
    e->field = field;
    return -1;
}

/* ---- parsing and validation (no store) --------------------------------- */

int kg_api_parse_body(const char *body, size_t len, json_t **out,
                      kg_api_error *e)
{
    kg_err err;
    *out = NULL;
    if (len == 0)
        return kg_api_set_error(
            e, 400, "invalid_json", NULL,
            "request body is empty; expected a JSON object");
    if (kg_json_parse(body, len, out, &err))
        return kg_api_set_error(e, 400, "invalid_json", NULL, "%s", err.msg);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return kg_api_set_error(e, 400, "invalid_json", NULL,
                                "request body must be a JSON object");
    }
    return 0;
}

/*
 * 1 when v has the JSON type the schema (kgym/schema.h) gives the request
 * field, so that a refusal by kg_request_normalize is about its value
 * (422), not its type (400). Enum fields are never "right": an unknown
 * backend is a 400.
 */
static int right_type(const char *field, const json_t *v)
{
    const kg_field *f = kg_schema_find(field);
    if (!v || !f)
        return 0;
    switch (f->type) {
    case KG_FIELD_STR:
        return json_is_string(v);
    case KG_FIELD_ENUM:
        return 0;
    case KG_FIELD_INT:
        return kg_json_is_whole(v);
    case KG_FIELD_NUM:
        return json_is_number(v);
    case KG_FIELD_BOOL:
        return json_is_boolean(v);
    }
    return 0;
}

int kg_api_check_task(const json_t *in, json_t **norm, kg_api_error *e)
{
    *norm = NULL;
    if (!json_is_object(in))
        return kg_api_set_error(e, 400, "invalid_field", NULL,
                                "a task must be a JSON object");
    static const struct {
        const char *name;
        size_t max;
    } sized[] = {{"kernel_code", KG_MAX_KERNEL_CODE},
                 {"reference_code", KG_MAX_REFERENCE_CODE}};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(in, sized[i].name);
        if (json_is_string(v) && json_string_length(v) > sized[i].max)
            return kg_api_set_error(
                e, 413, "field_too_large", sized[i].name,
                "field \"%s\": %zu bytes, over the limit of %zu", sized[i].name,
                json_string_length(v), sized[i].max);
    }
    int code = 0;
    const char *field = NULL;
    kg_err err;
    *norm = kg_request_normalize(in, &code, &field, &err);
    if (*norm)
        return 0;
    if (code == KG_ENOMEM)
        return kg_api_set_error(e, 500, "internal", NULL, "out of memory");
    if (!field)
        return kg_api_set_error(e, 400, "invalid_field", NULL, "%s", err.msg);
    const json_t *v = json_object_get(in, field);
    if (right_type(field, v))
        return kg_api_set_error(e, 422, "invalid_value", field, "%s", err.msg);
    return kg_api_set_error(e, 400, v ? "invalid_field" : "missing_field",
                            field, "%s", err.msg);
}

/* Reads an optional string field of at most max bytes; -1 with e set. */
int kg_api_opt_string(const json_t *o, const char *key, size_t max,
                      int required, const char **out, kg_api_error *e)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required)
            return kg_api_set_error(e, 400, "missing_field", key,
                                    "field \"%s\": required", key);
        return 0;
    }
    if (!json_is_string(v))
        return kg_api_set_error(e, 400, "invalid_field", key,
                                "field \"%s\": must be a string", key);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > max || strlen(s) != n)
        return kg_api_set_error(e, 422, "invalid_value", key,
                                "field \"%s\": 1..%zu bytes without NUL", key,
                                max);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return kg_api_set_error(e, 422, "invalid_value", key,
                                    "field \"%s\": control character", key);
    *out = s;
    return 0;
}

/* A long poll's "wait_s": absent or null is 0; else a number in
 * 0..KG_API_MAX_WAIT_S (400 for another type, 422 out of range). */
int kg_api_wait_field(const json_t *o, double *wait, kg_api_error *e)
{
    json_t *w = json_object_get(o, "wait_s");
    *wait = 0;
    if (!w || json_is_null(w))
        return 0;
    if (!json_is_number(w))
        return kg_api_set_error(e, 400, "invalid_field", "wait_s",
                                "field \"wait_s\": must be a number");
    *wait = json_number_value(w);
    if (!(*wait >= 0 && *wait <= KG_API_MAX_WAIT_S))
        return kg_api_set_error(e, 422, "invalid_value", "wait_s",
                                "field \"wait_s\": must be in 0..%d",
                                KG_API_MAX_WAIT_S);
    return 0;
}

/* A worker or task id field: required, kg_task_id_valid. */
int kg_api_id_field(const json_t *o, const char *key, const char **out,
                    kg_api_error *e)
{
    if (kg_api_opt_string(o, key, KG_MAX_TASK_ID, 1, out, e))
        return -1;
    if (!kg_task_id_valid(*out))
        return kg_api_set_error(e, 422, "invalid_value", key,
                                "field \"%s\": use 1..100 characters of "
                                "[A-Za-z0-9._:-]",
                                key);
    return 0;
}

/*
 * 32 hex digits: the time in ms (12), then 20 random. Ids that grow with
 * time go to the end of the store's index on task ids (SQLite: a batch
 * of 100 touches one or two pages of it instead of 100 random ones, each
 * of them written to the WAL again at every commit).
 */
void kg_api_new_id(char *out) /* 33 bytes */
{
    static const char hex[] = "0123456789abcdef";
    unsigned char r[16];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
    for (int i = 5; i >= 0; i--, ms >>= 8)
        r[i] = (unsigned char)ms;
    if (getrandom(r + 6, sizeof r - 6, 0) != (ssize_t)(sizeof r - 6)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     (uint64_t)(uintptr_t)out;
        for (size_t i = 6; i < sizeof r; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (unsigned char)(x >> 56);
        }
    }
    for (size_t i = 0; i < sizeof r; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[32] = 0;
}

/* ---- views of tasks --------------------------------------------------- */

static json_t *ms_or_null(int64_t ms)
{
    return ms ? json_integer(ms) : json_null();
}

/* A finished task's error_message for its status view (KernelGym clients
 * read it there for a task that did not complete): the result's, else one
 * that says why there is none. */
static json_t *status_message(const kg_task *t)
{
    json_t *m = t->result ? json_object_get(t->result, "error_message") : NULL;
    if (json_is_string(m))
        return json_copy(m);
    if (t->status == KG_TASK_CANCELLED)
        return json_string("the task was cancelled");
    if (t->status == KG_TASK_FAILED)
        return json_string("the task failed without a result");
    return json_null();
}

/* The status view of a stored task (GET /status/{id}). */
json_t *kg_api_status_view(const kg_task *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "task_id", json_string(t->id));
    json_object_set_new(o, "status",
                        json_string(kg_task_status_name(t->status)));
    json_object_set_new(o, "priority",
                        json_string(kg_priority_name(t->priority)));
    json_object_set_new(o, "attempts", json_integer(t->attempts));
    json_object_set_new(o, "worker",
                        t->worker[0] ? json_string(t->worker) : json_null());
    json_object_set_new(o, "submitted_ms", ms_or_null(t->submitted_ms));
    json_object_set_new(o, "started_ms", ms_or_null(t->started_ms));
    json_object_set_new(o, "finished_ms", ms_or_null(t->finished_ms));
    if (t->status == KG_TASK_RUNNING)
        json_object_set_new(o, "lease_deadline_ms",
                            ms_or_null(t->lease_deadline_ms));
    json_t *verdict = t->result ? json_object_get(t->result, "verdict") : NULL;
    if (t->status >= KG_TASK_COMPLETED) {
        json_object_set(o, "verdict", verdict ? verdict : json_null());
        json_object_set_new(o, "error_message", status_message(t));
    }
    return o;
}

/*
 * The result view (GET /results/{id}, and the "result" of a finished
 * submission): the stored result with task_id and status set to the
 * store's truth, or a bare {task_id, status} when there is no result.
 */
json_t *kg_api_result_view(const char *id, int status, const json_t *result)
{
    json_t *o =
        json_is_object(result) ? json_copy((json_t *)result) : json_object();
    json_object_set_new(o, "task_id", json_string(id));
    json_object_set_new(o, "status", json_string(kg_task_status_name(status)));
    kg_result_finalize(o);
    return o;
}

/* The reply to a submission of a task that already exists. */
json_t *kg_api_existing_view(const kg_task *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "task_id", json_string(t->id));
    json_object_set_new(o, "status",
                        json_string(kg_task_status_name(t->status)));
    json_object_set_new(o, "existing", json_true());
    if (t->status >= KG_TASK_COMPLETED)
        json_object_set_new(o, "result",
                            kg_api_result_view(t->id, t->status, t->result));
    return o;
}

json_t *kg_api_cached_view(const char *id, const json_t *result)
{
    json_t *o = json_object();
    json_object_set_new(o, "task_id", json_string(id));
    json_object_set_new(o, "status", json_string("completed"));
    json_object_set_new(o, "cached", json_true());
    json_object_set_new(o, "result",
                        kg_api_result_view(id, KG_TASK_COMPLETED, result));
    return o;
}

/* ---- dispatch --------------------------------------------------------- */

int kg_api_defers(kg_api *api)
{
    return kg_store_defers(api->store);
}

void kg_api_dispatch(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    switch (req->route) {
    case KG_ROUTE_EVALUATE: {
        kg_api_h_evaluate(api, req, rep);
        return;
    }
    case KG_ROUTE_EVALUATE_BATCH: {
        kg_api_h_batch(api, req, rep);
        return;
    }
    case KG_ROUTE_STATUS: {
        kg_api_h_status(api, req, rep);
        return;
    }
    case KG_ROUTE_RESULTS: {
        kg_api_h_results(api, req, rep);
        return;
    }
    case KG_ROUTE_RESULTS_BATCH: {
        kg_api_h_results_batch(api, req, rep);
        return;
    }
    case KG_ROUTE_CANCEL: {
        kg_api_h_cancel(api, req, rep);
        return;
    }
    case KG_ROUTE_HEALTH: {
        kg_api_h_health(api, req, rep);
        return;
    }
    case KG_ROUTE_METRICS: {
        kg_api_h_metrics(api, req, rep);
        return;
    }
    case KG_ROUTE_QUEUE: {
        kg_api_h_queue(api, req, rep);
        return;
    }
    case KG_ROUTE_WORKERS: {
        kg_api_h_workers(api, req, rep);
        return;
    }
    case KG_ROUTE_W_REGISTER: {
        kg_api_h_register(api, req, rep);
        return;
    }
    case KG_ROUTE_W_UNREGISTER: {
        kg_api_h_unregister(api, req, rep);
        return;
    }
    case KG_ROUTE_W_HEARTBEAT: {
        kg_api_h_heartbeat(api, req, rep);
        return;
    }
    case KG_ROUTE_W_LEASE: {
        kg_api_h_lease(api, req, rep);
        return;
    }
    case KG_ROUTE_W_RESULT: {
        kg_api_h_result(api, req, rep);
        return;
    }
    }
    kg_http_error(rep, 404, "not_found", NULL, "no such endpoint");
}

static void handler_dispatch(void *ctx, const kg_http_req *req,
                             kg_http_reply *rep)
{
    kg_api_dispatch(ctx, req, rep);
}

static int handler_defers(void *ctx)
{
    return kg_api_defers(ctx);
}

kg_http_handler kg_api_handler(kg_api *api)
{
    return (kg_http_handler){.ctx = api,
                             .dispatch = handler_dispatch,
                             .defers_writes = handler_defers};
}
