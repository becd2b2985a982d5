/*
 * store_redis_tasks.c - the Redis store's task calls: submit (plain and
 * cached), get, lease, complete, retry, cancel and the sweep of expired
 * leases, each one script (store_redis_lua.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_redis.h"

/*
 * Both submissions in one script: cached NULL for kg_store_submit_batch
 * (no lookups), else kg_store_submit_batch_cached's array.
 */
static int rd_submit(rd_store *s, const kg_submit *t, size_t n, int *created,
                     json_t **cached, kg_err *err)
{
    size_t argc = 1 + 6 * n;
    const char **av = calloc(argc, sizeof *av);
    size_t *lv = calloc(argc, sizeof *lv);
    char **texts = calloc(n, sizeof *texts);
    char cnt[24], prio[KG_NPRIO][16];
    int code = 0;
    if (!av || !lv || !texts) {
        code = kg_errf(err, KG_ENOMEM, "out of memory");
        goto out;
    }
    for (int p = 0; p < KG_NPRIO; p++)
        snprintf(prio[p], sizeof prio[p], "%d", p);
    snprintf(cnt, sizeof cnt, "%zu", n);
    av[0] = cnt;
    lv[0] = strlen(cnt);
    for (size_t i = 0; i < n; i++) {
        if (!(texts[i] = kg_store_json_text(t[i].request))) {
            code = kg_errf(err, KG_ENOMEM, "out of memory");
            goto out;
        }
        const char *ck = t[i].cache_key ? t[i].cache_key : "";
        int uc = cached && ck[0] && !t[i].replace_finished;
        const char *v[6] = {t[i].id,
                            prio[t[i].priority],
                            ck,
                            texts[i],
                            t[i].replace_finished ? "1" : "0",
                            uc ? "1" : "0"};
        for (int k = 0; k < 6; k++) {
            av[1 + 6 * i + (size_t)k] = v[k];
            lv[1 + 6 * i + (size_t)k] = strlen(v[k]);
        }
    }
    redisReply *r = rd__run(s, SC_SUBMIT, (int)argc, av, lv, &code, err);
    if (r) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == n) {
            for (size_t i = 0; i < n; i++) {
                const redisReply *e = r->element[i];
                if (cached && e->type == REDIS_REPLY_STRING) {
                    created[i] = 2;
                    if (!(cached[i] = kg_store_json_parse(e->str, e->len))) {
                        code =
                            kg_errf(err, KG_EPARSE, "cache entry is corrupt");
                        break;
                    }
                } else {
                    created[i] = (int)rd__num(e);
                }
            }
        } else {
            code = kg_errf(err, KG_EIO, "redis: unexpected submit reply");
        }
        freeReplyObject(r);
    }
out:
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(av);
    free(lv);
    return code;
}

int rd__submit_batch(kg_store *base, const kg_submit *t, size_t n, int *created,
                     kg_err *err)
{
    return rd_submit((rd_store *)base, t, n, created, NULL, err);
}

int rd__submit_batch_cached(kg_store *base, const kg_submit *t, size_t n,
                            int *created, json_t **cached, kg_err *err)
{
    return rd_submit((rd_store *)base, t, n, created, cached, err);
}

static const char *const GET_FIELDS[] = {"prio", "status", "ck",  "att",
                                         "w",    "avoid",  "sub", "start",
                                         "fin",  "dl",     "req", "res"};

int rd__get(kg_store *base, const char *id, unsigned what, kg_task *out,
            kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char key[16 + KG_MAX_TASK_ID];
    snprintf(key, sizeof key, "kg:t:%.*s", KG_MAX_TASK_ID, id);
    const char *av[2 + 12];
    int argc = 2;
    av[0] = "HMGET";
    av[1] = key;
    for (int i = 0; i < 10; i++)
        av[argc++] = GET_FIELDS[i];
    av[argc++] = what & KG_GET_REQUEST ? "req" : "-";
    av[argc++] = what & KG_GET_RESULT ? "res" : "-";
    int code;
    redisReply *r = rd__plain(s, argc, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 12) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected reply");
    }
    redisReply **e = r->element;
    if (e[1]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return kg_errf(err, KG_ENOTFOUND, "no task %s", id);
    }
    snprintf(out->id, sizeof out->id, "%s", id);
    out->priority = (int)rd__num(e[0]);
    out->status = (int)rd__num(e[1]);
    rd__str(out->cache_key, sizeof out->cache_key, e[2]);
    out->attempts = (int)rd__num(e[3]);
    rd__str(out->worker, sizeof out->worker, e[4]);
    rd__str(out->avoid_worker, sizeof out->avoid_worker, e[5]);
    out->submitted_ms = rd__num(e[6]);
    out->started_ms = rd__num(e[7]);
    out->finished_ms = rd__num(e[8]);
    out->lease_deadline_ms = rd__num(e[9]);
    code = rd__set_json(&out->request, e[10], id, "request", err);
    if (code == 0)
        code = rd__set_json(&out->result, e[11], id, "result", err);
    if (code < 0)
        kg_task_free(out);
    freeReplyObject(r);
    return code;
}

