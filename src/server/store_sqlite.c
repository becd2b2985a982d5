/*
 * store_sqlite.c - the embedded task store: one SQLite file in WAL mode.
 *
 * The tables and the statements of every store call live here; the
 * connections, the group commit and the reader pool in sqldb.c. Every
 * write is one function run by kg_sqldb_write, which returns once it is
 * on disk (synchronous=full, the default; see sqldb.h) and lets writes
 * that arrive together share one transaction and one fsync. Reads run on
 * a pool of reader connections beside the writer (WAL). One process per
 * database file: the queue order counter lives in the writer (next_qseq).
 *
 * Counters for metrics are kept by triggers in the same transactions as
 * the changes they count, so they never drift from the tasks table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/sqldb.h"
#include "server/store_impl.h"

enum {
    ST_INSERT,
    ST_RESET,
    ST_GET,
    ST_TOUCH,
    ST_LEASE,
    ST_COMPLETE,
    ST_RETRY,
    ST_CANCEL,
    ST_STATUS,
    ST_EXPIRED,
    ST_EXPIRE_FAIL,
    ST_REQUEUE,
    ST_DEAD_HOLDERS,
    ST_COUNTER_ADD,
    ST_DATA_PUT,
    ST_DATA_REQUEST,
    ST_RESULT_SET,
    ST_CACHE_GET,
    ST_CACHE_PUT,
    ST_COUNTS,
    ST_WORKER_COUNTS,
    ST_DEV_OWNER,
    ST_DEV_DROP,
    ST_WORKER_UPSERT,
    ST_EXTEND,
    ST_WORKER_DEL,
    ST_HELD,
    ST_WORKER_LIST,
    ST_MAX_QSEQ,
    ST_READ_BEGIN,
    ST_READ_END,
    ST_N
};

/* Columns of a task row as ST_GET (then request, result) and ST_LEASE
   return them. */
#define TASK_COLS                                                              \
    "id, priority, status, cache_key, attempts, worker, avoid_worker, "        \
    "submitted, started, finished, deadline"

/*
 * The sweep's holders (runs every second under the writer lock, so it
 * must not cost a row per running task): h lists the distinct holders of
 * running tasks by one seek each in tasks_running (a loose index scan),
 * dead those of them without a live worker row (?2: alive after). With
 * the deadline index, the sweep reads only what it takes back; scanning
 * every running task and its worker took ~100 ms at 30,000 running tasks,
 * a stall of every write each second.
 */
#define HOLDERS                                                                \
    "WITH RECURSIVE h(w) AS (SELECT (SELECT min(worker) FROM tasks WHERE "     \
    "status = 1) UNION ALL SELECT (SELECT min(worker) FROM tasks WHERE "       \
    "status = 1 AND worker > h.w) FROM h WHERE h.w IS NOT NULL), "             \
    "dead(w) AS (SELECT w FROM h WHERE w IS NOT NULL AND NOT EXISTS (SELECT "  \
    "1 FROM workers WHERE id = h.w AND last_seen > ?2)) "

