/*
 * store_sqlite.c - the embedded task store: one SQLite file in WAL mode.
 *
 * Concurrency: every write goes through one writer connection behind a
 * mutex (SQLite serialises writers anyway; a mutex queues them fairly
 * instead of letting them sleep in the busy handler). Reads (get, cache,
 * counts, workers) use a pool of reader connections, which WAL lets run
 * beside the writer. One process per database file: the queue order
 * counter lives in the writer (see next_qseq).
 *
 * Durability: journal_mode=WAL. synchronous=FULL (default) fsyncs the WAL
 * at every commit, so a write that returned survives kill -9 and power
 * loss; synchronous=NORMAL survives kill -9 of the process only.
 *
 * Counters for metrics are kept by triggers in the same transactions as
 * the changes they count, so they never drift from the tasks table.
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_impl.h"

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_EXISTS,
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
    ST_N
};

/* Columns of a task row as ST_GET (then request, result) and ST_LEASE
   return them. */
#define TASK_COLS                                                              \
    "id, priority, status, cache_key, attempts, worker, avoid_worker, "        \
    "submitted, started, finished, deadline"

static const char *const SQL[ST_N] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_EXISTS] = "SELECT status FROM tasks WHERE id = ?1",
    [ST_INSERT] =
        "INSERT INTO tasks(id, priority, status, qseq, cache_key, submitted) "
        "VALUES(?1, ?2, 0, ?3, ?4, ?5)",
    [ST_RESET] =
        "UPDATE tasks SET priority = ?2, status = 0, qseq = ?3, "
        "cache_key = ?4, submitted = ?5, "
        "verdict = NULL, attempts = 0, worker = '', avoid_worker = '', "
        "avoid_until = 0, started = 0, finished = 0, deadline = 0 "
        "WHERE id = ?1",
    [ST_GET] = "SELECT " TASK_COLS ", request, result FROM tasks JOIN "
               "task_data USING (id) WHERE id = ?1",
    [ST_TOUCH] = "UPDATE workers SET last_seen = ?2 WHERE id = ?1",
    /* the atomic claim: one statement picks and takes the task */
    [ST_LEASE] =
        "UPDATE tasks SET status = 1, worker = ?1, attempts = attempts + 1, "
        "started = ?2, deadline = ?2 + ?3 WHERE id = (SELECT id FROM tasks "
        "WHERE status = 0 AND NOT (avoid_worker = ?1 AND avoid_until > ?2) "
        "ORDER BY priority, qseq LIMIT 1) RETURNING " TASK_COLS,
    [ST_COMPLETE] = "UPDATE tasks SET status = ?3, verdict = ?5, "
                    "finished = ?6, deadline = 0 WHERE id = ?1 AND status = 1 "
                    "AND worker = ?2",
    [ST_RETRY] = "UPDATE tasks SET status = 0, "
                 "avoid_worker = ?2, avoid_until = ?4, qseq = ?5, deadline = 0 "
                 "WHERE id = ?1 AND status = 1 AND worker = ?2",
    [ST_CANCEL] = "UPDATE tasks SET status = 4, finished = ?2, deadline = 0 "
                  "WHERE id = ?1 AND status IN (0, 1)",
    [ST_STATUS] = "SELECT status FROM tasks WHERE id = ?1",
    /* running tasks whose lease ran out or whose holder is dead or gone */
    [ST_EXPIRED] = "SELECT id, attempts, worker FROM tasks WHERE status = 1 "
                   "AND (deadline <= ?1 OR NOT EXISTS (SELECT 1 FROM workers "
                   "w WHERE w.id = tasks.worker AND w.last_seen > ?2))",
    [ST_EXPIRE_FAIL] = "UPDATE tasks SET status = 3, verdict = 6, "
                       "finished = ?3, deadline = 0 WHERE id = ?1",
    [ST_REQUEUE] = "UPDATE tasks SET status = 0, qseq = ?2, deadline = 0 "
                   "WHERE id = ?1",
    /* holders that are dead (silent) or gone (unregistered, replaced) */
    [ST_DEAD_HOLDERS] =
        "SELECT count(DISTINCT worker) FROM tasks WHERE status = 1 AND NOT "
        "EXISTS (SELECT 1 FROM workers w WHERE w.id = tasks.worker AND "
        "w.last_seen > ?1)",
    [ST_COUNTER_ADD] = "UPDATE counters SET n = n + ?2 WHERE name = ?1",
    [ST_DATA_PUT] = "INSERT INTO task_data(id, request) VALUES(?1, ?2) ON "
                    "CONFLICT(id) DO UPDATE SET request = ?2, result = NULL",
    [ST_DATA_REQUEST] = "SELECT request FROM task_data WHERE id = ?1",
    [ST_RESULT_SET] = "UPDATE task_data SET result = ?2 WHERE id = ?1",
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
        "VALUES(?1, ?2, ?3, ?4, ?4) ON CONFLICT(id) DO UPDATE SET device = ?2, "
        "host = ?3, last_seen = ?4",
    [ST_EXTEND] = "UPDATE tasks SET deadline = ?2 WHERE status = 1 AND "
                  "worker = ?1",
    [ST_WORKER_DEL] = "DELETE FROM workers WHERE id = ?1",
    [ST_HELD] = "SELECT id FROM tasks WHERE status = 1 AND worker = ?1",
    [ST_WORKER_LIST] =
        "SELECT id, device, host, registered, last_seen, (SELECT count(*) "
        "FROM tasks WHERE status = 1 AND worker = workers.id) FROM workers "
        "ORDER BY id",
};

