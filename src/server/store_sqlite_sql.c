/*
 * store_sqlite_sql.c - the SQLite store's SQL: the statement of every
 * store call (sq__sql, indexed by ST_*), the schema, and the write that
 * creates the tables or brings an older file's to the current version.
 */
#include "server/store_sqlite.h"

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

const char *const sq__sql[ST_N] = {
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
    [ST_SECRET_GET] = "SELECT digest FROM worker_secrets WHERE id = ?1",
    [ST_SECRET_SET] = "INSERT INTO worker_secrets(id, digest) VALUES (?1, ?2)"
                      " ON CONFLICT(id) DO UPDATE SET digest = excluded.digest",
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
    " last_seen INTEGER NOT NULL);"
    /* a table of its own, so files from before get it without a migration */
    "CREATE TABLE IF NOT EXISTS worker_secrets(id TEXT PRIMARY KEY,"
    " digest TEXT NOT NULL) WITHOUT ROWID;";
// clang-format on

/* Version 1 (task_data keyed by the task id) to version 2. */
static const char MIGRATE_V1[] =
    "ALTER TABLE task_data RENAME TO task_data_v1;"
    "CREATE TABLE task_data(rid INTEGER PRIMARY KEY, request TEXT NOT NULL,"
    " result TEXT);"
    "INSERT INTO task_data(rid, request, result) SELECT tasks.rowid,"
    " d.request, d.result FROM task_data_v1 d JOIN tasks USING (id);"
    "DROP TABLE task_data_v1;";

/*
 * Creates the tables, or brings those of an older kgym to SCHEMA_VERSION
 * (a write at open). A database from a newer kgym is refused.
 */
int sq__w_schema(kg_sqlconn *c, void *arg, kg_err *err)
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