static const char *const SQL[ST_N] = {
    /* a new task; an existing id changes nothing (sqlite3_changes = 0) */
    [ST_INSERT] =
        "INSERT INTO tasks(id, priority, status, qseq, cache_key, submitted) "
        "VALUES(?1, ?2, 0, ?3, ?4, ?5) ON CONFLICT(id) DO NOTHING",
    [ST_RESET] =
        "UPDATE tasks SET priority = ?2, status = 0, qseq = ?3, "
        "cache_key = ?4, submitted = ?5, "
        "verdict = NULL, attempts = 0, worker = '', avoid_worker = '', "
        "avoid_until = 0, started = 0, finished = 0, deadline = 0 "
        "WHERE id = ?1",
    [ST_GET] = "SELECT " TASK_COLS ", request, result FROM tasks JOIN "
               "task_data ON rid = tasks.rowid WHERE id = ?1",
    [ST_TOUCH] = "UPDATE workers SET last_seen = ?2 WHERE id = ?1",
    /* the atomic claim: one statement picks and takes the task */
    [ST_LEASE] =
        "UPDATE tasks SET status = 1, worker = ?1, attempts = attempts + 1, "
        "started = ?2, deadline = ?2 + ?3 WHERE id = (SELECT id FROM tasks "
        "WHERE status = 0 AND NOT (avoid_worker = ?1 AND avoid_until > ?2) "
        "ORDER BY priority, qseq LIMIT 1) RETURNING " TASK_COLS ", rowid",
    [ST_COMPLETE] = "UPDATE tasks SET status = ?3, verdict = ?5, "
                    "finished = ?6, deadline = 0 WHERE id = ?1 AND status = 1 "
                    "AND worker = ?2",
    [ST_RETRY] = "UPDATE tasks SET status = 0, "
                 "avoid_worker = ?2, avoid_until = ?4, qseq = ?5, deadline = 0 "
                 "WHERE id = ?1 AND status = 1 AND worker = ?2 "
                 "RETURNING priority",
    [ST_CANCEL] = "UPDATE tasks SET status = 4, finished = ?2, deadline = 0 "
                  "WHERE id = ?1 AND status IN (0, 1)",
    [ST_STATUS] = "SELECT status, rowid, priority, coalesce(verdict, -1) "
                  "FROM tasks WHERE id = ?1",
    /* running tasks whose lease ran out or whose holder is dead or gone */
    [ST_EXPIRED] =
        HOLDERS "SELECT id, attempts, worker FROM tasks WHERE "
                "status = 1 AND deadline <= ?1 UNION SELECT id, attempts, "
                "worker FROM tasks WHERE status = 1 AND worker IN (SELECT "
                "w FROM dead)",
    [ST_EXPIRE_FAIL] = "UPDATE tasks SET status = 3, verdict = 6, "
                       "finished = ?3, deadline = 0 WHERE id = ?1",
    [ST_REQUEUE] = "UPDATE tasks SET status = 0, qseq = ?2, deadline = 0 "
                   "WHERE id = ?1 RETURNING priority",
    /* holders that are dead (silent) or gone (unregistered, replaced) */
    [ST_DEAD_HOLDERS] = HOLDERS "SELECT count(*) FROM dead",
    [ST_COUNTER_ADD] = "UPDATE counters SET n = n + ?2 WHERE name = ?1",
    [ST_DATA_PUT] = "INSERT INTO task_data(rid, request) VALUES(?1, ?2) ON "
                    "CONFLICT(rid) DO UPDATE SET request = ?2, result = NULL",
    [ST_DATA_REQUEST] = "SELECT request FROM task_data WHERE rid = ?1",
    [ST_RESULT_SET] = "UPDATE task_data SET result = ?2 WHERE rid = "
                      "(SELECT rowid FROM tasks WHERE id = ?1)",
    [ST_CACHE_GET] = "SELECT result FROM cache WHERE key = ?1",
    [ST_CACHE_PUT] = "INSERT INTO cache(key, result, created) VALUES(?1, ?2, "
                     "?3) ON CONFLICT(key) DO UPDATE SET result = ?2, "
                     "created = ?3",
    [ST_COUNTS] = "SELECT name, n FROM counters",
    [ST_WORKER_COUNTS] = "SELECT coalesce(sum(last_seen > ?1), 0), "
                         "coalesce(sum(last_seen <= ?1), 0) FROM workers",
    [ST_DEV_OWNER] = "SELECT id FROM workers WHERE host = ?2 AND device = ?3 "
                     "AND id != ?1 AND last_seen > ?4",
    [ST_DEV_DROP] =
        "DELETE FROM workers WHERE host = ?2 AND device = ?3 AND id != ?1",
    [ST_WORKER_UPSERT] =
        "INSERT INTO workers(id, device, host, registered, last_seen) "
        "VALUES(?1, ?3, ?2, ?4, ?4) ON CONFLICT(id) DO UPDATE SET device = ?3, "
        "host = ?2, last_seen = ?4",
    [ST_EXTEND] = "UPDATE tasks SET deadline = ?2 WHERE status = 1 AND "
                  "worker = ?1",
    [ST_WORKER_DEL] = "DELETE FROM workers WHERE id = ?1",
    [ST_HELD] = "SELECT id FROM tasks WHERE status = 1 AND worker = ?1",
    [ST_WORKER_LIST] =
        "SELECT id, device, host, registered, last_seen, (SELECT count(*) "
        "FROM tasks WHERE status = 1 AND worker = workers.id) FROM workers "
        "ORDER BY id",
    [ST_MAX_QSEQ] = "SELECT coalesce(max(qseq), 0) FROM tasks",
    [ST_READ_BEGIN] = "BEGIN",
    [ST_READ_END] = "COMMIT",
};

