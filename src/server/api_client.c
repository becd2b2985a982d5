/* api_client.c - the client endpoints: submissions (one and a batch),
 * task reads and cancellation (docs/api.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_util.h"
#include "common/log.h"
#include "common/request.h"
#include "common/result.h"
#include "server/api_impl.h"

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
        kg_api_new_id(p->id);
        json_object_set_new(p->norm, "task_id", json_string(p->id));
    }
    kg_err err;
    const char *pr = json_string_value(json_object_get(p->norm, "priority"));
    if (kg_priority_parse(pr ? pr : "normal", &p->priority, &err) ||
        kg_request_cache_key(p->norm, p->key, &err)) {
        json_decref(p->norm);
        p->norm = NULL;
        return kg_api_set_error(e, 500, "internal", NULL, "%s", err.msg);
    }
    p->force = json_is_true(json_object_get(p->norm, "force_refresh"));
    return 0;
}

/* The reply to a submission answered from the cache (res, borrowed). */
static json_t *cache_answer(kg_api *api, const struct prepared *p,
                            const json_t *res)
{
    kg_api_hit_put(api, p->id, p->key);
    kg_metrics_cache_hit(api->metrics);
    return kg_api_cached_view(p->id, res);
}

void kg_api_h_evaluate(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_api_error e;
    json_t *in;
    if (kg_api_parse_body(req->body, req->body_len, &in, &e)) {
        kg_api_reply_error(rep, &e);
        return;
    }
    struct prepared p;
    int rc = prepare(in, &p, &e);
    json_decref(in);
    if (rc) {
        kg_api_reply_error(rep, &e);
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
                kg_api_store_error(rep, rc, &err);
            } else {
                rep->status = 200;
                rep->json = kg_api_existing_view(&t);
                kg_task_free(&t);
            }
        } else {
            kg_api_store_error(rep, rc, &err);
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
    json_t *err =
        detail ? json_pack("{s:s, s:s}", "code", e->code, "message", e->message)
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

/* The working state of one batch: arrays of n (or cap) entries, owned. */
struct batch {
    size_t n, cap;
    struct prepared *ps; /* by index in the batch */
    kg_submit *subs;     /* by submission: the valid, distinct entries */
    size_t *which;       /* by submission: its index in the batch */
    int *created;        /* by submission: the store's answer */
    json_t **hits;       /* by submission: a cached result, or NULL */
    char *ok;            /* by index: valid, not a duplicate */
    const char **seen;   /* the ids seen so far (kg_api_seen_add) */
    json_t *entries;     /* the reply's "tasks" */
    size_t m, rejected, fresh;
};

/* The body's "tasks" array (borrowed from *in, which the caller frees),
 * or NULL with rep filled and *in freed. */
static json_t *batch_tasks(const kg_http_req *req, json_t **in,
                           kg_http_reply *rep)
{
    kg_api_error e;
    if (kg_api_parse_body(req->body, req->body_len, in, &e)) {
        kg_api_reply_error(rep, &e);
        return NULL;
    }
    json_t *tasks = json_object_get(*in, "tasks");
    if (!json_is_array(tasks)) {
        json_decref(*in);
        kg_http_error(rep, 400, tasks ? "invalid_field" : "missing_field",
                      "tasks",
                      "field \"tasks\": must be an array of task requests");
        return NULL;
    }
    size_t n = json_array_size(tasks);
    if (n > KG_API_MAX_BATCH) {
        json_decref(*in);
        kg_http_error(rep, 413, "field_too_large", "tasks",
                      "field \"tasks\": %zu tasks, over the limit of %d", n,
                      KG_API_MAX_BATCH);
        return NULL;
    }
    return tasks;
}

/* Allocates b's arrays for n tasks. Returns 0, or -1 when out of memory
 * (batch_free still frees what was made). */
static int batch_alloc(struct batch *b, size_t n)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    b->cap = 16;
    while (b->cap < 2 * n)
        b->cap *= 2;
    size_t n1 = n ? n : 1;
    b->ps = calloc(n1, sizeof *b->ps);
    b->subs = calloc(n1, sizeof *b->subs);
    b->which = calloc(n1, sizeof *b->which);
    b->created = calloc(n1, sizeof *b->created);
    b->hits = calloc(n1, sizeof *b->hits);
    b->ok = calloc(n1, 1);
    b->seen = calloc(b->cap, sizeof *b->seen);
    b->entries = json_array();
    if (!b->ps || !b->subs || !b->which || !b->created || !b->hits || !b->ok ||
        !b->seen || !b->entries)
        return -1;
    return 0;
}

static void batch_free(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->ps)
            json_decref(b->ps[i].norm);
        if (b->hits)
            json_decref(b->hits[i]);
    }
    free(b->ps);
    free(b->subs);
    free(b->which);
    free(b->created);
    free(b->hits);
    free(b->ok);
    free(b->seen);
    json_decref(b->entries);
}

/* Validates every task on its own: an entry error for a bad one or a
 * repeated id (null for the others, filled by batch_answer), and the
 * valid ones listed in b->subs for the store. */
static void batch_check(struct batch *b, const json_t *tasks)
{
    kg_api_error e;
    for (size_t i = 0; i < b->n; i++) {
        json_t *task = json_array_get(tasks, i);
        json_t *entry = json_null(); /* filled below */
        int detail = b->rejected < BATCH_DETAILED_ERRORS;
        if (prepare(task, &b->ps[i], &e)) {
            entry = entry_error(i, task, &e, detail);
        } else if (kg_api_seen_add(b->seen, b->cap, b->ps[i].id)) {
            kg_api_set_error(
                &e, 422, "duplicate_task_id", "task_id",
                "field \"task_id\": %s appears earlier in this batch",
                b->ps[i].id);
            entry = entry_error(i, task, &e, detail);
        } else {
            b->ok[i] = 1;
        }
        if (!b->ok[i])
            b->rejected++;
        json_array_append_new(b->entries, entry);
    }
    for (size_t i = 0; i < b->n; i++) {
        if (!b->ok[i])
            continue;
        const struct prepared *p = &b->ps[i];
        b->subs[b->m] =
            (kg_submit){p->id, p->priority, p->norm, p->key, p->force};
        b->which[b->m++] = i;
    }
}