/*
 * The schema. Request and result (KiB each) live in task_data, written
 * once each, so the many small updates of a task's life (lease, heartbeat,
 * requeue) rewrite a row of a hundred bytes, not its sources.
 * counters rows: s<status>, p<priority> (pending only), v<verdict>
 * (completed or failed tasks), lease_expiries.
 */
static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS tasks("
    " id TEXT PRIMARY KEY, priority INTEGER NOT NULL,"
    " status INTEGER NOT NULL, qseq INTEGER NOT NULL,"
    " cache_key TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0,"
    " worker TEXT NOT NULL DEFAULT '', avoid_worker TEXT NOT NULL DEFAULT '',"
    " avoid_until INTEGER NOT NULL DEFAULT 0, submitted INTEGER NOT NULL,"
    " started INTEGER NOT NULL DEFAULT 0, finished INTEGER NOT NULL DEFAULT 0,"
    " deadline INTEGER NOT NULL DEFAULT 0, verdict INTEGER);"
    "CREATE TABLE IF NOT EXISTS task_data(id TEXT PRIMARY KEY,"
    " request TEXT NOT NULL, result TEXT);"
    "CREATE INDEX IF NOT EXISTS tasks_queue ON tasks(priority, qseq)"
    " WHERE status = 0;"
    "CREATE INDEX IF NOT EXISTS tasks_running ON tasks(worker)"
    " WHERE status = 1;"
    "CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY,"
    " n INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO counters(name, n) VALUES ('s0', 0), ('s1', 0),"
    " ('s2', 0), ('s3', 0), ('s4', 0), ('p0', 0), ('p1', 0), ('p2', 0),"
    " ('v0', 0), ('v1', 0), ('v2', 0), ('v3', 0), ('v4', 0), ('v5', 0),"
    " ('v6', 0), ('v7', 0), ('lease_expiries', 0);"
    "CREATE TRIGGER IF NOT EXISTS tasks_count_ins AFTER INSERT ON tasks BEGIN"
    " UPDATE counters SET n = n + 1 WHERE name IN ('s' || NEW.status,"
    "  CASE WHEN NEW.status = 0 THEN 'p' || NEW.priority END,"
    "  CASE WHEN NEW.status IN (2, 3) THEN 'v' || NEW.verdict END);"
    " END;"
    "CREATE TRIGGER IF NOT EXISTS tasks_count_upd"
    " AFTER UPDATE OF status, priority, verdict ON tasks BEGIN"
    " UPDATE counters SET n = n - 1 WHERE name IN ('s' || OLD.status,"
    "  CASE WHEN OLD.status = 0 THEN 'p' || OLD.priority END,"
    "  CASE WHEN OLD.status IN (2, 3) THEN 'v' || OLD.verdict END);"
    " UPDATE counters SET n = n + 1 WHERE name IN ('s' || NEW.status,"
    "  CASE WHEN NEW.status = 0 THEN 'p' || NEW.priority END,"
    "  CASE WHEN NEW.status IN (2, 3) THEN 'v' || NEW.verdict END);"
    " END;"
    "CREATE TABLE IF NOT EXISTS cache(key TEXT PRIMARY KEY,"
    " result TEXT NOT NULL, created INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS workers(id TEXT PRIMARY KEY,"
    " device TEXT NOT NULL, host TEXT NOT NULL, registered INTEGER NOT NULL,"
    " last_seen INTEGER NOT NULL);";

typedef struct conn {
    sqlite3 *db;
    sqlite3_stmt *st[ST_N];
} conn;

typedef struct sq_store {
    kg_store base;
    char path[4096];
    pthread_mutex_t wmu; /* the writer and next_qseq */
    conn w;
    int64_t next_qseq;   /* queue position of the next (re)queued task */
    pthread_mutex_t pmu; /* the reader pool */
    pthread_cond_t pcv;
    conn *readers;
    int nreaders;
    int *idle; /* stack of idle reader indices */
    int nidle;
} sq_store;

static int db_err(sqlite3 *db, kg_err *err, const char *what)
{
    int code = sqlite3_errcode(db);
    int kc = KG_EIO;
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        kc = KG_EUNAVAIL;
    else if (code == SQLITE_NOMEM)
        kc = KG_ENOMEM;
    return kg_errf(err, kc, "sqlite %s: %s", what, sqlite3_errmsg(db));
}

/* The cached statement `which` of c, reset and unbound; NULL on error. */
static sqlite3_stmt *stmt(conn *c, int which, kg_err *err)
{
    sqlite3_stmt *st = c->st[which];
    if (!st) {
        if (sqlite3_prepare_v3(c->db, SQL[which], -1, SQLITE_PREPARE_PERSISTENT,
                               &st, NULL) != SQLITE_OK) {
            db_err(c->db, err, "prepare");
            return NULL;
        }
        c->st[which] = st;
    } else {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    return st;
}

static void conn_close(conn *c)
{
    for (int i = 0; i < ST_N; i++)
        sqlite3_finalize(c->st[i]);
    sqlite3_close(c->db);
    memset(c, 0, sizeof *c);
}

static int conn_open(conn *c, const char *path, const char *pragmas,
                     kg_err *err)
{
    memset(c, 0, sizeof *c);
    int flags =
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path, &c->db, flags, NULL) != SQLITE_OK) {
        int rc = kg_errf(err, KG_EIO, "sqlite open %s: %s", path,
                         c->db ? sqlite3_errmsg(c->db) : "out of memory");
        conn_close(c);
        return rc;
    }
    sqlite3_busy_timeout(c->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(c->db, pragmas, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = kg_errf(err, KG_EIO, "sqlite %s: %s", path,
                         msg ? msg : "setup failed");
        sqlite3_free(msg);
        conn_close(c);
        return rc;
    }
    return 0;
}

static conn *reader_get(sq_store *s)
{
    pthread_mutex_lock(&s->pmu);
    while (s->nidle == 0)
        pthread_cond_wait(&s->pcv, &s->pmu);
    conn *c = &s->readers[s->idle[--s->nidle]];
    pthread_mutex_unlock(&s->pmu);
    return c;
}

static void reader_put(sq_store *s, conn *c)
{
    pthread_mutex_lock(&s->pmu);
    s->idle[s->nidle++] = (int)(c - s->readers);
    pthread_cond_signal(&s->pcv);
    pthread_mutex_unlock(&s->pmu);
}

/* Runs a statement that returns no rows. */
static int step_done(conn *c, sqlite3_stmt *st, kg_err *err)
{
    int r = sqlite3_step(st);
    if (r != SQLITE_DONE && r != SQLITE_ROW)
        return db_err(c->db, err, "step");
    if (r == SQLITE_ROW)
        while ((r = sqlite3_step(st)) == SQLITE_ROW)
            ;
    sqlite3_reset(st);
    return r == SQLITE_DONE ? 0 : db_err(c->db, err, "step");
}

static int w_exec(sq_store *s, int which, kg_err *err)
{
    sqlite3_stmt *st = stmt(&s->w, which, err);
    return st ? step_done(&s->w, st, err) : KG_EIO;
}

static int w_begin(sq_store *s, kg_err *err)
{
    return w_exec(s, ST_BEGIN, err);
}

/* Commits; on failure the transaction is rolled back. */
static int w_commit(sq_store *s, kg_err *err)
{
    int rc = w_exec(s, ST_COMMIT, err);
    if (rc < 0 && !sqlite3_get_autocommit(s->w.db))
        w_exec(s, ST_ROLLBACK, NULL);
    return rc;
}

static void w_rollback(sq_store *s)
{
    if (!sqlite3_get_autocommit(s->w.db))
        w_exec(s, ST_ROLLBACK, NULL);
}

static void copy_col(char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, size, "%s", t ? (const char *)t : "");
}

