/*
 * sqldb.c - SQLite connections for the task store: a writer with group
 * commit, a pool of readers, cached statements (sqldb.h).
 *
 * Group commit. Every write runs under the writer lock inside the open
 * transaction (BEGIN IMMEDIATE by the first write to arrive), in a
 * savepoint of its own. Then it waits until its transaction is durable:
 *
 *   open txn --COMMIT (no fsync, synchronous=NORMAL)--> committed --
 *   fdatasync(WAL), without the lock--> durable
 *
 * Only one fsync runs at a time. A write that finds none running commits
 * the open transaction and runs the fsync itself; a write that finds one
 * running waits, and when it ends the first waiter to wake commits what
 * gathered meanwhile and runs the next fsync for all of it. So an idle
 * store answers one write after one commit and one fsync, and a busy one
 * answers a whole group per fsync. Each waiter is a record on its
 * caller's stack, on the list of its transaction; whoever commits or
 * syncs a list sets done (and the error, if any) on every record of it.
 *
 * Why the fsync is kgym's and not SQLite's: with synchronous=FULL SQLite
 * syncs inside COMMIT, holding the only writer, so no write could gather
 * while the disk works. synchronous=NORMAL plus an fdatasync of the WAL
 * after the commit is what FULL does (in WAL mode FULL adds exactly one
 * sync of the WAL per commit); the WAL header and checkpoints are synced
 * by SQLite itself in both modes. The directory is synced once at open so
 * the WAL's name survives a power cut too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/sqldb.h"

/* How writes reach the disk. */
enum {
    SYNC_GROUP,  /* synchronous=NORMAL + our fdatasync of the WAL */
    SYNC_SQLITE, /* synchronous=FULL: SQLite syncs in COMMIT (fallback) */
    SYNC_NONE,   /* synchronous=NORMAL, no sync per commit */
};

/* The writer's own statements. */
enum { TX_BEGIN, TX_COMMIT, TX_ROLLBACK, TX_SAVE, TX_RELEASE, TX_UNDO, TX_N };
static const char *const TX_SQL[TX_N] = {
    [TX_BEGIN] = "BEGIN IMMEDIATE", [TX_COMMIT] = "COMMIT",
    [TX_ROLLBACK] = "ROLLBACK",     [TX_SAVE] = "SAVEPOINT w",
    [TX_RELEASE] = "RELEASE w",     [TX_UNDO] = "ROLLBACK TO w",
};

/* One write waiting for its transaction to be durable. A blocking one
   (ticket NULL) is on its caller's stack and has its own condition
   variable, so that the end of an fsync wakes only the writes it made
   durable. A deferred one (kg_sqldb_defer_begin) is on the heap and
   counts down its request's ticket instead. */
struct waiter {
    struct waiter *next;
    pthread_cond_t cv;
    int committed; /* its transaction is committed (not yet synced) */
    int done;      /* durable, or failed with rc */
    int rc;
    kg_err *err; /* the caller's; may be NULL */
    struct kg_sqldb_ticket *ticket;
};

/* The deferred writes of one request (all fields under the db's wmu). */
struct kg_sqldb_ticket {
    kg_sqldb *d;
    int npending; /* its writes not yet durable or failed */
    int armed;    /* kg_sqldb_defer_end gave fn */
    int rc;       /* the first failure, or 0 */
    char msg[KG_ERR_MAX];
    kg_sqldb_done_fn fn;
    void *arg;
    struct kg_sqldb_ticket *next; /* on the db's fire list */
};

/* This thread's deferral: on between kg_sqldb_defer_begin and _end. */
static _Thread_local struct {
    int on;
    int blocked; /* a write gave up: it would have waited for a lock */
    struct kg_sqldb_ticket *t;
} tl_defer;

#define BUSY_WAIT_MS 5000 /* for a lock another process holds */
#define BUSY_STEP_MS 2

/* A list of waiters with a tail pointer, in arrival order. */
struct wlist {
    struct waiter *head, **tail;
};

