/* api.c - kgym serve's endpoints: requests in, store and scheduler calls,
 * JSON replies out (docs/api.md). */
#include <math.h>
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
#include "server/api.h"
#include "server/supervise.h"

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

static uint32_t hash_id(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void hit_put(kg_api *api, const char *id, const char *key)
{
    struct hit *set = &api->hits[(hash_id(id) % HIT_SETS) * HIT_WAYS];
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
static int hit_get(kg_api *api, const char *id, char key[65])
{
    struct hit *set = &api->hits[(hash_id(id) % HIT_SETS) * HIT_WAYS];
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

static void api_error(kg_http_reply *rep, const kg_api_error *e)
{
    kg_http_error(rep, e->status, e->code, e->field, "%s", e->message);
}

/* A store or scheduler failure that is not the request's fault. */
static void store_error(kg_http_reply *rep, int rc, const kg_err *err)
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
static int
set_error(kg_api_error *e, int status, const char *code, const char *field,
          const char *fmt, ...)
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
        return set_error(e, 400, "invalid_json", NULL,
                         "request body is empty; expected a JSON object");
    if (kg_json_parse(body, len, out, &err))
        return set_error(e, 400, "invalid_json", NULL, "%s", err.msg);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return set_error(e, 400, "invalid_json", NULL,
                         "request body must be a JSON object");
    }
    return 0;
}

/*
 * 1 when v has the JSON type the request field needs, so that a refusal by
 * kg_request_normalize is about its value (422), not its type (400). Enum
 * fields are never "right": an unknown backend is a 400.
 */
/* A whole number (1e40 is one too; the range is checked later). No cast
 * of an out-of-range double to an integer, which is undefined. */
static int is_whole(double x)
{
    return isfinite(x) && floor(x) == x;
}

static int right_type(const char *field, const json_t *v)
{
    static const char *const strings[] = {"task_id", "reference_code",
                                          "kernel_code", "entry_point"};
    static const char *const ints[] = {"num_correct_trials", "num_perf_trials",
                                       "num_warmup", "seed"};
    static const char *const bools[] = {"strict", "enable_profiling",
                                        "run_hack_checks", "force_refresh"};
    static const char *const nums[] = {"atol", "rtol", "timeout",
                                       "speedup_recheck_bound"};
    if (!v)
        return 0;
    for (size_t i = 0; i < 4; i++) {
        if (!strcmp(field, strings[i]))
            return json_is_string(v);
        if (!strcmp(field, ints[i]))
            return json_is_integer(v) ||
                   (json_is_real(v) && is_whole(json_real_value(v)));
        if (!strcmp(field, bools[i]))
            return json_is_boolean(v);
        if (!strcmp(field, nums[i]))
            return json_is_number(v);
    }
    return 0;
}

int kg_api_check_task(const json_t *in, json_t **norm, kg_api_error *e)
{
    *norm = NULL;
    if (!json_is_object(in))
        return set_error(e, 400, "invalid_field", NULL,
                         "a task must be a JSON object");
    static const struct {
        const char *name;
        size_t max;
    } sized[] = {{"kernel_code", KG_MAX_KERNEL_CODE},
                 {"reference_code", KG_MAX_REFERENCE_CODE}};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(in, sized[i].name);
        if (json_is_string(v) && json_string_length(v) > sized[i].max)
            return set_error(e, 413, "field_too_large", sized[i].name,
                             "field \"%s\": %zu bytes, over the limit of %zu",
                             sized[i].name, json_string_length(v),
                             sized[i].max);
    }
    int code = 0;
    const char *field = NULL;
    kg_err err;
    *norm = kg_request_normalize(in, &code, &field, &err);
    if (*norm)
        return 0;
    if (code == KG_ENOMEM)
        return set_error(e, 500, "internal", NULL, "out of memory");
    if (!field)
        return set_error(e, 400, "invalid_field", NULL, "%s", err.msg);
    const json_t *v = json_object_get(in, field);
    if (right_type(field, v))
        return set_error(e, 422, "invalid_value", field, "%s", err.msg);
    return set_error(e, 400, v ? "invalid_field" : "missing_field", field, "%s",
                     err.msg);
}

