/*
 * store_redis_workers.c - the Redis store's workers: register (one live
 * worker per host and device), heartbeat, unregister and list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_redis.h"

int rd__worker_register(kg_store *base, const char *id, const char *device,
                        const char *host, kg_err *err)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    const char *av[] = {id, device, host, ttl};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_REGISTER, 4, av, NULL, &code, err);
    if (r)
        freeReplyObject(r);
    return code;
}

int rd__worker_heartbeat(kg_store *base, const char *id, int *running,
                         kg_err *err)
{
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)base->opts.lease_ms);
    const char *av[] = {id, lease};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_HEARTBEAT, 2, av, NULL, &code, err);
    if (r) {
        *running = (int)rd__num(r); /* the entries its consumer holds */
        freeReplyObject(r);
    }
    return code;
}

int rd__worker_unregister(kg_store *base, const char *id, kg_err *err)
{
    const char *av[] = {id};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_UNREGISTER, 1, av, NULL, &code, err);
    if (r)
        freeReplyObject(r);
    return code;
}

static int cmp_worker(const void *a, const void *b)
{
    return strcmp(((const kg_worker *)a)->id, ((const kg_worker *)b)->id);
}

int rd__worker_list(kg_store *base, kg_worker **out, size_t *n, kg_err *err)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    const char *av[] = {ttl};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_WLIST, 1, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        (r->elements - 1) % 6) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected workers reply");
    }
    int64_t now = rd__num(r->element[0]);
    size_t cnt = (r->elements - 1) / 6;
    kg_worker *v = cnt ? calloc(cnt, sizeof *v) : NULL;
    if (cnt && !v) {
        freeReplyObject(r);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cnt; i++) {
        redisReply **e = r->element + 1 + 6 * i;
        rd__str(v[i].id, sizeof v[i].id, e[0]);
        rd__str(v[i].device, sizeof v[i].device, e[1]);
        rd__str(v[i].host, sizeof v[i].host, e[2]);
        v[i].registered_ms = rd__num(e[3]);
        v[i].last_seen_ms = rd__num(e[4]);
        v[i].running = (int)rd__num(e[5]);
        v[i].alive = v[i].last_seen_ms > now - base->opts.worker_ttl_ms;
    }
    freeReplyObject(r);
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, cmp_worker);
    *out = v;
    *n = cnt;
    return 0;
}

/* kg:ws:<id>: the digest of the worker's secret (plain SET/GET; no TTL:
 * a registration overwrites it) */
int rd__worker_secret_set(kg_store *base, const char *id, const char *digest,
                          kg_err *err)
{
    char k[16 + KG_MAX_WORKER_ID];
    snprintf(k, sizeof k, "kg:ws:%s", id);
    const char *av[] = {"SET", k, digest};
    int code;
    redisReply *r = rd__plain((rd_store *)base, 3, av, NULL, &code, err);
    if (r)
        freeReplyObject(r);
    return code < 0 ? code : 0;
}

int rd__worker_secret_get(kg_store *base, const char *id, char digest[65],
                          kg_err *err)
{
    char k[16 + KG_MAX_WORKER_ID];
    snprintf(k, sizeof k, "kg:ws:%s", id);
    const char *av[] = {"GET", k};
    int code;
    redisReply *r = rd__plain((rd_store *)base, 2, av, NULL, &code, err);
    if (!r)
        return code;
    code = 0;
    if (r->type == REDIS_REPLY_STRING && r->len == 64) {
        memcpy(digest, r->str, 64);
        digest[64] = 0;
        code = 1;
    }
    freeReplyObject(r);
    return code;
}
