/* api_worker.c - the worker endpoints: register, unregister, heartbeat,
 * lease (a long poll) and result (docs/api.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/json_util.h"
#include "common/log.h"
#include "common/request.h"
#include "common/result.h"
#include "common/sha256.h"
#include "server/metrics.h"
#include "server/api_impl.h"

/* ---- workers ---------------------------------------------------------- */

/* Parses a worker call's body and its worker_id; -1 with rep filled. */
static int worker_body(const kg_http_req *req, json_t **in, const char **wid,
                       kg_http_reply *rep)
{
    kg_api_error e;
    if (kg_api_parse_body(req->body, req->body_len, in, &e) ||
        kg_api_id_field(*in, "worker_id", wid, &e)) {
        json_decref(*in);
        *in = NULL;
        kg_api_reply_error(rep, &e);
        return -1;
    }
    return 0;
}

static void unknown_worker(kg_http_reply *rep, const char *wid)
{
    kg_http_error(rep, 404, "unknown_worker", "worker_id",
                  "worker_id %s: not registered (register again)", wid);
}

/* ---- worker identity --------------------------------------------------
 * A registration gets a secret of its own (256 random bits, hex); the
 * store keeps only its SHA-256. Every later call of that worker id must
 * carry it as "worker_secret", so another holder of the worker token can
 * neither post for, heartbeat, lease or unregister as, nor re-register, a
 * live worker's id. */

/* A fresh secret into out (65 bytes); -1 when the kernel gives no
 * randomness. */
static int new_secret(char out[65])
{
    unsigned char b[32];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = getrandom(b + got, sizeof b - got, 0);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof b; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[64] = 0;
    explicit_bzero(b, sizeof b);
    return 0;
}

/* 1 when secret's SHA-256 is digest; compared in constant time. */
static int secret_matches(const char *secret, const char *digest)
{
    char got[65];
    kg_sha256_hex(secret, strlen(secret), got);
    unsigned diff = 0;
    for (int i = 0; i < 64; i++)
        diff |= (unsigned)(got[i] ^ digest[i]);
    return diff == 0;
}

/*
 * The worker call's "worker_secret" against the one recorded for wid. 0
 * when it matches; else -1 with rep filled: 404 unknown_worker when none
 * is recorded (register again), 400 when the field is missing, 403
 * wrong_worker_secret when it does not match.
 */
static int check_secret(kg_api *api, const json_t *in, const char *wid,
                        kg_http_reply *rep)
{
    char want[65];
    kg_err err;
    int rc = kg_store_worker_secret_get(api->store, wid, want, &err);
    if (rc < 0) {
        kg_api_store_error(rep, rc, &err);
        return -1;
    }
    if (rc == 0) {
        unknown_worker(rep, wid);
        return -1;
    }
    const json_t *v = json_object_get(in, "worker_secret");
    if (!json_is_string(v)) {
        kg_http_error(rep, 400, v ? "invalid_field" : "missing_field",
                      "worker_secret",
                      "field \"worker_secret\": the string /worker/register "
                      "gave worker %s",
                      wid);
        return -1;
    }
    if (!secret_matches(json_string_value(v), want)) {
        kg_warn("worker %s: a call with another worker_secret refused", wid);
        kg_http_error(rep, 403, "wrong_worker_secret", "worker_secret",
                      "worker_secret: not the one worker %s registered with",
                      wid);
        return -1;
    }
    return 0;
}

/* 1 when wid is registered and alive; 0 when not; < 0 on a store error. */
static int worker_alive(kg_api *api, const char *wid, kg_err *err)
{
    kg_worker *w = NULL;
    size_t n = 0;
    int rc = kg_store_worker_list(api->store, &w, &n, err);
    if (rc < 0)
        return rc;
    int alive = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(w[i].id, wid))
            alive = w[i].alive;
    free(w);
    return alive;
}