struct kg_sqldb {
    char path[4096];
    int mode;  /* SYNC_* */
    int walfd; /* the WAL, for SYNC_GROUP; -1 otherwise */
    const char *const *sql;
    int nsql;

    pthread_mutex_t wmu; /* the writer and everything down to stats */
    kg_sqlconn w;
    sqlite3_stmt *tx[TX_N];
    int txn_open;
    struct wlist open;     /* writes in the open transaction */
    struct wlist unsynced; /* committed, waiting for the next fsync */
    int syncing;           /* an fsync is running (without wmu) */
    int broken;            /* an fsync failed: no more writes */
    int test_delay_ms;     /* kg_sqldb_test_slow_sync */
    char broken_msg[KG_ERR_MAX];
    uint64_t seq, committed_seq;  /* write numbers */
    struct kg_sqldb_ticket *fire; /* tickets done, to call outside wmu */
    pthread_cond_t scv;           /* wakes the syncer (SYNC_GROUP) */
    pthread_t sthread;
    int sstarted, sstop;
    int ckpt_mark; /* WAL pages at the last background checkpoint */
    kg_sqldb_stats stats;

    pthread_mutex_t pmu; /* the reader pool */
    pthread_cond_t pcv;
    kg_sqlconn *readers;
    int nreaders;
    int *idle; /* stack of idle reader indices */
    int nidle;

    /* the checkpointer: a thread with a connection of its own */
    pthread_mutex_t cmu; /* the fields below */
    pthread_cond_t ccv;
    sqlite3 *cdb;
    pthread_t cthread;
    int cstarted, cwanted, cstop;
    uint64_t checkpoints;
};

/* ---- connections and statements ---------------------------------------- */

int kg_sqlconn_err(kg_sqlconn *c, kg_err *err, const char *what)
{
    int code = sqlite3_errcode(c->db);
    int kc = KG_EIO;
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        kc = KG_EUNAVAIL;
    else if (code == SQLITE_NOMEM)
        kc = KG_ENOMEM;
    return kg_errf(err, kc, "sqlite %s: %s", what, sqlite3_errmsg(c->db));
}

sqlite3_stmt *kg_sqlconn_stmt(kg_sqlconn *c, int which, kg_err *err)
{
    sqlite3_stmt *st = c->st[which];
    if (!st) {
        if (sqlite3_prepare_v3(c->db, c->sql[which], -1,
                               SQLITE_PREPARE_PERSISTENT, &st,
                               NULL) != SQLITE_OK) {
            kg_sqlconn_err(c, err, "prepare");
            return NULL;
        }
        c->st[which] = st;
    } else {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    return st;
}

int kg_sqlconn_row(kg_sqlconn *c, sqlite3_stmt *st, kg_err *err)
{
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW)
        return 1;
    int rc = r == SQLITE_DONE ? 0 : kg_sqlconn_err(c, err, "step");
    sqlite3_reset(st);
    return rc;
}

int kg_sqlconn_exec(kg_sqlconn *c, sqlite3_stmt *st, kg_err *err)
{
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW)
        ;
    int rc = r == SQLITE_DONE ? 0 : kg_sqlconn_err(c, err, "step");
    sqlite3_reset(st);
    return rc;
}

int kg_sqlconn_changes(kg_sqlconn *c)
{
    return sqlite3_changes(c->db);
}

static void conn_close(kg_sqlconn *c)
{
    for (int i = 0; c->st && i < c->nsql; i++)
        sqlite3_finalize(c->st[i]);
    free(c->st);
    sqlite3_close(c->db);
    memset(c, 0, sizeof *c);
}

static int conn_open(kg_sqlconn *c, const kg_sqldb *d, const char *pragmas,
                     kg_err *err)
{
    memset(c, 0, sizeof *c);
    c->sql = d->sql;
    c->nsql = d->nsql;
    if (!(c->st = calloc((size_t)d->nsql, sizeof *c->st)))
        return kg_errf(err, KG_ENOMEM, "out of memory");
    int flags =
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(d->path, &c->db, flags, NULL) != SQLITE_OK) {
        int rc = kg_errf(err, KG_EIO, "sqlite open %s: %s", d->path,
                         c->db ? sqlite3_errmsg(c->db) : "out of memory");
        conn_close(c);
        return rc;
    }
    sqlite3_busy_timeout(c->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(c->db, pragmas, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = kg_errf(err, KG_EIO, "sqlite %s: %s", d->path,
                         msg ? msg : "setup failed");
        sqlite3_free(msg);
        conn_close(c);
        return rc;
    }
    return 0;
}

