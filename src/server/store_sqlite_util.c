/*
 * store_sqlite_util.c - the SQLite store's small helpers: binding and
 * reading columns, a task row into a kg_task, the state of one task, the
 * counters that follow every change of a task's status, and the requeue
 * shared by the sweep and unregister. c is the connection a write or read
 * was given.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_sqlite.h"

void sq__bind_str(sqlite3_stmt *st, int col, const char *v)
{
    sqlite3_bind_text(st, col, v, -1, SQLITE_STATIC);
}

/* Binds v's JSON text (NULL binds NULL). */
int sq__bind_json(sqlite3_stmt *st, int col, const json_t *v, kg_err *err)
{
    if (!v) {
        sqlite3_bind_null(st, col);
        return 0;
    }
    char *t = kg_store_json_text(v);
    if (!t)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    sqlite3_bind_text(st, col, t, -1, free);
    return 0;
}

/* Text column col into dst (size bytes; cut to fit, always terminated). */
void sq__copy_col(char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    size_t n = t ? (size_t)sqlite3_column_bytes(st, col) : 0;
    if (n >= size)
        n = size - 1;
    if (n)
        memcpy(dst, t, n);
    dst[n] = 0;
}

/* Parses JSON column col of st into *out (NULL column: NULL). */
static int col_json(sqlite3_stmt *st, int col, json_t **out, const char *id,
                    const char *what, kg_err *err)
{
    const char *t = (const char *)sqlite3_column_text(st, col);
    *out = NULL;
    if (!t)
        return 0;
    *out = kg_store_json_parse(t, (size_t)sqlite3_column_bytes(st, col));
    return *out ? 0
                : kg_errf(err, KG_EPARSE, "task %s: stored %s is corrupt", id,
                          what);
}

/* A task row (TASK_COLS, then request and result per what) into *out. */
int sq__fill_task(sqlite3_stmt *st, unsigned what, kg_task *out, kg_err *err)
{
    memset(out, 0, sizeof *out);
    sq__copy_col(out->id, sizeof out->id, st, 0);
    out->priority = sqlite3_column_int(st, 1);
    out->status = sqlite3_column_int(st, 2);
    sq__copy_col(out->cache_key, sizeof out->cache_key, st, 3);
    out->attempts = sqlite3_column_int(st, 4);
    sq__copy_col(out->worker, sizeof out->worker, st, 5);
    sq__copy_col(out->avoid_worker, sizeof out->avoid_worker, st, 6);
    out->submitted_ms = sqlite3_column_int64(st, 7);
    out->started_ms = sqlite3_column_int64(st, 8);
    out->finished_ms = sqlite3_column_int64(st, 9);
    out->lease_deadline_ms = sqlite3_column_int64(st, 10);
    int rc = 0;
    if (what & KG_GET_REQUEST)
        rc = col_json(st, 11, &out->request, out->id, "request", err);
    if (rc == 0 && (what & KG_GET_RESULT))
        rc = col_json(st, 12, &out->result, out->id, "result", err);
    if (rc < 0)
        kg_task_free(out);
    return rc;
}

/* Runs statement which with (id, text) bound to ?1, ?2; 0 or < 0. */
int sq__exec_id(kg_sqlconn *c, int which, const char *id, const char *text,
                kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, which, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, id);
    if (text)
        sq__bind_str(st, 2, text);
    return kg_sqlconn_exec(c, st, err);
}

/* Runs statement which with id bound to ?1 and the integer v to ?2. */
int sq__exec_id_int(kg_sqlconn *c, int which, const char *id, int64_t v,
                    kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, which, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, id);
    sqlite3_bind_int64(st, 2, v);
    return kg_sqlconn_exec(c, st, err);
}

/* task_data.result of id; result may be NULL (no change). */
int sq__set_result(kg_sqlconn *c, const char *id, const json_t *result,
                   kg_err *err)
{
    if (!result)
        return 0;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_RESULT_SET, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, id);
    int rc = sq__bind_json(st, 2, result, err);
    return rc < 0 ? rc : kg_sqlconn_exec(c, st, err);
}

/* Status of task id: >= 0 (and its rowid in *rid, if rid is not NULL),
   or KG_ENOTFOUND, or < 0 on error. */
/* Status of task id (or KG_ENOTFOUND); its rowid, priority and verdict
 * (-1: none) into those that are not NULL. */
