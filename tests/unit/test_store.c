/*
 * test_store.c - the task store (src/server/store.h) and the scheduler
 * policy (sched.h). One suite, run twice: against SQLite (a file in a temp
 * dir) and against a real redis-server started on a free loopback port
 * (redis_helper.h). Backend-specific cases: durability across kill -9
 * (of a child process for SQLite, of redis-server for Redis) and Redis
 * going away and coming back.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis.h>
#include <sqlite3.h>

#include "common/sha256.h"
#include "redis_helper.h"
#include "server/sched.h"
#include "server/store.h"
#include "server/store_impl.h"

/* a lease outlives a silent worker, so the two paths differ */
#define LEASE_MS 400
#define TTL_MS 250

enum { B_SQLITE, B_REDIS };

static struct {
    int backend;
    char dir[256]; /* SQLite files */
    int nfile;
    kg_test_redis redis;
    char url[512];
} G;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct fixture {
    kg_store *s;
} fixture;

static void opts_test(kg_store_opts *o)
{
    kg_store_opts_default(o);
    o->lease_ms = LEASE_MS;
    o->worker_ttl_ms = TTL_MS;
}

static void redis_flush(void)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", G.redis.port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisReply *r = redisCommand(c, "FLUSHALL");
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
}

/* A fresh, empty store of the current backend; URL left in G.url. */
static kg_store *open_fresh(void)
{
    kg_store_opts o;
    kg_err err = {{0}};
    kg_store *s = NULL;
    opts_test(&o);
    if (G.backend == B_SQLITE) {
        snprintf(G.url, sizeof G.url, "sqlite:%s/t%d.db", G.dir, G.nfile++);
    } else {
        redis_flush();
        snprintf(G.url, sizeof G.url, "redis://127.0.0.1:%d/0", G.redis.port);
    }
    int rc = kg_store_open(&s, G.url, &o, &err);
    if (rc)
        print_error("open %s: %s\n", G.url, err.msg);
    assert_int_equal(rc, 0);
    return s;
}

static kg_store *reopen(void)
{
    kg_store_opts o;
    kg_err err = {{0}};
    kg_store *s = NULL;
    opts_test(&o);
    int rc = kg_store_open(&s, G.url, &o, &err);
    if (rc)
        print_error("reopen %s: %s\n", G.url, err.msg);
    assert_int_equal(rc, 0);
    return s;
}

static int setup(void **state)
{
    /* *state first: a failed open must not leave a stale fixture behind
       for cmocka's teardown */
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    f->s = open_fresh();
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f)
        kg_store_close(f->s);
    free(f);
    *state = NULL;
    return 0;
}

static int group_setup_sqlite(void **state)
{
    (void)state;
    G.backend = B_SQLITE;
    snprintf(G.dir, sizeof G.dir, "/tmp/kgym-test-store-XXXXXX");
    return mkdtemp(G.dir) ? 0 : -1;
}