/* Reads an optional string field of at most max bytes; -1 with e set. */
static int opt_string(const json_t *o, const char *key, size_t max,
                      int required, const char **out, kg_api_error *e)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required)
            return set_error(e, 400, "missing_field", key,
                             "field \"%s\": required", key);
        return 0;
    }
    if (!json_is_string(v))
        return set_error(e, 400, "invalid_field", key,
                         "field \"%s\": must be a string", key);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > max || strlen(s) != n)
        return set_error(e, 422, "invalid_value", key,
                         "field \"%s\": 1..%zu bytes without NUL", key, max);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return set_error(e, 422, "invalid_value", key,
                             "field \"%s\": control character", key);
    *out = s;
    return 0;
}

/* A worker or task id field: required, kg_task_id_valid. */
static int id_field(const json_t *o, const char *key, const char **out,
                    kg_api_error *e)
{
    if (opt_string(o, key, KG_MAX_TASK_ID, 1, out, e))
        return -1;
    if (!kg_task_id_valid(*out))
        return set_error(e, 422, "invalid_value", key,
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
static void new_id(char *out) /* 33 bytes */
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
static json_t *status_view(const kg_task *t)
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
static json_t *result_view(const char *id, int status, const json_t *result)
{
    json_t *o =
        json_is_object(result) ? json_copy((json_t *)result) : json_object();
    json_object_set_new(o, "task_id", json_string(id));
    json_object_set_new(o, "status", json_string(kg_task_status_name(status)));
    kg_result_finalize(o);
    return o;
}

/* The reply to a submission of a task that already exists. */
static json_t *existing_view(const kg_task *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "task_id", json_string(t->id));
    json_object_set_new(o, "status",
                        json_string(kg_task_status_name(t->status)));
    json_object_set_new(o, "existing", json_true());
    if (t->status >= KG_TASK_COMPLETED)
        json_object_set_new(o, "result",
                            result_view(t->id, t->status, t->result));
    return o;
}

static json_t *cached_view(const char *id, const json_t *result)
{
    json_t *o = json_object();
    json_object_set_new(o, "task_id", json_string(id));
    json_object_set_new(o, "status", json_string("completed"));
    json_object_set_new(o, "cached", json_true());
    json_object_set_new(o, "result",
                        result_view(id, KG_TASK_COMPLETED, result));
    return o;
}

/* ---- submissions ------------------------------------------------------ */

/* A validated task ready for the store. */
struct prepared {
    char id[KG_MAX_TASK_ID + 1];
    int priority;
    int force;
    char key[65];
    json_t *norm; /* owned */
};

/* Validates one task and fills p (p->norm owned by p on success). */
static int prepare(const json_t *in, struct prepared *p, kg_api_error *e)
{
    memset(p, 0, sizeof *p);
    if (kg_api_check_task(in, &p->norm, e))
        return -1;
    const char *id = json_string_value(json_object_get(p->norm, "task_id"));
    if (id) {
        snprintf(p->id, sizeof p->id, "%s", id);
    } else {
        new_id(p->id);
        json_object_set_new(p->norm, "task_id", json_string(p->id));
    }
    kg_err err;
    const char *pr = json_string_value(json_object_get(p->norm, "priority"));
    if (kg_priority_parse(pr ? pr : "normal", &p->priority, &err) ||
        kg_request_cache_key(p->norm, p->key, &err)) {
        json_decref(p->norm);
        p->norm = NULL;
        return set_error(e, 500, "internal", NULL, "%s", err.msg);
    }
    p->force = json_is_true(json_object_get(p->norm, "force_refresh"));
    return 0;
}

/* The reply to a submission answered from the cache (res, borrowed). */
static json_t *cache_answer(kg_api *api, const struct prepared *p,
                            const json_t *res)
{
    hit_put(api, p->id, p->key);
    kg_metrics_cache_hit(api->metrics);
    return cached_view(p->id, res);
}

static void h_evaluate(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_api_error e;
    json_t *in;
    if (kg_api_parse_body(req->body, req->body_len, &in, &e)) {
        api_error(rep, &e);
        return;
    }
    struct prepared p;
    int rc = prepare(in, &p, &e);
    json_decref(in);
    if (rc) {
        api_error(rep, &e);
        return;
    }

    /* one store call: the cache (unless force_refresh) and the submission
       (Redis: one script) */
    kg_err err;
    json_t *res = NULL;
    kg_submit s = {p.id, p.priority, p.norm, p.key, p.force};
    rc = kg_store_submit_cached(api->store, &s, &res, &err);
    if (rc == 2) {
        rep->status = 200;
        rep->json = cache_answer(api, &p, res);
        json_decref(res);
    } else {
        if (rc == 0) {
            kg_http_wake(api->http, 1);
            rep->status = 200; /* KernelGym's clients submit until a 200 */
            rep->json =
                json_pack("{s:s, s:s}", "task_id", p.id, "status", "pending");
        } else if (rc == 1) {
            kg_task t;
            rc = kg_store_get(api->store, p.id, KG_GET_RESULT, &t, &err);
            if (rc) {
                store_error(rep, rc, &err);
            } else {
                rep->status = 200;
                rep->json = existing_view(&t);
                kg_task_free(&t);
            }
        } else {
            store_error(rep, rc, &err);
        }
    }
    json_decref(p.norm);
}

/* A batch reply details the first BATCH_DETAILED_ERRORS rejected entries
 * (error message and field); later ones carry index, task_id, status_code
 * and error.code only, so a batch of 10,000 bad entries of a few bytes
 * each gets no reply of megabytes (docs/api.md, Limits). */
#define BATCH_DETAILED_ERRORS 100

/* An error entry of a batch reply (detail 0: error.code only). */
static json_t *entry_error(size_t index, const json_t *task,
                           const kg_api_error *e, int detail)
{
    json_t *err = detail ? json_pack("{s:s, s:s}", "code", e->code,
                                     "message", e->message)
                         : json_pack("{s:s}", "code", e->code);
    if (e->field && detail)
        json_object_set_new(err, "field", json_string(e->field));
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer((json_int_t)index));
    json_t *id = json_is_object(task) ? json_object_get(task, "task_id") : NULL;
    if (json_is_string(id))
        json_object_set(o, "task_id", id);
    json_object_set_new(o, "status_code", json_integer(e->status));
    json_object_set_new(o, "error", err);
    return o;
}