/* ---- the writer --------------------------------------------------------- */

static int tx(kg_sqldb *d, int which, kg_err *err)
{
    return kg_sqlconn_exec(&d->w, d->tx[which], err);
}

/* A ticket whose writes are all done and whose fn is known goes on the
   fire list (wmu held). */
static void ticket_check(kg_sqldb *d, struct kg_sqldb_ticket *t)
{
    if (t->armed && t->npending == 0) {
        t->next = d->fire;
        d->fire = t;
    }
}

/* Marks every waiter of l done with rc (message msg when rc < 0) and
   wakes it, or counts down its ticket (wmu held). */
static void finish(kg_sqldb *d, struct wlist *l, int rc, const char *msg)
{
    struct waiter *next;
    for (struct waiter *w = l->head; w; w = next) {
        next = w->next; /* w may be gone once woken */
        struct kg_sqldb_ticket *t = w->ticket;
        if (t) {
            if (rc < 0 && t->rc == 0) {
                t->rc = rc;
                snprintf(t->msg, sizeof t->msg, "%s", msg);
            }
            t->npending--;
            ticket_check(d, t);
            free(w);
            continue;
        }
        if (rc < 0)
            kg_errf(w->err, rc, "%s", msg);
        w->rc = rc;
        w->done = 1;
        pthread_cond_signal(&w->cv);
    }
    l->head = NULL;
    l->tail = &l->head;
}

/* Releases wmu, then calls the fn of every ticket on the fire list (the
   callers' callbacks must not run under the writer lock) and frees it. */
static void unlock_and_fire(kg_sqldb *d)
{
    struct kg_sqldb_ticket *t = d->fire;
    d->fire = NULL;
    pthread_mutex_unlock(&d->wmu);
    while (t) {
        struct kg_sqldb_ticket *next = t->next;
        t->fn(t->arg, t->rc, t->rc < 0 ? t->msg : NULL);
        free(t);
        t = next;
    }
}

/* Appends l to the end of into; l becomes empty. */
static void wlist_move(struct wlist *into, struct wlist *l)
{
    if (!l->head)
        return;
    *into->tail = l->head;
    into->tail = l->tail;
    l->head = NULL;
    l->tail = &l->head;
}

/*
 * Commits the open transaction (wmu held). Its writes become committed
 * (SYNC_GROUP: they now wait for an fsync) or done; on failure they are
 * all done with the error.
 */
static void commit_open(kg_sqldb *d)
{
    kg_err e;
    int rc = d->broken ? kg_errf(&e, KG_EIO, "%s", d->broken_msg)
                       : tx(d, TX_COMMIT, &e);
    if (rc < 0 && !sqlite3_get_autocommit(d->w.db))
        tx(d, TX_ROLLBACK, NULL);
    d->txn_open = 0;
    if (rc < 0) {
        finish(d, &d->open, rc == KG_EUNAVAIL ? rc : KG_EIO, e.msg);
        return;
    }
    d->stats.commits++;
    d->committed_seq = d->seq;
    if (d->mode != SYNC_GROUP) {
        d->stats.durable_seq = d->committed_seq;
        finish(d, &d->open, 0, NULL);
        return;
    }
    for (struct waiter *w = d->open.head; w; w = w->next)
        w->committed = 1;
    wlist_move(&d->unsynced, &d->open);
}

/*
 * One fsync of the WAL for everything committed so far (wmu held on entry
 * and exit, released around the fsync).
 */