static int group_teardown_sqlite(void **state)
{
    (void)state;
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", G.dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int group_setup_redis(void **state)
{
    (void)state;
    G.backend = B_REDIS;
    memset(&G.redis, 0, sizeof G.redis);
    if (kg_test_redis_start(&G.redis) < 0) {
        fprintf(stderr, "could not start redis-server\n");
        kg_test_redis_stop(&G.redis);
        return -1;
    }
    return 0;
}

static int group_teardown_redis(void **state)
{
    (void)state;
    kg_test_redis_stop(&G.redis);
    return 0;
}

#define OK(call)                                                               \
    do {                                                                       \
        kg_err e_ = {{0}};                                                     \
        (void)e_;                                                              \
        int rc_ = (call);                                                      \
        if (rc_ < 0)                                                           \
            print_error("%s: %s %s\n", #call, kg_strerror(rc_), e_.msg);       \
        assert_true(rc_ >= 0);                                                 \
    } while (0)

static json_t *request(const char *tag)
{
    return json_pack("{s:s, s:s, s:s, s:i}", "reference_code", "ref",
                     "kernel_code", tag, "backend", "cpu", "seed", 7);
}

static int submit(kg_store *s, const char *id, int prio)
{
    kg_err err = {{0}};
    json_t *req = request(id);
    kg_submit t = {id, prio, req, NULL, 0};
    int rc = kg_store_submit(s, &t, &err);
    json_decref(req);
    if (rc < 0)
        print_error("submit %s: %s\n", id, err.msg);
    return rc;
}

static void reg(kg_store *s, const char *id, const char *device)
{
    kg_err err = {{0}};
    int rc = kg_store_worker_register(s, id, device, "host1", &err);
    if (rc)
        print_error("register %s: %s\n", id, err.msg);
    assert_int_equal(rc, 0);
}

/* Leases one task for worker; returns its id in buf, or "" for none. */
static const char *lease(kg_store *s, const char *worker, char *buf)
{
    kg_err err = {{0}};
    kg_task t;
    int rc = kg_store_lease(s, worker, &t, &err);
    if (rc < 0)
        print_error("lease %s: %s\n", worker, err.msg);
    assert_true(rc >= 0);
    buf[0] = 0;
    if (rc == 1) {
        assert_int_equal(t.status, KG_TASK_RUNNING);
        assert_string_equal(t.worker, worker);
        assert_non_null(t.request);
        strcpy(buf, t.id);
    }
    kg_task_free(&t);
    return buf;
}

/* A result as the contract has it (kg_result_check): a pass with its
 * runtimes and speedup, anything else with none. */
static json_t *result_of(const char *verdict)
{
    if (strcmp(verdict, "pass"))
        return json_pack("{s:s, s:b, s:n, s:n}", "verdict", verdict,
                         "correctness", 0, "speedup", "kernel_runtime");
    return json_pack("{s:s, s:b, s:f, s:f, s:f}", "verdict", verdict,
                     "correctness", 1, "speedup", 1.5, "kernel_runtime", 2.0,
                     "reference_runtime", 3.0);
}

static void test_submit_get(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    kg_task t;
    json_t *req = request("k1");
    char key[65];
    memset(key, 'a', 64);
    key[64] = 0;
    kg_submit sub = {"task-1", KG_PRIO_HIGH, req, key, 0};
    int64_t before = now_ms();
    assert_int_equal(kg_store_submit(s, &sub, &err), 0);
    assert_int_equal(kg_store_get(s, "task-1", KG_GET_REQUEST, &t, &err), 0);
    assert_string_equal(t.id, "task-1");
    assert_int_equal(t.status, KG_TASK_PENDING);
    assert_int_equal(t.priority, KG_PRIO_HIGH);
    assert_string_equal(t.cache_key, key);
    assert_int_equal(t.attempts, 0);
    assert_string_equal(t.worker, "");
    assert_true(t.submitted_ms >= before - 1000);
    assert_true(json_equal(t.request, req));
    assert_null(t.result);
    kg_task_free(&t);
    /* scalar read: no JSON members */
    assert_int_equal(kg_store_get(s, "task-1", 0, &t, &err), 0);
    assert_null(t.request);
    kg_task_free(&t);
    /* resubmission keeps the task; replace only applies to finished ones */
    assert_int_equal(kg_store_submit(s, &sub, &err), 1);
    sub.replace_finished = 1;
    assert_int_equal(kg_store_submit(s, &sub, &err), 1);
    assert_int_equal(kg_store_get(s, "nope", 0, &t, &err), KG_ENOTFOUND);
    assert_int_equal(kg_store_get(s, "bad id!", 0, &t, &err), KG_EINVAL);
    json_decref(req);
}

/* kg_store_lease_text: the request as the stored JSON text, which
 * parses back to what was submitted; nothing parsed. */
static void test_lease_text(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    json_t *req = request("lt");
    json_object_set_new(req, "reference_code", json_string("r\"\\\n\u00e9"));
    json_object_set_new(req, "atol", json_real(0.001));
    kg_submit sub = {"lt-1", KG_PRIO_NORMAL, req, NULL, 0};
    OK(kg_store_submit(s, &sub, &err));
    reg(s, "w1", "cpu:0");
    kg_task t;
    assert_int_equal(kg_store_lease_text(s, "w1", &t, &err), 1);
    assert_string_equal(t.id, "lt-1");
    assert_int_equal(t.status, KG_TASK_RUNNING);
    assert_int_equal(t.attempts, 1);
    assert_null(t.request);
    assert_non_null(t.request_text);
    json_error_t je;
    json_t *back = json_loads(t.request_text, 0, &je);
    assert_non_null(back);
    assert_true(json_equal(back, req));
    json_decref(back);
    kg_task_free(&t);
    assert_null(t.request_text);
    assert_int_equal(kg_store_lease_text(s, "w1", &t, &err), 0);
    assert_int_equal(kg_store_lease_text(s, "w9", &t, &err), KG_ENOTFOUND);
    json_decref(req);
}

static void test_submit_batch_and_replace(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    json_t *req = request("b");
    kg_submit v[3] = {{"b1", 1, req, NULL, 0},
                      {"b2", 2, req, NULL, 0},
                      {"b3", 0, req, NULL, 0}};
    int created[3] = {9, 9, 9};
    assert_int_equal(submit(s, "b2", 1), 0);
    assert_int_equal(kg_store_submit_batch(s, v, 3, created, &err), 0);
    assert_int_equal(created[0], 0);
    assert_int_equal(created[1], 1);
    assert_int_equal(created[2], 0);
    kg_submit dup[2] = {{"d1", 1, req, NULL, 0}, {"d1", 1, req, NULL, 0}};
    assert_int_equal(kg_store_submit_batch(s, dup, 2, created, &err),
                     KG_EINVAL);
    /* replace_finished resets a finished task */
    char id[128];
    reg(s, "w1", "cpu:0");
    assert_string_equal(lease(s, "w1", id), "b3");
    json_t *res = result_of("pass");
    OK(kg_store_complete(s, "b3", "w1", KG_TASK_COMPLETED, res, &e_));
    json_t *req2 = request("b3-new");
    kg_submit again = {"b3", KG_PRIO_LOW, req2, NULL, 1};
    assert_int_equal(kg_store_submit(s, &again, &err), 0);
    kg_task t;
    assert_int_equal(
        kg_store_get(s, "b3", KG_GET_REQUEST | KG_GET_RESULT, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_PENDING);
    assert_int_equal(t.priority, KG_PRIO_LOW);
    assert_int_equal(t.attempts, 0);
    assert_null(t.result);
    assert_true(json_equal(t.request, req2));
    kg_task_free(&t);
    json_decref(res);
    json_decref(req);
    json_decref(req2);
}

/* The counters of kg_store_counts_get against the tasks themselves. */
static void expect_counts(kg_store *s, const char *const *ids, size_t n)
{
    long long status[KG_NSTATUS] = {0}, pending[KG_NPRIO] = {0};
    long long verdict[KG_NVERDICT] = {0};
    for (size_t i = 0; i < n; i++) {
        kg_task t;
        kg_err err = {{0}};
        assert_int_equal(kg_store_get(s, ids[i], KG_GET_RESULT, &t, &err), 0);
        status[t.status]++;
        if (t.status == KG_TASK_PENDING)
            pending[t.priority]++;
        if (t.status == KG_TASK_COMPLETED || t.status == KG_TASK_FAILED) {
            const json_t *v = json_object_get(t.result, "verdict");
            verdict[kg_verdict_parse(json_string_value(v))]++;
        }
        kg_task_free(&t);
    }
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    for (int i = 0; i < KG_NSTATUS; i++)
        assert_int_equal(c.by_status[i], status[i]);
    for (int i = 0; i < KG_NPRIO; i++)
        assert_int_equal(c.pending[i], pending[i]);
    for (int i = 0; i < KG_NVERDICT; i++)
        assert_int_equal(c.by_verdict[i], verdict[i]);
}

/*
 * Counters stay equal to what the tasks say through batches (new ids of
 * every priority, ids that exist, a replaced finished task), leases,
 * completions, a retry, a cancel and an expiry.
 */
static void test_counts_follow_tasks(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    static const char *const ids[] = {"c0", "c1", "c2", "c3", "c4", "c5"};
    json_t *req = request("c");
    kg_submit v[6];
    int created[6];
    for (int i = 0; i < 6; i++)
        v[i] = (kg_submit){ids[i], i % 3, req, NULL, 0};
    assert_int_equal(kg_store_submit_batch(s, v, 4, created, &err), 0);
    expect_counts(s, ids, 4);
    /* c2, c3 exist (left alone), c4, c5 are new */
    assert_int_equal(kg_store_submit_batch(s, v + 2, 4, created, &err), 0);
    assert_int_equal(created[0] + created[1] + created[2] + created[3], 2);
    expect_counts(s, ids, 6);
    reg(s, "w1", "cpu:0");
    char id[128];
    json_t *pass = result_of("pass"), *bad = result_of("mismatch");
    OK(kg_store_complete(s, lease(s, "w1", id), "w1", KG_TASK_COMPLETED, pass,
                         &e_));
    OK(kg_store_complete(s, lease(s, "w1", id), "w1", KG_TASK_FAILED, bad,
                         &e_));
    lease(s, "w1", id);
    OK(kg_store_retry(s, id, "w1", NULL, 0, &e_));
    lease(s, "w1", id);
    OK(kg_store_cancel(s, id, &e_));
    lease(s, "w1", id); /* left running */
    expect_counts(s, ids, 6);
    /* the first finished task again, replaced: pending once more */
    kg_task t;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(kg_store_get(s, ids[i], 0, &t, &err), 0);
        if (t.status == KG_TASK_COMPLETED) {
            kg_submit again = {ids[i], KG_PRIO_HIGH, req, NULL, 1};
            kg_submit fresh = {"c6", KG_PRIO_LOW, req, NULL, 0};
            kg_submit two[2] = {again, fresh};
            assert_int_equal(kg_store_submit_batch(s, two, 2, created, &err),
                             0);
            assert_int_equal(created[0], 0);
            assert_int_equal(created[1], 0);
        }
        kg_task_free(&t);
    }
    static const char *const all[] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6"};
    expect_counts(s, all, 7);
    /* the running task's lease runs out: requeued by the sweep */
    kg_test_sleep_ms(LEASE_MS + 100);
    OK(kg_store_requeue_expired(s, 3, NULL, &e_));
    expect_counts(s, all, 7);
    json_decref(pass);
    json_decref(bad);
    json_decref(req);
}

static void test_priority_fifo(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    char id[128];
    assert_int_equal(submit(s, "a-low", KG_PRIO_LOW), 0);
    assert_int_equal(submit(s, "b-normal", KG_PRIO_NORMAL), 0);
    assert_int_equal(submit(s, "c-high", KG_PRIO_HIGH), 0);
    assert_int_equal(submit(s, "d-normal", KG_PRIO_NORMAL), 0);
    assert_int_equal(submit(s, "e-high", KG_PRIO_HIGH), 0);
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.pending[KG_PRIO_HIGH], 2);
    assert_int_equal(c.pending[KG_PRIO_NORMAL], 2);
    assert_int_equal(c.pending[KG_PRIO_LOW], 1);
    assert_int_equal(c.by_status[KG_TASK_PENDING], 5);
    reg(s, "w1", "cpu:0");
    const char *want[] = {"c-high", "e-high", "b-normal", "d-normal", "a-low"};
    for (int i = 0; i < 5; i++)
        assert_string_equal(lease(s, "w1", id), want[i]);
    assert_string_equal(lease(s, "w1", id), "");
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.by_status[KG_TASK_PENDING], 0);
    assert_int_equal(c.by_status[KG_TASK_RUNNING], 5);
    assert_int_equal(c.pending[KG_PRIO_HIGH], 0);
}

#define NLEASERS 4
#define NATOMIC 120