/* A task row (TASK_COLS) into *out; json members per what. */
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
    for (int k = 0; k < 2; k++) {
        if (!(what & (k == 0 ? KG_GET_REQUEST : KG_GET_RESULT)))
            continue;
        const char *t = (const char *)sqlite3_column_text(st, 11 + k);
        if (!t)
            continue;
        json_t *j =
            kg_store_json_parse(t, (size_t)sqlite3_column_bytes(st, 11 + k));
        if (!j) {
            kg_task_free(out);
            return kg_errf(err, KG_EPARSE, "task %s: stored %s is corrupt",
                           out->id, k == 0 ? "request" : "result");
        }
        if (k == 0)
            out->request = j;
        else
            out->result = j;
    }
    return 0;
}

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

/* task_data.result of id (writer held); result may be NULL (no change). */
static int set_result(sq_store *s, const char *id, const json_t *result,
                      kg_err *err)
{
    if (!result)
        return 0;
    sqlite3_stmt *st = stmt(&s->w, ST_RESULT_SET, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    int rc = bind_json(st, 2, result, err);
    return rc < 0 ? rc : step_done(&s->w, st, err);
}

/* The stored request of id into *out (writer held). */
static int get_request(sq_store *s, const char *id, json_t **out, kg_err *err)
{
    sqlite3_stmt *st = stmt(&s->w, ST_DATA_REQUEST, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(st), rc = 0;
    if (r == SQLITE_ROW) {
        *out = kg_store_json_parse((const char *)sqlite3_column_text(st, 0),
                                   (size_t)sqlite3_column_bytes(st, 0));
        if (!*out)
            rc = kg_errf(err, KG_EPARSE, "task %s: stored request is corrupt",
                         id);
    } else {
        rc = r == SQLITE_DONE ? kg_errf(err, KG_EIO, "task %s: no request", id)
                              : db_err(s->w.db, err, "lease");
    }
    sqlite3_reset(st);
    return rc;
}

static int sq_submit_batch(kg_store *base, const kg_submit *t, size_t n,
                           int *created, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t now = kg_store_now_ms();
    pthread_mutex_lock(&s->wmu);
    int64_t qseq0 = s->next_qseq;
    int rc = w_begin(s, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sqlite3_stmt *st = stmt(&s->w, ST_EXISTS, err);
        if (!st) {
            rc = KG_EIO;
            break;
        }
        sqlite3_bind_text(st, 1, t[i].id, -1, SQLITE_STATIC);
        int r = sqlite3_step(st);
        if (r != SQLITE_ROW && r != SQLITE_DONE) {
            rc = db_err(s->w.db, err, "submit");
            break;
        }
        int which = ST_INSERT;
        if (r == SQLITE_ROW) {
            int status = sqlite3_column_int(st, 0);
            if (!t[i].replace_finished || status < KG_TASK_COMPLETED) {
                created[i] = 1;
                sqlite3_reset(st);
                continue;
            }
            which = ST_RESET;
        }
        sqlite3_reset(st);
        created[i] = 0;
        if (!(st = stmt(&s->w, which, err))) {
            rc = KG_EIO;
            break;
        }
        sqlite3_bind_text(st, 1, t[i].id, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, t[i].priority);
        sqlite3_bind_int64(st, 3, s->next_qseq++);
        sqlite3_bind_text(st, 4, t[i].cache_key ? t[i].cache_key : "", -1,
                          SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, now);
        if ((rc = step_done(&s->w, st, err)) < 0)
            break;
        if (!(st = stmt(&s->w, ST_DATA_PUT, err))) {
            rc = KG_EIO;
            break;
        }
        sqlite3_bind_text(st, 1, t[i].id, -1, SQLITE_STATIC);
        if ((rc = bind_json(st, 2, t[i].request, err)) < 0)
            break;
        rc = step_done(&s->w, st, err);
    }
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    if (rc < 0)
        s->next_qseq = qseq0;
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int sq_get(kg_store *base, const char *id, unsigned what, kg_task *out,
                  kg_err *err)
{
    sq_store *s = (sq_store *)base;
    conn *c = reader_get(s);
    int rc;
    sqlite3_stmt *st = stmt(c, ST_GET, err);
    if (!st) {
        rc = KG_EIO;
    } else {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW)
            rc = fill_task(st, what, out, err);
        else if (r == SQLITE_DONE)
            rc = kg_errf(err, KG_ENOTFOUND, "no task %s", id);
        else
            rc = db_err(c->db, err, "get");
        sqlite3_reset(st);
    }
    reader_put(s, c);
    return rc;
}

/* Marks worker id seen now (writer held). 1 if it exists, 0 if not. */
static int touch_worker(sq_store *s, const char *id, int64_t now, kg_err *err)
{
    sqlite3_stmt *st = stmt(&s->w, ST_TOUCH, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    int rc = step_done(&s->w, st, err);
    return rc < 0 ? rc : sqlite3_changes(s->w.db) > 0;
}

static int sq_lease(kg_store *base, const char *worker_id, kg_task *out,
                    kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t now = kg_store_now_ms();
    pthread_mutex_lock(&s->wmu);
    int rc = w_begin(s, err);
    if (rc == 0) {
        rc = touch_worker(s, worker_id, now, err);
        if (rc == 0)
            rc = kg_errf(err, KG_ENOTFOUND, "worker %s is not registered",
                         worker_id);
    }
    if (rc == 1) {
        sqlite3_stmt *st = stmt(&s->w, ST_LEASE, err);
        if (!st) {
            rc = KG_EIO;
        } else {
            sqlite3_bind_text(st, 1, worker_id, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, now);
            sqlite3_bind_int64(st, 3, base->opts.lease_ms);
            int r = sqlite3_step(st);
            if (r == SQLITE_ROW) {
                rc = fill_task(st, 0, out, err);
                if (rc == 0)
                    rc = 1;
                while ((r = sqlite3_step(st)) == SQLITE_ROW)
                    ;
            } else {
                rc = 0;
            }
            if (r != SQLITE_DONE)
                rc = db_err(s->w.db, err, "lease");
            sqlite3_reset(st);
            if (rc == 1) {
                int g = get_request(s, out->id, &out->request, err);
                if (g < 0)
                    rc = g;
            }
            if (rc < 0)
                kg_task_free(out);
        }
    }
    if (rc >= 0) {
        int c = w_commit(s, err);
        if (c < 0) {
            kg_task_free(out);
            rc = c;
        }
    } else {
        w_rollback(s);
    }
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

/* After a guarded update changed nothing: KG_ENOTFOUND or KG_ESTATE. */
static int not_held(sq_store *s, const char *id, const char *worker_id,
                    kg_err *err)
{
    sqlite3_stmt *st = stmt(&s->w, ST_STATUS, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int r = sqlite3_step(st);
    int status = r == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_reset(st);
    if (r != SQLITE_ROW && r != SQLITE_DONE)
        return db_err(s->w.db, err, "status");
    if (status < 0)
        return kg_errf(err, KG_ENOTFOUND, "no task %s", id);
    return kg_errf(err, KG_ESTATE, "task %s is %s and not held by worker %s",
                   id, kg_task_status_name(status), worker_id);
}

static int sq_complete(kg_store *base, const char *id, const char *worker_id,
                       int status, const json_t *result, int verdict,
                       kg_err *err)
{
    sq_store *s = (sq_store *)base;
    pthread_mutex_lock(&s->wmu);
    sqlite3_stmt *st = NULL;
    int rc = w_begin(s, err);
    if (rc == 0 && !(st = stmt(&s->w, ST_COMPLETE, err)))
        rc = KG_EIO;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, worker_id, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, status);
        sqlite3_bind_int(st, 5, verdict);
        sqlite3_bind_int64(st, 6, kg_store_now_ms());
        rc = step_done(&s->w, st, err);
        if (rc == 0 && sqlite3_changes(s->w.db) == 0)
            rc = not_held(s, id, worker_id, err);
        else if (rc == 0)
            rc = set_result(s, id, result, err);
    }
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int sq_retry(kg_store *base, const char *id, const char *worker_id,
                    const json_t *result, int64_t avoid_ms, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    pthread_mutex_lock(&s->wmu);
    sqlite3_stmt *st = NULL;
    int rc = w_begin(s, err);
    if (rc == 0 && !(st = stmt(&s->w, ST_RETRY, err)))
        rc = KG_EIO;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, worker_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, kg_store_now_ms() + avoid_ms);
        sqlite3_bind_int64(st, 5, s->next_qseq);
        rc = step_done(&s->w, st, err);
        if (rc == 0 && sqlite3_changes(s->w.db) == 0)
            rc = not_held(s, id, worker_id, err);
        else if (rc == 0)
            rc = set_result(s, id, result, err);
    }
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    if (rc == 0)
        s->next_qseq++;
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int sq_cancel(kg_store *base, const char *id, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    pthread_mutex_lock(&s->wmu);
    int rc;
    sqlite3_stmt *st = stmt(&s->w, ST_CANCEL, err);
    if (!st) {
        rc = KG_EIO;
    } else {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, kg_store_now_ms());
        rc = step_done(&s->w, st, err);
        if (rc == 0 && sqlite3_changes(s->w.db) == 0) {
            rc = not_held(s, id, "-", err);
            if (rc == KG_ESTATE)
                rc = 1;
        }
    }
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int counter_add(sq_store *s, const char *name, long long n, kg_err *err)
{
    sqlite3_stmt *st = stmt(&s->w, ST_COUNTER_ADD, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, n);
    return step_done(&s->w, st, err);
}

/* One expired task (writer held, in a transaction): requeue or fail. */
static int expire_one(sq_store *s, const char *id, int attempts,
                      const char *worker, int max_attempts, int64_t now,
                      kg_requeue_counts *out, kg_err *err)
{
    sqlite3_stmt *st;
    int rc;
    if (attempts >= max_attempts) {
        json_t *res = kg_store_expired_result(id, attempts, worker);
        if (!res)
            return kg_errf(err, KG_ENOMEM, "out of memory");
        if (!(st = stmt(&s->w, ST_EXPIRE_FAIL, err))) {
            json_decref(res);
            return KG_EIO;
        }
        sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, now);
        rc = step_done(&s->w, st, err);
        if (rc == 0)
            rc = set_result(s, id, res, err);
        json_decref(res);
        if (rc == 0)
            out->failed++;
        return rc;
    }
    if (!(st = stmt(&s->w, ST_REQUEUE, err)))
        return KG_EIO;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, s->next_qseq++);
    if ((rc = step_done(&s->w, st, err)) == 0)
        out->requeued++;
    return rc;
}

typedef struct expired_row {
    char id[KG_MAX_TASK_ID + 1];
    char worker[KG_MAX_WORKER_ID + 1];
    int attempts;
} expired_row;

static int sq_requeue_expired(kg_store *base, int max_attempts,
                              kg_requeue_counts *out, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t now = kg_store_now_ms();
    int64_t alive_after = now - base->opts.worker_ttl_ms;
    expired_row *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->wmu);
    int64_t qseq0 = s->next_qseq;
    int rc = w_begin(s, err);
    sqlite3_stmt *st = NULL;
    if (rc == 0 && !(st = stmt(&s->w, ST_DEAD_HOLDERS, err)))
        rc = KG_EIO;
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, alive_after);
        if (sqlite3_step(st) == SQLITE_ROW)
            out->dead_workers = sqlite3_column_int(st, 0);
        sqlite3_reset(st);
        if (!(st = stmt(&s->w, ST_EXPIRED, err)))
            rc = KG_EIO;
    }
    if (rc == 0) {
        /* collect first: the updates below move rows out of the scan */
        sqlite3_bind_int64(st, 1, now);
        sqlite3_bind_int64(st, 2, alive_after);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                expired_row *nr = realloc(rows, nc * sizeof *rows);
                if (!nr) {
                    rc = kg_errf(err, KG_ENOMEM, "out of memory");
                    break;
                }
                rows = nr;
                cap = nc;
            }
            copy_col(rows[n].id, sizeof rows[n].id, st, 0);
            rows[n].attempts = sqlite3_column_int(st, 1);
            copy_col(rows[n].worker, sizeof rows[n].worker, st, 2);
            n++;
        }
        if (rc == 0 && r != SQLITE_DONE)
            rc = db_err(s->w.db, err, "requeue");
        sqlite3_reset(st);
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = expire_one(s, rows[i].id, rows[i].attempts, rows[i].worker,
                        max_attempts, now, out, err);
    if (rc == 0 && n > 0)
        rc = counter_add(s, "lease_expiries", (long long)n, err);
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    if (rc < 0) {
        s->next_qseq = qseq0;
        out->requeued = out->failed = out->dead_workers = 0;
    }
    pthread_mutex_unlock(&s->wmu);
    free(rows);
    return rc;
}