static void sync_round(kg_sqldb *d)
{
    struct wlist batch = {d->unsynced.head, d->unsynced.tail};
    if (!batch.head)
        batch.tail = &batch.head;
    d->unsynced.head = NULL;
    d->unsynced.tail = &d->unsynced.head;
    uint64_t target = d->committed_seq;
    int delay_ms = d->test_delay_ms;
    d->syncing = 1;
    pthread_mutex_unlock(&d->wmu);
    int r = fdatasync(d->walfd);
    int e = errno;
    if (delay_ms > 0) {
        struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&d->wmu);
    d->syncing = 0;
    d->stats.syncs++;
    if (r != 0 && !d->broken) {
        d->broken = 1;
        snprintf(d->broken_msg, sizeof d->broken_msg,
                 "sqlite %.60s: fsync of the WAL failed (%.40s); writes since "
                 "the last good fsync may be lost, restart the server",
                 d->path, strerror(e));
    }
    if (r != 0) {
        finish(d, &batch, KG_EIO, d->broken_msg);
    } else {
        if (target > d->stats.durable_seq)
            d->stats.durable_seq = target;
        finish(d, &batch, 0, NULL);
    }
}

/*
 * The syncer (SYNC_GROUP only): the one thread that commits and fsyncs.
 * While an fsync runs, writes gather in the open transaction; when it
 * ends, the syncer commits them and runs the next fsync for all of them.
 * Blocking writers wait on their own condition variable; deferred ones
 * have their tickets' fns called here, outside the lock. It stops once
 * asked to and nothing is left to commit.
 */
static void *syncer_main(void *arg)
{
    kg_sqldb *d = arg;
    pthread_mutex_lock(&d->wmu);
    for (;;) {
        while (!d->sstop && !d->open.head && !d->unsynced.head)
            pthread_cond_wait(&d->scv, &d->wmu);
        if (!d->open.head && !d->unsynced.head)
            break;
        if (d->open.head)
            commit_open(d);
        if (d->unsynced.head)
            sync_round(d);
        unlock_and_fire(d);
        pthread_mutex_lock(&d->wmu);
    }
    pthread_mutex_unlock(&d->wmu);
    return NULL;
}

/*
 * The writes of the open transaction lost their changes because SQLite
 * rolled the whole transaction back after an error (wmu held).
 */
static void lost_txn(kg_sqldb *d, const kg_err *why)
{
    char msg[KG_ERR_MAX];
    snprintf(msg, sizeof msg, "transaction rolled back: %.200s", why->msg);
    d->txn_open = 0;
    finish(d, &d->open, KG_EIO, msg);
}

/*
 * Puts a deferred waiter for the write just made on the open transaction,
 * under this thread's ticket (wmu held). Returns 0 when it cannot (out of
 * memory, or the ticket is another database's): the write then waits.
 */
static int defer(kg_sqldb *d)
{
    struct kg_sqldb_ticket *t = tl_defer.t;
    if (t && t->d != d)
        return 0;
    struct waiter *w = calloc(1, sizeof *w);
    if (!w)
        return 0;
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) {
            free(w);
            return 0;
        }
        t->d = d;
        tl_defer.t = t;
    }
    w->ticket = t;
    t->npending++;
    *d->open.tail = w;
    d->open.tail = &w->next;
    return 1;
}

/*
 * Opens the transaction when none is (wmu held). Another process may hold
 * the database's write lock (a backup, an sqlite3 shell): the writer has
 * no busy timeout, so that no thread waits for it holding wmu; a write
 * waits here with wmu released, BUSY_STEP_MS at a time, at most
 * BUSY_WAIT_MS, then fails with KG_EUNAVAIL. A deferring thread with no
 * deferred write yet gives up at once instead (kg_sqldb_defer_blocked):
 * its caller then runs the request where it may block.
 */