void kg_api_h_register(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    kg_api_error e;
    json_t *in;
    if (kg_api_parse_body(req->body, req->body_len, &in, &e)) {
        kg_api_reply_error(rep, &e);
        return;
    }
    const char *wid = NULL, *device = NULL, *host = NULL;
    char gen[KG_MAX_TASK_ID + 1];
    if ((json_object_get(in, "worker_id") &&
         !json_is_null(json_object_get(in, "worker_id")) &&
         kg_api_id_field(in, "worker_id", &wid, &e)) ||
        kg_api_opt_string(in, "device", KG_MAX_DEVICE, 1, &device, &e) ||
        kg_api_opt_string(in, "host", KG_MAX_HOST, 0, &host, &e)) {
        json_decref(in);
        {
            kg_api_reply_error(rep, &e);
            return;
        }
    }
    if (!wid) {
        gen[0] = 'w';
        gen[1] = '-';
        kg_api_new_id(gen + 2);
        wid = gen;
    }
    if (!host)
        host = req->peer && req->peer[0] ? req->peer : "unknown";
    kg_err err;
    char old[65], secret[65], digest[65];
    /* a live id is taken: only its own secret registers it again */
    int rc = wid == gen ? 0 : worker_alive(api, wid, &err);
    if (rc > 0)
        rc = kg_store_worker_secret_get(api->store, wid, old, &err);
    if (rc > 0) {
        const char *sec =
            json_string_value(json_object_get(in, "worker_secret"));
        if (!sec || !secret_matches(sec, old)) {
            kg_warn("register as live worker %s without its secret refused",
                    wid);
            kg_http_error(rep, 409, "worker_id_taken", "worker_id",
                          "worker_id %s is registered to a live worker: "
                          "registering it again needs its worker_secret (or "
                          "wait until it has been silent for %lld ms)",
                          wid, (long long)api->opts.worker_ttl_ms);
            json_decref(in);
            return;
        }
    }
    if (rc < 0) {
        kg_api_store_error(rep, rc, &err);
        json_decref(in);
        return;
    }
    if (new_secret(secret) < 0) {
        kg_http_error(rep, 500, "internal", NULL, "no randomness for a secret");
        json_decref(in);
        return;
    }
    kg_sha256_hex(secret, 64, digest);
    rc = kg_store_worker_register(api->store, wid, device, host, &err);
    if (rc == 0)
        rc = kg_store_worker_secret_set(api->store, wid, digest, &err);
    if (rc == KG_ESTATE) {
        kg_http_error(rep, 409, "device_claimed", "device",
                      "device %s on %s is held by another live worker", device,
                      host);
    } else if (rc) {
        kg_api_store_error(rep, rc, &err);
    } else {
        rep->status = 200;
        rep->json = json_pack(
            "{s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "worker_id", wid,
            "worker_secret", secret, "device", device, "host", host,
            "lease_ms", (json_int_t)api->opts.lease_ms, "worker_ttl_ms",
            (json_int_t)api->opts.worker_ttl_ms, "heartbeat_interval_ms",
            (json_int_t)(api->opts.worker_ttl_ms / 3));
    }
    explicit_bzero(secret, sizeof secret);
    json_decref(in);
}

