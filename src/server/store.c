/*
 * store.c - the store API of store.h: argument checks, URL parsing and
 * dispatch to the backend (store_sqlite.c, store_redis.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/result.h"
#include "server/sqldb.h"
#include "server/store_impl.h"

static const char *const PRIO_NAMES[KG_NPRIO] = {"high", "normal", "low"};
static const char *const STATUS_NAMES[KG_NSTATUS] = {
    "pending", "running", "completed", "failed", "cancelled"};
static const char *const VERDICT_NAMES[KG_NVERDICT] = {
    "pass",        "mismatch", "compile_error", "runtime_error", "timeout",
    "hacked",      "infra_error", "other",      "problem_error"};

const char *kg_priority_name(int prio)
{
    return prio >= 0 && prio < KG_NPRIO ? PRIO_NAMES[prio] : "?";
}

const char *kg_task_status_name(int status)
{
    return status >= 0 && status < KG_NSTATUS ? STATUS_NAMES[status] : "?";
}

const char *kg_verdict_name(int verdict)
{
    return verdict >= 0 && verdict < KG_NVERDICT ? VERDICT_NAMES[verdict] : "?";
}

int kg_priority_parse(const char *name, int *prio, kg_err *err)
{
    for (int i = 0; name && i < KG_NPRIO; i++)
        if (!strcmp(name, PRIO_NAMES[i])) {
            *prio = i;
            return 0;
        }
    return kg_errf(err, KG_EINVAL,
                   "priority \"%s\": use one of high, normal, low",
                   name ? name : "(null)");
}

int kg_verdict_parse(const char *name)
{
    for (int i = 0; name && i < KG_NVERDICT; i++)
        if (i != KG_VERDICT_OTHER && !strcmp(name, VERDICT_NAMES[i]))
            return i;
    return KG_VERDICT_OTHER;
}

void kg_store_opts_default(kg_store_opts *o)
{
    memset(o, 0, sizeof *o);
    o->lease_ms = KG_STORE_DEFAULT_LEASE_MS;
    o->worker_ttl_ms = KG_STORE_DEFAULT_WORKER_TTL_MS;
    o->sqlite_sync_full = 1;
    o->pool_size = 64;
}

/* sqlite:PATH[?sync=full|normal] and redis://HOST:PORT[/DB]. */
int kg_store_open(kg_store **out, const char *url, const kg_store_opts *opts,
                  kg_err *err)
{
    kg_store_opts o;
    if (opts)
        o = *opts;
    else
        kg_store_opts_default(&o);
    *out = NULL;
    if (!url)
        return kg_errf(err, KG_EINVAL, "store: no URL");
    if (o.lease_ms <= 0 || o.worker_ttl_ms <= 0 || o.pool_size < 1 ||
        o.pool_size > 256)
        return kg_errf(err, KG_EINVAL,
                       "store: lease_ms and worker_ttl_ms must be > 0, "
                       "pool_size 1..256");
    if (!strncmp(url, "sqlite:", 7)) {
        char path[4096];
        const char *p = url + 7;
        const char *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || n >= sizeof path)
            return kg_errf(err, KG_EINVAL, "store URL \"%s\": bad path", url);
        memcpy(path, p, n);
        path[n] = 0;
        if (q) {
            if (!strcmp(q, "?sync=full"))
                o.sqlite_sync_full = 1;
            else if (!strcmp(q, "?sync=normal"))
                o.sqlite_sync_full = 0;
            else
                return kg_errf(err, KG_EINVAL,
                               "store URL \"%s\": the only option is "
                               "?sync=full|normal",
                               url);
        }
        return kg_store_sqlite_open(out, path, &o, err);
    }
    if (!strncmp(url, "redis://", 8)) {
        char host[256];
        const char *p = url + 8;
        const char *colon = strrchr(p, ':');
        const char *slash = strchr(p, '/');
        int port = 6379, db = 0;
        size_t hn;
        if (colon && (!slash || colon < slash)) {
            char *end;
            long v = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || v < 1 || v > 65535 || (*end && *end != '/'))
                return kg_errf(err, KG_EINVAL, "store URL \"%s\": bad port",
                               url);
            port = (int)v;
            hn = (size_t)(colon - p);
        } else {
            hn = slash ? (size_t)(slash - p) : strlen(p);
        }
        if (slash && slash[1]) {
            char *end;
            long v = strtol(slash + 1, &end, 10);
            if (*end || v < 0 || v > 1000000)
                return kg_errf(err, KG_EINVAL,
                               "store URL \"%s\": bad database number", url);
            db = (int)v;
        }
        if (hn == 0 || hn >= sizeof host)
            return kg_errf(err, KG_EINVAL, "store URL \"%s\": bad host", url);
        memcpy(host, p, hn);
        host[hn] = 0;
        return kg_store_redis_open(out, host, port, db, &o, err);
    }
    return kg_errf(err, KG_EINVAL,
                   "store URL \"%s\": use sqlite:PATH or redis://HOST:PORT/DB",
                   url);
}