static int begin(kg_sqldb *d, kg_err *err)
{
    for (int waited = 0;;) {
        if (d->broken)
            return kg_errf(err, KG_EIO, "%s", d->broken_msg);
        if (d->txn_open)
            return 0;
        int rc = tx(d, TX_BEGIN, err);
        if (rc == 0) {
            d->txn_open = 1;
            return 0;
        }
        if (rc != KG_EUNAVAIL || waited >= BUSY_WAIT_MS)
            return rc;
        if (tl_defer.on && !tl_defer.t) {
            tl_defer.blocked = 1;
            return rc;
        }
        pthread_mutex_unlock(&d->wmu);
        struct timespec ts = {0, BUSY_STEP_MS * 1000000L};
        nanosleep(&ts, NULL);
        waited += BUSY_STEP_MS;
        pthread_mutex_lock(&d->wmu);
    }
}

void kg_sqldb_defer_begin(void)
{
    tl_defer.on = 1;
    tl_defer.blocked = 0;
    tl_defer.t = NULL;
}

int kg_sqldb_defer_blocked(void)
{
    return tl_defer.blocked;
}

int kg_sqldb_defer_pending(void)
{
    return tl_defer.t != NULL;
}

int kg_sqldb_defer_end(kg_sqldb_done_fn fn, void *arg)
{
    struct kg_sqldb_ticket *t = tl_defer.t;
    tl_defer.on = 0;
    tl_defer.t = NULL;
    if (!t)
        return 0;
    kg_sqldb *d = t->d;
    pthread_mutex_lock(&d->wmu);
    t->fn = fn;
    t->arg = arg;
    t->armed = 1;
    ticket_check(d, t);
    unlock_and_fire(d);
    return 1;
}

int kg_sqldb_write(kg_sqldb *d, kg_sqldb_fn fn, void *arg, kg_err *err)
{
    kg_err e2;
    if (!err)
        err = &e2;
    pthread_mutex_lock(&d->wmu);
    int rc = 0;
    if (d->broken) {
        rc = kg_errf(err, KG_EIO, "%s", d->broken_msg);
        goto out;
    }
    if ((rc = begin(d, err)) < 0)
        goto out;
    /* alone in the transaction: a failure rolls the whole of it back;
       else a savepoint keeps the others' changes */
    int alone = !d->open.head;
    if (!alone && (rc = tx(d, TX_SAVE, err)) < 0) {
        if (sqlite3_get_autocommit(d->w.db))
            lost_txn(d, err);
        goto out;
    }
    d->seq++;
    rc = fn(&d->w, arg, err);
    if (rc >= 0 && !alone && tx(d, TX_RELEASE, err) < 0)
        rc = KG_EIO;
    if (rc < 0) {
        if (sqlite3_get_autocommit(d->w.db)) {
            lost_txn(d, err);
        } else if (alone) {
            tx(d, TX_ROLLBACK, NULL);
            d->txn_open = 0;
        } else {
            tx(d, TX_UNDO, NULL);
            tx(d, TX_RELEASE, NULL);
        }
        goto out;
    }
    d->stats.writes++;
    if (d->mode == SYNC_GROUP && tl_defer.on && defer(d)) {
        pthread_cond_signal(&d->scv);
        goto out; /* fn's value now; its ticket tells when durable */
    }
    struct waiter w = {.err = err};
    pthread_cond_init(&w.cv, NULL);
    *d->open.tail = &w;
    d->open.tail = &w.next;
    if (d->mode == SYNC_GROUP) {
        pthread_cond_signal(&d->scv);
        while (!w.done)
            pthread_cond_wait(&w.cv, &d->wmu);
    }
    while (!w.done) { /* SYNC_SQLITE, SYNC_NONE: the commit is durable */
        commit_open(d);
    }
    pthread_cond_destroy(&w.cv);
    if (w.rc < 0)
        rc = w.rc;
out:
    unlock_and_fire(d);
    return rc;
}

void kg_sqldb_test_slow_sync(kg_sqldb *d, int ms)
{
    pthread_mutex_lock(&d->wmu);
    d->test_delay_ms = ms;
    pthread_mutex_unlock(&d->wmu);
}

uint64_t kg_sqldb_write_seq(kg_sqldb *d)
{
    return d->seq;
}

void kg_sqldb_stats_get(kg_sqldb *d, kg_sqldb_stats *out)
{
    pthread_mutex_lock(&d->wmu);
    *out = d->stats;
    pthread_mutex_unlock(&d->wmu);
    pthread_mutex_lock(&d->cmu);
    out->checkpoints = d->checkpoints;
    pthread_mutex_unlock(&d->cmu);
}

