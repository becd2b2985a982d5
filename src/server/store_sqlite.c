/*
 * store_sqlite.c - the embedded task store: one SQLite file in WAL mode;
 * this file holds its handle: open, describe, close and the vtable.
 *
 * The store's files: store_sqlite_sql.c (statements and schema),
 * store_sqlite_util.c (row and counter helpers), store_sqlite_tasks.c
 * (submit, get, lease, complete, retry, cancel, sweep),
 * store_sqlite_cache.c (result cache, counts), store_sqlite_workers.c
 * (workers); the connections, the group commit and the reader pool are
 * in sqldb.c. Every write is one function run by kg_sqldb_write, which
 * returns once it is on disk (synchronous=full, the default; see sqldb.h)
 * and lets writes that arrive together share one transaction and one
 * fsync. Reads run on a pool of reader connections beside the writer
 * (WAL). One process per database file: the queue order counter lives in
 * the writer (next_qseq).
 *
 * Counters for metrics are kept in C in the same transactions as the
 * changes they count (sq__count_move), so they never drift from the
 * tasks table.
 */
#include <stdio.h>
#include <stdlib.h>

#include "server/store_sqlite.h"

/* ---- the handle -------------------------------------------------------- */

static int sq_describe(kg_store *base, char *buf, size_t size, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    (void)err;
    snprintf(buf, size,
             "sqlite %s (SQLite %s), journal_mode=wal synchronous=%s", s->path,
             sqlite3_libversion(), kg_sqldb_sync_name(s->db));
    return 0;
}

static void sq_close(kg_store *base)
{
    sq_store *s = (sq_store *)base;
    kg_sqldb_close(s->db);
    free(s);
}

static int sq_defers(const kg_store *base)
{
    return kg_sqldb_defers(((const sq_store *)base)->db);
}

static const struct kg_store_ops SQLITE_OPS = {
    .name = "sqlite",
    .close = sq_close,
    .defers = sq_defers,
    .describe = sq_describe,
    .submit_batch = sq__submit_batch,
    .get = sq__get,
    .status_many = sq__status_many,
    .lease = sq__lease,
    .complete = sq__complete,
    .retry = sq__retry,
    .cancel = sq__cancel,
    .requeue_expired = sq__requeue_expired,
    .cache_get = sq__cache_get,
    .cache_put = sq__cache_put,
    .cache_get_many = sq__cache_get_many,
    .counts = sq__counts,
    .worker_register = sq__worker_register,
    .worker_heartbeat = sq__worker_heartbeat,
    .worker_unregister = sq__worker_unregister,
    .worker_list = sq__worker_list,
    .worker_secret_set = sq__worker_secret_set,
    .worker_secret_get = sq__worker_secret_get,
};

/* The queue position after the last one stored (a read at open). */
static int r_max_qseq(kg_sqlconn *c, void *arg, kg_err *err)
{
    int64_t *next = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_MAX_QSEQ, err);
    if (!st)
        return KG_EIO;
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r < 0 ? r : kg_errf(err, KG_EIO, "sqlite open: no max(qseq)");
    *next = sqlite3_column_int64(st, 0) + 1;
    sqlite3_reset(st);
    return 0;
}

int kg_store_sqlite_open(kg_store **out, const char *path,
                         const kg_store_opts *opts, kg_err *err)
{
    sq_store *s = calloc(1, sizeof *s);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    s->base.ops = &SQLITE_OPS;
    s->base.opts = *opts;
    snprintf(s->path, sizeof s->path, "%s", path);
    int readers = opts->pool_size < 16 ? opts->pool_size : 16;
    int rc = kg_sqldb_open(&s->db, path, opts->sqlite_sync_full, readers,
                           sq__sql, ST_N, NULL, err);
    if (rc == 0)
        rc = kg_sqldb_write(s->db, sq__w_schema, NULL, err);
    if (rc == 0)
        rc = kg_sqldb_read(s->db, r_max_qseq, &s->next_qseq, err);
    if (rc < 0) {
        kg_sqldb_close(s->db);
        free(s);
        return rc;
    }
    *out = &s->base;
    return 0;
}
