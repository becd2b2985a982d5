/*
 * test_sqldb.c - the SQLite writer's group commit (src/server/sqldb.h) on
 * a real database file: concurrent writes share commits and fsyncs, none
 * returns before its fsync, a failing write undoes only its own changes,
 * and the durability modes are what they say.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/sqldb.h"

enum { Q_INSERT, Q_COUNT, Q_HAS, Q_N };
static const char *const SQL[Q_N] = {
    [Q_INSERT] = "INSERT INTO t(k, v) VALUES(?1, ?2)",
    [Q_COUNT] = "SELECT count(*) FROM t",
    [Q_HAS] = "SELECT 1 FROM t WHERE k = ?1",
};
static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT)";

static char dir[64];

/*
 * kgym's own fdatasync calls, counted apart from the stats the code under
 * test keeps: the Makefile links this test with -Wl,--wrap=fdatasync, so
 * sqldb.o's calls come here (SQLite's own, inside its shared library, do
 * not). fsync_done_max is the largest call number that has returned.
 */
int __real_fdatasync(int fd);
static atomic_ulong fsync_started, fsync_done_max;

int __wrap_fdatasync(int fd)
{
    unsigned long me = atomic_fetch_add(&fsync_started, 1) + 1;
    int r = __real_fdatasync(fd);
    unsigned long cur = atomic_load(&fsync_done_max);
    while (cur < me &&
           !atomic_compare_exchange_weak(&fsync_done_max, &cur, me))
        ;
    return r;
}

static kg_sqldb *open_db(const char *name, int sync_full)
{
    char path[128];
    kg_err err = {{0}};
    kg_sqldb *d = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = kg_sqldb_open(&d, path, sync_full, 2, SQL, Q_N, SCHEMA, &err);
    if (rc)
        print_error("open %s: %s\n", path, err.msg);
    assert_int_equal(rc, 0);
    return d;
}

/* One write: inserts key k; fails with KG_ESTATE after the insert when
   fail is set. Records the write's sequence number. */
struct ins {
    kg_sqldb *d;
    int64_t k;
    int fail;
    uint64_t seq;
    unsigned long fsyncs_before; /* fdatasync calls begun when it ran */
};

static int w_insert(kg_sqlconn *c, void *arg, kg_err *err)
{
    struct ins *a = arg;
    a->seq = kg_sqldb_write_seq(a->d);
    sqlite3_stmt *st = kg_sqlconn_stmt(c, Q_INSERT, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_int64(st, 1, a->k);
    sqlite3_bind_text(st, 2, "value", -1, SQLITE_STATIC);
    int rc = kg_sqlconn_exec(c, st, err);
    a->fsyncs_before = atomic_load(&fsync_started);
    if (rc == 0 && a->fail)
        rc = kg_errf(err, KG_ESTATE, "refused after the insert");
    return rc;
}

static int r_count(kg_sqlconn *c, void *arg, kg_err *err)
{
    int64_t *n = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, Q_COUNT, err);
    if (!st)
        return KG_EIO;
    int r = kg_sqlconn_row(c, st, err);
    if (r == 1) {
        *n = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    return r == 1 ? 0 : KG_EIO;
}

static int r_has(kg_sqlconn *c, void *arg, kg_err *err)
{
    sqlite3_stmt *st = kg_sqlconn_stmt(c, Q_HAS, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_int64(st, 1, *(int64_t *)arg);
    int r = kg_sqlconn_row(c, st, err);
    if (r == 1)
        sqlite3_reset(st);
    return r;
}

static int64_t count_rows(kg_sqldb *d)
{
    int64_t n = -1;
    kg_err err = {{0}};
    assert_int_equal(kg_sqldb_read(d, r_count, &n, &err), 0);
    return n;
}

static int has(kg_sqldb *d, int64_t k)
{
    kg_err err = {{0}};
    int r = kg_sqldb_read(d, r_has, &k, &err);
    assert_true(r >= 0);
    return r;
}

#define NTHREADS 16
#define PER_THREAD 50

struct writer {
    kg_sqldb *d;
    int index;
    pthread_barrier_t *start;
    int late_returns; /* writes that returned before stats.durable_seq
                         covered them */
    int unsynced_returns; /* writes that returned before an fdatasync
                             begun after their insert had returned */
    int errors;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    pthread_barrier_wait(w->start);
    for (int i = 0; i < PER_THREAD; i++) {
        struct ins a = {w->d, (int64_t)w->index * 1000 + i, 0, 0, 0};
        kg_err err = {{0}};
        if (kg_sqldb_write(w->d, w_insert, &a, &err) != 0) {
            w->errors++;
            continue;
        }
        kg_sqldb_stats st;
        kg_sqldb_stats_get(w->d, &st);
        if (st.durable_seq < a.seq)
            w->late_returns++;
        if (atomic_load(&fsync_done_max) <= a.fsyncs_before)
            w->unsynced_returns++;
    }
    return NULL;
}

/* Runs NTHREADS writers of PER_THREAD inserts each, all at once. */
static void run_writers(kg_sqldb *d)
{
    pthread_t th[NTHREADS];
    struct writer w[NTHREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct writer){d, i, &start, 0, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].errors, 0);
        assert_int_equal(w[i].late_returns, 0);
        assert_int_equal(w[i].unsynced_returns, 0);
    }
    pthread_barrier_destroy(&start);
}

