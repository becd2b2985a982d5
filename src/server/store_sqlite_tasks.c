/*
 * store_sqlite_tasks.c - the SQLite store's task calls: submit, get,
 * lease, complete, retry, cancel and the sweep of expired leases. Each
 * write is a function run by kg_sqldb_write, each read one run by
 * kg_sqldb_read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_sqlite.h"

/* ---- submissions ------------------------------------------------------- */

struct submit_args {
    sq_store *s;
    const kg_submit *t;
    size_t n;
    int *created;
    int64_t now;
};

/*
 * Task t as new (which = ST_INSERT) or as a replacement of the task with
 * rowid rid (ST_RESET): its row and its request. 1 when ST_INSERT found
 * the id taken (nothing changed).
 */
static int put_task(kg_sqlconn *c, sq_store *s, int which, int64_t rid,
                    const kg_submit *t, int64_t now, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, which, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, t->id);
    sqlite3_bind_int(st, 2, t->priority);
    sqlite3_bind_int64(st, 3, s->next_qseq);
    sq__bind_str(st, 4, t->cache_key ? t->cache_key : "");
    sqlite3_bind_int64(st, 5, now);
    int rc = kg_sqlconn_exec(c, st, err);
    if (rc < 0)
        return rc;
    if (kg_sqlconn_changes(c) == 0)
        return 1; /* the id exists (ST_INSERT only) */
    s->next_qseq++;
    if (which == ST_INSERT)
        rid = sqlite3_last_insert_rowid(c->db);
    if (!(st = kg_sqlconn_stmt(c, ST_DATA_PUT, err)))
        return KG_EIO;
    sqlite3_bind_int64(st, 1, rid);
    if ((rc = sq__bind_json(st, 2, t->request, err)) < 0)
        return rc;
    return kg_sqlconn_exec(c, st, err);
}

static int w_submit(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct submit_args *a = arg;
    long long added[KG_NPRIO] = {0, 0, 0}; /* new rows, by priority */
    for (size_t i = 0; i < a->n; i++) {
        const kg_submit *t = &a->t[i];
        int rc = put_task(c, a->s, ST_INSERT, 0, t, a->now, err);
        if (rc == 0)
            added[t->priority]++;
        if (rc == 1) {
            /* exists: left alone unless finished and to be replaced */
            int64_t rid = 0;
            int prio = 0, verdict = -1;
            int status = sq__task_state(c, t->id, &rid, &prio, &verdict, err);
            if (status < 0)
                return status;
            rc = 1;
            if (t->replace_finished && status >= KG_TASK_COMPLETED) {
                rc = put_task(c, a->s, ST_RESET, rid, t, a->now, err);
                if (rc == 0)
                    rc = sq__count_move(c, status, prio, verdict,
                                        KG_TASK_PENDING, t->priority, -1, err);
            }
        }
        if (rc < 0)
            return rc;
        a->created[i] = rc;
    }
    /* what a trigger on INSERT would count: status pending, its priority */
    long long total = added[0] + added[1] + added[2];
    int rc = total ? sq__exec_id_int(c, ST_COUNTER_ADD, "s0", total, err) : 0;
    for (int p = 0; rc == 0 && p < KG_NPRIO; p++) {
        char name[3] = {'p', (char)('0' + p), 0};
        if (added[p])
            rc = sq__exec_id_int(c, ST_COUNTER_ADD, name, added[p], err);
    }
    return rc;
}

int sq__submit_batch(kg_store *base, const kg_submit *t, size_t n, int *created,
                     kg_err *err)
{
    sq_store *s = (sq_store *)base;
    struct submit_args a = {s, t, n, created, kg_store_now_ms()};
    return kg_sqldb_write(s->db, w_submit, &a, err);
}

/* ---- reads ------------------------------------------------------------- */

struct get_args {
    const char *id;
    unsigned what;
    kg_task *out;
};

static int r_get(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct get_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_GET, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r < 0 ? r : kg_errf(err, KG_ENOTFOUND, "no task %s", a->id);
    int rc = sq__fill_task(st, a->what, a->out, err);
    sqlite3_reset(st);
    return rc;
}

int sq__get(kg_store *base, const char *id, unsigned what, kg_task *out,
            kg_err *err)
{
    struct get_args a = {id, what, out};
    return kg_sqldb_read(((sq_store *)base)->db, r_get, &a, err);
}

struct status_many_args {
    const char *const *ids;
    size_t n;
    int *status;
};

/* Every task in one read transaction: one snapshot, one lock round. */
static int r_status_many(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct status_many_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_READ_BEGIN, err);
    int rc = st ? kg_sqlconn_exec(c, st, err) : KG_EIO;
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        kg_task t;
        struct get_args one = {a->ids[i], 0, &t};
        int r = r_get(c, &one, err);
        if (r == 0) {
            a->status[i] = t.status;
            kg_task_free(&t);
        } else if (r != KG_ENOTFOUND) {
            rc = r;
        }
    }
    if ((st = kg_sqlconn_stmt(c, ST_READ_END, rc < 0 ? NULL : err)) != NULL) {
        int r = kg_sqlconn_exec(c, st, rc < 0 ? NULL : err);
        if (rc == 0)
            rc = r;
    }
    return rc;
}