/* ---- readers ------------------------------------------------------------ */

int kg_sqldb_read(kg_sqldb *d, kg_sqldb_fn fn, void *arg, kg_err *err)
{
    if (tl_defer.t && tl_defer.t->d == d) {
        /* this request wrote, and its write may not be committed yet: a
           reader would not see it, the writer does */
        pthread_mutex_lock(&d->wmu);
        int rc = fn(&d->w, arg, err);
        for (int i = 0; i < d->nsql; i++)
            if (d->w.st[i])
                sqlite3_reset(d->w.st[i]);
        unlock_and_fire(d);
        return rc;
    }
    pthread_mutex_lock(&d->pmu);
    while (d->nidle == 0)
        pthread_cond_wait(&d->pcv, &d->pmu);
    int i = d->idle[--d->nidle];
    pthread_mutex_unlock(&d->pmu);
    int rc = fn(&d->readers[i], arg, err);
    /* a statement left stepped keeps the connection's read transaction,
     * and with it an old snapshot, open: the next read on this connection
     * would not see writes acknowledged since (a completed task read back
     * as pending). Reset them all: the next read starts fresh. */
    for (sqlite3_stmt *st = sqlite3_next_stmt(d->readers[i].db, NULL); st;
         st = sqlite3_next_stmt(d->readers[i].db, st))
        sqlite3_reset(st);
    pthread_mutex_lock(&d->pmu);
    d->idle[d->nidle++] = i;
    pthread_cond_signal(&d->pcv);
    pthread_mutex_unlock(&d->pmu);
    return rc;
}

/* ---- checkpoints ------------------------------------------------------- */

/*
 * Checkpoints (copying the WAL back into the database file) run on a
 * thread of their own with a connection of its own, not inside a COMMIT
 * of the writer as SQLite's automatic checkpoint would: a PASSIVE
 * checkpoint does not block writers, so no write waits for one. SQLite
 * syncs the WAL before and the database file after each checkpoint.
 */
#define CHECKPOINT_PAGES 1000 /* WAL growth that asks for one (4 MiB) */
/*
 * The WAL starts over from its beginning only when a checkpoint has
 * copied all of it before the writer's next transaction begins, which a
 * background checkpoint under a steady stream of writes rarely manages.
 * So the WAL grows; the background one runs once per CHECKPOINT_PAGES of
 * growth (not after every commit: each run costs two fsyncs, which
 * compete with the group commit's), and past CHECKPOINT_PAGES_MAX the
 * writer checkpoints in its commit, as SQLite's automatic checkpoint
 * would: by then the background runs have copied nearly everything, so
 * this is short, and the WAL starts over.
 */
#define CHECKPOINT_PAGES_MAX (4 * CHECKPOINT_PAGES)

/* After every commit of the writer (wmu held): the WAL holds pages. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    kg_sqldb *d = arg;
    if (pages < d->ckpt_mark) /* the WAL started over */
        d->ckpt_mark = 0;
    if (pages >= CHECKPOINT_PAGES_MAX) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL,
                                  NULL);
        d->ckpt_mark = 0;
        return SQLITE_OK;
    }
    if (pages >= d->ckpt_mark + CHECKPOINT_PAGES) {
        d->ckpt_mark = pages;
        pthread_mutex_lock(&d->cmu);
        d->cwanted = 1;
        pthread_cond_signal(&d->ccv);
        pthread_mutex_unlock(&d->cmu);
    }
    return SQLITE_OK;
}