/*
 * 16 threads write at once on a slow disk (each fsync 20 ms longer):
 * writes that arrive during an fsync share the next commit and fsync, so
 * there are far fewer of both than writes, and no write returned before
 * the fsync that covers it.
 */
static void test_group_commit(void **state)
{
    (void)state;
    kg_sqldb *d = open_db("group.db", 1);
    assert_string_equal(kg_sqldb_sync_name(d), "full (group commit)");
    kg_sqldb_test_slow_sync(d, 20);
    unsigned long calls0 = atomic_load(&fsync_started);
    run_writers(d);
    kg_sqldb_stats st;
    kg_sqldb_stats_get(d, &st);
    int n = NTHREADS * PER_THREAD;
    /* every fsync the stats count is a real fdatasync call */
    assert_int_equal(atomic_load(&fsync_started) - calls0, st.syncs);
    assert_int_equal(st.writes, n);
    assert_int_equal(st.durable_seq, n);
    assert_int_equal(count_rows(d), n);
    print_message("      %d writes: %llu commits, %llu fsyncs\n", n,
                  (unsigned long long)st.commits, (unsigned long long)st.syncs);
    /* 800 writes at >= 20 ms an fsync one by one would take 16 s */
    assert_true(st.syncs <= (uint64_t)n / 4);
    assert_true(st.commits <= st.syncs + 1);
    kg_sqldb_close(d);

    /* the same on a normal disk: still no early return */
    d = open_db("group2.db", 1);
    run_writers(d);
    kg_sqldb_stats_get(d, &st);
    assert_int_equal(st.durable_seq, n);
    assert_true(st.syncs >= 1 && st.syncs <= st.commits);
    assert_int_equal(count_rows(d), n);
    kg_sqldb_close(d);
}

struct later {
    kg_sqldb *d;
    int64_t k;
    int fail;
    int rc;
    kg_err err;
};

