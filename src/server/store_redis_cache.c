/*
 * store_redis_cache.c - the Redis store's result cache (get, get many,
 * put; kg:c:<key>) and the metrics counts (kg:stats, workers alive).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_redis.h"

int rd__cache_get(kg_store *base, const char *key, json_t **result, kg_err *err)
{
    char k[80];
    snprintf(k, sizeof k, "kg:c:%s", key);
    const char *av[] = {"GET", k};
    int code;
    redisReply *r = rd__plain((rd_store *)base, 2, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type == REDIS_REPLY_STRING) {
        *result = kg_store_json_parse(r->str, r->len);
        code = *result ? 1 : kg_errf(err, KG_EPARSE, "cache entry is corrupt");
    }
    freeReplyObject(r);
    return code;
}

/* Every key in one MGET (one round trip for a whole batch). */
int rd__cache_get_many(kg_store *base, const char *const *keys, size_t n,
                       json_t **results, kg_err *err)
{
    const char **av = calloc(n + 1, sizeof *av);
    char (*k)[80] = calloc(n, sizeof *k);
    size_t *at = calloc(n, sizeof *at), m = 0;
    int code = 0, hits = 0;
    if (!av || !k || !at) {
        code = kg_errf(err, KG_ENOMEM, "out of memory");
        goto out;
    }
    av[0] = "MGET";
    for (size_t i = 0; i < n; i++)
        if (keys[i]) {
            snprintf(k[m], sizeof k[m], "kg:c:%s", keys[i]);
            av[1 + m] = k[m];
            at[m++] = i;
        }
    if (m == 0)
        goto out;
    redisReply *r =
        rd__plain((rd_store *)base, (int)(m + 1), av, NULL, &code, err);
    if (!r)
        goto out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != m) {
        code = kg_errf(err, KG_EIO, "redis: unexpected MGET reply");
    } else {
        for (size_t j = 0; j < m && code == 0; j++) {
            redisReply *e = r->element[j];
            if (e->type != REDIS_REPLY_STRING)
                continue;
            results[at[j]] = kg_store_json_parse(e->str, e->len);
            if (!results[at[j]])
                code = kg_errf(err, KG_EPARSE, "cache entry is corrupt");
            else
                hits++;
        }
    }
    freeReplyObject(r);
out:
    free(av);
    free(k);
    free(at);
    return code < 0 ? code : hits;
}

int rd__cache_put(kg_store *base, const char *key, const json_t *result,
                  kg_err *err)
{
    char k[80];
    snprintf(k, sizeof k, "kg:c:%s", key);
    char *text = kg_store_json_text(result);
    if (!text)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    const char *av[] = {"SET", k, text};
    int code;
    redisReply *r = rd__plain((rd_store *)base, 3, av, NULL, &code, err);
    free(text);
    if (r)
        freeReplyObject(r);
    return code;
}

int rd__counts(kg_store *base, kg_store_counts *out, kg_err *err)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", (long long)base->opts.worker_ttl_ms);
    const char *av[] = {ttl};
    int code;
    redisReply *r =
        rd__run((rd_store *)base, SC_COUNTS, 1, av, NULL, &code, err);
    if (!r)
        return code;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        freeReplyObject(r);
        return kg_errf(err, KG_EIO, "redis: unexpected counts reply");
    }
    out->workers_alive = rd__num(r->element[0]);
    out->workers_dead = rd__num(r->element[1]) - out->workers_alive;
    for (size_t i = 2; i + 1 < r->elements; i += 2) {
        char name[64];
        rd__str(name, sizeof name, r->element[i]);
        long long v = rd__num(r->element[i + 1]);
        int k = name[0] && name[1] ? atoi(name + 1) : -1;
        if (name[0] == 's' && k >= 0 && k < KG_NSTATUS && name[1] != 't')
            out->by_status[k] = v;
        else if (name[0] == 'p' && k >= 0 && k < KG_NPRIO)
            out->pending[k] = v;
        else if (name[0] == 'v' && k >= 0 && k < KG_NVERDICT)
            out->by_verdict[k] = v;
        else if (!strcmp(name, "lease_expiries"))
            out->lease_expiries = v;
    }
    freeReplyObject(r);
    return 0;
}