/*
 * The schema (user_version 2). Request and result (KiB each) live in
 * task_data, written once each, so the many small updates of a task's
 * life (lease, heartbeat, requeue) rewrite a row of a hundred bytes, not
 * its sources. task_data is keyed by the task's rowid: rows are appended
 * in submission order, so a batch of submissions writes a few pages of it
 * rather than one page per task of an index on random ids (version 1 had
 * that index; migrate_v1 converts). counters rows: s<status>, p<priority>
 * (pending only), v<verdict> (completed or failed tasks), lease_expiries.
 */
#define SCHEMA_VERSION 2
#define VERSION_TEXT "2" /* the same, for SQL text */
// clang-format off
static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS tasks("
    " id TEXT PRIMARY KEY, priority INTEGER NOT NULL,"
    " status INTEGER NOT NULL, qseq INTEGER NOT NULL,"
    " cache_key TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0,"
    " worker TEXT NOT NULL DEFAULT '', avoid_worker TEXT NOT NULL DEFAULT '',"
    " avoid_until INTEGER NOT NULL DEFAULT 0, submitted INTEGER NOT NULL,"
    " started INTEGER NOT NULL DEFAULT 0, finished INTEGER NOT NULL DEFAULT 0,"
    " deadline INTEGER NOT NULL DEFAULT 0, verdict INTEGER);"
    "CREATE TABLE IF NOT EXISTS task_data(rid INTEGER PRIMARY KEY,"
    " request TEXT NOT NULL, result TEXT);"
    "CREATE INDEX IF NOT EXISTS tasks_queue ON tasks(priority, qseq)"
    " WHERE status = 0;"
    "CREATE INDEX IF NOT EXISTS tasks_running ON tasks(worker)"
    " WHERE status = 1;"
    "CREATE INDEX IF NOT EXISTS tasks_deadline ON tasks(deadline)"
    " WHERE status = 1;"
    "CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY,"
    " n INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO counters(name, n) VALUES ('s0', 0), ('s1', 0),"
    " ('s2', 0), ('s3', 0), ('s4', 0), ('p0', 0), ('p1', 0), ('p2', 0),"
    " ('v0', 0), ('v1', 0), ('v2', 0), ('v3', 0), ('v4', 0), ('v5', 0),"
    " ('v6', 0), ('v7', 0), ('v8', 0), ('lease_expiries', 0);"
    /* The counters are kept in C, in the transaction of each change
       (w_submit, count_move): triggers did it before and cost a statement
       journal per insert or update, a third of a lease; files from then
       lose them here. */
    "DROP TRIGGER IF EXISTS tasks_count_ins;"
    "DROP TRIGGER IF EXISTS tasks_count_upd;"
    "CREATE TABLE IF NOT EXISTS cache(key TEXT PRIMARY KEY,"
    " result TEXT NOT NULL, created INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS workers(id TEXT PRIMARY KEY,"
    " device TEXT NOT NULL, host TEXT NOT NULL, registered INTEGER NOT NULL,"
    " last_seen INTEGER NOT NULL);";
// clang-format on

/* Version 1 (task_data keyed by the task id) to version 2. */
static const char MIGRATE_V1[] =
    "ALTER TABLE task_data RENAME TO task_data_v1;"
    "CREATE TABLE task_data(rid INTEGER PRIMARY KEY, request TEXT NOT NULL,"
    " result TEXT);"
    "INSERT INTO task_data(rid, request, result) SELECT tasks.rowid,"
    " d.request, d.result FROM task_data_v1 d JOIN tasks USING (id);"
    "DROP TABLE task_data_v1;";

typedef struct sq_store {
    kg_store base;
    char path[4096];
    kg_sqldb *db;
    int64_t next_qseq; /* queue position of the next (re)queued task; the
                          writer's (touched only inside a write) */
} sq_store;

/* ---- small helpers (c is the connection a write or read was given) ---- */

static void bind_str(sqlite3_stmt *st, int col, const char *v)
{
    sqlite3_bind_text(st, col, v, -1, SQLITE_STATIC);
}

/* Binds v's JSON text (NULL binds NULL). */
static int bind_json(sqlite3_stmt *st, int col, const json_t *v, kg_err *err)
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
static void copy_col(char *dst, size_t size, sqlite3_stmt *st, int col)
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
static int fill_task(sqlite3_stmt *st, unsigned what, kg_task *out, kg_err *err)
{
    memset(out, 0, sizeof *out);
    copy_col(out->id, sizeof out->id, st, 0);
    out->priority = sqlite3_column_int(st, 1);
    out->status = sqlite3_column_int(st, 2);
    copy_col(out->cache_key, sizeof out->cache_key, st, 3);
    out->attempts = sqlite3_column_int(st, 4);
    copy_col(out->worker, sizeof out->worker, st, 5);
    copy_col(out->avoid_worker, sizeof out->avoid_worker, st, 6);
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
static int exec_id(kg_sqlconn *c, int which, const char *id, const char *text,
                   kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, which, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, id);
    if (text)
        bind_str(st, 2, text);
    return kg_sqlconn_exec(c, st, err);
}

/* Runs statement which with id bound to ?1 and the integer v to ?2. */
static int exec_id_int(kg_sqlconn *c, int which, const char *id, int64_t v,
                       kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, which, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, id);
    sqlite3_bind_int64(st, 2, v);
    return kg_sqlconn_exec(c, st, err);
}