/* Open-addressing set of ids, to refuse the same id twice in one batch. */
static int seen_add(const char **tab, size_t cap, const char *id)
{
    size_t i = hash_id(id) & (cap - 1);
    while (tab[i]) {
        if (!strcmp(tab[i], id))
            return 1;
        i = (i + 1) & (cap - 1);
    }
    tab[i] = id;
    return 0;
}

/*
 * POST /evaluate/batch: every task validated on its own (an entry error
 * for a bad one), one cache lookup for the whole batch, one store write
 * for everything not answered from the cache.
 */
static void h_batch(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_api_error e;
    json_t *in;
    if (kg_api_parse_body(req->body, req->body_len, &in, &e)) {
        api_error(rep, &e);
        return;
    }
    json_t *tasks = json_object_get(in, "tasks");
    if (!json_is_array(tasks)) {
        json_decref(in);
        kg_http_error(rep, 400, tasks ? "invalid_field" : "missing_field",
                      "tasks",
                      "field \"tasks\": must be an array of task requests");
        return;
    }
    size_t n = json_array_size(tasks);
    if (n > KG_API_MAX_BATCH) {
        json_decref(in);
        kg_http_error(rep, 413, "field_too_large", "tasks",
                      "field \"tasks\": %zu tasks, over the limit of %d", n,
                      KG_API_MAX_BATCH);
        return;
    }
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    size_t n1 = n ? n : 1;
    struct prepared *ps = calloc(n1, sizeof *ps);
    kg_submit *subs = calloc(n1, sizeof *subs);
    size_t *which = calloc(n1, sizeof *which);
    int *created = calloc(n1, sizeof *created);
    json_t **hits = calloc(n1, sizeof *hits); /* by submission */
    char *ok = calloc(n1, 1); /* valid, not a duplicate */
    const char **seen = calloc(cap, sizeof *seen);
    json_t *entries = json_array();
    if (!ps || !subs || !which || !created || !hits || !ok || !seen ||
        !entries) {
        kg_http_error(rep, 500, "internal", NULL, "out of memory");
        goto out;
    }
    size_t m = 0, rejected = 0;
    kg_err err;
    int rc;
    for (size_t i = 0; i < n; i++) {
        json_t *task = json_array_get(tasks, i);
        json_t *entry = json_null(); /* filled below */
        int detail = rejected < BATCH_DETAILED_ERRORS;
        if (prepare(task, &ps[i], &e)) {
            entry = entry_error(i, task, &e, detail);
        } else if (seen_add(seen, cap, ps[i].id)) {
            set_error(&e, 422, "duplicate_task_id", "task_id",
                      "field \"task_id\": %s appears earlier in this batch",
                      ps[i].id);
            entry = entry_error(i, task, &e, detail);
        } else {
            ok[i] = 1;
        }
        if (!ok[i])
            rejected++;
        json_array_append_new(entries, entry);
    }
    for (size_t i = 0; i < n; i++) {
        if (!ok[i])
            continue;
        subs[m] = (kg_submit){ps[i].id, ps[i].priority, ps[i].norm, ps[i].key,
                              ps[i].force};
        which[m++] = i;
    }
    if (m) {
        rc = kg_store_submit_batch_cached(api->store, subs, m, created, hits,
                                          &err);
        if (rc) {
            store_error(rep, rc, &err);
            goto out;
        }
    }
    size_t fresh = 0;
    for (size_t j = 0; j < m; j++) {
        json_t *entry;
        if (created[j] == 2) {
            entry = cache_answer(api, &ps[which[j]], hits[j]);
        } else if (created[j] == 0) {
            fresh++;
            entry = json_pack("{s:s, s:s}", "task_id", ps[which[j]].id,
                              "status", "pending");
        } else {
            kg_task t;
            rc = kg_store_get(api->store, ps[which[j]].id, KG_GET_RESULT, &t,
                              &err);
            if (rc) {
                store_error(rep, rc, &err);
                goto out;
            }
            entry = existing_view(&t);
            kg_task_free(&t);
        }
        json_array_set_new(entries, which[j], entry);
    }
    kg_http_wake(api->http, (int)(fresh < 1000000 ? fresh : 1000000));
    rep->status = 200;
    rep->json =
        json_pack("{s:o, s:I, s:I}", "tasks", entries, "accepted",
                  (json_int_t)(n - rejected), "rejected", (json_int_t)rejected);
    if (rejected > BATCH_DETAILED_ERRORS)
        json_object_set_new(
            rep->json, "errors_abridged",
            json_integer((json_int_t)(rejected - BATCH_DETAILED_ERRORS)));
    entries = NULL;
out:
    for (size_t i = 0; i < n; i++) {
        if (ps)
            json_decref(ps[i].norm);
        if (hits)
            json_decref(hits[i]);
    }
    free(ps);
    free(subs);
    free(which);
    free(created);
    free(hits);
    free(ok);
    free(seen);
    json_decref(entries);
    json_decref(in);
}