void kg_store_close(kg_store *s)
{
    if (s)
        s->ops->close(s);
}

const char *kg_store_backend(const kg_store *s)
{
    return s->ops->name;
}

int kg_store_defers(const kg_store *s)
{
    return s->ops->defers && s->ops->defers(s);
}

void kg_store_defer_begin(void)
{
    kg_sqldb_defer_begin();
}

int kg_store_defer_pending(void)
{
    return kg_sqldb_defer_pending();
}

int kg_store_defer_blocked(void)
{
    return kg_sqldb_defer_blocked();
}

int kg_store_defer_end(kg_store_done_fn done_fn, void *arg)
{
    return kg_sqldb_defer_end(done_fn, arg);
}

int kg_store_describe(kg_store *s, char *buf, size_t size, kg_err *err)
{
    if (!buf || size == 0)
        return kg_errf(err, KG_EINVAL, "describe: no buffer");
    return s->ops->describe(s, buf, size, err);
}

void kg_task_free(kg_task *t)
{
    if (!t)
        return;
    json_decref(t->request);
    json_decref(t->result);
    free(t->request_text);
    t->request = t->result = NULL;
    t->request_text = NULL;
}

static int check_id(const char *what, const char *id, kg_err *err)
{
    if (!id || !kg_task_id_valid(id))
        return kg_errf(err, KG_EINVAL,
                       "%s: use 1..100 characters of [A-Za-z0-9._:-]", what);
    return 0;
}