static int sq_cache_get(kg_store *base, const char *key, json_t **result,
                        kg_err *err)
{
    sq_store *s = (sq_store *)base;
    conn *c = reader_get(s);
    int rc;
    sqlite3_stmt *st = stmt(c, ST_CACHE_GET, err);
    if (!st) {
        rc = KG_EIO;
    } else {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            *result =
                kg_store_json_parse((const char *)sqlite3_column_text(st, 0),
                                    (size_t)sqlite3_column_bytes(st, 0));
            rc =
                *result ? 1 : kg_errf(err, KG_EPARSE, "cache entry is corrupt");
        } else if (r == SQLITE_DONE) {
            rc = 0;
        } else {
            rc = db_err(c->db, err, "cache");
        }
        sqlite3_reset(st);
    }
    reader_put(s, c);
    return rc;
}

static int sq_cache_put(kg_store *base, const char *key, const json_t *result,
                        kg_err *err)
{
    sq_store *s = (sq_store *)base;
    pthread_mutex_lock(&s->wmu);
    int rc;
    sqlite3_stmt *st = stmt(&s->w, ST_CACHE_PUT, err);
    if (!st) {
        rc = KG_EIO;
    } else {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, kg_store_now_ms());
        rc = bind_json(st, 2, result, err);
        if (rc == 0)
            rc = step_done(&s->w, st, err);
    }
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int sq_counts(kg_store *base, kg_store_counts *out, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    conn *c = reader_get(s);
    int rc = 0, r;
    sqlite3_stmt *st = stmt(c, ST_COUNTS, err);
    if (!st) {
        rc = KG_EIO;
        goto done;
    }
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        long long v = sqlite3_column_int64(st, 1);
        int i = name && name[1] ? atoi(name + 1) : -1;
        if (!name)
            continue;
        if (name[0] == 's' && i >= 0 && i < KG_NSTATUS)
            out->by_status[i] = v;
        else if (name[0] == 'p' && i >= 0 && i < KG_NPRIO)
            out->pending[i] = v;
        else if (name[0] == 'v' && i >= 0 && i < KG_NVERDICT)
            out->by_verdict[i] = v;
        else if (!strcmp(name, "lease_expiries"))
            out->lease_expiries = v;
    }
    sqlite3_reset(st);
    if (r != SQLITE_DONE) {
        rc = db_err(c->db, err, "counts");
        goto done;
    }
    if (!(st = stmt(c, ST_WORKER_COUNTS, err))) {
        rc = KG_EIO;
        goto done;
    }
    sqlite3_bind_int64(st, 1, kg_store_now_ms() - base->opts.worker_ttl_ms);
    if ((r = sqlite3_step(st)) == SQLITE_ROW) {
        out->workers_alive = sqlite3_column_int64(st, 0);
        out->workers_dead = sqlite3_column_int64(st, 1);
    } else {
        rc = db_err(c->db, err, "counts");
    }
    sqlite3_reset(st);