/* ---- task reads and cancellation --------------------------------------- */

/*
 * Reads task id for a GET; on failure fills rep and returns -1. A task
 * answered from the cache (not in the store) comes back as a completed
 * kg_task with its result.
 */
static int load_task(kg_api *api, const char *id, kg_task *t,
                     kg_http_reply *rep)
{
    kg_err err;
    memset(t, 0, sizeof *t);
    if (!id || !kg_task_id_valid(id)) {
        kg_http_error(rep, 404, "not_found", "task_id",
                      "task_id: malformed, so no such task");
        return -1;
    }
    int rc = kg_store_get(api->store, id, KG_GET_RESULT, t, &err);
    if (rc == 0)
        return 0;
    char key[65];
    if (rc == KG_ENOTFOUND && hit_get(api, id, key)) {
        json_t *res = NULL;
        rc = kg_store_cache_get(api->store, key, &res, &err);
        if (rc == 1) {
            memset(t, 0, sizeof *t);
            snprintf(t->id, sizeof t->id, "%s", id);
            t->status = KG_TASK_COMPLETED;
            t->priority = KG_PRIO_NORMAL;
            t->result = res;
            return 0;
        }
        if (rc == 0)
            rc = KG_ENOTFOUND; /* evicted from the cache since */
    }
    if (rc == KG_ENOTFOUND)
        kg_http_error(rep, 404, "not_found", "task_id",
                      "task_id %s: no such task", id);
    else
        store_error(rep, rc, &err);
    return -1;
}