static int check_key(const char *key, kg_err *err)
{
    if (!key || strlen(key) != 64 || strspn(key, "0123456789abcdef") != 64)
        return kg_errf(err, KG_EINVAL,
                       "cache key: want 64 lowercase hex characters");
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kg_store_submit(kg_store *s, const kg_submit *t, kg_err *err)
{
    int created = 0;
    int rc = kg_store_submit_batch(s, t, 1, &created, err);
    return rc < 0 ? rc : created;
}

/* The checks of kg_store_submit_batch (n > 0). */
static int check_submissions(const kg_submit *t, size_t n, const int *created,
                             kg_err *err)
{
    int rc;
    if (!t || !created)
        return kg_errf(err, KG_EINVAL, "submit: no tasks");
    for (size_t i = 0; i < n; i++) {
        if ((rc = check_id("task id", t[i].id, err)) < 0)
            return rc;
        if (t[i].priority < 0 || t[i].priority >= KG_NPRIO)
            return kg_errf(err, KG_EINVAL, "task %s: bad priority %d", t[i].id,
                           t[i].priority);
        if (!json_is_object(t[i].request))
            return kg_errf(err, KG_EINVAL, "task %s: request is no object",
                           t[i].id);
        if (t[i].cache_key && t[i].cache_key[0] &&
            (rc = check_key(t[i].cache_key, err)) < 0)
            return rc;
    }
    if (n > 1) {
        /* distinct ids (a sorted copy) */
        const char **ids = malloc(n * sizeof *ids);
        if (!ids)
            return kg_errf(err, KG_ENOMEM, "submit: out of memory");
        for (size_t i = 0; i < n; i++)
            ids[i] = t[i].id;
        qsort(ids, n, sizeof *ids, cmp_str);
        for (size_t i = 1; i < n; i++)
            if (!strcmp(ids[i - 1], ids[i])) {
                rc = kg_errf(err, KG_EINVAL,
                             "submit: task id %s twice in one batch", ids[i]);
                free(ids);
                return rc;
            }
        free(ids);
    }
    return 0;
}

int kg_store_submit_batch(kg_store *s, const kg_submit *t, size_t n,
                          int *created, kg_err *err)
{
    int rc;
    if (n == 0)
        return 0;
    if ((rc = check_submissions(t, n, created, err)) < 0)
        return rc;
    return s->ops->submit_batch(s, t, n, created, err);
}

/* 1 when task i of a cached submission looks the cache up. */
static int wants_cache(const kg_submit *t)
{
    return t->cache_key && t->cache_key[0] && !t->replace_finished;
}

/*
 * kg_store_submit_batch_cached for a backend without its own: one
 * cache_get_many, a get per hit whose id the client may have used, then
 * one submit_batch for everything not answered from the cache.
 */
static int submit_cached_generic(kg_store *s, const kg_submit *t, size_t n,
                                 int *created, json_t **cached, kg_err *err)
{
    const char **keys = calloc(n, sizeof *keys);
    kg_submit *rest = calloc(n, sizeof *rest);
    size_t *which = calloc(n, sizeof *which);
    int *rc_rest = calloc(n, sizeof *rc_rest);
    int rc = 0;
    if (!keys || !rest || !which || !rc_rest) {
        rc = kg_errf(err, KG_ENOMEM, "submit: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = wants_cache(&t[i]) ? t[i].cache_key : NULL;
    if ((rc = kg_store_cache_get_many(s, keys, n, cached, err)) < 0)
        goto out;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (cached[i]) {
            kg_task task;
            memset(&task, 0, sizeof task);
            rc = s->ops->get(s, t[i].id, 0, &task, err);
            if (rc == KG_ENOTFOUND) {
                created[i] = 2;
                rc = 0;
                continue;
            }
            if (rc < 0)
                goto out;
            kg_task_free(&task);
            json_decref(cached[i]); /* exists: submitted as usual */
            cached[i] = NULL;
        }
        rest[m] = t[i];
        which[m++] = i;
    }
    if (m && (rc = s->ops->submit_batch(s, rest, m, rc_rest, err)) < 0)
        goto out;
    for (size_t j = 0; j < m; j++)
        created[which[j]] = rc_rest[j];
    rc = 0;
out:
    free(keys);
    free(rest);
    free(which);
    free(rc_rest);
    return rc;
}

/*
 * 1 when a cached result may answer a submission: it meets the result
 * contract (kg_result_check). An entry written before that check existed,
 * or put there by hand, is checked on every read and, failing, is a miss.
 */
static int cache_entry_ok(const char *key, const json_t *result)
{
    kg_err why;
    if (kg_result_check(result, &why) == 0)
        return 1;
    kg_warn("cache entry %.16s...: not served: %s", key ? key : "?",
            why.msg);
    return 0;
}

/*
 * A backend that looks the cache up itself (Redis, in one script) may
 * answer from an entry that fails the contract: such a hit is dropped and
 * its task submitted as if the cache had missed.
 */
static int resubmit_bad_hits(kg_store *s, const kg_submit *t, size_t n,
                             int *created, json_t **cached, kg_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (!cached[i] || cache_entry_ok(t[i].cache_key, cached[i]))
            continue;
        json_decref(cached[i]);
        cached[i] = NULL;
        int one = 0;
        int rc = s->ops->submit_batch(s, &t[i], 1, &one, err);
        if (rc < 0)
            return rc;
        created[i] = one;
    }
    return 0;
}

int kg_store_submit_batch_cached(kg_store *s, const kg_submit *t, size_t n,
                                 int *created, json_t **cached, kg_err *err)
{
    int rc;
    if (n == 0)
        return 0;
    if (!cached)
        return kg_errf(err, KG_EINVAL, "submit: no cached array");
    for (size_t i = 0; i < n; i++)
        cached[i] = NULL;
    if ((rc = check_submissions(t, n, created, err)) < 0)
        return rc;
    rc = s->ops->submit_batch_cached
             ? s->ops->submit_batch_cached(s, t, n, created, cached, err)
             : submit_cached_generic(s, t, n, created, cached, err);
    if (rc >= 0)
        rc = resubmit_bad_hits(s, t, n, created, cached, err);
    if (rc < 0)
        for (size_t i = 0; i < n; i++) {
            json_decref(cached[i]);
            cached[i] = NULL;
        }
    return rc;
}

int kg_store_submit_cached(kg_store *s, const kg_submit *t, json_t **cached,
                           kg_err *err)
{
    int created = 0;
    int rc = kg_store_submit_batch_cached(s, t, 1, &created, cached, err);
    return rc < 0 ? rc : created;
}

int kg_store_get(kg_store *s, const char *id, unsigned what, kg_task *out,
                 kg_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = check_id("task id", id, err)) < 0)
        return rc;
    return s->ops->get(s, id, what, out, err);
}

