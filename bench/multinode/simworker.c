/*
 * simworker.c - simulated remote workers for bench/multinode/run.py: N
 * threads in one process (one "machine"), each one worker with its own
 * device (cpu:0 .. cpu:N-1), its own keep-alive connection and its own
 * worker id, speaking the protocol of `kgym worker` (src/cli/cmd_worker.c)
 * through the same HTTP client (src/common/http_client.c): POST
 * /worker/register {worker_id, device, host}, /worker/heartbeat
 * {worker_id, tasks} every heartbeat_interval_ms the server gives, a long
 * poll POST /worker/lease {worker_id, wait_s} (wait_s: until the next
 * heartbeat, 1..20 s, as the real worker asks when idle), POST
 * /worker/result {worker_id, task_id, result} and POST /worker/unregister
 * on SIGTERM. What it leaves out is the evaluation: a leased task's result
 * is kg_result_new's (every contract field, verdict runtime_error) after
 * --eval-ms of sleep, so the server does the same work per task as for a
 * real one and the machine's CPUs stay with the server.
 *
 *   simworker --server URL --token-file F --workers N [--eval-ms MS]
 *             [--out FILE]
 *
 * Writes one line per call to FILE (default stdout) once stopped:
 * "KIND STATUS T_END_MS LATENCY_MS", KIND lease|result|heartbeat|register,
 * T_END_MS on CLOCK_MONOTONIC (the same clock in every namespace), STATUS
 * the HTTP status or 0 when no answer came. Built by run.py against
 * libkgym-app.a and libkgym.a of a kgym build.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/http_client.h"
#include "common/result.h"

#define CALL_TIMEOUT_MS 10000L
#define MAX_WAIT_S 20

struct sample {
    char kind; /* L lease, R result, H heartbeat, G register */
    int status;
    double t_end, ms;
};

struct sim {
    pthread_t th;
    int index;
    kg_client *http;
    char id[128], device[32];
    char secret[80]; /* the worker_secret of its registration */
    double hb_iv, next_hb;
    int registered;
    struct sample *s;
    size_t n, cap;
};

static volatile sig_atomic_t stop_flag;
static const char *server, *token;
static char host[128];
static long eval_ms;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void record(struct sim *w, char kind, long status, double t0)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        struct sample *s = realloc(w->s, cap * sizeof *s);
        if (!s)
            return;
        w->s = s;
        w->cap = cap;
    }
    double t1 = kg_now_ms();
    w->s[w->n++] = (struct sample){kind, (int)status, t1, t1 - t0};
}

/* POST path {worker_id, ...}; the status (0: no answer), *r filled. */
static long call(struct sim *w, char kind, const char *path, json_t *body,
                 long timeout_ms, kg_client_resp *r)
{
    json_object_set_new(body, "worker_id", json_string(w->id));
    if (w->secret[0])
        json_object_set_new(body, "worker_secret", json_string(w->secret));
    kg_err err = {{0}};
    double t0 = kg_now_ms();
    int rc =
        kg_client_request(w->http, "POST", path, body, timeout_ms, r, &err);
    json_decref(body);
    long st = rc ? 0 : r->status;
    if (rc != KG_ESTATE)
        record(w, kind, st, t0);
    return st;
}

static void do_register(struct sim *w)
{
    kg_client_resp r;
    long st = call(w, 'G', "/worker/register",
                   json_pack("{s:s, s:s}", "device", w->device, "host", host),
                   CALL_TIMEOUT_MS, &r);
    const char *sec =
        st == 200 ? json_string_value(json_object_get(r.json, "worker_secret"))
                  : NULL;
    if (sec)
        snprintf(w->secret, sizeof w->secret, "%s", sec);
    if (st == 200) {
        json_t *hb = json_object_get(r.json, "heartbeat_interval_ms");
        double iv = json_is_integer(hb) ? (double)json_integer_value(hb) : 0;
        w->hb_iv = iv < 500 ? 500 : iv;
        w->next_hb = kg_now_ms() + w->hb_iv;
        w->registered = 1;
    } else {
        kg_sleep_ms(1000);
    }
    kg_client_resp_free(&r);
}

static void do_heartbeat(struct sim *w)
{
    kg_client_resp r;
    w->next_hb = kg_now_ms() + w->hb_iv;
    /* a task is posted before the next call: none held between calls */
    long st = call(w, 'H', "/worker/heartbeat", json_pack("{s:[]}", "tasks"),
                   CALL_TIMEOUT_MS, &r);
    if (st == 404)
        w->registered = 0;
    kg_client_resp_free(&r);
}