/* task_data.result of id; result may be NULL (no change). */
static int set_result(kg_sqlconn *c, const char *id, const json_t *result,
                      kg_err *err)
{
    if (!result)
        return 0;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_RESULT_SET, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, id);
    int rc = bind_json(st, 2, result, err);
    return rc < 0 ? rc : kg_sqlconn_exec(c, st, err);
}

/* Status of task id: >= 0 (and its rowid in *rid, if rid is not NULL),
   or KG_ENOTFOUND, or < 0 on error. */
/* Status of task id (or KG_ENOTFOUND); its rowid, priority and verdict
 * (-1: none) into those that are not NULL. */
static int task_state(kg_sqlconn *c, const char *id, int64_t *rid, int *prio,
                      int *verdict, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_STATUS, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, id);
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
    return task_state(c, id, rid, NULL, NULL, err);
}

static int count_add(kg_sqlconn *c, char kind, int value, int64_t n,
                     kg_err *err)
{
    char name[16];
    snprintf(name, sizeof name, "%c%d", kind, value);
    return exec_id_int(c, ST_COUNTER_ADD, name, n, err);
}

/*
 * The counters of a task that goes from status st0 (priority p0, verdict
 * v0) to st1 (p1, v1), in the writer's transaction: s<status>, p<priority>
 * while pending, v<verdict> while completed or failed (-1: no verdict).
 */
static int count_move(kg_sqlconn *c, int st0, int p0, int v0, int st1, int p1,
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
static int requeue(kg_sqlconn *c, sq_store *s, const char *id, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_REQUEUE, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, id);
    sqlite3_bind_int64(st, 2, s->next_qseq++);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r;
    int prio = sqlite3_column_int(st, 0);
    if ((r = kg_sqlconn_exec(c, st, err)) < 0)
        return r;
    return count_move(c, KG_TASK_RUNNING, prio, -1, KG_TASK_PENDING, prio, -1,
                      err);
}

/* After a guarded update changed nothing: KG_ENOTFOUND or KG_ESTATE. */
static int not_held(kg_sqlconn *c, const char *id, const char *worker_id,
                    kg_err *err)
{
    int status = task_status(c, id, NULL, err);
    if (status < 0)
        return status;
    return kg_errf(err, KG_ESTATE, "task %s is %s and not held by worker %s",
                   id, kg_task_status_name(status), worker_id);
}

/* Marks worker id seen now. 1 if it exists, KG_ENOTFOUND if not. */
static int touch_worker(kg_sqlconn *c, const char *id, int64_t now, kg_err *err)
{
    int rc = exec_id_int(c, ST_TOUCH, id, now, err);
    if (rc < 0)
        return rc;
    return kg_sqlconn_changes(c) > 0
               ? 1
               : kg_errf(err, KG_ENOTFOUND, "worker %s is not registered", id);
}

