/*
 * sqldb_impl.h - what sqldb.c (statements, readers, checkpoints, open)
 * and sqldb_write.c (the writer and its group commit) share: the
 * database's struct and the writer's records. Internal to src/server/sqldb*.c.
 */
#ifndef KGYM_SQLDB_IMPL_H
#define KGYM_SQLDB_IMPL_H

#include <pthread.h>

#include "server/sqldb.h"

/* How writes reach the disk. */
enum {
    SYNC_GROUP,  /* synchronous=NORMAL + our fdatasync of the WAL */
    SYNC_SQLITE, /* synchronous=FULL: SQLite syncs in COMMIT (fallback) */
    SYNC_NONE,   /* synchronous=NORMAL, no sync per commit */
};

/* The writer's own statements. */
enum { TX_BEGIN, TX_COMMIT, TX_ROLLBACK, TX_SAVE, TX_RELEASE, TX_UNDO, TX_N };

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

/* sqldb_write.c */

/* Unlocks wmu, then calls the callbacks of the tickets that are done. */
void sqldb__unlock_and_fire(kg_sqldb *d);
/* The syncer thread (SYNC_GROUP): commits, fsyncs, wakes the writes. */
void *sqldb__syncer_main(void *arg);
int sqldb__deferred_on(const kg_sqldb *d);

#endif