/* One store write for the valid tasks, then their entries: cached,
 * pending, or the task that already existed. Returns 0, or -1 with rep
 * filled. */
static int batch_answer(kg_api *api, struct batch *b, kg_http_reply *rep)
{
    kg_err err;
    int rc;
    if (b->m) {
        rc = kg_store_submit_batch_cached(api->store, b->subs, b->m, b->created,
                                          b->hits, &err);
        if (rc) {
            kg_api_store_error(rep, rc, &err);
            return -1;
        }
    }
    for (size_t j = 0; j < b->m; j++) {
        const struct prepared *p = &b->ps[b->which[j]];
        json_t *entry;
        if (b->created[j] == 2) {
            entry = cache_answer(api, p, b->hits[j]);
        } else if (b->created[j] == 0) {
            b->fresh++;
            entry =
                json_pack("{s:s, s:s}", "task_id", p->id, "status", "pending");
        } else {
            kg_task t;
            rc = kg_store_get(api->store, p->id, KG_GET_RESULT, &t, &err);
            if (rc) {
                kg_api_store_error(rep, rc, &err);
                return -1;
            }
            entry = kg_api_existing_view(&t);
            kg_task_free(&t);
        }
        json_array_set_new(b->entries, b->which[j], entry);
    }
    return 0;
}

/* The batch reply; takes b->entries. */
static void batch_reply(kg_api *api, struct batch *b, kg_http_reply *rep)
{
    size_t fresh = b->fresh, rejected = b->rejected;
    kg_http_wake(api->http, (int)(fresh < 1000000 ? fresh : 1000000));
    rep->status = 200;
    rep->json = json_pack("{s:o, s:I, s:I}", "tasks", b->entries, "accepted",
                          (json_int_t)(b->n - rejected), "rejected",
                          (json_int_t)rejected);
    if (rejected > BATCH_DETAILED_ERRORS)
        json_object_set_new(
            rep->json, "errors_abridged",
            json_integer((json_int_t)(rejected - BATCH_DETAILED_ERRORS)));
    b->entries = NULL;
}

/*
 * POST /evaluate/batch: every task validated on its own (an entry error
 * for a bad one), one cache lookup for the whole batch, one store write
 * for everything not answered from the cache.
 */
void kg_api_h_batch(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    json_t *tasks = batch_tasks(req, &in, rep);
    if (!tasks)
        return;
    struct batch b;
    if (batch_alloc(&b, json_array_size(tasks))) {
        kg_http_error(rep, 500, "internal", NULL, "out of memory");
    } else {
        batch_check(&b, tasks);
        if (batch_answer(api, &b, rep) == 0)
            batch_reply(api, &b, rep);
    }
    batch_free(&b);
    json_decref(in);
}

/* ---- task reads and cancellation --------------------------------------- */

int kg_api_read_task(kg_api *api, const char *id, kg_task *t, kg_err *err)
{
    memset(t, 0, sizeof *t);
    int rc = kg_store_get(api->store, id, KG_GET_RESULT, t, err);
    char key[65];
    if (rc != KG_ENOTFOUND || !kg_api_hit_get(api, id, key))
        return rc;
    json_t *res = NULL;
    rc = kg_store_cache_get(api->store, key, &res, err);
    if (rc == 0)
        return KG_ENOTFOUND; /* evicted from the cache since */
    if (rc < 0)
        return rc;
    memset(t, 0, sizeof *t);
    snprintf(t->id, sizeof t->id, "%s", id);
    t->status = KG_TASK_COMPLETED;
    t->priority = KG_PRIO_NORMAL;
    t->result = res;
    return 0;
}

/* Reads task id for a GET; on failure fills rep and returns -1. */
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
    int rc = kg_api_read_task(api, id, t, &err);
    if (rc == 0)
        return 0;
    if (rc == KG_ENOTFOUND)
        kg_http_error(rep, 404, "not_found", "task_id",
                      "task_id %s: no such task", id);
    else
        kg_api_store_error(rep, rc, &err);
    return -1;
}

void kg_api_h_status(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_task t;
    if (load_task(api, req->param, &t, rep))
        return;
    rep->status = 200;
    rep->json = kg_api_status_view(&t);
    kg_task_free(&t);
}

void kg_api_h_results(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_task t;
    if (load_task(api, req->param, &t, rep))
        return;
    if (t.status >= KG_TASK_COMPLETED) {
        rep->status = 200;
        rep->json = kg_api_result_view(t.id, t.status, t.result);
    } else {
        rep->status = 202;
        rep->json = json_pack("{s:s, s:s}", "task_id", t.id, "status",
                              kg_task_status_name(t.status));
    }
    kg_task_free(&t);
}

void kg_api_h_cancel(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
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
        kg_api_store_error(rep, rc, &err);
        return;
    }
    if (rc == 1) {
        rc = kg_store_get(api->store, id, 0, &t, &err);
        if (rc) {
            kg_api_store_error(rep, rc, &err);
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
    if (rc == 0) /* cancelled now: wake the result polls waiting for it */
        kg_http_key_add(rep->done_keys, id);
    rep->status = 200;
    rep->json = json_pack("{s:s, s:s}", "task_id", id, "status", "cancelled");
}
