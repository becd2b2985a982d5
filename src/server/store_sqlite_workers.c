/*
 * store_sqlite_workers.c - the SQLite store's workers: register (one live
 * worker per host and device), heartbeat (extends its leases), unregister
 * (requeues what it held) and list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_sqlite.h"

/* ---- workers ----------------------------------------------------------- */

struct worker_args {
    sq_store *s;
    const char *id, *device, *host;
    int64_t now, alive_after, lease_ms;
    kg_worker *list;
    size_t n;
    int running; /* w_heartbeat: the leases it extended */
};

static int w_register(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct worker_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_DEV_OWNER, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    sq__bind_str(st, 2, a->host);
    sq__bind_str(st, 3, a->device);
    sqlite3_bind_int64(st, 4, a->alive_after);
    int r = kg_sqlconn_row(c, st, err);
    if (r < 0)
        return r;
    if (r == 1) {
        int rc = kg_errf(
            err, KG_ESTATE, "device %s on host %s is held by live worker %s",
            a->device, a->host, (const char *)sqlite3_column_text(st, 0));
        sqlite3_reset(st);
        return rc;
    }
    /* a dead worker's claim is taken over; the sweep requeues its tasks */
    for (int which = ST_DEV_DROP; which <= ST_WORKER_UPSERT; which++) {
        if (!(st = kg_sqlconn_stmt(c, which, err)))
            return KG_EIO;
        sq__bind_str(st, 1, a->id);
        sq__bind_str(st, 2, a->host);
        sq__bind_str(st, 3, a->device);
        if (which == ST_WORKER_UPSERT)
            sqlite3_bind_int64(st, 4, a->now);
        if ((r = kg_sqlconn_exec(c, st, err)) < 0)
            return r;
    }
    return 0;
}

int sq__worker_register(kg_store *base, const char *id, const char *device,
                        const char *host, kg_err *err)
{
    int64_t now = kg_store_now_ms();
    struct worker_args a = {.id = id,
                            .device = device,
                            .host = host,
                            .now = now,
                            .alive_after = now - base->opts.worker_ttl_ms};
    return kg_sqldb_write(((sq_store *)base)->db, w_register, &a, err);
}

static int w_heartbeat(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct worker_args *a = arg;
    int rc = sq__touch_worker(c, a->id, a->now, err);
    if (rc < 0)
        return rc;
    rc = sq__exec_id_int(c, ST_EXTEND, a->id, a->now + a->lease_ms, err);
    /* every running task it holds: the count kg_store_worker_list gives */
    a->running = rc < 0 ? 0 : kg_sqlconn_changes(c);
    return rc;
}

int sq__worker_heartbeat(kg_store *base, const char *id, int *running,
                         kg_err *err)
{
    struct worker_args a = {
        .id = id, .now = kg_store_now_ms(), .lease_ms = base->opts.lease_ms};
    int rc = kg_sqldb_write(((sq_store *)base)->db, w_heartbeat, &a, err);
    *running = a.running;
    return rc;
}

static int w_unregister(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct worker_args *a = arg;
    int rc = sq__exec_id(c, ST_WORKER_DEL, a->id, NULL, err);
    if (rc < 0)
        return rc;
    if (kg_sqlconn_changes(c) == 0)
        return kg_errf(err, KG_ENOTFOUND, "worker %s is not registered", a->id);
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_HELD, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    char (*held)[KG_MAX_TASK_ID + 1] = NULL;
    size_t n = 0;
    if ((rc = sq__collect_ids(c, st, &held, &n, err)) < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = sq__requeue(c, a->s, held[i], err);
    free(held);
    return rc;
}

int sq__worker_unregister(kg_store *base, const char *id, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    struct worker_args a = {.s = s, .id = id};
    return kg_sqldb_write(s->db, w_unregister, &a, err);
}

static int r_worker_list(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct worker_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_WORKER_LIST, err);
    if (!st)
        return KG_EIO;
    size_t cap = 0;
    int r;
    while ((r = kg_sqlconn_row(c, st, err)) == 1) {
        if (a->n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            kg_worker *nv = realloc(a->list, nc * sizeof *nv);
            if (!nv) {
                sqlite3_reset(st);
                return kg_errf(err, KG_ENOMEM, "out of memory");
            }
            a->list = nv;
            cap = nc;
        }
        kg_worker *w = &a->list[a->n++];
        memset(w, 0, sizeof *w);
        sq__copy_col(w->id, sizeof w->id, st, 0);
        sq__copy_col(w->device, sizeof w->device, st, 1);
        sq__copy_col(w->host, sizeof w->host, st, 2);
        w->registered_ms = sqlite3_column_int64(st, 3);
        w->last_seen_ms = sqlite3_column_int64(st, 4);
        w->alive = w->last_seen_ms > a->alive_after;
        w->running = sqlite3_column_int(st, 5);
    }
    return r;
}

int sq__worker_list(kg_store *base, kg_worker **out, size_t *n, kg_err *err)
{
    struct worker_args a = {.alive_after =
                                kg_store_now_ms() - base->opts.worker_ttl_ms};
    int rc = kg_sqldb_read(((sq_store *)base)->db, r_worker_list, &a, err);
    if (rc < 0) {
        free(a.list);
        return rc;
    }
    *out = a.list;
    *n = a.n;
    return 0;
}

/* ---- worker secrets ---------------------------------------------------- */

struct secret_args {
    const char *id, *put;
    char *got; /* 65 bytes */
};

static int w_secret_set(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct secret_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_SECRET_SET, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    sq__bind_str(st, 2, a->put);
    return kg_sqlconn_exec(c, st, err);
}

int sq__worker_secret_set(kg_store *base, const char *id, const char *digest,
                          kg_err *err)
{
    struct secret_args a = {id, digest, NULL};
    int rc = kg_sqldb_write(((sq_store *)base)->db, w_secret_set, &a, err);
    return rc < 0 ? rc : 0;
}

static int r_secret_get(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct secret_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_SECRET_GET, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r;
    const char *d = (const char *)sqlite3_column_text(st, 0);
    snprintf(a->got, 65, "%s", d ? d : "");
    sqlite3_reset(st);
    return 1;
}

int sq__worker_secret_get(kg_store *base, const char *id, char digest[65],
                          kg_err *err)
{
    struct secret_args a = {id, NULL, digest};
    return kg_sqldb_read(((sq_store *)base)->db, r_secret_get, &a, err);
}