int kg_store_lease(kg_store *s, const char *worker_id, kg_task *out,
                   kg_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = check_id("worker id", worker_id, err)) < 0)
        return rc;
    return s->ops->lease(s, worker_id, KG_GET_REQUEST, out, err);
}

int kg_store_lease_text(kg_store *s, const char *worker_id, kg_task *out,
                        kg_err *err)
{
    int rc;
    memset(out, 0, sizeof *out);
    if ((rc = check_id("worker id", worker_id, err)) < 0)
        return rc;
    return s->ops->lease(s, worker_id, KG_GET_REQUEST_TEXT, out, err);
}

int kg_store_complete(kg_store *s, const char *id, const char *worker_id,
                      int status, const json_t *result, kg_err *err)
{
    int rc;
    if ((rc = check_id("task id", id, err)) < 0 ||
        (rc = check_id("worker id", worker_id, err)) < 0)
        return rc;
    if (status != KG_TASK_COMPLETED && status != KG_TASK_FAILED)
        return kg_errf(err, KG_EINVAL,
                       "complete: status must be completed or failed");
    if (!json_is_object(result))
        return kg_errf(err, KG_EINVAL, "complete: result is no object");
    const json_t *v = json_object_get(result, "verdict");
    int verdict =
        kg_verdict_parse(json_is_string(v) ? json_string_value(v) : NULL);
    return s->ops->complete(s, id, worker_id, status, result, verdict, err);
}

int kg_store_retry(kg_store *s, const char *id, const char *worker_id,
                   const json_t *result, int64_t avoid_ms, kg_err *err)
{
    int rc;
    if ((rc = check_id("task id", id, err)) < 0 ||
        (rc = check_id("worker id", worker_id, err)) < 0)
        return rc;
    if (result && !json_is_object(result))
        return kg_errf(err, KG_EINVAL, "retry: result is no object");
    if (avoid_ms < 0)
        avoid_ms = 0;
    return s->ops->retry(s, id, worker_id, result, avoid_ms, err);
}

int kg_store_cancel(kg_store *s, const char *id, kg_err *err)
{
    int rc;
    if ((rc = check_id("task id", id, err)) < 0)
        return rc;
    return s->ops->cancel(s, id, err);
}

int kg_store_requeue_expired(kg_store *s, int max_attempts,
                             kg_requeue_counts *out, kg_err *err)
{
    kg_requeue_counts c = {0, 0, 0};
    if (max_attempts < 1)
        return kg_errf(err, KG_EINVAL, "requeue: max_attempts must be >= 1");
    int rc = s->ops->requeue_expired(s, max_attempts, &c, err);
    if (out)
        *out = c;
    return rc;
}

int kg_store_cache_get(kg_store *s, const char *key, json_t **result,
                       kg_err *err)
{
    int rc;
    *result = NULL;
    if ((rc = check_key(key, err)) < 0)
        return rc;
    rc = s->ops->cache_get(s, key, result, err);
    if (rc > 0 && !cache_entry_ok(key, *result)) {
        json_decref(*result);
        *result = NULL;
        rc = 0;
    }
    return rc;
}

int kg_store_status_many(kg_store *s, const char *const *ids, size_t n,
                         int *status, kg_err *err)
{
    if (n && (!ids || !status))
        return kg_errf(err, KG_EINVAL, "status: no ids");
    for (size_t i = 0; i < n; i++) {
        status[i] = -1;
        if (!ids[i] || !kg_task_id_valid(ids[i]))
            return kg_errf(err, KG_EINVAL, "status: entry %zu is no task id",
                           i);
    }
    if (n == 0)
        return 0;
    if (s->ops->status_many)
        return s->ops->status_many(s, ids, n, status, err);
    for (size_t i = 0; i < n; i++) {
        kg_task t;
        int rc = s->ops->get(s, ids[i], 0, &t, err);
        if (rc == 0) {
            status[i] = t.status;
            kg_task_free(&t);
        } else if (rc != KG_ENOTFOUND) {
            return rc;
        }
    }
    return 0;
}