int sq__status_many(kg_store *base, const char *const *ids, size_t n,
                    int *status, kg_err *err)
{
    struct status_many_args a = {ids, n, status};
    return kg_sqldb_read(((sq_store *)base)->db, r_status_many, &a, err);
}

/* ---- the lease and its end --------------------------------------------- */

struct lease_args {
    const char *worker;
    int64_t now, lease_ms;
    kg_task *out;
};

static int w_lease(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct lease_args *a = arg;
    int rc = sq__touch_worker(c, a->worker, a->now, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_LEASE, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->worker);
    sqlite3_bind_int64(st, 2, a->now);
    sqlite3_bind_int64(st, 3, a->lease_ms);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r; /* 0: nothing to lease */
    int64_t rid = sqlite3_column_int64(st, 11);
    rc = sq__fill_task(st, 0, a->out, err);
    if (rc == 0)
        rc = kg_sqlconn_exec(c, st, err); /* RETURNING: run it to the end */
    else
        sqlite3_reset(st);
    if (rc == 0)
        rc = sq__count_move(c, KG_TASK_PENDING, a->out->priority, -1,
                            KG_TASK_RUNNING, a->out->priority, -1, err);
    if (rc < 0)
        return rc;
    if (!(st = kg_sqlconn_stmt(c, ST_DATA_REQUEST, err)))
        return KG_EIO;
    sqlite3_bind_int64(st, 1, rid);
    if ((r = kg_sqlconn_row(c, st, err)) <= 0)
        return r < 0 ? r
                     : kg_errf(err, KG_EIO, "task %s: no request", a->out->id);
    /* a copy of the text: parsed, if at all, after the writer is free (a
       stored request that does not parse then leaves the lease standing,
       to expire) */
    const char *t = (const char *)sqlite3_column_text(st, 0);
    rc = t && !(a->out->request_text =
                    strndup(t, (size_t)sqlite3_column_bytes(st, 0)))
             ? kg_errf(err, KG_ENOMEM, "out of memory")
             : 0;
    sqlite3_reset(st);
    return rc < 0 ? rc : 1;
}

int sq__lease(kg_store *base, const char *worker_id, unsigned what,
              kg_task *out, kg_err *err)
{
    struct lease_args a = {worker_id, kg_store_now_ms(), base->opts.lease_ms,
                           out};
    int rc = kg_sqldb_write(((sq_store *)base)->db, w_lease, &a, err);
    if (rc == 1 && !(what & KG_GET_REQUEST_TEXT) && out->request_text) {
        out->request =
            kg_store_json_parse(out->request_text, strlen(out->request_text));
        free(out->request_text);
        out->request_text = NULL;
        if (!out->request)
            rc = kg_errf(err, KG_EPARSE, "task %s: stored request is corrupt",
                         out->id);
    }
    if (rc < 0)
        kg_task_free(out);
    return rc;
}

/* complete, retry and cancel: one guarded update of the task, then the
   result (complete, retry) */
struct end_args {
    sq_store *s;
    const char *id, *worker;
    int status, verdict;
    const json_t *result;
    int64_t now, avoid_until;
};

static int w_complete(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct end_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_COMPLETE, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    sq__bind_str(st, 2, a->worker);
    sqlite3_bind_int(st, 3, a->status);
    sqlite3_bind_int(st, 5, a->verdict);
    sqlite3_bind_int64(st, 6, a->now);
    int rc = kg_sqlconn_exec(c, st, err);
    if (rc < 0)
        return rc;
    if (kg_sqlconn_changes(c) == 0)
        return sq__not_held(c, a->id, a->worker, err);
    rc = sq__count_move(c, KG_TASK_RUNNING, 0, -1, a->status, 0, a->verdict,
                        err);
    return rc < 0 ? rc : sq__set_result(c, a->id, a->result, err);
}

int sq__complete(kg_store *base, const char *id, const char *worker_id,
                 int status, const json_t *result, int verdict, kg_err *err)
{
    struct end_args a = {.id = id,
                         .worker = worker_id,
                         .status = status,
                         .verdict = verdict,
                         .result = result,
                         .now = kg_store_now_ms()};
    return kg_sqldb_write(((sq_store *)base)->db, w_complete, &a, err);
}

static int w_retry(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct end_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_RETRY, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, a->id);
    sq__bind_str(st, 2, a->worker);
    sqlite3_bind_int64(st, 4, a->avoid_until);
    sqlite3_bind_int64(st, 5, a->s->next_qseq);
    int rc = kg_sqlconn_row(c, st, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return sq__not_held(c, a->id, a->worker, err);
    int prio = sqlite3_column_int(st, 0);
    if ((rc = kg_sqlconn_exec(c, st, err)) < 0)
        return rc;
    a->s->next_qseq++;
    rc = sq__count_move(c, KG_TASK_RUNNING, prio, -1, KG_TASK_PENDING, prio, -1,
                        err);
    return rc < 0 ? rc : sq__set_result(c, a->id, a->result, err);
}

