/*
 * sqldb.c - SQLite connections for the task store (sqldb.h): cached
 * statements, the pool of readers, the checkpointer, open and close. The
 * writer and its group commit are in sqldb_write.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/sqldb_impl.h"

/* The writer's own statements. */
static const char *const TX_SQL[TX_N] = {
    [TX_BEGIN] = "BEGIN IMMEDIATE", [TX_COMMIT] = "COMMIT",
    [TX_ROLLBACK] = "ROLLBACK",     [TX_SAVE] = "SAVEPOINT w",
    [TX_RELEASE] = "RELEASE w",     [TX_UNDO] = "ROLLBACK TO w",
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

/* ---- readers ------------------------------------------------------------ */

int kg_sqldb_read(kg_sqldb *d, kg_sqldb_fn fn, void *arg, kg_err *err)
{
    if (sqldb__deferred_on(d)) {
        /* this request wrote, and its write may not be committed yet: a
           reader would not see it, the writer does */
        pthread_mutex_lock(&d->wmu);
        int rc = fn(&d->w, arg, err);
        for (int i = 0; i < d->nsql; i++)
            if (d->w.st[i])
                sqlite3_reset(d->w.st[i]);
        sqldb__unlock_and_fire(d);
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
        if (pthread_create(&d->sthread, NULL, sqldb__syncer_main, d) != 0)
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