struct leaser {
    kg_store *s;
    char worker[16];
    char (*got)[KG_MAX_TASK_ID + 1];
    int n;
    int failed;
};

static void *leaser_main(void *arg)
{
    struct leaser *l = arg;
    for (;;) {
        kg_task t;
        kg_err err;
        int rc = kg_store_lease(l->s, l->worker, &t, &err);
        if (rc < 0) {
            l->failed = 1;
            break;
        }
        if (rc == 0)
            break;
        snprintf(l->got[l->n++], KG_MAX_TASK_ID + 1, "%s", t.id);
        kg_task_free(&t);
    }
    return NULL;
}

static void test_lease_atomic(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    char id[32];
    for (int i = 0; i < NATOMIC; i++) {
        snprintf(id, sizeof id, "t%03d", i);
        assert_int_equal(submit(s, id, i % 3), 0);
    }
    struct leaser L[NLEASERS];
    pthread_t th[NLEASERS];
    for (int k = 0; k < NLEASERS; k++) {
        memset(&L[k], 0, sizeof L[k]);
        L[k].s = s;
        snprintf(L[k].worker, sizeof L[k].worker, "w%d", k);
        char dev[16];
        snprintf(dev, sizeof dev, "cpu:%d", k);
        reg(s, L[k].worker, dev);
        L[k].got = calloc(NATOMIC, KG_MAX_TASK_ID + 1);
    }
    for (int k = 0; k < NLEASERS; k++)
        pthread_create(&th[k], NULL, leaser_main, &L[k]);
    for (int k = 0; k < NLEASERS; k++)
        pthread_join(th[k], NULL);
    int seen[NATOMIC] = {0}, total = 0;
    for (int k = 0; k < NLEASERS; k++) {
        assert_int_equal(L[k].failed, 0);
        for (int i = 0; i < L[k].n; i++) {
            int v = atoi(L[k].got[i] + 1);
            assert_true(v >= 0 && v < NATOMIC);
            seen[v]++;
            total++;
        }
        free(L[k].got);
    }
    assert_int_equal(total, NATOMIC);
    for (int i = 0; i < NATOMIC; i++)
        assert_int_equal(seen[i], 1);
}

static void test_complete_only_holder(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_task t;
    assert_int_equal(submit(s, "c1", 1), 0);
    reg(s, "w1", "cpu:0");
    reg(s, "w2", "cpu:1");
    assert_string_equal(lease(s, "w1", id), "c1");
    json_t *res = result_of("pass");
    assert_int_equal(
        kg_store_complete(s, "c1", "w2", KG_TASK_COMPLETED, res, &err),
        KG_ESTATE);
    assert_int_equal(
        kg_store_complete(s, "zz", "w1", KG_TASK_COMPLETED, res, &err),
        KG_ENOTFOUND);
    assert_int_equal(
        kg_store_complete(s, "c1", "w1", KG_TASK_COMPLETED, res, &err), 0);
    assert_int_equal(
        kg_store_complete(s, "c1", "w1", KG_TASK_COMPLETED, res, &err),
        KG_ESTATE);
    assert_int_equal(kg_store_get(s, "c1", KG_GET_RESULT, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_COMPLETED);
    assert_true(json_equal(t.result, res));
    assert_int_equal(t.attempts, 1);
    assert_string_equal(t.worker, "w1");
    assert_true(t.finished_ms >= t.started_ms && t.started_ms > 0);
    kg_task_free(&t);
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.by_status[KG_TASK_COMPLETED], 1);
    assert_int_equal(c.by_verdict[KG_VERDICT_PASS], 1);
    assert_int_equal(c.by_status[KG_TASK_RUNNING], 0);
    json_decref(res);
}