/* The ids of rows of statement st (already bound): a malloc'd array of
 *n ids (caller frees), in the order of the rows. */
static int collect_ids(kg_sqlconn *c, sqlite3_stmt *st,
                       char (**out)[KG_MAX_TASK_ID + 1], size_t *n, kg_err *err)
{
    char(*ids)[KG_MAX_TASK_ID + 1] = NULL;
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
        copy_col(ids[*n], sizeof ids[*n], st, 0);
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
    bind_str(st, 1, t->id);
    sqlite3_bind_int(st, 2, t->priority);
    sqlite3_bind_int64(st, 3, s->next_qseq);
    bind_str(st, 4, t->cache_key ? t->cache_key : "");
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
    if ((rc = bind_json(st, 2, t->request, err)) < 0)
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
            int status = task_state(c, t->id, &rid, &prio, &verdict, err);
            if (status < 0)
                return status;
            rc = 1;
            if (t->replace_finished && status >= KG_TASK_COMPLETED) {
                rc = put_task(c, a->s, ST_RESET, rid, t, a->now, err);
                if (rc == 0)
                    rc = count_move(c, status, prio, verdict, KG_TASK_PENDING,
                                    t->priority, -1, err);
            }
        }
        if (rc < 0)
            return rc;
        a->created[i] = rc;
    }
    /* what a trigger on INSERT would count: status pending, its priority */
    long long total = added[0] + added[1] + added[2];
    int rc = total ? exec_id_int(c, ST_COUNTER_ADD, "s0", total, err) : 0;
    for (int p = 0; rc == 0 && p < KG_NPRIO; p++) {
        char name[3] = {'p', (char)('0' + p), 0};
        if (added[p])
            rc = exec_id_int(c, ST_COUNTER_ADD, name, added[p], err);
    }
    return rc;
}

static int sq_submit_batch(kg_store *base, const kg_submit *t, size_t n,
                           int *created, kg_err *err)
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
    bind_str(st, 1, a->id);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r < 0 ? r : kg_errf(err, KG_ENOTFOUND, "no task %s", a->id);
    int rc = fill_task(st, a->what, a->out, err);
    sqlite3_reset(st);
    return rc;
}

static int sq_get(kg_store *base, const char *id, unsigned what, kg_task *out,
                  kg_err *err)
{
    struct get_args a = {id, what, out};
    return kg_sqldb_read(((sq_store *)base)->db, r_get, &a, err);
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
    int rc = touch_worker(c, a->worker, a->now, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_LEASE, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, a->worker);
    sqlite3_bind_int64(st, 2, a->now);
    sqlite3_bind_int64(st, 3, a->lease_ms);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r; /* 0: nothing to lease */
    int64_t rid = sqlite3_column_int64(st, 11);
    rc = fill_task(st, 0, a->out, err);
    if (rc == 0)
        rc = kg_sqlconn_exec(c, st, err); /* RETURNING: run it to the end */
    else
        sqlite3_reset(st);
    if (rc == 0)
        rc = count_move(c, KG_TASK_PENDING, a->out->priority, -1,
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

static int sq_lease(kg_store *base, const char *worker_id, unsigned what,
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
    bind_str(st, 1, a->id);
    bind_str(st, 2, a->worker);
    sqlite3_bind_int(st, 3, a->status);
    sqlite3_bind_int(st, 5, a->verdict);
    sqlite3_bind_int64(st, 6, a->now);
    int rc = kg_sqlconn_exec(c, st, err);
    if (rc < 0)
        return rc;
    if (kg_sqlconn_changes(c) == 0)
        return not_held(c, a->id, a->worker, err);
    rc = count_move(c, KG_TASK_RUNNING, 0, -1, a->status, 0, a->verdict, err);
    return rc < 0 ? rc : set_result(c, a->id, a->result, err);
}

static int sq_complete(kg_store *base, const char *id, const char *worker_id,
                       int status, const json_t *result, int verdict,
                       kg_err *err)
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
    bind_str(st, 1, a->id);
    bind_str(st, 2, a->worker);
    sqlite3_bind_int64(st, 4, a->avoid_until);
    sqlite3_bind_int64(st, 5, a->s->next_qseq);
    int rc = kg_sqlconn_row(c, st, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return not_held(c, a->id, a->worker, err);
    int prio = sqlite3_column_int(st, 0);
    if ((rc = kg_sqlconn_exec(c, st, err)) < 0)
        return rc;
    a->s->next_qseq++;
    rc = count_move(c, KG_TASK_RUNNING, prio, -1, KG_TASK_PENDING, prio, -1,
                    err);
    return rc < 0 ? rc : set_result(c, a->id, a->result, err);
}

static int sq_retry(kg_store *base, const char *id, const char *worker_id,
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
    int status = task_state(c, a->id, NULL, &prio, NULL, err);
    if (status < 0)
        return status;
    if (status != KG_TASK_PENDING && status != KG_TASK_RUNNING)
        return 1; /* already finished */
    int rc = exec_id_int(c, ST_CANCEL, a->id, a->now, err);
    if (rc == 0)
        rc = count_move(c, status, prio, -1, KG_TASK_CANCELLED, prio, -1, err);
    return rc;
}

static int sq_cancel(kg_store *base, const char *id, kg_err *err)
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
        copy_col(rows[*n].id, sizeof rows[*n].id, st, 0);
        rows[*n].attempts = sqlite3_column_int(st, 1);
        copy_col(rows[*n].worker, sizeof rows[*n].worker, st, 2);
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
        int rc = requeue(c, a->s, row->id, err);
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
        bind_str(st, 1, row->id);
        sqlite3_bind_int64(st, 3, a->now);
        rc = kg_sqlconn_exec(c, st, err);
    }
    if (rc == 0)
        rc = count_move(c, KG_TASK_RUNNING, 0, -1, KG_TASK_FAILED, 0,
                        KG_VERDICT_INFRA_ERROR, err);
    if (rc == 0)
        rc = set_result(c, row->id, res, err);
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
        rc = exec_id_int(c, ST_COUNTER_ADD, "lease_expiries", (int64_t)n, err);
    return rc;
}