static void *checkpointer_main(void *arg)
{
    kg_sqldb *d = arg;
    pthread_mutex_lock(&d->cmu);
    for (;;) {
        while (!d->cwanted && !d->cstop)
            pthread_cond_wait(&d->ccv, &d->cmu);
        if (d->cstop)
            break;
        d->cwanted = 0;
        pthread_mutex_unlock(&d->cmu);
        int log = 0, done = 0;
        int r = sqlite3_wal_checkpoint_v2(
            d->cdb, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        pthread_mutex_lock(&d->cmu);
        if (r == SQLITE_OK)
            d->checkpoints++;
    }
    pthread_mutex_unlock(&d->cmu);
    return NULL;
}

/* Starts the checkpointer and turns SQLite's own checkpoints off. */
static int start_checkpointer(kg_sqldb *d, kg_err *err)
{
    int flags =
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(d->path, &d->cdb, flags, NULL) != SQLITE_OK)
        return kg_errf(err, KG_EIO, "sqlite open %s (checkpointer): %s",
                       d->path,
                       d->cdb ? sqlite3_errmsg(d->cdb) : "out of memory");
    sqlite3_busy_timeout(d->cdb, 5000);
    sqlite3_exec(d->cdb, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
    if (pthread_create(&d->cthread, NULL, checkpointer_main, d) != 0)
        return kg_errf(err, KG_ENOMEM, "sqlite %s: no checkpoint thread",
                       d->path);
    d->cstarted = 1;
    sqlite3_wal_hook(d->w.db, wal_hook, d);
    return 0;
}

static void stop_checkpointer(kg_sqldb *d)
{
    if (d->cstarted) {
        pthread_mutex_lock(&d->cmu);
        d->cstop = 1;
        pthread_cond_signal(&d->ccv);
        pthread_mutex_unlock(&d->cmu);
        pthread_join(d->cthread, NULL);
        d->cstarted = 0;
    }
    sqlite3_close(d->cdb);
    d->cdb = NULL;
}

/* ---- open and close ----------------------------------------------------- */

int kg_sqldb_defers(const kg_sqldb *d)
{
    return d->mode == SYNC_GROUP && d->sstarted;
}

const char *kg_sqldb_sync_name(const kg_sqldb *d)
{
    switch (d->mode) {
    case SYNC_GROUP:
        return "full (group commit)";
    case SYNC_SQLITE:
        return "full";
    default:
        return "normal";
    }
}

/* fsync of the directory holding path, so a new file's name is durable. */
static int sync_dir(const char *path, kg_err *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return kg_errf(err, KG_EIO, "fsync of directory %s: %s", dir,
                       strerror(e));
    }
    close(fd);
    return 0;
}

/* The journal mode the writer runs in; 1 when it is WAL. */
static int in_wal_mode(kg_sqldb *d)
{
    sqlite3_stmt *st;
    int wal = 0;
    if (sqlite3_prepare_v2(d->w.db, "PRAGMA journal_mode", -1, &st, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) {
            const char *m = (const char *)sqlite3_column_text(st, 0);
            wal = m && !strcmp(m, "wal");
        }
        sqlite3_finalize(st);
    }
    return wal;
}

/*
 * Chooses how commits reach the disk: SYNC_GROUP when the WAL file can be
 * opened for our own fdatasync, else SQLite's synchronous=FULL.
 */
static int setup_sync(kg_sqldb *d, int sync_full, kg_err *err)
{
    d->walfd = -1;
    if (!sync_full) {
        d->mode = SYNC_NONE;
        return 0;
    }
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", d->path);
    /* a read opens (and creates) the WAL */
    sqlite3_exec(d->w.db, "SELECT count(*) FROM sqlite_master", NULL, NULL,
                 NULL);
    if (in_wal_mode(d))
        d->walfd = open(wal, O_RDONLY | O_CLOEXEC);
    if (d->walfd < 0) {
        d->mode = SYNC_SQLITE;
        char *msg = NULL;
        if (sqlite3_exec(d->w.db, "PRAGMA synchronous=FULL", NULL, NULL,
                         &msg) != SQLITE_OK) {
            int rc = kg_errf(err, KG_EIO, "sqlite %s: %s", d->path,
                             msg ? msg : "synchronous=FULL failed");
            sqlite3_free(msg);
            return rc;
        }
        return 0;
    }
    d->mode = SYNC_GROUP;
    if (fdatasync(d->walfd) != 0)
        return kg_errf(err, KG_EIO, "fsync of %s: %s", wal, strerror(errno));
    return sync_dir(d->path, err);
}