done:
    reader_put(s, c);
    return rc;
}

static int sq_worker_register(kg_store *base, const char *id,
                              const char *device, const char *host, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t now = kg_store_now_ms();
    pthread_mutex_lock(&s->wmu);
    int rc = w_begin(s, err);
    sqlite3_stmt *st = NULL;
    if (rc == 0 && !(st = stmt(&s->w, ST_DEV_OWNER, err)))
        rc = KG_EIO;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, host, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, device, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, now - base->opts.worker_ttl_ms);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW)
            rc =
                kg_errf(err, KG_ESTATE,
                        "device %s on host %s is held by live worker %s",
                        device, host, (const char *)sqlite3_column_text(st, 0));
        else if (r != SQLITE_DONE)
            rc = db_err(s->w.db, err, "register");
        sqlite3_reset(st);
    }
    /* a dead worker's claim is taken over; the sweep requeues its tasks */
    for (int which = ST_DEV_DROP; rc == 0 && which <= ST_WORKER_UPSERT;
         which++) {
        if (!(st = stmt(&s->w, which, err))) {
            rc = KG_EIO;
            break;
        }
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, which == ST_DEV_DROP ? 3 : 2, device, -1,
                          SQLITE_STATIC);
        sqlite3_bind_text(st, which == ST_DEV_DROP ? 2 : 3, host, -1,
                          SQLITE_STATIC);
        if (which == ST_WORKER_UPSERT)
            sqlite3_bind_int64(st, 4, now);
        rc = step_done(&s->w, st, err);
    }
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int sq_worker_heartbeat(kg_store *base, const char *id, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t now = kg_store_now_ms();
    pthread_mutex_lock(&s->wmu);
    int rc = w_begin(s, err);
    if (rc == 0) {
        rc = touch_worker(s, id, now, err);
        if (rc == 0)
            rc = kg_errf(err, KG_ENOTFOUND, "worker %s is not registered", id);
    }
    if (rc == 1) {
        sqlite3_stmt *st = stmt(&s->w, ST_EXTEND, err);
        if (!st) {
            rc = KG_EIO;
        } else {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, now + base->opts.lease_ms);
            rc = step_done(&s->w, st, err);
        }
    }
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    pthread_mutex_unlock(&s->wmu);
    return rc;
}