static void *later_main(void *arg)
{
    struct later *l = arg;
    struct ins a = {l->d, l->k, l->fail, 0, 0};
    l->rc = kg_sqldb_write(l->d, w_insert, &a, &l->err);
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * While write 1's fsync runs (slowed to 300 ms), writes 2 and 3 join one
 * transaction; 3 fails after its insert. 3 gets its error at once and its
 * row is gone; 2 keeps its row and returns after the next fsync.
 */
static void test_failed_write_is_isolated(void **state)
{
    (void)state;
    kg_sqldb *d = open_db("isolate.db", 1);
    kg_sqldb_test_slow_sync(d, 300);
    struct later l1 = {d, 1, 0, 1, {{0}}};
    struct later l2 = {d, 2, 0, 1, {{0}}};
    struct later l3 = {d, 3, 1, 1, {{0}}};
    pthread_t t1, t2, t3;
    assert_int_equal(pthread_create(&t1, NULL, later_main, &l1), 0);
    sleep_ms(100); /* write 1 is in its fsync now */
    assert_int_equal(pthread_create(&t2, NULL, later_main, &l2), 0);
    sleep_ms(20); /* 2 is in the open transaction: 3 runs in a savepoint */
    assert_int_equal(pthread_create(&t3, NULL, later_main, &l3), 0);
    pthread_join(t3, NULL);
    kg_sqldb_stats st;
    kg_sqldb_stats_get(d, &st);
    assert_int_equal(l3.rc, KG_ESTATE);
    assert_non_null(strstr(l3.err.msg, "refused"));
    assert_int_equal(st.syncs, 0); /* 3 did not wait for anyone's fsync */
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(l1.rc, 0);
    assert_int_equal(l2.rc, 0);
    assert_true(has(d, 1));
    assert_true(has(d, 2));
    assert_false(has(d, 3));
    kg_sqldb_stats_get(d, &st);
    assert_int_equal(st.writes, 2);
    assert_int_equal(st.commits, 2);
    assert_int_equal(st.syncs, 2);
    kg_sqldb_close(d);

    /* the rows are in the file, not only in this handle */
    d = open_db("isolate.db", 1);
    assert_int_equal(count_rows(d), 2);
    kg_sqldb_close(d);
}

/* synchronous=normal: commits, no fsyncs of our own; a failing write
   alone in its transaction rolls all of it back. */
static void test_normal_mode(void **state)
{
    (void)state;
    kg_sqldb *d = open_db("normal.db", 0);
    assert_string_equal(kg_sqldb_sync_name(d), "normal");
    struct ins a = {d, 7, 0, 0, 0};
    kg_err err = {{0}};
    assert_int_equal(kg_sqldb_write(d, w_insert, &a, &err), 0);
    /* the same key again: the write fails, nothing changes */
    assert_true(kg_sqldb_write(d, w_insert, &a, &err) < 0);
    assert_non_null(strstr(err.msg, "UNIQUE"));
    kg_sqldb_stats st;
    kg_sqldb_stats_get(d, &st);
    assert_int_equal(st.writes, 1);
    assert_int_equal(st.commits, 1);
    assert_int_equal(st.syncs, 0);
    assert_int_equal(count_rows(d), 1);
    kg_sqldb_close(d);
}

/* A read that finds key k and leaves its statement stepped (not reset),
   as a read function that returns on its first row may. */
static int r_has_left_open(kg_sqlconn *c, void *arg, kg_err *err)
{
    int64_t *k = arg;
    sqlite3_stmt *st = kg_sqlconn_stmt(c, Q_HAS, err);
    if (!st)
        return KG_EIO;
    sqlite3_bind_int64(st, 1, *k);
    return kg_sqlconn_row(c, st, err);
}

/* Reads after a write see it, even on a reader connection whose previous
   read left a statement stepped (that kept an old snapshot open: a task
   completed and acknowledged read back as pending). */
static void test_reads_see_acknowledged_writes(void **state)
{
    (void)state;
    kg_sqldb *d = open_db("snapshot.db", 1);
    kg_err err = {{0}};
    struct ins a = {d, 1, 0, 0, 0};
    assert_int_equal(kg_sqldb_write(d, w_insert, &a, &err), 0);
    int64_t k = 1;
    assert_int_equal(kg_sqldb_read(d, r_has_left_open, &k, &err), 1);
    struct ins b = {d, 2, 0, 0, 0};
    assert_int_equal(kg_sqldb_write(d, w_insert, &b, &err), 0);
    for (int i = 0; i < 4; i++) /* whichever reader the pool hands out */
        assert_int_equal(count_rows(d), 2);
    kg_sqldb_close(d);
}

struct done {
    atomic_int calls;
    int rc;
    uint64_t durable_seq; /* stats.durable_seq when called */
    kg_sqldb *d;
};

static void on_done(void *arg, int rc, const char *msg)
{
    struct done *x = arg;
    (void)msg;
    kg_sqldb_stats st;
    kg_sqldb_stats_get(x->d, &st);
    x->durable_seq = st.durable_seq;
    x->rc = rc;
    atomic_fetch_add(&x->calls, 1);
}

/*
 * Deferred writes (an HTTP thread's): a write returns before its fsync
 * (slowed to 200 ms), the request reads what it wrote, and the callback
 * comes once, after the fsync that covers both writes. Without writes, or
 * when the only write failed, there is nothing to wait for.
 */
static void test_deferred_writes(void **state)
{
    (void)state;
    kg_sqldb *d = open_db("defer.db", 1);
    kg_sqldb_test_slow_sync(d, 200);
    kg_err err = {{0}};
    struct done x = {.d = d};
    kg_sqldb_defer_begin();
    struct ins a = {d, 1, 0, 0, 0}, b = {d, 2, 0, 0, 0};
    assert_int_equal(kg_sqldb_write(d, w_insert, &a, &err), 0);
    assert_int_equal(kg_sqldb_write(d, w_insert, &b, &err), 0);
    assert_true(kg_sqldb_defer_pending());
    assert_true(has(d, 1) && has(d, 2)); /* on the writer */
    kg_sqldb_stats st;
    kg_sqldb_stats_get(d, &st);
    assert_true(st.durable_seq < b.seq); /* returned before the fsync */
    assert_int_equal(kg_sqldb_defer_end(on_done, &x), 1);
    for (int i = 0; i < 300 && !atomic_load(&x.calls); i++)
        sleep_ms(10);
    sleep_ms(50);
    assert_int_equal(atomic_load(&x.calls), 1);
    assert_int_equal(x.rc, 0);
    assert_true(x.durable_seq >= b.seq);

    /* nothing written, or only a failed write: no callback */
    struct done y = {.d = d};
    kg_sqldb_defer_begin();
    assert_int_equal(kg_sqldb_defer_end(on_done, &y), 0);
    kg_sqldb_defer_begin();
    struct ins c = {d, 3, 1, 0, 0};
    assert_int_equal(kg_sqldb_write(d, w_insert, &c, &err), KG_ESTATE);
    assert_false(kg_sqldb_defer_pending());
    assert_int_equal(kg_sqldb_defer_end(on_done, &y), 0);
    assert_int_equal(atomic_load(&y.calls), 0);
    assert_false(has(d, 3));
    kg_sqldb_close(d);
}

/*
 * Another process holds the write lock: a deferring write gives up at
 * once (blocked, nothing written); a plain write waits for the lock,
 * without holding the writer, and goes through once it is released.
 */
static void test_deferred_write_would_block(void **state)
{
    (void)state;
    kg_sqldb *d = open_db("busy.db", 1);
    char path[128];
    snprintf(path, sizeof path, "%s/busy.db", dir);
    sqlite3 *other = NULL;
    assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 2000);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL),
                     SQLITE_OK);
    kg_err err = {{0}};
    kg_sqldb_defer_begin();
    struct ins a = {d, 1, 0, 0, 0};
    assert_int_equal(kg_sqldb_write(d, w_insert, &a, &err), KG_EUNAVAIL);
    assert_true(kg_sqldb_defer_blocked());
    assert_int_equal(kg_sqldb_defer_end(on_done, NULL), 0);

    struct later l = {d, 2, 0, 1, {{0}}};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, later_main, &l), 0);
    sleep_ms(100);
    assert_int_equal(count_rows(d), 0); /* reads go on meanwhile */
    assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL),
                     SQLITE_OK);
    pthread_join(t, NULL);
    assert_int_equal(l.rc, 0);
    assert_true(has(d, 2));
    sqlite3_close(other);
    kg_sqldb_close(d);
}

static void test_open_error(void **state)
{
    (void)state;
    kg_sqldb *d = NULL;
    kg_err err = {{0}};
    assert_int_equal(kg_sqldb_open(&d, "/nonexistent-dir/x.db", 1, 1, SQL, Q_N,
                                   SCHEMA, &err),
                     KG_EIO);
    assert_null(d);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.db"));
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/kgym-test-sqldb-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_commit),
        cmocka_unit_test(test_failed_write_is_isolated),
        cmocka_unit_test(test_normal_mode),
        cmocka_unit_test(test_reads_see_acknowledged_writes),
        cmocka_unit_test(test_deferred_writes),
        cmocka_unit_test(test_deferred_write_would_block),
        cmocka_unit_test(test_open_error),
    };
    int failed = cmocka_run_group_tests_name("sqldb", tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        failed++;
    return failed ? 1 : 0;
}