static void test_expired_requeue_and_limit(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_requeue_counts rq;
    kg_task t;
    assert_int_equal(submit(s, "x1", 1), 0);
    reg(s, "w1", "cpu:0");
    assert_string_equal(lease(s, "w1", id), "x1");
    OK(kg_store_requeue_expired(s, 2, &rq, &e_));
    assert_int_equal(rq.requeued + rq.failed, 0); /* not yet expired */
    kg_test_sleep_ms(LEASE_MS + 100);
    /* past the deadline but before a sweep: a heartbeat still extends,
     * and says how many tasks w1 holds */
    int running = -1;
    OK(kg_store_worker_heartbeat(s, "w1", &running, &e_));
    assert_int_equal(running, 1);
    OK(kg_store_requeue_expired(s, 2, &rq, &e_));
    assert_int_equal(rq.requeued, 0);
    kg_test_sleep_ms(LEASE_MS + 100);
    OK(kg_store_requeue_expired(s, 2, &rq, &e_));
    assert_int_equal(rq.requeued, 1);
    assert_int_equal(rq.failed, 0);
    assert_int_equal(kg_store_get(s, "x1", 0, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_PENDING);
    kg_task_free(&t);
    /* the late holder cannot complete it */
    json_t *res = result_of("pass");
    assert_int_equal(
        kg_store_complete(s, "x1", "w1", KG_TASK_COMPLETED, res, &err),
        KG_ESTATE);
    OK(kg_store_worker_heartbeat(s, "w1", &running, &e_));
    assert_int_equal(running, 0); /* requeued: w1 holds nothing */
    assert_string_equal(lease(s, "w1", id), "x1");
    kg_test_sleep_ms(LEASE_MS + 100);
    OK(kg_store_worker_heartbeat(s, "w1", NULL, &e_)); /* keep w1 alive... */
    OK(kg_store_requeue_expired(s, 2, &rq, &e_));
    assert_int_equal(rq.requeued + rq.failed, 0); /* ...and its lease */
    kg_test_sleep_ms(LEASE_MS + 100);
    OK(kg_store_requeue_expired(s, 2, &rq, &e_));
    assert_int_equal(rq.failed, 1);
    assert_int_equal(rq.requeued, 0);
    assert_int_equal(kg_store_get(s, "x1", KG_GET_RESULT, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_FAILED);
    assert_int_equal(t.attempts, 2);
    assert_non_null(t.result);
    assert_string_equal(
        json_string_value(json_object_get(t.result, "error_code")),
        "LEASE_EXPIRED_TOO_OFTEN");
    kg_task_free(&t);
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.lease_expiries, 2);
    assert_int_equal(c.by_status[KG_TASK_FAILED], 1);
    assert_int_equal(c.by_verdict[KG_VERDICT_INFRA_ERROR], 1);
    assert_string_equal(lease(s, "w1", id), "");
    json_decref(res);
}

static void test_retry_avoids_worker(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_task t;
    assert_int_equal(submit(s, "r1", 1), 0);
    assert_int_equal(submit(s, "r2", 2), 0);
    reg(s, "w1", "cpu:0");
    reg(s, "w2", "cpu:1");
    assert_string_equal(lease(s, "w1", id), "r1");
    json_t *res = result_of("infra_error");
    assert_int_equal(kg_store_retry(s, "r1", "w2", res, 60000, &err),
                     KG_ESTATE);
    assert_int_equal(kg_store_retry(s, "r1", "w1", res, 60000, &err), 0);
    assert_int_equal(kg_store_get(s, "r1", KG_GET_RESULT, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_PENDING);
    assert_string_equal(t.avoid_worker, "w1");
    assert_true(json_equal(t.result, res));
    kg_task_free(&t);
    /* w1 skips r1 (avoided) and gets r2; w2 gets r1 */
    assert_string_equal(lease(s, "w1", id), "r2");
    assert_string_equal(lease(s, "w1", id), "");
    assert_string_equal(lease(s, "w2", id), "r1");
    /* an avoidance that ran out no longer applies */
    assert_int_equal(kg_store_retry(s, "r1", "w2", NULL, 0, &err), 0);
    assert_string_equal(lease(s, "w2", id), "r1");
    assert_int_equal(kg_store_get(s, "r1", 0, &t, &err), 0);
    assert_int_equal(t.attempts, 3);
    kg_task_free(&t);
    json_decref(res);
}

static void test_cancel(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_task t;
    assert_int_equal(submit(s, "p1", 1), 0);
    assert_int_equal(submit(s, "p2", 1), 0);
    assert_int_equal(kg_store_cancel(s, "p1", &err), 0);
    reg(s, "w1", "cpu:0");
    assert_string_equal(lease(s, "w1", id), "p2"); /* p1 is not leased */
    const char *ids[] = {"p2", "nope", "p1", "p3"};
    int st[4];
    assert_int_equal(submit(s, "p3", 1), 0);
    OK(kg_store_status_many(s, ids, 4, st, &e_)); /* one read of them all */
    assert_int_equal(st[0], KG_TASK_RUNNING);
    assert_int_equal(st[1], -1);
    assert_int_equal(st[2], KG_TASK_CANCELLED);
    assert_int_equal(st[3], KG_TASK_PENDING);
    assert_int_equal(kg_store_cancel(s, "p3", &err), 0);
    assert_int_equal(kg_store_cancel(s, "p2", &err), 0);
    json_t *res = result_of("pass");
    assert_int_equal(
        kg_store_complete(s, "p2", "w1", KG_TASK_COMPLETED, res, &err),
        KG_ESTATE);
    assert_int_equal(kg_store_retry(s, "p2", "w1", NULL, 0, &err), KG_ESTATE);
    assert_int_equal(kg_store_get(s, "p2", 0, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_CANCELLED);
    assert_true(t.finished_ms > 0);
    kg_task_free(&t);
    assert_int_equal(kg_store_cancel(s, "p2", &err), 1);
    assert_int_equal(kg_store_cancel(s, "nope", &err), KG_ENOTFOUND);
    assert_string_equal(lease(s, "w1", id), "");
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.by_status[KG_TASK_CANCELLED], 3);
    assert_int_equal(c.by_status[KG_TASK_RUNNING], 0);
    assert_int_equal(c.pending[1], 0);
    /* a cancelled lease does not expire into a requeue */
    kg_requeue_counts rq;
    kg_test_sleep_ms(LEASE_MS + 100);
    OK(kg_store_requeue_expired(s, 3, &rq, &e_));
    assert_int_equal(rq.requeued + rq.failed, 0);
    json_decref(res);
}

static void test_cache(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char key[65];
    json_t *got = (json_t *)1;
    kg_sha256_hex("x", 1, key);
    assert_int_equal(kg_store_cache_get(s, key, &got, &err), 0);
    assert_null(got);
    json_t *r1 = result_of("pass"), *r2 = result_of("mismatch");
    assert_int_equal(kg_store_cache_put(s, key, r1, &err), 0);
    assert_int_equal(kg_store_cache_get(s, key, &got, &err), 1);
    assert_true(json_equal(got, r1));
    json_decref(got);
    assert_int_equal(kg_store_cache_put(s, key, r2, &err), 0);
    assert_int_equal(kg_store_cache_get(s, key, &got, &err), 1);
    assert_true(json_equal(got, r2));
    json_decref(got);
    assert_int_equal(kg_store_cache_get(s, "abc", &got, &err), KG_EINVAL);
    /* many at once: hits, a miss, a skipped NULL, the same key twice */
    char k2[65], k3[65];
    kg_sha256_hex("y", 1, k2);
    kg_sha256_hex("z", 1, k3);
    assert_int_equal(kg_store_cache_put(s, k3, r1, &err), 0);
    const char *keys[5] = {key, k2, NULL, k3, key};
    json_t *res[5] = {(json_t *)1, (json_t *)1, (json_t *)1, (json_t *)1,
                      (json_t *)1};
    assert_int_equal(kg_store_cache_get_many(s, keys, 5, res, &err), 3);
    assert_true(json_equal(res[0], r2));
    assert_null(res[1]);
    assert_null(res[2]);
    assert_true(json_equal(res[3], r1));
    assert_true(json_equal(res[4], r2));
    for (int i = 0; i < 5; i++)
        json_decref(res[i]);
    keys[1] = "abc"; /* a malformed key: nothing looked up */
    assert_int_equal(kg_store_cache_get_many(s, keys, 5, res, &err), KG_EINVAL);
    for (int i = 0; i < 5; i++)
        assert_null(res[i]);
    json_decref(r1);
    json_decref(r2);
}

/*
 * The cache holds only results that meet the contract: a put of another
 * is refused, and an entry already there (written before the check, or by
 * hand: here straight through the backend) is a miss on every read path,
 * the submission then evaluated as usual. Redis looks the cache up in its
 * submit script, SQLite through store.c: both must agree.
 */
static void test_cache_contract(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char key[65];
    kg_sha256_hex("forged", 6, key);
    json_t *forged = json_pack("{s:s, s:f, s:b, s:f}", "verdict", "pass",
                               "speedup", 1e308, "correctness", 0,
                               "kernel_runtime", -1.0);
    assert_int_equal(kg_store_cache_put(s, key, forged, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "result.correctness"));
    /* an entry from before the check */
    assert_int_equal(s->ops->cache_put(s, key, forged, &err), 0);
    json_t *got = (json_t *)1;
    assert_int_equal(kg_store_cache_get(s, key, &got, &err), 0);
    assert_null(got);
    const char *keys[1] = {key};
    json_t *many[1] = {(json_t *)1};
    assert_int_equal(kg_store_cache_get_many(s, keys, 1, many, &err), 0);
    assert_null(many[0]);
    json_t *req = request("f");
    kg_submit a = {"f-1", 1, req, key, 0};
    got = (json_t *)1;
    assert_int_equal(kg_store_submit_cached(s, &a, &got, &err), 0);
    assert_null(got);
    kg_task t;
    assert_int_equal(kg_store_get(s, "f-1", 0, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_PENDING);
    kg_task_free(&t);
    /* a pass whose speedup exceeds its own runtimes' quotient */
    json_t *fast = json_pack("{s:s, s:b, s:f, s:f, s:f}", "verdict", "pass",
                             "correctness", 1, "speedup", 50.0,
                             "kernel_runtime", 1.0, "reference_runtime", 2.0);
    assert_int_equal(kg_store_cache_put(s, key, fast, &err), KG_EINVAL);
    assert_non_null(strstr(err.msg, "result.speedup"));
    json_decref(fast);
    json_decref(req);
    json_decref(forged);
}

/* A worker's secret digest: none, set, overwritten, per id. */
static void test_worker_secret(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char d1[65], d2[65], got[65];
    kg_sha256_hex("one", 3, d1);
    kg_sha256_hex("two", 3, d2);
    assert_int_equal(kg_store_worker_secret_get(s, "ws-a", got, &err), 0);
    assert_int_equal(kg_store_worker_secret_set(s, "ws-a", d1, &err), 0);
    assert_int_equal(kg_store_worker_secret_get(s, "ws-a", got, &err), 1);
    assert_string_equal(got, d1);
    assert_int_equal(kg_store_worker_secret_get(s, "ws-b", got, &err), 0);
    assert_int_equal(kg_store_worker_secret_set(s, "ws-a", d2, &err), 0);
    assert_int_equal(kg_store_worker_secret_get(s, "ws-a", got, &err), 1);
    assert_string_equal(got, d2);
    assert_int_equal(kg_store_worker_secret_set(s, "ws-a", "nothex", &err),
                     KG_EINVAL);
    assert_int_equal(kg_store_worker_secret_get(s, "a b", got, &err),
                     KG_EINVAL);
}

/*
 * kg_store_submit_cached / _batch_cached: a cached key answers a task
 * whose id is free (2, the result, nothing written); a task whose id
 * exists is not hidden (1); force (replace_finished) never looks; a miss
 * is submitted (0). Redis does it in its submit script, SQLite through
 * store.c's reads then write: both must agree.
 */
static void test_submit_cached(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char hit[65], miss[65];
    kg_sha256_hex("cached", 6, hit);
    kg_sha256_hex("fresh", 5, miss);
    json_t *res = result_of("pass");
    assert_int_equal(kg_store_cache_put(s, hit, res, &err), 0);
    json_t *req = request("c");
    kg_task t;
    json_t *got = (json_t *)1;

    kg_submit a = {"c-hit", 1, req, hit, 0};
    assert_int_equal(kg_store_submit_cached(s, &a, &got, &err), 2);
    assert_non_null(got);
    assert_true(json_equal(got, res));
    json_decref(got);
    assert_int_equal(kg_store_get(s, "c-hit", 0, &t, &err), KG_ENOTFOUND);

    kg_submit b = {"c-miss", 1, req, miss, 0};
    assert_int_equal(kg_store_submit_cached(s, &b, &got, &err), 0);
    assert_null(got);
    assert_int_equal(kg_store_get(s, "c-miss", 0, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_PENDING);
    kg_task_free(&t);

    /* an existing id with a cached key: the task, not the cache */
    OK(submit(s, "c-old", 1));
    kg_submit c = {"c-old", 1, req, hit, 0};
    assert_int_equal(kg_store_submit_cached(s, &c, &got, &err), 1);
    assert_null(got);

    /* force_refresh: no lookup, a new pending task */
    kg_submit d = {"c-force", 1, req, hit, 1};
    assert_int_equal(kg_store_submit_cached(s, &d, &got, &err), 0);
    assert_null(got);
    assert_int_equal(kg_store_get(s, "c-force", 0, &t, &err), 0);
    assert_string_equal(t.cache_key, hit);
    kg_task_free(&t);

    /* a batch of all four kinds, and one without a key */
    kg_submit v[5] = {{"cb-hit", 0, req, hit, 0},
                      {"cb-miss", 2, req, miss, 0},
                      {"c-old", 1, req, hit, 0},
                      {"cb-force", 1, req, hit, 1},
                      {"cb-nokey", 1, req, NULL, 0}};
    int created[5];
    json_t *cached[5];
    assert_int_equal(kg_store_submit_batch_cached(s, v, 5, created, cached,
                                                  &err),
                     0);
    assert_int_equal(created[0], 2);
    assert_true(json_equal(cached[0], res));
    assert_int_equal(created[1], 0);
    assert_int_equal(created[2], 1);
    assert_int_equal(created[3], 0);
    assert_int_equal(created[4], 0);
    for (int i = 1; i < 5; i++)
        assert_null(cached[i]);
    json_decref(cached[0]);
    assert_int_equal(kg_store_get(s, "cb-hit", 0, &t, &err), KG_ENOTFOUND);
    const char *made[] = {"cb-miss", "cb-force", "cb-nokey"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kg_store_get(s, made[i], 0, &t, &err), 0);
        kg_task_free(&t);
    }
    kg_store_counts n;
    OK(kg_store_counts_get(s, &n, &err));
    /* c-miss, c-old, c-force, cb-miss, cb-force, cb-nokey */
    assert_int_equal(n.by_status[KG_TASK_PENDING], 6);

    /* a bad id fails the whole call, with nothing handed out */
    v[1].id = "bad id!";
    cached[0] = (json_t *)1;
    assert_int_equal(kg_store_submit_batch_cached(s, v, 5, created, cached,
                                                  &err),
                     KG_EINVAL);
    for (int i = 0; i < 5; i++)
        assert_null(cached[i]);
    json_decref(req);
    json_decref(res);
}

static void test_workers(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    reg(s, "w1", "cuda:0");
    assert_int_equal(kg_store_worker_register(s, "w2", "cuda:0", "host1", &err),
                     KG_ESTATE);
    assert_non_null(strstr(err.msg, "w1"));
    reg(s, "w2", "cuda:1");
    reg(s, "w1", "cuda:0"); /* re-registering is fine */
    assert_int_equal(kg_store_worker_register(s, "w3", "cuda:0", "host2", &err),
                     0);
    kg_worker *v;
    size_t n;
    OK(kg_store_worker_list(s, &v, &n, &e_));
    assert_int_equal(n, 3);
    assert_string_equal(v[0].id, "w1");
    assert_string_equal(v[0].device, "cuda:0");
    assert_string_equal(v[0].host, "host1");
    assert_true(v[0].alive);
    assert_string_equal(v[2].id, "w3");
    free(v);
    assert_int_equal(submit(s, "u1", 1), 0);
    assert_string_equal(lease(s, "w2", id), "u1");
    OK(kg_store_worker_list(s, &v, &n, &e_));
    assert_int_equal(v[1].running, 1);
    free(v);
    /* leaving hands the task back */
    assert_int_equal(kg_store_worker_unregister(s, "w2", &err), 0);
    assert_int_equal(kg_store_worker_unregister(s, "w2", &err), KG_ENOTFOUND);
    assert_int_equal(kg_store_worker_heartbeat(s, "w2", NULL, &err), KG_ENOTFOUND);
    kg_task t;
    assert_int_equal(kg_store_lease(s, "w2", &t, &err), KG_ENOTFOUND);
    assert_string_equal(lease(s, "w1", id), "u1");
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.workers_alive, 2);
    assert_int_equal(c.workers_dead, 0);
}

/* Regression: a worker process restarted under the same id kept the dead
 * process's lease alive through its heartbeats, so the task never ran. */
static void test_reregister_releases_leases(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_task t;
    assert_int_equal(submit(s, "r1", 1), 0);
    reg(s, "w1", "cpu:0");
    assert_string_equal(lease(s, "w1", id), "r1");
    reg(s, "w1", "cpu:0"); /* the restarted process */
    OK(kg_store_worker_heartbeat(s, "w1", NULL, &e_));
    assert_int_equal(kg_store_get(s, "r1", 0, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_PENDING);
    kg_task_free(&t);
    assert_string_equal(lease(s, "w1", id), "r1"); /* it runs again */
    assert_int_equal(kg_store_get(s, "r1", 0, &t, &err), 0);
    assert_int_equal(t.attempts, 2);
    kg_task_free(&t);
}

static void test_dead_worker(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_requeue_counts rq;
    assert_int_equal(submit(s, "d1", 1), 0);
    reg(s, "w1", "cuda:0");
    reg(s, "w2", "cuda:1");
    assert_string_equal(lease(s, "w1", id), "d1");
    /* w2 keeps beating, w1 goes silent past its ttl but not past its
       lease: the task comes back because w1 is dead */
    for (int i = 0; i < 4; i++) {
        kg_test_sleep_ms(TTL_MS / 4 + 20);
        OK(kg_store_worker_heartbeat(s, "w2", NULL, &e_));
    }
    kg_worker *v;
    size_t n;
    OK(kg_store_worker_list(s, &v, &n, &e_));
    assert_int_equal(n, 2);
    assert_false(v[0].alive);
    assert_true(v[1].alive);
    free(v);
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.workers_dead, 1);
    OK(kg_store_requeue_expired(s, 3, &rq, &e_));
    assert_int_equal(rq.requeued, 1);
    assert_int_equal(rq.dead_workers, 1);
    assert_string_equal(lease(s, "w2", id), "d1");
    /* a dead worker's device can be claimed by a new worker */
    reg(s, "w3", "cuda:0");
    assert_int_equal(kg_store_worker_heartbeat(s, "w1", NULL, &err), KG_ENOTFOUND);
    assert_int_equal(kg_store_worker_register(s, "w1", "cuda:0", "host1", &err),
                     KG_ESTATE);
}

/* The sched.h policy over the store. */
static void test_sched_policy(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_sched *sc;
    kg_sched_policy p;
    kg_sched_policy_default(&p);
    p.max_attempts = 2;
    p.infra_avoid_ms = 60000;
    assert_int_equal(kg_sched_start(&sc, s, &p, 0, &err), 0);
    char key[65];
    kg_sha256_hex("k", 1, key);
    json_t *req = request("s1");
    kg_submit sub = {"s1", 1, req, key, 0};
    assert_int_equal(kg_store_submit(s, &sub, &err), 0);
    reg(s, "w1", "cpu:0");
    reg(s, "w2", "cpu:1");
    json_t *infra = result_of("infra_error"), *pass = result_of("pass");
    int outcome = -1;
    assert_string_equal(lease(s, "w1", id), "s1");
    assert_int_equal(kg_sched_result(sc, "s1", "w2", pass, &outcome, &err),
                     KG_ESTATE);
    assert_int_equal(kg_sched_result(sc, "s1", "w1", infra, &outcome, &err), 0);
    assert_int_equal(outcome, KG_TASK_PENDING);
    assert_string_equal(lease(s, "w1", id), "");
    assert_string_equal(lease(s, "w2", id), "s1");
    assert_int_equal(kg_sched_result(sc, "s1", "w2", infra, &outcome, &err), 0);
    assert_int_equal(outcome, KG_TASK_FAILED);
    kg_task t;
    assert_int_equal(kg_store_get(s, "s1", KG_GET_RESULT, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_FAILED);
    assert_string_equal(
        json_string_value(json_object_get(t.result, "error_code")),
        "INFRA_RETRIES_EXHAUSTED");
    kg_task_free(&t);
    json_t *got = NULL;
    assert_int_equal(kg_store_cache_get(s, key, &got, &err), 0);
    /* a real verdict completes the task and fills the cache */
    sub.replace_finished = 1;
    assert_int_equal(kg_store_submit(s, &sub, &err), 0);
    assert_string_equal(lease(s, "w1", id), "s1");
    assert_int_equal(kg_sched_result(sc, "s1", "w1", pass, &outcome, &err), 0);
    assert_int_equal(outcome, KG_TASK_COMPLETED);
    assert_int_equal(kg_store_cache_get(s, key, &got, &err), 1);
    assert_true(json_equal(got, pass));
    json_decref(got);
    /* the sweep */
    assert_int_equal(submit(s, "s2", 1), 0);
    assert_string_equal(lease(s, "w1", id), "s2");
    kg_test_sleep_ms(TTL_MS + 100);
    kg_requeue_counts rq;
    assert_int_equal(kg_sched_sweep(sc, &rq, &err), 0);
    assert_int_equal(rq.requeued, 1);
    kg_sched_stop(sc);
    json_decref(req);
    json_decref(infra);
    json_decref(pass);
}

/* problem_error (the reference failed, not the candidate) is final: the
 * task completes on its first attempt, is not retried elsewhere as an
 * infra_error is, and is counted under its own name. Stored after "other",
 * so an old store's counters keep their meaning. */
static void test_sched_problem_error_is_final(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_sched *sc;
    kg_sched_policy p;
    kg_sched_policy_default(&p);
    p.max_attempts = 3;
    assert_int_equal(kg_sched_start(&sc, s, &p, 0, &err), 0);
    assert_int_equal(KG_VERDICT_OTHER, 7);
    assert_int_equal(kg_verdict_parse("problem_error"),
                     KG_VERDICT_PROBLEM_ERROR);
    assert_string_equal(kg_verdict_name(KG_VERDICT_PROBLEM_ERROR),
                        "problem_error");
    assert_int_equal(kg_verdict_parse("other"), KG_VERDICT_OTHER);
    assert_int_equal(kg_verdict_parse("no_such_verdict"), KG_VERDICT_OTHER);
    assert_int_equal(submit(s, "pe1", 1), 0);
    reg(s, "w1", "cpu:0");
    assert_string_equal(lease(s, "w1", id), "pe1");
    json_t *res = result_of("problem_error");
    int outcome = -1;
    assert_int_equal(kg_sched_result(sc, "pe1", "w1", res, &outcome, &err), 0);
    assert_int_equal(outcome, KG_TASK_COMPLETED);
    kg_task t;
    assert_int_equal(kg_store_get(s, "pe1", KG_GET_RESULT, &t, &err), 0);
    assert_int_equal(t.status, KG_TASK_COMPLETED);
    assert_int_equal(t.attempts, 1);
    kg_task_free(&t);
    assert_string_equal(lease(s, "w1", id), "");
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.by_verdict[KG_VERDICT_PROBLEM_ERROR], 1);
    assert_int_equal(c.by_verdict[KG_VERDICT_OTHER], 0);
    assert_int_equal(c.by_verdict[KG_VERDICT_INFRA_ERROR], 0);
    kg_sched_stop(sc);
    json_decref(res);
}

/* Background sweeps requeue without anyone asking. */
static void test_sched_background(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    char id[128];
    kg_sched *sc;
    kg_sched_policy p;
    kg_sched_policy_default(&p);
    p.sweep_ms = 50;
    assert_int_equal(submit(s, "g1", 1), 0);
    reg(s, "w1", "cpu:0");
    assert_string_equal(lease(s, "w1", id), "g1");
    assert_int_equal(kg_sched_start(&sc, s, &p, 1, &err), 0);
    kg_task t;
    kg_requeue_counts tot = {0, 0, 0};
    int pending = 0;
    /* the sweep's totals are added after its store call returns, so the
       task can be pending a moment before they show it */
    for (int i = 0; i < 40 && !(pending && tot.requeued); i++) {
        kg_test_sleep_ms(50);
        assert_int_equal(kg_store_get(s, "g1", 0, &t, &err), 0);
        pending = t.status == KG_TASK_PENDING;
        kg_task_free(&t);
        kg_sched_totals(sc, &tot);
    }
    assert_true(pending);
    assert_int_equal(tot.requeued, 1);
    kg_sched_stop(sc);
}

#define NDURABLE 200

/*
 * SQLite: a child submits NDURABLE tasks one by one, reporting each
 * acknowledgement through a pipe, and SIGKILLs itself right after the
 * last one. Every acknowledged task must be in the reopened store.
 */
static void test_durable_sqlite_kill9(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    kg_store *s0 = open_fresh(); /* creates the file; the child reopens */
    kg_store_close(s0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        kg_store *s = NULL;
        kg_store_opts o;
        opts_test(&o);
        if (kg_store_open(&s, G.url, &o, NULL))
            _exit(2);
        for (int i = 0; i < NDURABLE; i++) {
            char id[32];
            snprintf(id, sizeof id, "dur%04d", i);
            json_t *req = request(id);
            kg_submit t = {id, i % 3, req, NULL, 0};
            if (kg_store_submit(s, &t, NULL) != 0)
                _exit(3);
            if (write(pfd[1], &i, sizeof i) != sizeof i)
                _exit(4);
        }
        kill(getpid(), SIGKILL);
        _exit(5);
    }
    close(pfd[1]);
    int i, acked = 0;
    while (read(pfd[0], &i, sizeof i) == sizeof i)
        acked = i + 1;
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(acked, NDURABLE);
    kg_store *s = reopen();
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_int_equal(c.by_status[KG_TASK_PENDING], acked);
    for (i = 0; i < acked; i++) {
        char id[32];
        kg_task t;
        kg_err err;
        snprintf(id, sizeof id, "dur%04d", i);
        assert_int_equal(kg_store_get(s, id, KG_GET_REQUEST, &t, &err), 0);
        assert_non_null(t.request);
        kg_task_free(&t);
    }
    /* the queue order survives too */
    reg(s, "w1", "cpu:0");
    char id[128];
    assert_string_equal(lease(s, "w1", id), "dur0000");
    kg_store_close(s);
}

#define NSUBMITTERS 16
#define PER_SUBMITTER 100
#define KILL_AFTER 600

struct submitter {
    kg_store *s;
    int index, fd;
};

/* Submits PER_SUBMITTER tasks one by one; writes each acknowledged
   number (index * 1000 + i) to fd, or -1 and stops on an error. */
static void *submitter_main(void *arg)
{
    struct submitter *a = arg;
    for (int i = 0; i < PER_SUBMITTER; i++) {
        int k = a->index * 1000 + i;
        char id[32];
        snprintf(id, sizeof id, "gc%05d", k);
        json_t *req = request(id);
        kg_submit t = {id, k % 3, req, NULL, 0};
        int rc = kg_store_submit(a->s, &t, NULL);
        json_decref(req);
        if (rc != 0)
            k = -1;
        if (write(a->fd, &k, sizeof k) != sizeof k || k < 0)
            break;
    }
    return NULL;
}

/*
 * SQLite group commit: a child submits from 16 threads at once (so
 * submissions share commits and fsyncs) and reports every acknowledgement
 * through a pipe; the parent SIGKILLs it in mid-stream, after 600
 * acknowledgements. Every acknowledged task must be in the reopened store,
 * with its request.
 */
static void test_durable_sqlite_kill9_concurrent(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    kg_store *s0 = open_fresh(); /* creates the file; the child reopens */
    kg_store_close(s0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        kg_store *s = NULL;
        kg_store_opts o;
        opts_test(&o);
        if (kg_store_open(&s, G.url, &o, NULL))
            _exit(2);
        pthread_t th[NSUBMITTERS];
        struct submitter a[NSUBMITTERS];
        for (int i = 0; i < NSUBMITTERS; i++) {
            a[i] = (struct submitter){s, i, pfd[1]};
            if (pthread_create(&th[i], NULL, submitter_main, &a[i]))
                _exit(3);
        }
        for (int i = 0; i < NSUBMITTERS; i++)
            pthread_join(th[i], NULL);
        pause(); /* the parent kills us */
        _exit(4);
    }
    close(pfd[1]);
    int *acked = calloc(NSUBMITTERS * PER_SUBMITTER, sizeof *acked);
    assert_non_null(acked);
    int k, n = 0, killed = 0;
    while (read(pfd[0], &k, sizeof k) == sizeof k) {
        assert_true(k >= 0); /* a submission failed in the child */
        acked[n++] = k;
        if (n == KILL_AFTER) {
            kill(pid, SIGKILL);
            killed = 1;
        }
    }
    close(pfd[0]);
    if (!killed)
        kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_true(n >= KILL_AFTER);
    print_message("      %d acknowledged before and around the kill\n", n);
    kg_store *s = reopen();
    kg_store_counts c;
    OK(kg_store_counts_get(s, &c, &e_));
    assert_true(c.by_status[KG_TASK_PENDING] >= n);
    for (int i = 0; i < n; i++) {
        char id[32];
        kg_task t;
        kg_err err;
        snprintf(id, sizeof id, "gc%05d", acked[i]);
        int rc = kg_store_get(s, id, KG_GET_REQUEST, &t, &err);
        if (rc)
            print_error("acknowledged %s: %s\n", id, err.msg);
        assert_int_equal(rc, 0);
        assert_non_null(t.request);
        assert_string_equal(
            json_string_value(json_object_get(t.request, "kernel_code")), id);
        kg_task_free(&t);
    }
    free(acked);
    kg_store_close(s);
}

/* The tables of schema version 1 that version 2 changed or needs. */
static const char V1_TABLES[] =
    "CREATE TABLE tasks(id TEXT PRIMARY KEY, priority INTEGER NOT NULL,"
    " status INTEGER NOT NULL, qseq INTEGER NOT NULL,"
    " cache_key TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0,"
    " worker TEXT NOT NULL DEFAULT '', avoid_worker TEXT NOT NULL DEFAULT '',"
    " avoid_until INTEGER NOT NULL DEFAULT 0, submitted INTEGER NOT NULL,"
    " started INTEGER NOT NULL DEFAULT 0, finished INTEGER NOT NULL DEFAULT 0,"
    " deadline INTEGER NOT NULL DEFAULT 0, verdict INTEGER);"
    "CREATE TABLE task_data(id TEXT PRIMARY KEY, request TEXT NOT NULL,"
    " result TEXT);"
    "CREATE TABLE counters(name TEXT PRIMARY KEY, n INTEGER NOT NULL)"
    " WITHOUT ROWID;"
    "INSERT INTO counters(name, n) VALUES ('s0', 1), ('s1', 0), ('s2', 1),"
    " ('s3', 0), ('s4', 0), ('p0', 0), ('p1', 1), ('p2', 0), ('v0', 1),"
    " ('v1', 0), ('v2', 0), ('v3', 0), ('v4', 0), ('v5', 0), ('v6', 0),"
    " ('v7', 0), ('lease_expiries', 0);"
    /* a finished task first, so rowids and ids do not line up */
    "INSERT INTO tasks(id, priority, status, qseq, submitted, verdict)"
    " VALUES ('old-done', 1, 2, 1, 1, 0), ('old-pending', 1, 0, 2, 2, NULL);"
    "INSERT INTO task_data(id, request, result) VALUES"
    " ('old-pending', '{\"kernel_code\": \"kp\"}', NULL),"
    " ('old-done', '{\"kernel_code\": \"kd\"}', '{\"verdict\": \"pass\"}');";

/*
 * A database written by schema version 1 (task_data keyed by task id) is
 * converted at open: requests, results, counters and queue order kept.
 */
static void test_sqlite_migrates_v1(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/v1.db", G.dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int r = sqlite3_exec(db, V1_TABLES, NULL, NULL, &msg);
    if (r != SQLITE_OK)
        print_error("v1 tables: %s\n", msg);
    assert_int_equal(r, SQLITE_OK);
    sqlite3_close(db);
    snprintf(G.url, sizeof G.url, "sqlite:%s", path);
    for (int round = 0; round < 2; round++) { /* the second open: no-op */
        kg_store *s = reopen();
        kg_task t;
        kg_err err = {{0}};
        assert_int_equal(kg_store_get(s, "old-done",
                                      KG_GET_REQUEST | KG_GET_RESULT, &t, &err),
                         0);
        assert_int_equal(t.status, KG_TASK_COMPLETED);
        assert_string_equal(
            json_string_value(json_object_get(t.request, "kernel_code")), "kd");
        assert_string_equal(
            json_string_value(json_object_get(t.result, "verdict")), "pass");
        kg_task_free(&t);
        kg_store_counts c;
        OK(kg_store_counts_get(s, &c, &e_));
        assert_int_equal(c.pending[1], 1); /* old-pending, then new */
        assert_int_equal(c.by_verdict[KG_VERDICT_PASS], 1 + round);
        if (round == 0) {
            assert_int_equal(submit(s, "new", 1), 0);
            reg(s, "w1", "cpu:0");
            char id[128];
            assert_string_equal(lease(s, "w1", id), "old-pending");
            json_t *res = result_of("pass");
            OK(kg_store_complete(s, "old-pending", "w1", KG_TASK_COMPLETED, res,
                                 &e_));
            json_decref(res);
            assert_int_equal(kg_store_get(s, "new", KG_GET_REQUEST, &t, &err),
                             0);
            assert_string_equal(
                json_string_value(json_object_get(t.request, "kernel_code")),
                "new");
            kg_task_free(&t);
        }
        kg_store_close(s);
    }
}

/*
 * Redis: acknowledged submissions, then SIGKILL of redis-server (AOF,
 * appendfsync always), restart on the same dir: all there, and the store
 * handle reconnects by itself.
 */
static void test_durable_redis_kill9(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    for (int i = 0; i < NDURABLE; i++) {
        char id[32];
        snprintf(id, sizeof id, "dur%04d", i);
        assert_int_equal(submit(s, id, i % 3), 0);
    }
    reg(s, "w1", "cpu:0");
    char id[128];
    assert_string_equal(lease(s, "w1", id), "dur0000");
    kg_test_redis_kill(&G.redis, SIGKILL);
    assert_int_equal(kg_test_redis_start(&G.redis), 0);
    /* the pooled connection Redis closed in dying is not used again: the
     * first call after the restart succeeds (it failed with KG_EUNAVAIL) */
    kg_store_counts c;
    assert_int_equal(kg_store_counts_get(s, &c, &err), 0);
    assert_int_equal(c.pending[0] + c.pending[1] + c.pending[2], NDURABLE - 1);
    assert_int_equal(c.by_status[KG_TASK_RUNNING], 1);
    for (int i = 0; i < NDURABLE; i++) {
        kg_task t;
        snprintf(id, sizeof id, "dur%04d", i);
        assert_int_equal(kg_store_get(s, id, KG_GET_REQUEST, &t, &err), 0);
        assert_non_null(t.request);
        assert_int_equal(t.status, i ? KG_TASK_PENDING : KG_TASK_RUNNING);
        kg_task_free(&t);
    }
    /* the stream and its consumer group survived: leasing continues */
    assert_string_equal(lease(s, "w1", id), "dur0003");
}

/* Redis down: KG_EUNAVAIL within ~2 s; back up: the same handle works. */
static void test_redis_down(void **state)
{
    kg_store *s = ((fixture *)*state)->s;
    kg_err err = {{0}};
    assert_int_equal(submit(s, "before", 1), 0);
    kg_test_redis_kill(&G.redis, SIGKILL);
    for (int k = 0; k < 3; k++) {
        int64_t t0 = now_ms();
        json_t *req = request("down");
        kg_submit sub = {"during", 1, req, NULL, 0};
        int rc = kg_store_submit(s, &sub, &err);
        json_decref(req);
        int64_t dt = now_ms() - t0;
        assert_int_equal(rc, KG_EUNAVAIL);
        assert_true(dt < 2000);
    }
    /* a server that accepts but never answers (stopped) times out too */
    assert_int_equal(kg_test_redis_start(&G.redis), 0);
    kill(G.redis.pid, SIGSTOP);
    int64_t t0 = now_ms();
    kg_task t;
    int rc = kg_store_get(s, "before", 0, &t, &err);
    int64_t dt = now_ms() - t0;
    kill(G.redis.pid, SIGCONT);
    assert_int_equal(rc, KG_EUNAVAIL);
    assert_true(dt < 2500);
    /* back: the handle reconnects */
    rc = -1;
    for (int i = 0; i < 20 && rc != 0; i++) {
        rc = kg_store_get(s, "before", 0, &t, &err);
        if (rc == 0)
            kg_task_free(&t);
        else
            kg_test_sleep_ms(100);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(submit(s, "after", 1), 0);
    kg_store *s2 = reopen();
    assert_int_equal(kg_store_get(s2, "after", 0, &t, &err), 0);
    kg_task_free(&t);
    kg_store_close(s2);
}

/* Stored JSON text reads back equal, for every kind of value. */
static void test_json_text_round_trip(void **state)
{
    (void)state;
    static const double reals[] = {
        0.01,   1e-4,     300,  10,   -2.5, 0.1, 1.0 / 3, 1e-300, 1e300, -0.0,
        5e-324, 123456.5, 1e14, 1e15, 1e21, 0.3, -7e-7,   2.675,  1.005, 9e18};
    json_t *o = json_object();
    json_t *a = json_array();
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        json_array_append_new(a, json_real(reals[i]));
    json_object_set_new(o, "reals", a);
    json_object_set_new(o, "ints",
                        json_pack("[I, I, I, i]", (json_int_t)0,
                                  (json_int_t)INT64_MAX, (json_int_t)INT64_MIN,
                                  -42));
    json_object_set_new(
        o, "s",
        json_string("quote \" back \\ nl \n tab \t cr \r "
                    "bell \a del \x7f \xc3\xa9 \xf0\x9f\x98\x80"));
    json_object_set_new(o, "nul", json_stringn("a\0b", 3));
    json_object_set_new(o, "\"key\"",
                        json_pack("{s:b, s:b, s:n, s:{}, s:[]}", "t", 1, "f", 0,
                                  "n", "o", "a"));
    char *t = kg_store_json_text(o);
    assert_non_null(t);
    json_t *back = kg_store_json_parse(t, strlen(t));
    if (!back || !json_equal(back, o))
        print_error("read back differs: %s\n", t);
    assert_non_null(back);
    assert_true(json_equal(back, o));
    /* reals stay reals, and short decimals are written short */
    assert_non_null(strstr(t, "[0.01,0.0001,300.0,10.0,-2.5,0.1,"));
    json_t *r = json_array_get(json_object_get(back, "reals"), 2);
    assert_true(json_is_real(r));
    free(t);
    json_decref(back);
    json_decref(o);
}

static void test_open_errors(void **state)
{
    (void)state;
    kg_store *s;
    kg_err err = {{0}};
    assert_int_equal(kg_store_open(&s, "mysql://x", NULL, &err), KG_EINVAL);
    assert_int_equal(kg_store_open(&s, "sqlite:", NULL, &err), KG_EINVAL);
    assert_int_equal(kg_store_open(&s, "redis://h:0/0", NULL, &err), KG_EINVAL);
    assert_int_equal(
        kg_store_open(&s, "sqlite:/nonexistent-dir/x.db", NULL, &err), KG_EIO);
    int port = kg_test_free_port();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", port);
    int64_t t0 = now_ms();
    assert_int_equal(kg_store_open(&s, url, NULL, &err), KG_EUNAVAIL);
    assert_true(now_ms() - t0 < 2000);
}

#define WITH_REDIS 1

#define COMMON_TESTS                                                           \
    cmocka_unit_test_setup_teardown(test_submit_get, setup, teardown),         \
        cmocka_unit_test_setup_teardown(test_lease_text, setup, teardown),     \
        cmocka_unit_test_setup_teardown(test_submit_batch_and_replace, setup,  \
                                        teardown),                             \
        cmocka_unit_test_setup_teardown(test_counts_follow_tasks, setup,       \
                                        teardown),                             \
        cmocka_unit_test_setup_teardown(test_priority_fifo, setup, teardown),  \
        cmocka_unit_test_setup_teardown(test_lease_atomic, setup, teardown),   \
        cmocka_unit_test_setup_teardown(test_complete_only_holder, setup,      \
                                        teardown),                             \
        cmocka_unit_test_setup_teardown(test_expired_requeue_and_limit, setup, \
                                        teardown),                             \
        cmocka_unit_test_setup_teardown(test_retry_avoids_worker, setup,       \
                                        teardown),                             \
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),         \
        cmocka_unit_test_setup_teardown(test_cache, setup, teardown),          \
        cmocka_unit_test_setup_teardown(test_submit_cached, setup, teardown),  \
        cmocka_unit_test_setup_teardown(test_cache_contract, setup,            \
                                        teardown),                             \
        cmocka_unit_test_setup_teardown(test_worker_secret, setup, teardown),  \
        cmocka_unit_test_setup_teardown(test_workers, setup, teardown),        \
        cmocka_unit_test_setup_teardown(test_reregister_releases_leases,       \
                                        setup, teardown),                      \
        cmocka_unit_test_setup_teardown(test_dead_worker, setup, teardown),    \
        cmocka_unit_test_setup_teardown(test_sched_policy, setup, teardown),   \
        cmocka_unit_test_setup_teardown(test_sched_problem_error_is_final,     \
                                        setup, teardown),                      \
        cmocka_unit_test_setup_teardown(test_sched_background, setup,          \
                                        teardown)

int main(void)
{
    const struct CMUnitTest sqlite_tests[] = {
        COMMON_TESTS,
        cmocka_unit_test(test_durable_sqlite_kill9),
        cmocka_unit_test(test_durable_sqlite_kill9_concurrent),
        cmocka_unit_test(test_sqlite_migrates_v1),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_json_text_round_trip),
    };
    const struct CMUnitTest redis_tests[] = {
        COMMON_TESTS,
        cmocka_unit_test_setup_teardown(test_durable_redis_kill9, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_redis_down, setup, teardown),
    };
    int failed =
        cmocka_run_group_tests_name("store_sqlite", sqlite_tests,
                                    group_setup_sqlite, group_teardown_sqlite);
    if (WITH_REDIS && !getenv("KGYM_TEST_NO_REDIS"))
        failed += cmocka_run_group_tests_name("store_redis", redis_tests,
                                              group_setup_redis,
                                              group_teardown_redis);
    return failed ? 1 : 0;
}