static void h_status(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_task t;
    if (load_task(api, req->param, &t, rep))
        return;
    rep->status = 200;
    rep->json = status_view(&t);
    kg_task_free(&t);
}

static void h_results(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_task t;
    if (load_task(api, req->param, &t, rep))
        return;
    if (t.status >= KG_TASK_COMPLETED) {
        rep->status = 200;
        rep->json = result_view(t.id, t.status, t.result);
    } else {
        rep->status = 202;
        rep->json = json_pack("{s:s, s:s}", "task_id", t.id, "status",
                              kg_task_status_name(t.status));
    }
    kg_task_free(&t);
}

static void h_cancel(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_task t;
    if (load_task(api, req->param, &t, rep))
        return;
    char id[KG_MAX_TASK_ID + 1];
    memcpy(id, t.id, sizeof id);
    kg_task_free(&t);
    kg_err err;
    int rc = kg_store_cancel(api->store, id, &err);
    if (rc == KG_ENOTFOUND) {
        /* a cache-answered task: completed, nothing to cancel */
        kg_http_error(rep, 409, "already_finished", "task_id",
                      "task %s is already completed", id);
        return;
    }
    if (rc < 0) {
        store_error(rep, rc, &err);
        return;
    }
    if (rc == 1) {
        rc = kg_store_get(api->store, id, 0, &t, &err);
        if (rc) {
            store_error(rep, rc, &err);
            return;
        }
        int st = t.status;
        kg_task_free(&t);
        if (st != KG_TASK_CANCELLED) {
            kg_http_error(rep, 409, "already_finished", "task_id",
                          "task %s is already %s", id, kg_task_status_name(st));
            return;
        }
    }
    rep->status = 200;
    rep->json = json_pack("{s:s, s:s}", "task_id", id, "status", "cancelled");
}

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