static int sq_worker_unregister(kg_store *base, const char *id, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    char(*held)[KG_MAX_TASK_ID + 1] = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->wmu);
    int64_t qseq0 = s->next_qseq;
    int rc = w_begin(s, err);
    sqlite3_stmt *st = NULL;
    if (rc == 0 && !(st = stmt(&s->w, ST_WORKER_DEL, err)))
        rc = KG_EIO;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        rc = step_done(&s->w, st, err);
        if (rc == 0 && sqlite3_changes(s->w.db) == 0)
            rc = kg_errf(err, KG_ENOTFOUND, "worker %s is not registered", id);
    }
    if (rc == 0 && !(st = stmt(&s->w, ST_HELD, err)))
        rc = KG_EIO;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 8;
                void *nh = realloc(held, nc * sizeof *held);
                if (!nh) {
                    rc = kg_errf(err, KG_ENOMEM, "out of memory");
                    break;
                }
                held = nh;
                cap = nc;
            }
            copy_col(held[n], sizeof held[n], st, 0);
            n++;
        }
        if (rc == 0 && r != SQLITE_DONE)
            rc = db_err(s->w.db, err, "unregister");
        sqlite3_reset(st);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!(st = stmt(&s->w, ST_REQUEUE, err))) {
            rc = KG_EIO;
            break;
        }
        sqlite3_bind_text(st, 1, held[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, s->next_qseq++);
        rc = step_done(&s->w, st, err);
    }
    if (rc == 0)
        rc = w_commit(s, err);
    else
        w_rollback(s);
    if (rc < 0)
        s->next_qseq = qseq0;
    pthread_mutex_unlock(&s->wmu);
    free(held);
    return rc;
}