/* Every task's status in one script (one round trip). */
int rd__status_many(kg_store *base, const char *const *ids, size_t n,
                    int *status, kg_err *err)
{
    if (n > INT32_MAX)
        return kg_errf(err, KG_EINVAL, "status: too many ids");
    int code;
    redisReply *r = rd__run((rd_store *)base, SC_STATUS, (int)n,
                            (const char **)ids, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected reply");
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v = rd__num(r->element[i]);
        status[i] = v >= 0 && v < KG_NSTATUS ? (int)v : -1;
    }
    freeReplyObject(r);
    return 0;
}

int rd__lease(kg_store *base, const char *worker_id, unsigned what,
              kg_task *out, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)base->opts.lease_ms);
    const char *av[] = {worker_id, lease};
    int code;
    redisReply *r = rd__run(s, SC_LEASE, 2, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return 0;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 9) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected lease reply");
    }
    redisReply **e = r->element;
    rd__str(out->id, sizeof out->id, e[0]);
    out->priority = (int)rd__num(e[1]);
    out->status = KG_TASK_RUNNING;
    rd__str(out->cache_key, sizeof out->cache_key, e[2]);
    out->attempts = (int)rd__num(e[3]);
    snprintf(out->worker, sizeof out->worker, "%s", worker_id);
    rd__str(out->avoid_worker, sizeof out->avoid_worker, e[4]);
    out->submitted_ms = rd__num(e[5]);
    out->started_ms = rd__num(e[6]);
    out->lease_deadline_ms = rd__num(e[7]);
    if (what & KG_GET_REQUEST_TEXT) {
        code = 0;
        if (e[8]->type == REDIS_REPLY_STRING &&
            !(out->request_text = strndup(e[8]->str, e[8]->len)))
            code = kg_errf(err, KG_ENOMEM, "out of memory");
    } else {
        code = rd__set_json(&out->request, e[8], out->id, "request", err);
    }
    freeReplyObject(r);
    return code < 0 ? code : 1;
}

/* The message of an ESTATE reply from complete/retry. */
static int held_err(int code, const char *id, const char *worker_id,
                    kg_err *err)
{
    if (code == KG_ESTATE) {
        int st = err ? atoi(err->msg) : -1;
        return kg_errf(err, KG_ESTATE,
                       "task %s is %s and not held by worker %s", id,
                       kg_task_status_name(st), worker_id);
    }
    return code;
}

int rd__complete(kg_store *base, const char *id, const char *worker_id,
                 int status, const json_t *result, int verdict, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char *res = kg_store_json_text(result);
    if (!res)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char st[8], v[8];
    snprintf(st, sizeof st, "%d", status);
    snprintf(v, sizeof v, "%d", verdict);
    const char *av[] = {id, worker_id, st, res, v};
    int code;
    redisReply *r = rd__run(s, SC_COMPLETE, 5, av, NULL, &code, err);
    free(res);
    if (r)
        freeReplyObject(r);
    return held_err(code, id, worker_id, err);
}

int rd__retry(kg_store *base, const char *id, const char *worker_id,
              const json_t *result, int64_t avoid_ms, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char *res = result ? kg_store_json_text(result) : NULL;
    if (result && !res)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char avoid[24];
    snprintf(avoid, sizeof avoid, "%lld", (long long)avoid_ms);
    const char *av[] = {id, worker_id, res ? res : "", avoid};
    int code;
    redisReply *r = rd__run(s, SC_RETRY, 4, av, NULL, &code, err);
    free(res);
    if (r)
        freeReplyObject(r);
    return held_err(code, id, worker_id, err);
}

int rd__cancel(kg_store *base, const char *id, kg_err *err)
{
    const char *av[] = {id};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_CANCEL, 1, av, NULL, &code, err);
    if (!r)
        return code;
    code = (int)rd__num(r);
    freeReplyObject(r);
    return code;
}

int rd__requeue_expired(kg_store *base, int max_attempts,
                        kg_requeue_counts *out, kg_err *err)
{
    char lease[24], ttl[24], max[16];
    snprintf(lease, sizeof lease, "%lld", (long long)base->opts.lease_ms);
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    snprintf(max, sizeof max, "%d", max_attempts);
    const char *av[] = {lease, ttl, max};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_SWEEP, 3, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        out->requeued = (int)rd__num(r->element[0]);
        out->failed = (int)rd__num(r->element[1]);
        out->dead_workers = (int)rd__num(r->element[2]);
    } else {
        code = kg_errf(err, KG_EIO, "redis: unexpected sweep reply");
    }
    freeReplyObject(r);
    return code;
}
