/*
 * store_bench.c - throughput of the task store (src/server/store.h) for
 * both backends: submissions one by one (from one thread, then from 16
 * at once, where the SQLite group commit shares fsyncs), in batches of
 * 100, status reads, then 64 workers leasing and completing everything. Redis
 * runs as a private redis-server (tests/unit/redis_helper.h) with each
 * appendfsync policy; SQLite in a temp file with synchronous FULL and NORMAL.
 *
 * Not built by make. Build and run from the repository root:
 *   make build/libkgym-app.a build/libkgym.a &&
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc -Itests/unit \
 *     $(pkg-config --cflags jansson hiredis sqlite3) bench/store_bench.c \
 *     build/libkgym-app.a build/libkgym.a \
 *     $(pkg-config --libs jansson hiredis sqlite3) -lpthread -lm \
 *     -o build/store_bench && build/store_bench [N [sqlite|redis]]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_helper.h"
#include "server/store.h"

#define BATCH 100
#define NSUBMITTERS 16 /* concurrent one-by-one submitters */
#define NWORKERS 64    /* concurrent lease + complete workers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static json_t *request(int i)
{
    /* a realistic size: a few KiB of source on each side */
    static char code[4096];
    if (!code[0])
        memset(code, 'x', sizeof code - 1);
    return json_pack("{s:s, s:s, s:s, s:i}", "reference_code", code,
                     "kernel_code", code, "backend", "cpu", "seed", i);
}

static void die(const char *what, int rc, const kg_err *e)
{
    fprintf(stderr, "%s: %s %s\n", what, kg_strerror(rc), e->msg);
    exit(1);
}

/* n single submissions with ids <prefix>-<first>... */
static void submit_range(kg_store *s, const char *prefix, int first, int n)
{
    kg_err e;
    for (int i = first; i < first + n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        json_t *req = request(i);
        kg_submit t = {id, i % 3, req, NULL, 0};
        int rc = kg_store_submit(s, &t, &e);
        if (rc < 0)
            die("submit", rc, &e);
        json_decref(req);
    }
}

struct submitter {
    kg_store *s;
    int first, n;
};

static void *submit_loop(void *arg)
{
    struct submitter *a = arg;
    submit_range(a->s, "par", a->first, a->n);
    return NULL;
}

struct worker {
    kg_store *s;
    char id[32];
    int n;
};

static void *lease_loop(void *arg)
{
    struct worker *w = arg;
    kg_err e;
    json_t *res = json_pack("{s:s}", "verdict", "pass");
    for (;;) {
        kg_task t;
        int rc = kg_store_lease(w->s, w->id, &t, &e);
        if (rc < 0)
            die("lease", rc, &e);
        if (rc == 0)
            break;
        rc = kg_store_complete(w->s, t.id, w->id, KG_TASK_COMPLETED, res, &e);
        if (rc < 0)
            die("complete", rc, &e);
        kg_task_free(&t);
        w->n++;
    }
    json_decref(res);
    return NULL;
}

static void bench(const char *label, const char *url, int n)
{
    kg_store *s;
    kg_err e;
    int rc = kg_store_open(&s, url, NULL, &e);
    if (rc < 0)
        die("open", rc, &e);
    char desc[256];
    kg_store_describe(s, desc, sizeof desc, &e);
    /* one by one, one thread */
    double t0 = now_s();
    submit_range(s, "one", 0, n);
    double one = n / (now_s() - t0);
    /* one by one, NSUBMITTERS threads: the group commit's case */
    pthread_t th[NWORKERS];
    struct submitter sub[NSUBMITTERS];
    t0 = now_s();
    for (int k = 0; k < NSUBMITTERS; k++) {
        sub[k] = (struct submitter){s, k * n, n / NSUBMITTERS};
        pthread_create(&th[k], NULL, submit_loop, &sub[k]);
    }
    for (int k = 0; k < NSUBMITTERS; k++)
        pthread_join(th[k], NULL);
    double par = NSUBMITTERS * (n / NSUBMITTERS) / (now_s() - t0);
    /* batches */
    int nb = n * 10;
    kg_submit v[BATCH];
    char ids[BATCH][32];
    int created[BATCH];
    t0 = now_s();
    for (int i = 0; i < nb; i += BATCH) {
        for (int k = 0; k < BATCH; k++) {
            snprintf(ids[k], sizeof ids[k], "bat-%d", i + k);
            v[k] = (kg_submit){ids[k], (i + k) % 3, request(i + k), NULL, 0};
        }
        if ((rc = kg_store_submit_batch(s, v, BATCH, created, &e)) < 0)
            die("batch", rc, &e);
        for (int k = 0; k < BATCH; k++)
            json_decref((json_t *)v[k].request);
    }
    double batch = nb / (now_s() - t0);
    /* status reads */
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        char id[32];
        kg_task t;
        snprintf(id, sizeof id, "bat-%d", i);
        if ((rc = kg_store_get(s, id, 0, &t, &e)) < 0)
            die("get", rc, &e);
        kg_task_free(&t);
    }
    double gets = n / (now_s() - t0);
    /* NWORKERS concurrent workers lease + complete everything */
    struct worker w[NWORKERS];
    for (int k = 0; k < NWORKERS; k++) {
        char dev[16];
        w[k] = (struct worker){s, "", 0};
        snprintf(w[k].id, sizeof w[k].id, "w%d", k);
        snprintf(dev, sizeof dev, "cpu:%d", k);
        if ((rc = kg_store_worker_register(s, w[k].id, dev, "bench", &e)) < 0)
            die("register", rc, &e);
    }
    t0 = now_s();
    for (int k = 0; k < NWORKERS; k++)
        pthread_create(&th[k], NULL, lease_loop, &w[k]);
    int total = 0;
    for (int k = 0; k < NWORKERS; k++) {
        pthread_join(th[k], NULL);
        total += w[k].n;
    }
    double leases = total / (now_s() - t0);
    printf("%-27s submit %5.0f/s  x%d threads %5.0f/s  batch(%d) %5.0f/s  "
           "get %6.0f/s  lease+complete x%d %5.0f/s  [%d tasks]\n",
           label, one, NSUBMITTERS, par, BATCH, batch, gets, NWORKERS, leases,
           total);
    printf("%-27s (%s)\n", "", desc);
    kg_store_close(s);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    const char *only = argc > 2 ? argv[2] : ""; /* "sqlite" or "redis" */
    char dir[] = "/tmp/kgym-store-bench-XXXXXX", url[512], cmd[512];
    if (!mkdtemp(dir))
        return 1;
    if (strcmp(only, "redis")) {
        snprintf(url, sizeof url, "sqlite:%s/full.db", dir);
        bench("sqlite synchronous=full", url, n);
        snprintf(url, sizeof url, "sqlite:%s/normal.db?sync=normal", dir);
        bench("sqlite synchronous=normal", url, n);
    }
    const char *pol[] = {"always", "everysec"};
    for (int i = 0; i < 2 && strcmp(only, "sqlite"); i++) {
        kg_test_redis r;
        memset(&r, 0, sizeof r);
        snprintf(r.fsync, sizeof r.fsync, "%s", pol[i]);
        if (kg_test_redis_start(&r) < 0) {
            fprintf(stderr, "cannot start redis-server\n");
            kg_test_redis_stop(&r);
            return 1;
        }
        char label[64];
        snprintf(label, sizeof label, "redis appendfsync=%s", pol[i]);
        snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", r.port);
        bench(label, url, n);
        kg_test_redis_stop(&r);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