int sq__task_state(kg_sqlconn *c, const char *id, int64_t *rid, int *prio,
                   int *verdict, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_STATUS, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, id);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r < 0 ? r : kg_errf(err, KG_ENOTFOUND, "no task %s", id);
    int status = sqlite3_column_int(st, 0);
    if (rid)
        *rid = sqlite3_column_int64(st, 1);
    if (prio)
        *prio = sqlite3_column_int(st, 2);
    if (verdict)
        *verdict = sqlite3_column_int(st, 3);
    sqlite3_reset(st);
    return status;
}

static int task_status(kg_sqlconn *c, const char *id, int64_t *rid, kg_err *err)
{
    return sq__task_state(c, id, rid, NULL, NULL, err);
}

static int count_add(kg_sqlconn *c, char kind, int value, int64_t n,
                     kg_err *err)
{
    char name[16];
    snprintf(name, sizeof name, "%c%d", kind, value);
    return sq__exec_id_int(c, ST_COUNTER_ADD, name, n, err);
}

/*
 * The counters of a task that goes from status st0 (priority p0, verdict
 * v0) to st1 (p1, v1), in the writer's transaction: s<status>, p<priority>
 * while pending, v<verdict> while completed or failed (-1: no verdict).
 */
int sq__count_move(kg_sqlconn *c, int st0, int p0, int v0, int st1, int p1,
                   int v1, kg_err *err)
{
    int rc = count_add(c, 's', st0, -1, err);
    if (rc == 0)
        rc = count_add(c, 's', st1, 1, err);
    if (rc == 0 && st0 == KG_TASK_PENDING)
        rc = count_add(c, 'p', p0, -1, err);
    if (rc == 0 && st1 == KG_TASK_PENDING)
        rc = count_add(c, 'p', p1, 1, err);
    int fin0 = st0 == KG_TASK_COMPLETED || st0 == KG_TASK_FAILED;
    int fin1 = st1 == KG_TASK_COMPLETED || st1 == KG_TASK_FAILED;
    if (rc == 0 && fin0 && v0 >= 0)
        rc = count_add(c, 'v', v0, -1, err);
    if (rc == 0 && fin1 && v1 >= 0)
        rc = count_add(c, 'v', v1, 1, err);
    return rc;
}

/* A running task back to pending at the end of its queue (sweep,
 * unregister), counted. */
int sq__requeue(kg_sqlconn *c, sq_store *s, const char *id, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_REQUEUE, err);
    if (!st)
        return KG_EIO;
    sq__bind_str(st, 1, id);
    sqlite3_bind_int64(st, 2, s->next_qseq++);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r;
    int prio = sqlite3_column_int(st, 0);
    if ((r = kg_sqlconn_exec(c, st, err)) < 0)
        return r;
    return sq__count_move(c, KG_TASK_RUNNING, prio, -1, KG_TASK_PENDING, prio,
                          -1, err);
}

/* After a guarded update changed nothing: KG_ENOTFOUND or KG_ESTATE. */
int sq__not_held(kg_sqlconn *c, const char *id, const char *worker_id,
                 kg_err *err)
{
    int status = task_status(c, id, NULL, err);
    if (status < 0)
        return status;
    return kg_errf(err, KG_ESTATE, "task %s is %s and not held by worker %s",
                   id, kg_task_status_name(status), worker_id);
}

/* Marks worker id seen now. 1 if it exists, KG_ENOTFOUND if not. */
int sq__touch_worker(kg_sqlconn *c, const char *id, int64_t now, kg_err *err)
{
    int rc = sq__exec_id_int(c, ST_TOUCH, id, now, err);
    if (rc < 0)
        return rc;
    return kg_sqlconn_changes(c) > 0
               ? 1
               : kg_errf(err, KG_ENOTFOUND, "worker %s is not registered", id);
}

/* The ids of rows of statement st (already bound): a malloc'd array of
 *n ids (caller frees), in the order of the rows. */
int sq__collect_ids(kg_sqlconn *c, sqlite3_stmt *st,
                    char (**out)[KG_MAX_TASK_ID + 1], size_t *n, kg_err *err)
{
    char (*ids)[KG_MAX_TASK_ID + 1] = NULL;
    size_t cap = 0;
    int r;
    *n = 0;
    while ((r = kg_sqlconn_row(c, st, err)) == 1) {
        if (*n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            void *ni = realloc(ids, nc * sizeof *ids);
            if (!ni) {
                sqlite3_reset(st);
                r = kg_errf(err, KG_ENOMEM, "out of memory");
                break;
            }
            ids = ni;
            cap = nc;
        }
        sq__copy_col(ids[*n], sizeof ids[*n], st, 0);
        (*n)++;
    }
    if (r < 0) {
        free(ids);
        *n = 0;
        return r;
    }
    *out = ids;
    return 0;
}