int kg_store_cache_get_many(kg_store *s, const char *const *keys, size_t n,
                            json_t **results, kg_err *err)
{
    int rc;
    if (n == 0)
        return 0;
    if (!keys || !results)
        return kg_errf(err, KG_EINVAL, "cache: no keys");
    for (size_t i = 0; i < n; i++)
        results[i] = NULL;
    for (size_t i = 0; i < n; i++)
        if (keys[i] && (rc = check_key(keys[i], err)) < 0)
            return rc;
    rc = s->ops->cache_get_many(s, keys, n, results, err);
    for (size_t i = 0; i < n; i++)
        if (results[i] && (rc < 0 || !cache_entry_ok(keys[i], results[i]))) {
            json_decref(results[i]);
            results[i] = NULL;
            if (rc > 0)
                rc--; /* a hit no more */
        }
    return rc;
}

int kg_store_cache_put(kg_store *s, const char *key, const json_t *result,
                       kg_err *err)
{
    int rc;
    if ((rc = check_key(key, err)) < 0)
        return rc;
    if (!json_is_object(result))
        return kg_errf(err, KG_EINVAL, "cache: result is no object");
    kg_err why;
    if (kg_result_check(result, &why) < 0)
        return kg_errf(err, KG_EINVAL, "cache: result refused: %s", why.msg);
    return s->ops->cache_put(s, key, result, err);
}

int kg_store_counts_get(kg_store *s, kg_store_counts *out, kg_err *err)
{
    memset(out, 0, sizeof *out);
    return s->ops->counts(s, out, err);
}

int kg_store_worker_register(kg_store *s, const char *id, const char *device,
                             const char *host, kg_err *err)
{
    int rc;
    if ((rc = check_id("worker id", id, err)) < 0)
        return rc;
    if (!device || !*device || strlen(device) > KG_MAX_DEVICE)
        return kg_errf(err, KG_EINVAL, "device: 1..%d characters",
                       KG_MAX_DEVICE);
    if (!host || !*host || strlen(host) > KG_MAX_HOST)
        return kg_errf(err, KG_EINVAL, "host: 1..%d characters", KG_MAX_HOST);
    if (strchr(device, '\t') || strchr(host, '\t'))
        return kg_errf(err, KG_EINVAL, "device and host: no tab characters");
    /* A registration starts a new session of this id: what an earlier
     * process of the same id still holds goes back to the queue now.
     * Otherwise the new process's heartbeats would keep the dead one's
     * leases alive and those tasks would never run. */
    kg_err e2;
    rc = s->ops->worker_unregister(s, id, &e2);
    if (rc < 0 && rc != KG_ENOTFOUND) {
        if (err)
            *err = e2;
        return rc;
    }
    return s->ops->worker_register(s, id, device, host, err);
}

int kg_store_worker_heartbeat(kg_store *s, const char *id, int *running,
                              kg_err *err)
{
    int rc, n = 0;
    if ((rc = check_id("worker id", id, err)) < 0)
        return rc;
    rc = s->ops->worker_heartbeat(s, id, &n, err);
    if (running)
        *running = n;
    return rc;
}

int kg_store_worker_unregister(kg_store *s, const char *id, kg_err *err)
{
    int rc;
    if ((rc = check_id("worker id", id, err)) < 0)
        return rc;
    return s->ops->worker_unregister(s, id, err);
}

int kg_store_worker_list(kg_store *s, kg_worker **out, size_t *n, kg_err *err)
{
    *out = NULL;
    *n = 0;
    return s->ops->worker_list(s, out, n, err);
}

int kg_store_worker_secret_set(kg_store *s, const char *id, const char *digest,
                               kg_err *err)
{
    int rc;
    if ((rc = check_id("worker id", id, err)) < 0 ||
        (rc = check_key(digest, err)) < 0)
        return rc;
    return s->ops->worker_secret_set(s, id, digest, err);
}

int kg_store_worker_secret_get(kg_store *s, const char *id, char digest[65],
                               kg_err *err)
{
    int rc;
    digest[0] = 0;
    if ((rc = check_id("worker id", id, err)) < 0)
        return rc;
    rc = s->ops->worker_secret_get(s, id, digest, err);
    /* only a well-formed digest counts as one */
    if (rc > 0 && check_key(digest, NULL) < 0) {
        digest[0] = 0;
        rc = 0;
    }
    return rc;
}