static int sq_requeue_expired(kg_store *base, int max_attempts,
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
    bind_str(st, 1, a->key);
    int r = kg_sqlconn_row(c, st, err);
    if (r <= 0)
        return r;
    *a->got = kg_store_json_parse((const char *)sqlite3_column_text(st, 0),
                                  (size_t)sqlite3_column_bytes(st, 0));
    sqlite3_reset(st);
    return *a->got ? 1 : kg_errf(err, KG_EPARSE, "cache entry is corrupt");
}

static int sq_cache_get(kg_store *base, const char *key, json_t **result,
                        kg_err *err)
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

static int sq_cache_get_many(kg_store *base, const char *const *keys, size_t n,
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
    bind_str(st, 1, a->key);
    sqlite3_bind_int64(st, 3, kg_store_now_ms());
    int rc = bind_json(st, 2, a->put, err);
    return rc < 0 ? rc : kg_sqlconn_exec(c, st, err);
}

static int sq_cache_put(kg_store *base, const char *key, const json_t *result,
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

static int sq_counts(kg_store *base, kg_store_counts *out, kg_err *err)
{
    struct counts_args a = {kg_store_now_ms() - base->opts.worker_ttl_ms, out};
    return kg_sqldb_read(((sq_store *)base)->db, r_counts, &a, err);
}

/* ---- workers ----------------------------------------------------------- */

struct worker_args {
    sq_store *s;
    const char *id, *device, *host;
    int64_t now, alive_after, lease_ms;
    kg_worker *list;
    size_t n;
};

static int w_register(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct worker_args *a = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_DEV_OWNER, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, a->id);
    bind_str(st, 2, a->host);
    bind_str(st, 3, a->device);
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
        bind_str(st, 1, a->id);
        bind_str(st, 2, a->host);
        bind_str(st, 3, a->device);
        if (which == ST_WORKER_UPSERT)
            sqlite3_bind_int64(st, 4, a->now);
        if ((r = kg_sqlconn_exec(c, st, err)) < 0)
            return r;
    }
    return 0;
}

static int sq_worker_register(kg_store *base, const char *id,
                              const char *device, const char *host, kg_err *err)
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
    int rc = touch_worker(c, a->id, a->now, err);
    if (rc < 0)
        return rc;
    return exec_id_int(c, ST_EXTEND, a->id, a->now + a->lease_ms, err);
}