int sq__retry(kg_store *base, const char *id, const char *worker_id,
              const json_t *result, int64_t avoid_ms, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    struct end_args a = {.s = s,
                         .id = id,
                         .worker = worker_id,
                         .result = result,
                         .avoid_until = kg_store_now_ms() + avoid_ms};
    return kg_sqldb_write(s->db, w_retry, &a, err);
}

static int w_cancel(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct end_args *a = arg;
    int prio = 0;
    int status = sq__task_state(c, a->id, NULL, &prio, NULL, err);
    if (status < 0)
        return status;
    if (status != KG_TASK_PENDING && status != KG_TASK_RUNNING)
        return 1; /* already finished */
    int rc = sq__exec_id_int(c, ST_CANCEL, a->id, a->now, err);
    if (rc == 0)
        rc = sq__count_move(c, status, prio, -1, KG_TASK_CANCELLED, prio, -1,
                            err);
    return rc;
}

int sq__cancel(kg_store *base, const char *id, kg_err *err)
{
    struct end_args a = {.id = id, .now = kg_store_now_ms()};
    return kg_sqldb_write(((sq_store *)base)->db, w_cancel, &a, err);
}

/* ---- the sweep --------------------------------------------------------- */

typedef struct expired_row {
    char id[KG_MAX_TASK_ID + 1];
    char worker[KG_MAX_WORKER_ID + 1];
    int attempts;
} expired_row;

struct sweep_args {
    sq_store *s;
    int max_attempts;
    int64_t now, alive_after;
    kg_requeue_counts *out;
};

/* Running tasks to take back: lease ran out, holder dead or gone. */
static int expired_rows(kg_sqlconn *c, const struct sweep_args *a,
                        expired_row **out, size_t *n, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_EXPIRED, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_int64(st, 1, a->now);
    sqlite3_bind_int64(st, 2, a->alive_after);
    expired_row *rows = NULL;
    size_t cap = 0;
    int r;
    *n = 0;
    while ((r = kg_sqlconn_row(c, st, err)) == 1) {
        if (*n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            expired_row *nr = realloc(rows, nc * sizeof *rows);
            if (!nr) {
                sqlite3_reset(st);
                r = kg_errf(err, KG_ENOMEM, "out of memory");
                break;
            }
            rows = nr;
            cap = nc;
        }
        sq__copy_col(rows[*n].id, sizeof rows[*n].id, st, 0);
        rows[*n].attempts = sqlite3_column_int(st, 1);
        sq__copy_col(rows[*n].worker, sizeof rows[*n].worker, st, 2);
        (*n)++;
    }
    if (r < 0) {
        free(rows);
        *n = 0;
        return r;
    }
    *out = rows;
    return 0;
}

/* One expired task: back to pending, or failed past the retry limit. */
static int expire_one(kg_sqlconn *c, const struct sweep_args *a,
                      const expired_row *row, kg_err *err)
{
    if (row->attempts < a->max_attempts) {
        int rc = sq__requeue(c, a->s, row->id, err);
        if (rc == 0)
            a->out->requeued++;
        return rc;
    }
    json_t *res = kg_store_expired_result(row->id, row->attempts, row->worker);
    if (!res)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_EXPIRE_FAIL, err);
    int rc = KG_EIO;
    if (st) {
        sq__bind_str(st, 1, row->id);
        sqlite3_bind_int64(st, 3, a->now);
        rc = kg_sqlconn_exec(c, st, err);
    }
    if (rc == 0)
        rc = sq__count_move(c, KG_TASK_RUNNING, 0, -1, KG_TASK_FAILED, 0,
                            KG_VERDICT_INFRA_ERROR, err);
    if (rc == 0)
        rc = sq__set_result(c, row->id, res, err);
    json_decref(res);
    if (rc == 0)
        a->out->failed++;
    return rc;
}

static int w_sweep(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct sweep_args *a = arg;
    *a->out = (kg_requeue_counts){0, 0, 0};
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_DEAD_HOLDERS, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_int64(st, 2, a->alive_after);
    int rc = kg_sqlconn_row(c, st, err);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        a->out->dead_workers = sqlite3_column_int(st, 0);
        sqlite3_reset(st);
    }
    /* collect first: the updates below move rows out of the scan */
    expired_row *rows = NULL;
    size_t n = 0;
    if ((rc = expired_rows(c, a, &rows, &n, err)) < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = expire_one(c, a, &rows[i], err);
    free(rows);
    if (rc == 0 && n > 0)
        rc = sq__exec_id_int(c, ST_COUNTER_ADD, "lease_expiries", (int64_t)n,
                             err);
    return rc;
}

int sq__requeue_expired(kg_store *base, int max_attempts,
                        kg_requeue_counts *out, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t now = kg_store_now_ms();
    struct sweep_args a = {s, max_attempts, now, now - base->opts.worker_ttl_ms,
                           out};
    int rc = kg_sqldb_write(s->db, w_sweep, &a, err);
    if (rc < 0)
        *out = (kg_requeue_counts){0, 0, 0};
    return rc;
}