static void post_result(struct sim *w, const char *tid)
{
    json_t *res = kg_result_new(tid, "runtime_error", "SIMULATED", "bench",
                                "simulated worker: nothing evaluated");
    kg_client_resp r;
    /* posted until the server answers, as the worker's outbox does */
    for (int i = 0; i < 50; i++) {
        long st = call(w, 'R', "/worker/result",
                       json_pack("{s:s, s:O}", "task_id", tid, "result", res),
                       CALL_TIMEOUT_MS, &r);
        kg_client_resp_free(&r);
        if (st && st < 500)
            break;
        kg_sleep_ms(250);
    }
    json_decref(res);
}

static void do_lease(struct sim *w)
{
    int wait = (int)((w->next_hb - kg_now_ms()) / 1e3);
    wait = wait < 1 ? 1 : wait > MAX_WAIT_S ? MAX_WAIT_S : wait;
    kg_client_resp r;
    long st = call(w, 'L', "/worker/lease", json_pack("{s:i}", "wait_s", wait),
                   (long)wait * 1000 + CALL_TIMEOUT_MS, &r);
    const char *tid = json_string_value(json_object_get(r.json, "task_id"));
    if (st == 200 && tid &&
        json_is_object(json_object_get(r.json, "request"))) {
        char id[128];
        snprintf(id, sizeof id, "%s", tid);
        kg_client_resp_free(&r);
        if (eval_ms > 0)
            kg_sleep_ms(eval_ms);
        post_result(w, id);
        return;
    }
    if (st == 404)
        w->registered = 0;
    else if (st != 204 && !stop_flag)
        kg_sleep_ms(st == 0 ? 250 : 1000);
    kg_client_resp_free(&r);
}

static void *main_loop(void *arg)
{
    struct sim *w = arg;
    while (!stop_flag) {
        if (!w->registered) {
            do_register(w);
            continue;
        }
        if (kg_now_ms() >= w->next_hb)
            do_heartbeat(w);
        do_lease(w);
    }
    if (w->registered) {
        kg_client_resp r;
        kg_client_set_abort(w->http, NULL);
        call(w, 'U', "/worker/unregister", json_object(), 5000, &r);
        kg_client_resp_free(&r);
    }
    return NULL;
}

static char *read_token(const char *path)
{
    char *t = NULL;
    kg_err err = {{0}};
    if (kg_client_read_token(path, &t, &err)) {
        fprintf(stderr, "simworker: %s\n", err.msg);
        exit(2);
    }
    return t;
}

int main(int argc, char **argv)
{
    const char *token_file = NULL, *out = NULL;
    int n = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--server"))
            server = argv[i + 1];
        else if (!strcmp(argv[i], "--token-file"))
            token_file = argv[i + 1];
        else if (!strcmp(argv[i], "--workers"))
            n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--eval-ms"))
            eval_ms = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else {
            fprintf(stderr, "simworker: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!server || n < 1 || n > 256) {
        fprintf(stderr, "usage: simworker --server URL [--token-file F] "
                        "--workers N [--eval-ms MS] [--out FILE]\n");
        return 2;
    }
    token = token_file ? read_token(token_file) : NULL;
    if (gethostname(host, sizeof host - 1) || !host[0])
        snprintf(host, sizeof host, "localhost");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* the signal goes to the main thread only */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    struct sim *ws = calloc((size_t)n, sizeof *ws);
    for (int i = 0; i < n; i++) {
        struct sim *w = &ws[i];
        kg_err err = {{0}};
        w->index = i;
        snprintf(w->device, sizeof w->device, "cpu:%d", i);
        /* HOST-DEVICE-PID, as kgym worker names itself (':' is allowed) */
        snprintf(w->id, sizeof w->id, "%.60s-%s-%ld", host, w->device,
                 (long)getpid());
        if (kg_client_new(&w->http, server, token, &err)) {
            fprintf(stderr, "simworker: %s\n", err.msg);
            return 1;
        }
        kg_client_set_connect_timeout(w->http, 3000);
        kg_client_set_abort(w->http, &stop_flag);
        pthread_create(&w->th, NULL, main_loop, w);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    while (!stop_flag)
        pause();
    for (int i = 0; i < n; i++)
        pthread_join(ws[i].th, NULL);
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "simworker: %s: %s\n", out, strerror(errno));
        return 1;
    }
    static const char *names[128] = {['L'] = "lease",
                                     ['R'] = "result",
                                     ['H'] = "heartbeat",
                                     ['G'] = "register",
                                     ['U'] = "unregister"};
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < ws[i].n; k++) {
            const struct sample *s = &ws[i].s[k];
            fprintf(f, "%s %d %.3f %.3f\n", names[(int)s->kind], s->status,
                    s->t_end, s->ms);
        }
        free(ws[i].s);
        kg_client_free(ws[i].http);
    }
    if (f != stdout)
        fclose(f);
    free(ws);
    free((char *)token);
    return 0;
}
