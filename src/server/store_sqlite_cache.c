/*
 * store_sqlite_cache.c - the SQLite store's result cache (get, get many,
 * put) and the metrics counts (the counters table, workers alive/dead).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_sqlite.h"

/* ---- result cache ------------------------------------------------------ */

struct cache_args {
    const char *key;
    const json_t *put;
    json_t **got;
};

static int r_cache_get(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct cache_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_CACHE_GET, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->key);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r;
    *a->got = kg_store_json_parse((const char *)sqlite3_column_text(st, 0),
                                  (size_t)sqlite3_column_bytes(st, 0));
    sqlite3_reset(st);
    return *a->got ? 1 : kg_errf(err, KG_EPARSE, "cache entry is corrupt");
}

int sq__cache_get(kg_store *base, const char *key, json_t **result, kg_err *err)
{
    struct cache_args a = {key, NULL, result};
    return kg_sqldb_read(((sq_store *)base)->db, r_cache_get, &a, err);
}

struct cache_many_args {
    const char *const *keys;
    size_t n;
    json_t **results;
};

/* Every key in one read transaction: one snapshot, one lock round. */
static int r_cache_many(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct cache_many_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_READ_BEGIN, err);
    int rc = st ? kg_sqlconn_exec(c, st, err) : KG_EIO, hits = 0;
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        if (!a->keys[i])
            continue;
        struct cache_args one = {a->keys[i], NULL, &a->results[i]};
        int r = r_cache_get(c, &one, err);
        if (r < 0)
            rc = r;
        hits += r > 0;
    }
    if ((st = kg_sqlconn_stmt(c, ST_READ_END, rc < 0 ? NULL : err)) != NULL) {
        int r = kg_sqlconn_exec(c, st, rc < 0 ? NULL : err);
        if (rc == 0)
            rc = r;
    }
    return rc < 0 ? rc : hits;
}

int sq__cache_get_many(kg_store *base, const char *const *keys, size_t n,
                       json_t **results, kg_err *err)
{
    struct cache_many_args a = {keys, n, results};
    return kg_sqldb_read(((sq_store *)base)->db, r_cache_many, &a, err);
}

static int w_cache_put(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct cache_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_CACHE_PUT, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->key);
    sqlite3_bind_int64(st, 3, kg_store_now_ms());
    int rc = sq__bind_json(st, 2, a->put, err);
    return rc < 0 ? rc : kg_sqlconn_exec(c, st, err);
}

int sq__cache_put(kg_store *base, const char *key, const json_t *result,
                  kg_err *err)
{
    struct cache_args a = {key, result, NULL};
    return kg_sqldb_write(((sq_store *)base)->db, w_cache_put, &a, err);
}

/* ---- metrics ----------------------------------------------------------- */

struct counts_args {
    int64_t alive_after;
    kg_store_counts *out;
};

static void count_row(kg_store_counts *out, const char *name, long long v)
{
    int i = name[0] && name[1] ? atoi(name + 1) : -1;
    if (name[0] == 's' && i >= 0 && i < KG_NSTATUS)
        out->by_status[i] = v;
    else if (name[0] == 'p' && i >= 0 && i < KG_NPRIO)
        out->pending[i] = v;
    else if (name[0] == 'v' && i >= 0 && i < KG_NVERDICT)
        out->by_verdict[i] = v;
    else if (!strcmp(name, "lease_expiries"))
        out->lease_expiries = v;
}

static int r_counts(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct counts_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_COUNTS, err);
    if (!st)
        return KG_EIO;
    int r;
    while ((r = kg_sqlconn_row(c, st, err)) == 1) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (name)
            count_row(a->out, name, sqlite3_column_int64(st, 1));
    }
    if (r < 0)
        return r;
    if (!(st = kg_sqlconn_stmt(c, ST_WORKER_COUNTS, err)))
        return KG_EIO;
    sqlite3_bind_int64(st, 1, a->alive_after);
    if ((r = kg_sqlconn_row(c, st, err)) <= 0)
        return r < 0 ? r : kg_errf(err, KG_EIO, "sqlite counts: no row");
    a->out->workers_alive = sqlite3_column_int64(st, 0);
    a->out->workers_dead = sqlite3_column_int64(st, 1);
    sqlite3_reset(st);
    return 0;
}

int sq__counts(kg_store *base, kg_store_counts *out, kg_err *err)
{
    struct counts_args a = {kg_store_now_ms() - base->opts.worker_ttl_ms, out};
    return kg_sqldb_read(((sq_store *)base)->db, r_counts, &a, err);
}