void kg_sqldb_close(kg_sqldb *d)
{
    if (!d)
        return;
    if (d->sstarted) {
        pthread_mutex_lock(&d->wmu);
        d->sstop = 1;
        pthread_cond_signal(&d->scv);
        pthread_mutex_unlock(&d->wmu);
        pthread_join(d->sthread, NULL);
    }
    stop_checkpointer(d);
    for (int i = 0; i < d->nreaders; i++)
        conn_close(&d->readers[i]);
    for (int i = 0; i < TX_N; i++)
        sqlite3_finalize(d->tx[i]);
    conn_close(&d->w);
    if (d->walfd >= 0)
        close(d->walfd);
    free(d->readers);
    free(d->idle);
    pthread_cond_destroy(&d->scv);
    pthread_mutex_destroy(&d->wmu);
    pthread_mutex_destroy(&d->pmu);
    pthread_cond_destroy(&d->pcv);
    pthread_mutex_destroy(&d->cmu);
    pthread_cond_destroy(&d->ccv);
    free(d);
}

int kg_sqldb_open(kg_sqldb **out, const char *path, int sync_full, int nreaders,
                  const char *const *sql, int nsql, const char *schema,
                  kg_err *err)
{
    *out = NULL;
    kg_sqldb *d = calloc(1, sizeof *d);
    if (!d)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    snprintf(d->path, sizeof d->path, "%s", path);
    d->sql = sql;
    d->nsql = nsql;
    d->walfd = -1;
    d->open.tail = &d->open.head;
    d->unsynced.tail = &d->unsynced.head;
    pthread_mutex_init(&d->wmu, NULL);
    pthread_cond_init(&d->scv, NULL);
    pthread_mutex_init(&d->pmu, NULL);
    pthread_cond_init(&d->pcv, NULL);
    pthread_mutex_init(&d->cmu, NULL);
    pthread_cond_init(&d->ccv, NULL);
    /* the writer's page cache: 16 MiB (SQLite's default is 2), so that
       the pages inserts and claims touch stay in memory */
    int rc = conn_open(&d->w, d,
                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                       " PRAGMA cache_size=-16384;",
                       err);
    char *msg = NULL;
    if (rc == 0 && schema &&
        sqlite3_exec(d->w.db, schema, NULL, NULL, &msg) != SQLITE_OK)
        rc = kg_errf(err, KG_EIO, "sqlite %s: schema: %s", path,
                     msg ? msg : "failed");
    sqlite3_free(msg);
    for (int i = 0; rc == 0 && i < TX_N; i++)
        if (sqlite3_prepare_v3(d->w.db, TX_SQL[i], -1,
                               SQLITE_PREPARE_PERSISTENT, &d->tx[i],
                               NULL) != SQLITE_OK)
            rc = kg_sqlconn_err(&d->w, err, "prepare");
    if (rc == 0)
        rc = setup_sync(d, sync_full, err);
    if (rc == 0)
        rc = start_checkpointer(d, err);
    if (rc == 0)
        sqlite3_busy_timeout(d->w.db, 0); /* see begin() */
    if (rc == 0 && d->mode == SYNC_GROUP) {
        if (pthread_create(&d->sthread, NULL, syncer_main, d) != 0)
            rc = kg_errf(err, KG_ENOMEM, "sqlite %s: no syncer thread", path);
        else
            d->sstarted = 1;
    }
    if (rc == 0) {
        d->readers = calloc((size_t)nreaders, sizeof *d->readers);
        d->idle = calloc((size_t)nreaders, sizeof *d->idle);
        if (!d->readers || !d->idle)
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
    }
    for (int i = 0; rc == 0 && i < nreaders; i++) {
        rc = conn_open(&d->readers[i], d, "PRAGMA query_only=1;", err);
        if (rc == 0) {
            d->idle[d->nidle++] = i;
            d->nreaders++;
        }
    }
    if (rc < 0) {
        kg_sqldb_close(d);
        return rc;
    }
    *out = d;
    return 0;
}
