/*
 * store_redis.c - the task store on Redis (>= 6.2), for workers on several
 * machines; this file holds its handle: open, describe, close and the
 * vtable. The others: store_redis_lua.c (the scripts),
 * store_redis_conn.c (connection pool, running scripts, replies),
 * store_redis_tasks.c (submit, get, lease, complete, retry, cancel,
 * sweep), store_redis_cache.c (result cache, counts),
 * store_redis_workers.c (workers).
 *
 * Layout (keys under "kg:"; one logical DB per kgym installation):
 *   kg:q:0 kg:q:1 kg:q:2  one stream per priority (high, normal, low);
 *                         entry {id}; consumer group "kg"; consumers are
 *                         worker ids, plus "kg-sweep" (the sweep's claims)
 *                         and "kg-parked" (retried tasks whose avoided
 *                         worker read them first)
 *   kg:t:<id>             hash: the task (prio status ck req res att w avoid
 *                         avoid_until sub start fin dl entry verdict)
 *   kg:stats              hash: counters s<status> p<prio> v<verdict>
 *                         lease_expiries, kept by the scripts below
 *   kg:w:<id>             hash: a worker (device host reg seen)
 *   kg:workers            zset: worker id -> last heartbeat (ms)
 *   kg:dev                hash: "host\tdevice" -> worker id
 *   kg:c:<key>            string: cached result
 *   kg:sweepcur:<prio>    string: where the sweep's XAUTOCLAIM goes on
 *
 * Reliable-queue primitives do the queueing: a lease is XREADGROUP (new
 * work enters the worker's pending entries list), a heartbeat is XCLAIM of
 * the worker's own entries (resets their idle time), expiry is XAUTOCLAIM
 * with min-idle-time = lease_ms by the sweep, completion is XACK (+ XDEL).
 * Every operation is one Lua script, so it is atomic and one round trip;
 * the task hash says whether a stream entry is still current (`entry`),
 * which makes stale entries (cancelled, requeued) harmless.
 *
 * Time is Redis's (TIME), so all servers sharing the Redis agree.
 * Durability is the server's AOF: with appendfsync always a reply means
 * the write is on disk. Standalone Redis only (scripts touch keys they do
 * not declare, which Redis Cluster forbids).
 *
 * Connections: a pool of hiredis contexts (hiredis is not thread-safe),
 * each used by one call at a time; connect and command timeouts of 1 s; a
 * broken connection is dropped and made again on a later call, so the
 * store recovers by itself when Redis comes back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_redis.h"

static int rd_describe(kg_store *base, char *buf, size_t size, kg_err *err)
{
    rd_store *s = (rd_store *)base;
    char ver[32] = "?", aof[16] = "?", fsync[16] = "?";
    const char *info[] = {"INFO", "server"};
    int code;
    redisReply *r = rd__plain(s, 2, info, NULL, &code, err);
    if (!r)
        return code;
    const char *p = r->str ? strstr(r->str, "redis_version:") : NULL;
    if (p)
        sscanf(p + 14, "%31[^\r\n]", ver);
    freeReplyObject(r);
    const char *cfg[] = {"CONFIG", "GET", "append*"};
    r = rd__plain(s, 3, cfg, NULL, &code, NULL); /* CONFIG may be disabled */
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            if (!r->element[i]->str || !r->element[i + 1]->str)
                continue;
            if (!strcmp(r->element[i]->str, "appendonly"))
                snprintf(aof, sizeof aof, "%s", r->element[i + 1]->str);
            else if (!strcmp(r->element[i]->str, "appendfsync"))
                snprintf(fsync, sizeof fsync, "%s", r->element[i + 1]->str);
        }
    if (r)
        freeReplyObject(r);
    snprintf(buf, size,
             "redis %s:%d/%d, redis %s, appendonly=%s appendfsync=%s%s",
             s->host, s->port, s->db, ver, aof, fsync,
             strcmp(aof, "yes") ? " (WARNING: without AOF a crash of Redis "
                                  "loses accepted tasks)"
                                : "");
    return 0;
}

static void rd_close(kg_store *base)
{
    rd_store *s = (rd_store *)base;
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i].c)
            redisFree(s->conns[i].c);
    free(s->conns);
    free(s->idle);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static const struct kg_store_ops REDIS_OPS = {
    .name = "redis",
    .close = rd_close,
    .describe = rd_describe,
    .submit_batch = rd__submit_batch,
    .submit_batch_cached = rd__submit_batch_cached,
    .get = rd__get,
    .status_many = rd__status_many,
    .lease = rd__lease,
    .complete = rd__complete,
    .retry = rd__retry,
    .cancel = rd__cancel,
    .requeue_expired = rd__requeue_expired,
    .cache_get = rd__cache_get,
    .cache_put = rd__cache_put,
    .cache_get_many = rd__cache_get_many,
    .counts = rd__counts,
    .worker_register = rd__worker_register,
    .worker_heartbeat = rd__worker_heartbeat,
    .worker_unregister = rd__worker_unregister,
    .worker_list = rd__worker_list,
    .worker_secret_set = rd__worker_secret_set,
    .worker_secret_get = rd__worker_secret_get,
};

int kg_store_redis_open(kg_store **out, const char *host, int port, int db,
                        const kg_store_opts *opts, kg_err *err)
{
    *out = NULL;
    rd_store *s = calloc(1, sizeof *s);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    s->base.ops = &REDIS_OPS;
    s->base.opts = *opts;
    snprintf(s->host, sizeof s->host, "%s", host);
    s->port = port;
    s->db = db;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->conns = calloc((size_t)opts->pool_size, sizeof *s->conns);
    s->idle = calloc((size_t)opts->pool_size, sizeof *s->idle);
    if (!s->conns || !s->idle) {
        rd_close(&s->base);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    s->nconns = opts->pool_size;
    for (int i = s->nconns - 1; i >= 0; i--)
        s->idle[s->nidle++] = i;
    /* one connection now: an unreachable server fails the open */
    int rc = rd__connect(s, &s->conns[0], err);
    if (rc < 0) {
        rd_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
