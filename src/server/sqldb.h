/*
 * sqldb.h - one SQLite database file as the task store uses it (internal
 * to src/server/): a writer connection with group commit, a pool of
 * reader connections, and prepared statements cached per connection.
 *
 * Writes: kg_sqldb_write runs a caller's function inside the writer's
 * open transaction and returns once that transaction is on disk. Writes
 * that arrive while an fsync is running join one transaction, which the
 * next fsync makes durable for all of them at once (group commit). The
 * fsync of the WAL runs without the writer lock, so new writes gather
 * while the disk works. A failing write undoes only its own changes (a
 * savepoint), never those of the writes it shares a transaction with.
 *
 * Durability modes (kg_sqldb_open's sync_full):
 *   1  every write that returned >= 0 is on disk: the WAL is fdatasync'ed
 *      after the commit that holds it (SQLite runs with synchronous=NORMAL
 *      and kgym does the commit's sync itself, the one FULL would do);
 *   0  synchronous=NORMAL alone: a write survives kill -9 of the process
 *      (it is in the OS page cache), not a power cut.
 * Readers may see a write up to one fsync (~1 ms) before it is durable;
 * its writer is not answered before it is.
 *
 * Threads: every call is safe from any thread; kg_sqldb_close must not
 * race with the others.
 */
#ifndef KGYM_SERVER_SQLDB_H
#define KGYM_SERVER_SQLDB_H

#include <sqlite3.h>
#include <stdint.h>

#include "kgym/kgym.h"

/* A connection and its cached statements (by index into the SQL table). */
typedef struct kg_sqlconn {
    sqlite3 *db;
    sqlite3_stmt **st;
    const char *const *sql;
    int nsql;
} kg_sqlconn;

typedef struct kg_sqldb kg_sqldb;

/*
 * Opens (creating if needed) the database file path in WAL mode, runs
 * schema (may be NULL) on the writer, and opens nreaders read-only
 * connections. sql is a table of nsql statements, borrowed for the life
 * of the handle; kg_sqlconn_stmt prepares them on first use. *out is the
 * caller's, released with kg_sqldb_close.
 */
int kg_sqldb_open(kg_sqldb **out, const char *path, int sync_full, int nreaders,
                  const char *const *sql, int nsql, const char *schema,
                  kg_err *err);
void kg_sqldb_close(kg_sqldb *d);

/* "full (group commit)", "full" (SQLite syncs) or "normal". */
const char *kg_sqldb_sync_name(const kg_sqldb *d);

/* 1 when writes can be deferred (group commit; see below). */
int kg_sqldb_defers(const kg_sqldb *d);

/*
 * A write: returns >= 0 to keep its changes (that value is what
 * kg_sqldb_write returns once they are durable), < 0 to undo them (the
 * error is returned at once, without waiting for anyone's fsync). It runs
 * with the writer to itself, in a transaction other writes share, so it
 * must not commit, roll back or keep statements running. Its error text
 * goes into err.
 */
typedef int (*kg_sqldb_fn)(kg_sqlconn *c, void *arg, kg_err *err);

/*
 * Runs fn on the writer and returns its value once its changes are on
 * disk (see the modes above). If the commit or the fsync fails, returns
 * KG_EIO (KG_EUNAVAIL when the file is locked by another process) with
 * the reason in err, and fn's changes may be lost; the caller must then
 * undo whatever fn handed out (memory it allocated into arg). After a
 * failed fsync every later write fails too: the kernel may have dropped
 * the pages, so nothing more can be promised until a restart.
 */
int kg_sqldb_write(kg_sqldb *d, kg_sqldb_fn fn, void *arg, kg_err *err);

/*
 * Runs fn on a reader connection (waits for an idle one); fn's value.
 * On a thread whose deferred writes (below) are pending it runs on the
 * writer instead, so that a request reads what it wrote.
 */
int kg_sqldb_read(kg_sqldb *d, kg_sqldb_fn fn, void *arg, kg_err *err);

/*
 * Deferred durability, for a thread that must not block for an fsync (an
 * HTTP thread serving many connections). Between kg_sqldb_defer_begin and
 * kg_sqldb_defer_end, a kg_sqldb_write on a group-commit database (mode
 * "full (group commit)") returns fn's value as soon as fn ran, before the
 * commit and the fsync; the writes are gathered under one ticket.
 * kg_sqldb_defer_end then returns 0 when there was none (done_fn is not
 * called), or 1: done_fn(arg, rc, msg) will be called exactly once, on
 * the syncer's thread or on this one before kg_sqldb_defer_end returns,
 * when all of them are durable (rc 0, msg NULL) or one failed (rc < 0,
 * the reason in msg; its changes are lost and whatever the request
 * answered must not be sent). The caller must not reply before. Other
 * modes ignore the deferral (writes wait, as without it).
 * kg_sqldb_defer_pending: 1 when this thread has deferred writes since
 * kg_sqldb_defer_begin.
 */
typedef void (*kg_sqldb_done_fn)(void *arg, int rc, const char *msg);
void kg_sqldb_defer_begin(void);
int kg_sqldb_defer_pending(void);
/* 1 when a write since kg_sqldb_defer_begin failed with KG_EUNAVAIL at
 * once, before any was deferred, because another process holds the
 * database's write lock: nothing was written, and the caller should run
 * the request again without deferral, on a thread that may wait. */
int kg_sqldb_defer_blocked(void);
int kg_sqldb_defer_end(kg_sqldb_done_fn done_fn, void *arg);

/* What the writer has done so far. */
typedef struct kg_sqldb_stats {
    uint64_t writes;  /* kg_sqldb_write calls whose fn kept its changes */
    uint64_t commits; /* transactions committed (each holds >= 1 write) */
    uint64_t syncs;   /* fsyncs of the WAL by kgym (0 unless group commit) */
    uint64_t durable_seq; /* every write numbered up to this is durable */
    uint64_t checkpoints; /* by the background checkpointer */
} kg_sqldb_stats;

void kg_sqldb_stats_get(kg_sqldb *d, kg_sqldb_stats *out);

/*
 * Inside a write: the sequence number of this write (1, 2, ...). After
 * kg_sqldb_write returned >= 0, stats.durable_seq >= that number: tests
 * use this to check that no write returns before its fsync.
 */
uint64_t kg_sqldb_write_seq(kg_sqldb *d);

/*
 * For tests: every fsync of the group commit takes ms longer, as on a
 * slow disk, so that concurrent writes are sure to gather.
 */
void kg_sqldb_test_slow_sync(kg_sqldb *d, int ms);

/* ---- statements (on the connection a kg_sqldb_fn was given) ---- */

/* Cached statement `which`, reset and unbound; NULL with err on error. */
sqlite3_stmt *kg_sqlconn_stmt(kg_sqlconn *c, int which, kg_err *err);

/*
 * One step of st: 1 = a row is ready, 0 = done (st reset), < 0 = error
 * (st reset, message in err).
 */
int kg_sqlconn_row(kg_sqlconn *c, sqlite3_stmt *st, kg_err *err);

/* Runs st to the end, ignoring rows; 0 or < 0. st is reset either way. */
int kg_sqlconn_exec(kg_sqlconn *c, sqlite3_stmt *st, kg_err *err);

/* Rows changed by the last statement of c. */
int kg_sqlconn_changes(kg_sqlconn *c);

/* The connection's last error as a KG_E* code and message about `what`. */
int kg_sqlconn_err(kg_sqlconn *c, kg_err *err, const char *what);

#endif
