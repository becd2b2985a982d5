/*
 * sqldb_write.c - the writer of the task store's SQLite database (sqldb.h):
 * group commit, deferred durability, and the syncer thread.
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/sqldb_impl.h"

/* This thread's deferral: on between kg_sqldb_defer_begin and _end. */
static _Thread_local struct {
    int on;
    int blocked; /* a write gave up: it would have waited for a lock */
    struct kg_sqldb_ticket *t;
} tl_defer;

#define BUSY_WAIT_MS 5000 /* for a lock another process holds */
#define BUSY_STEP_MS 2
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
void sqldb__unlock_and_fire(kg_sqldb *d)
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
void *sqldb__syncer_main(void *arg)
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
        sqldb__unlock_and_fire(d);
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
    sqldb__unlock_and_fire(d);
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
    sqldb__unlock_and_fire(d);
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

/* 1 if this thread's deferral has written to d: its reads must then run
   on the writer, which sees what is not committed yet. */
int sqldb__deferred_on(const kg_sqldb *d)
{
    return tl_defer.t && tl_defer.t->d == d;
}