static int sq_worker_heartbeat(kg_store *base, const char *id, kg_err *err)
{
    struct worker_args a = {
        .id = id, .now = kg_store_now_ms(), .lease_ms = base->opts.lease_ms};
    return kg_sqldb_write(((sq_store *)base)->db, w_heartbeat, &a, err);
}

static int w_unregister(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct worker_args *a = arg;
    int rc = exec_id(c, ST_WORKER_DEL, a->id, NULL, err);
    if (rc < 0)
        return rc;
    if (kg_sqlconn_changes(c) == 0)
        return kg_errf(err, KG_ENOTFOUND, "worker %s is not registered", a->id);
    sqlite3_stmt *st = kg_sqlconn_stmt(c, ST_HELD, err);
    if (!st)
        return KG_EIO;
    bind_str(st, 1, a->id);
    char(*held)[KG_MAX_TASK_ID + 1] = NULL;
    size_t n = 0;
    if ((rc = collect_ids(c, st, &held, &n, err)) < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = requeue(c, a->s, held[i], err);
    free(held);
    return rc;
}

static int sq_worker_unregister(kg_store *base, const char *id, kg_err *err)
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
        copy_col(w->id, sizeof w->id, st, 0);
        copy_col(w->device, sizeof w->device, st, 1);
        copy_col(w->host, sizeof w->host, st, 2);
        w->registered_ms = sqlite3_column_int64(st, 3);
        w->last_seen_ms = sqlite3_column_int64(st, 4);
        w->alive = w->last_seen_ms > a->alive_after;
        w->running = sqlite3_column_int(st, 5);
    }
    return r;
}

static int sq_worker_list(kg_store *base, kg_worker **out, size_t *n,
                          kg_err *err)
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
    .submit_batch = sq_submit_batch,
    .get = sq_get,
    .lease = sq_lease,
    .complete = sq_complete,
    .retry = sq_retry,
    .cancel = sq_cancel,
    .requeue_expired = sq_requeue_expired,
    .cache_get = sq_cache_get,
    .cache_put = sq_cache_put,
    .cache_get_many = sq_cache_get_many,
    .counts = sq_counts,
    .worker_register = sq_worker_register,
    .worker_heartbeat = sq_worker_heartbeat,
    .worker_unregister = sq_worker_unregister,
    .worker_list = sq_worker_list,
};

/*
 * Creates the tables, or brings those of an older kgym to SCHEMA_VERSION
 * (a write at open). A database from a newer kgym is refused.
 */
static int w_schema(kg_sqlconn *c, void *arg, kg_err *err)
{
    (void)arg;
    sqlite3_stmt *st;
    int version = 0, v1 = 0;
    if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) !=
        SQLITE_OK)
        return kg_sqlconn_err(c, err, "schema");
    if (sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version > SCHEMA_VERSION)
        return kg_errf(err, KG_EINVAL,
                       "sqlite: the database has schema version %d, newer "
                       "than this kgym's %d",
                       version, SCHEMA_VERSION);
    /* version 1 did not set user_version; its task_data has an id column */
    if (sqlite3_prepare_v2(c->db,
                           "SELECT 1 FROM pragma_table_info('task_data') "
                           "WHERE name = 'id'",
                           -1, &st, NULL) != SQLITE_OK)
        return kg_sqlconn_err(c, err, "schema");
    v1 = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    char *msg = NULL;
    int r = v1 ? sqlite3_exec(c->db, MIGRATE_V1, NULL, NULL, &msg) : SQLITE_OK;
    if (r == SQLITE_OK)
        r = sqlite3_exec(c->db, SCHEMA, NULL, NULL, &msg);
    if (r == SQLITE_OK)
        r = sqlite3_exec(c->db, "PRAGMA user_version = " VERSION_TEXT, NULL,
                         NULL, &msg);
    if (r != SQLITE_OK) {
        int rc =
            kg_errf(err, KG_EIO, "sqlite schema%s: %s",
                    v1 ? " (migrating version 1)" : "", msg ? msg : "failed");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

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
    int rc = kg_sqldb_open(&s->db, path, opts->sqlite_sync_full, readers, SQL,
                           ST_N, NULL, err);
    if (rc == 0)
        rc = kg_sqldb_write(s->db, w_schema, NULL, err);
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