void kg_api_h_unregister(kg_api *api, const kg_http_req *req,
                         kg_http_reply *rep)
{
    json_t *in;
    const char *wid;
    if (worker_body(req, &in, &wid, rep))
        return;
    if (check_secret(api, in, wid, rep)) {
        json_decref(in);
        return;
    }
    kg_err err;
    int rc = kg_store_worker_unregister(api->store, wid, &err);
    if (rc == KG_ENOTFOUND) {
        unknown_worker(rep, wid);
    } else if (rc) {
        kg_api_store_error(rep, rc, &err);
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
void kg_api_h_heartbeat(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    const char *wid;
    if (worker_body(req, &in, &wid, rep))
        return;
    if (check_secret(api, in, wid, rep)) {
        json_decref(in);
        return;
    }
    json_t *tasks = json_object_get(in, "tasks");
    int held;
    json_t *cancel = not_held(api, wid, tasks, &held, rep);
    if (!cancel) {
        json_decref(in);
        return;
    }
    kg_err err;
    int running = 0;
    int rc = kg_store_worker_heartbeat(api->store, wid, &running, &err);
    /* the store's count first: listing every worker is for the rare case */
    if (rc == 0 && json_is_array(tasks) && running > held &&
        release_unknown(api, wid, held)) {
        /* everything it held is pending again: stop all of it */
        json_decref(cancel);
        cancel = json_copy(tasks);
    }
    if (rc == KG_ENOTFOUND) {
        unknown_worker(rep, wid);
    } else if (rc) {
        kg_api_store_error(rep, rc, &err);
    } else {
        rep->status = 200;
        rep->json = json_pack("{s:s, s:I, s:O}", "worker_id", wid, "lease_ms",
                              (json_int_t)api->opts.lease_ms, "cancel", cancel);
    }
    json_decref(cancel);
    json_decref(in);
}

/* Gives back a lease whose reply never reached the worker. */
static void lease_undo(void *ctx, json_t *arg)
{
    kg_api *api = ctx;
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
void kg_api_h_lease(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    const char *wid;
    if (worker_body(req, &in, &wid, rep))
        return;
    if (!req->resumed) {
        /* checked once: a parked poll is the same request */
        if (check_secret(api, in, wid, rep)) {
            json_decref(in);
            return;
        }
        double wait;
        kg_api_error e;
        if (kg_api_wait_field(in, &wait, &e)) {
            json_decref(in);
            kg_api_reply_error(rep, &e);
            return;
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
        kg_api_store_error(rep, rc, &err);
    }
    json_decref(in);
}

void kg_api_h_result(kg_api *api, const kg_http_req *req, kg_http_reply *rep)
{
    json_t *in;
    const char *wid, *tid;
    if (worker_body(req, &in, &wid, rep))
        return;
    if (check_secret(api, in, wid, rep)) {
        json_decref(in);
        return;
    }
    kg_api_error e;
    if (kg_api_id_field(in, "task_id", &tid, &e)) {
        json_decref(in);
        {
            kg_api_reply_error(rep, &e);
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
    kg_err err;
    int outcome = 0;
    int rc = kg_sched_result(api->sched, tid, wid, res, &outcome, &err);
    if (rc == KG_EINVAL) {
        /* the lease holder's result breaks the contract: nothing stored */
        char field[64] = "result";
        size_t n = strcspn(err.msg, ":");
        if (n < sizeof field && !strncmp(err.msg, "result.", 7))
            snprintf(field, sizeof field, "%.*s", (int)n, err.msg);
        kg_metrics_result_refused(api->metrics);
        kg_warn("worker %s: result for task %s refused: %s", wid, tid,
                err.msg);
        kg_http_error(rep, 422, "invalid_result", field, "%s", err.msg);
    } else if (rc == KG_ESTATE) {
        kg_http_error(rep, 409, "not_lease_holder", "worker_id",
                      "worker_id %s does not hold task %s (lease expired, "
                      "cancelled, or never its)",
                      wid, tid);
    } else if (rc == KG_ENOTFOUND) {
        kg_http_error(rep, 404, "not_found", "task_id",
                      "task_id %s: no such task", tid);
    } else if (rc) {
        kg_api_store_error(rep, rc, &err);
    } else {
        if (outcome == KG_TASK_PENDING)
            kg_http_wake(api->http, 1);
        else /* final: wake the result polls waiting for it */
            kg_http_key_add(rep->done_keys, tid);
        rep->status = 200;
        rep->json = json_pack("{s:s, s:s}", "task_id", tid, "status",
                              kg_task_status_name(outcome));
    }
    json_decref(in);
}