static void h_health(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_store_counts c;
    kg_err err;
    int rc = kg_store_counts_get(api->store, &c, &err);
    if (rc) {
        store_error(rep, rc, &err);
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

static void h_queue(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_store_counts c;
    kg_err err;
    int rc = kg_store_counts_get(api->store, &c, &err);
    if (rc) {
        store_error(rep, rc, &err);
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

static void h_workers(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_worker *w = NULL;
    size_t n = 0;
    kg_err err;
    int rc = kg_store_worker_list(api->store, &w, &n, &err);
    if (rc) {
        store_error(rep, rc, &err);
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

static void h_metrics(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    (void)req;
    kg_metrics_snapshot s;
    memset(&s, 0, sizeof s);
    kg_err err;
    s.store_up = kg_store_counts_get(api->store, &s.counts, &err) == 0;
    s.parked_polls = api->http ? kg_http_parked(api->http) : -1;
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

/* ---- workers ---------------------------------------------------------- */

/* Parses a worker call's body and its worker_id; -1 with rep filled. */
static int worker_body(const kg_http_req *req, json_t **in, const char **wid,
                       kg_http_reply *rep)
{
    kg_api_error e;
    if (kg_api_parse_body(req->body, req->body_len, in, &e) ||
        id_field(*in, "worker_id", wid, &e)) {
        json_decref(*in);
        *in = NULL;
        api_error(rep, &e);
        return -1;
    }
    return 0;
}

static void unknown_worker(kg_http_reply *rep, const char *wid)
{
    kg_http_error(rep, 404, "unknown_worker", "worker_id",
                  "worker_id %s: not registered (register again)", wid);
}

static void h_register(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_api_error e;
    json_t *in;
    if (kg_api_parse_body(req->body, req->body_len, &in, &e)) {
        api_error(rep, &e);
        return;
    }
    const char *wid = NULL, *device = NULL, *host = NULL;
    char gen[KG_MAX_TASK_ID + 1];
    if ((json_object_get(in, "worker_id") &&
         !json_is_null(json_object_get(in, "worker_id")) &&
         id_field(in, "worker_id", &wid, &e)) ||
        opt_string(in, "device", KG_MAX_DEVICE, 1, &device, &e) ||
        opt_string(in, "host", KG_MAX_HOST, 0, &host, &e)) {
        json_decref(in);
        {
            api_error(rep, &e);
            return;
        }
    }
    if (!wid) {
        gen[0] = 'w';
        gen[1] = '-';
        new_id(gen + 2);
        wid = gen;
    }
    if (!host)
        host = req->peer && req->peer[0] ? req->peer : "unknown";
    kg_err err;
    int rc = kg_store_worker_register(api->store, wid, device, host, &err);
    if (rc == KG_ESTATE) {
        kg_http_error(rep, 409, "device_claimed", "device",
                      "device %s on %s is held by another live worker", device,
                      host);
    } else if (rc) {
        store_error(rep, rc, &err);
    } else {
        rep->status = 200;
        rep->json = json_pack(
            "{s:s, s:s, s:s, s:I, s:I, s:I}", "worker_id", wid, "device",
            device, "host", host, "lease_ms", (json_int_t)api->opts.lease_ms,
            "worker_ttl_ms", (json_int_t)api->opts.worker_ttl_ms,
            "heartbeat_interval_ms", (json_int_t)(api->opts.worker_ttl_ms / 3));
    }
    json_decref(in);
}

static void h_unregister(kg_api *api, const kg_http_req *req,
                         kg_http_reply *rep)
{
    json_t *in;
    const char *wid;
    if (worker_body(req, &in, &wid, rep))
        return;
    kg_err err;
    int rc = kg_store_worker_unregister(api->store, wid, &err);
    if (rc == KG_ENOTFOUND) {
        unknown_worker(rep, wid);
    } else if (rc) {
        store_error(rep, rc, &err);
    } else {
        kg_http_wake(api->http, -1); /* its tasks are pending again */
        rep->status = 200;
        rep->json =
            json_pack("{s:s, s:b}", "worker_id", wid, "unregistered", 1);
    }
    json_decref(in);
}

#define MAX_HB_TASKS 64 /* a worker's tasks in flight (its --concurrency) */

/*
 * Of the task ids a worker says it is running, those it no longer holds
 * (cancelled, requeued after a lost lease, unknown): it should stop them.
 * A task the store cannot be asked about now is left alone. Returns a new
 * array, or NULL with rep filled when `tasks` is malformed.
 */
static json_t *not_held(kg_api *api, const char *wid, const json_t *tasks,
                        int *held, kg_http_reply *rep)
{
    json_t *out = json_array();
    *held = 0;
    if (!tasks || json_is_null(tasks))
        return out;
    if (!json_is_array(tasks)) {
        json_decref(out);
        kg_http_error(rep, 400, "invalid_field", "tasks",
                      "field \"tasks\": must be an array of task ids");
        return NULL;
    }
    if (json_array_size(tasks) > MAX_HB_TASKS) {
        json_decref(out);
        kg_http_error(rep, 422, "invalid_value", "tasks",
                      "field \"tasks\": at most %d ids", MAX_HB_TASKS);
        return NULL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(tasks, i, v)
    {
        const char *id = json_string_value(v);
        if (!id || !kg_task_id_valid(id)) {
            json_decref(out);
            kg_http_error(rep, json_is_string(v) ? 422 : 400,
                          json_is_string(v) ? "invalid_value" : "invalid_field",
                          "tasks",
                          "field \"tasks\": entry %zu is not a task id", i);
            return NULL;
        }
        kg_task t;
        kg_err err;
        int rc = kg_store_get(api->store, id, 0, &t, &err);
        if (rc == 0) {
            if (t.status != KG_TASK_RUNNING || strcmp(t.worker, wid))
                json_array_append_new(out, json_string(id));
            else
                ++*held;
            kg_task_free(&t);
        } else if (rc == KG_ENOTFOUND) {
            json_array_append_new(out, json_string(id));
        }
    }
    return out;
}

/*
 * A worker that reports its tasks (`held` of them are running under it in
 * the store) but holds more there lost a lease reply: the lease was made
 * but the reply never reached it (the server was killed after the write, or
 * Redis ran a lease script after the server had given up on it). Its
 * heartbeats would keep such a lease alive forever. The store cannot list
 * a worker's tasks, so the worker starts a new session instead
 * (re-registration puts every task it held back to pending, as after a
 * restart). Returns 1 when that happened. A worker never asks for a lease
 * while it sends a heartbeat, so no lease reply can be on its way.
 */
static int release_unknown(kg_api *api, const char *wid, int held)
{
    kg_worker *w = NULL;
    size_t n = 0;
    kg_err err;
    if (kg_store_worker_list(api->store, &w, &n, &err))
        return 0; /* the next heartbeat asks again */
    int done = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(w[i].id, wid) || w[i].running <= held)
            continue;
        if (kg_store_worker_register(api->store, wid, w[i].device, w[i].host,
                                     &err) == 0) {
            kg_warn("worker %s holds %d task(s) in the store but reports %d: "
                    "a lease reply was lost; its tasks are pending again",
                    wid, w[i].running, held);
            kg_http_wake(api->http, -1);
            done = 1;
        }
        break;
    }
    free(w);
    return done;
}

/*
 * POST /worker/heartbeat {"worker_id", "tasks"?}: the worker is alive and
 * its leases are extended; the reply's "cancel" lists the tasks of
 * "tasks" it no longer holds, which is how a cancellation reaches a
 * running evaluation.
 */
static void h_heartbeat(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    const char *wid;
    if (worker_body(req, &in, &wid, rep))
        return;
    json_t *tasks = json_object_get(in, "tasks");
    int held;
    json_t *cancel = not_held(api, wid, tasks, &held, rep);
    if (!cancel) {
        json_decref(in);
        return;
    }
    kg_err err;
    int rc = kg_store_worker_heartbeat(api->store, wid, &err);
    if (rc == 0 && json_is_array(tasks) && release_unknown(api, wid, held)) {
        /* everything it held is pending again: stop all of it */
        json_decref(cancel);
        cancel = json_copy(tasks);
    }
    if (rc == KG_ENOTFOUND) {
        unknown_worker(rep, wid);
    } else if (rc) {
        store_error(rep, rc, &err);
    } else {
        rep->status = 200;
        rep->json = json_pack("{s:s, s:I, s:O}", "worker_id", wid, "lease_ms",
                              (json_int_t)api->opts.lease_ms, "cancel", cancel);
    }
    json_decref(cancel);
    json_decref(in);
}

/* Gives back a lease whose reply never reached the worker. */
static void lease_undo(kg_api *api, json_t *arg)
{
    const char *id = json_string_value(json_object_get(arg, "task_id"));
    const char *wid = json_string_value(json_object_get(arg, "worker_id"));
    if (id && wid && kg_store_retry(api->store, id, wid, NULL, 0, NULL) == 0)
        kg_http_wake(api->http, 1);
}

/*
 * The lease reply as text, the request spliced in as the store holds it
 * (compact JSON it wrote itself), so the sources are neither parsed nor
 * printed again. Ids are [A-Za-z0-9._:-] (kg_task_id_valid): no escaping.
 * Returns malloc'd text (length in *len), or NULL when out of memory.
 */
static char *lease_reply(const kg_task *t, int64_t lease_ms, size_t *len)
{
    const char *req = t->request_text ? t->request_text : "null";
    size_t cap = strlen(req) + strlen(t->id) + 200;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    int n = snprintf(buf, cap,
                     "{\"task_id\": \"%s\", \"request\": %s, \"priority\": "
                     "\"%s\", \"attempt\": %d, \"lease_deadline_ms\": %lld, "
                     "\"lease_ms\": %lld}",
                     t->id, req, kg_priority_name(t->priority), t->attempts,
                     (long long)t->lease_deadline_ms, (long long)lease_ms);
    if (n < 0 || (size_t)n >= cap) {
        free(buf);
        return NULL;
    }
    *len = (size_t)n;
    return buf;
}

/*
 * POST /worker/lease {"worker_id", "wait_s"}: a task now, or, while none
 * is pending, a park until wait_s has passed (then 204). The deadline
 * lives in req->slot across parks.
 */
static void h_lease(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    const char *wid;
    if (worker_body(req, &in, &wid, rep))
        return;
    if (!req->resumed) {
        json_t *w = json_object_get(in, "wait_s");
        double wait = 0;
        if (w && !json_is_null(w)) {
            if (!json_is_number(w)) {
                json_decref(in);
                {
                    kg_http_error(rep, 400, "invalid_field", "wait_s",
                                  "field \"wait_s\": must be a number");
                    return;
                }
            }
            wait = json_number_value(w);
            if (!(wait >= 0 && wait <= KG_API_MAX_WAIT_S)) {
                json_decref(in);
                {
                    kg_http_error(rep, 422, "invalid_value", "wait_s",
                                  "field \"wait_s\": must be in 0..%d",
                                  KG_API_MAX_WAIT_S);
                    return;
                }
            }
        }
        *req->slot = req->now + wait;
    }
    kg_task t;
    kg_err err;
    int rc = kg_store_lease_text(api->store, wid, &t, &err);
    if (rc == 1) {
        rep->status = 200;
        rep->text = lease_reply(&t, api->opts.lease_ms, &rep->text_len);
        rep->content_type = "application/json";
        rep->undo = lease_undo;
        rep->undo_arg =
            json_pack("{s:s, s:s}", "task_id", t.id, "worker_id", wid);
        kg_task_free(&t);
    } else if (rc == 0) {
        rep->status = 0; /* park, or 204 once the wait is over */
        rep->park_until = *req->slot;
    } else if (rc == KG_ENOTFOUND) {
        unknown_worker(rep, wid);
    } else {
        store_error(rep, rc, &err);
    }
    json_decref(in);
}

static void h_result(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    const char *wid, *tid;
    if (worker_body(req, &in, &wid, rep))
        return;
    kg_api_error e;
    if (id_field(in, "task_id", &tid, &e)) {
        json_decref(in);
        {
            api_error(rep, &e);
            return;
        }
    }
    json_t *res = json_object_get(in, "result");
    if (!json_is_object(res)) {
        json_decref(in);
        {
            kg_http_error(rep, 400, res ? "invalid_field" : "missing_field",
                          "result",
                          "field \"result\": must be a result object");
            return;
        }
    }
    json_t *verdict = json_object_get(res, "verdict");
    if (verdict && !json_is_string(verdict) && !json_is_null(verdict)) {
        json_decref(in);
        {
            kg_http_error(rep, 400, "invalid_field", "result.verdict",
                          "field \"result.verdict\": must be a string");
            return;
        }
    }
    int outcome = 0;
    kg_err err;
    int rc = kg_sched_result(api->sched, tid, wid, res, &outcome, &err);
    if (rc == KG_ESTATE) {
        kg_http_error(rep, 409, "not_lease_holder", "worker_id",
                      "worker_id %s does not hold task %s (lease expired, "
                      "cancelled, or never its)",
                      wid, tid);
    } else if (rc == KG_ENOTFOUND) {
        kg_http_error(rep, 404, "not_found", "task_id",
                      "task_id %s: no such task", tid);
    } else if (rc) {
        store_error(rep, rc, &err);
    } else {
        if (outcome == KG_TASK_PENDING)
            kg_http_wake(api->http, 1);
        rep->status = 200;
        rep->json = json_pack("{s:s, s:s}", "task_id", tid, "status",
                              kg_task_status_name(outcome));
    }
    json_decref(in);
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
        h_evaluate(api, req, rep);
        return;
    }
    case KG_ROUTE_EVALUATE_BATCH: {
        h_batch(api, req, rep);
        return;
    }
    case KG_ROUTE_STATUS: {
        h_status(api, req, rep);
        return;
    }
    case KG_ROUTE_RESULTS: {
        h_results(api, req, rep);
        return;
    }
    case KG_ROUTE_CANCEL: {
        h_cancel(api, req, rep);
        return;
    }
    case KG_ROUTE_HEALTH: {
        h_health(api, req, rep);
        return;
    }
    case KG_ROUTE_METRICS: {
        h_metrics(api, req, rep);
        return;
    }
    case KG_ROUTE_QUEUE: {
        h_queue(api, req, rep);
        return;
    }
    case KG_ROUTE_WORKERS: {
        h_workers(api, req, rep);
        return;
    }
    case KG_ROUTE_W_REGISTER: {
        h_register(api, req, rep);
        return;
    }
    case KG_ROUTE_W_UNREGISTER: {
        h_unregister(api, req, rep);
        return;
    }
    case KG_ROUTE_W_HEARTBEAT: {
        h_heartbeat(api, req, rep);
        return;
    }
    case KG_ROUTE_W_LEASE: {
        h_lease(api, req, rep);
        return;
    }
    case KG_ROUTE_W_RESULT: {
        h_result(api, req, rep);
        return;
    }
    }
    kg_http_error(rep, 404, "not_found", NULL, "no such endpoint");
}