static int sq_worker_list(kg_store *base, kg_worker **out, size_t *n,
                          kg_err *err)
{
    sq_store *s = (sq_store *)base;
    int64_t alive_after = kg_store_now_ms() - base->opts.worker_ttl_ms;
    conn *c = reader_get(s);
    kg_worker *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0, r;
    sqlite3_stmt *st = stmt(c, ST_WORKER_LIST, err);
    if (!st) {
        rc = KG_EIO;
        goto done;
    }
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            size_t nc = cap ? 2 * cap : 8;
            kg_worker *nv = realloc(v, nc * sizeof *v);
            if (!nv) {
                rc = kg_errf(err, KG_ENOMEM, "out of memory");
                break;
            }
            v = nv;
            cap = nc;
        }
        kg_worker *w = &v[cnt++];
        memset(w, 0, sizeof *w);
        copy_col(w->id, sizeof w->id, st, 0);
        copy_col(w->device, sizeof w->device, st, 1);
        copy_col(w->host, sizeof w->host, st, 2);
        w->registered_ms = sqlite3_column_int64(st, 3);
        w->last_seen_ms = sqlite3_column_int64(st, 4);
        w->alive = w->last_seen_ms > alive_after;
        w->running = sqlite3_column_int(st, 5);
    }
    if (rc == 0 && r != SQLITE_DONE)
        rc = db_err(c->db, err, "workers");
    sqlite3_reset(st);
done:
    reader_put(s, c);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int sq_describe(kg_store *base, char *buf, size_t size, kg_err *err)
{
    sq_store *s = (sq_store *)base;
    (void)err;
    snprintf(buf, size,
             "sqlite %s (SQLite %s), journal_mode=wal synchronous=%s", s->path,
             sqlite3_libversion(),
             base->opts.sqlite_sync_full ? "full" : "normal");
    return 0;
}

static void sq_close(kg_store *base)
{
    sq_store *s = (sq_store *)base;
    for (int i = 0; i < s->nreaders; i++)
        conn_close(&s->readers[i]);
    conn_close(&s->w);
    free(s->readers);
    free(s->idle);
    pthread_mutex_destroy(&s->wmu);
    pthread_mutex_destroy(&s->pmu);
    pthread_cond_destroy(&s->pcv);
    free(s);
}

static const struct kg_store_ops SQLITE_OPS = {
    .name = "sqlite",
    .close = sq_close,
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
    .counts = sq_counts,
    .worker_register = sq_worker_register,
    .worker_heartbeat = sq_worker_heartbeat,
    .worker_unregister = sq_worker_unregister,
    .worker_list = sq_worker_list,
};

int kg_store_sqlite_open(kg_store **out, const char *path,
                         const kg_store_opts *opts, kg_err *err)
{
    sq_store *s = calloc(1, sizeof *s);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    s->base.ops = &SQLITE_OPS;
    s->base.opts = *opts;
    snprintf(s->path, sizeof s->path, "%s", path);
    pthread_mutex_init(&s->wmu, NULL);
    pthread_mutex_init(&s->pmu, NULL);
    pthread_cond_init(&s->pcv, NULL);
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s;",
             opts->sqlite_sync_full ? "FULL" : "NORMAL");
    int rc = conn_open(&s->w, path, pragmas, err);
    char *msg = NULL;
    if (rc == 0 && sqlite3_exec(s->w.db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK)
        rc = kg_errf(err, KG_EIO, "sqlite %s: schema: %s", path,
                     msg ? msg : "failed");
    sqlite3_free(msg);
    if (rc == 0) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(s->w.db,
                               "SELECT coalesce(max(qseq), 0) FROM tasks", -1,
                               &st, NULL) != SQLITE_OK)
            rc = db_err(s->w.db, err, "open");
        else {
            if (sqlite3_step(st) == SQLITE_ROW)
                s->next_qseq = sqlite3_column_int64(st, 0) + 1;
            else
                rc = db_err(s->w.db, err, "open");
            sqlite3_finalize(st);
        }
    }
    if (rc == 0) {
        s->readers = calloc((size_t)opts->pool_size, sizeof *s->readers);
        s->idle = calloc((size_t)opts->pool_size, sizeof *s->idle);
        if (!s->readers || !s->idle)
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
    }
    for (int i = 0; rc == 0 && i < opts->pool_size; i++) {
        rc = conn_open(&s->readers[i], path, "PRAGMA query_only=1;", err);
        if (rc == 0) {
            s->idle[s->nidle++] = i;
            s->nreaders++;
        }
    }
    if (rc < 0) {
        sq_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
