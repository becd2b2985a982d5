/* cmd_worker.c - `kgym worker`: the worker engine fed by a kgym server.
 * Registers its device, heartbeats, leases tasks while it has a free slot,
 * evaluates them in the engine (the same one `kgym eval` drives), posts
 * each result, and on SIGTERM/SIGINT drains and unregisters. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "common/clock.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/request.h"
#include "common/result.h"
#include "worker/engine.h"

#define BACKOFF_MIN_MS 250.0
#define BACKOFF_MAX_MS 10000.0
#define CALL_TIMEOUT_MS 10000L
#define MAX_WAIT_S 20
#define CANCEL_CHECK_MS 2000.0 /* heartbeat at least this often when busy */
#define MAX_TOKEN 4096

/* A leased task while the engine runs it. */
struct job {
    char *task_id;
    int attempt;
    double started_ms;
    struct job *next;
};

/* A result waiting to be posted. */
struct outbox {
    char *task_id;
    json_t *result;
    struct outbox *next;
};

struct worker {
    kg_client *http;
    kg_engine *eng;
    char id[KG_MAX_TASK_ID + 1];
    char secret[80]; /* the server's for this registration ("": none yet) */
    char host[128];
    const char *device;        /* as registered: cpu, cpu:N or cuda:N */
    char engine_device[64];    /* as the engine knows it: cpu or cuda:N */
    int concurrency, inflight;
    int registered, fatal;
    double hb_interval_ms, next_hb_ms;
    double backoff_ms, next_try_ms; /* the server is away until next_try */
    struct job *jobs;
    struct outbox *out, **out_tail;
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    if (stop_flag < 2)
        stop_flag++;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kgym worker --server URL [--token-file F] --device "
            "cpu[:N]|cuda:N [options]\n"
            "\n"
            "Registers with a kgym server (docs/api.md), leases tasks, "
            "evaluates them in\n"
            "sandboxed children of one warm zygote and posts the results. "
            "Reconnects with\n"
            "backoff while the server is away. SIGTERM/SIGINT: stop "
            "leasing, finish the\n"
            "tasks in flight, post their results, unregister (a second "
            "signal: at once).\n"
            "\n"
            "options:\n"
            "  --server URL            default $KGYM_SERVER, else %s\n"
            "  --token-file F          worker token (default "
            "$KGYM_TOKEN_FILE)\n"
            "  --token-fd N            read the token from file descriptor N "
            "instead\n"
            "                          (how kgym serve --workers hands it "
            "over)\n"
            "  --device D              the device this worker owns "
            "(required): cuda:N, or\n"
            "                          cpu (cpu:N names one of several cpu "
            "workers on a host)\n"
            "  --concurrency N|auto    tasks in flight (default 1; auto: 4 on "
            "a GPU, on the\n"
            "                          CPU its CPUs / 2, at most 8)\n"
            "  --worker-id ID          default HOST-DEVICE-PID\n"
            "  --drain-timeout S       longest wait for tasks in flight on "
            "stop (default 330)\n"
            "  --cpu-threads N|auto    threads of torch's CPU pool in each "
            "child (default\n"
            "                          auto: the CPUs / (2 x concurrency), at "
            "least 1)\n"
            "  --compile-ahead on|off|auto\n"
            "                          Triton candidates compile their kernels "
            "before their\n"
            "                          first call (default auto: on for a GPU "
            "with\n"
            "                          concurrency > 1)\n"
            "  --spare-mem-floor F     keep fewer warm pairs when one leaves "
            "less than this\n"
            "                          share of the device's memory free "
            "(default 0.25;\n"
            "                          0: never)\n"
            "  --fresh                 a fresh interpreter per child (no "
            "zygote)\n"
            "  --no-sandbox            skip namespaces, seccomp and limits "
            "(debugging only)\n"
            "  --no-cgroups            no per-task cgroup\n"
            "  --python PATH           interpreter with torch\n"
            "  --verbose               show the children's output\n",
            KG_CLI_DEFAULT_SERVER);
}

/* Replaces characters a worker id may not hold with '-'. */
static void sanitize_id(char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == ':' ||
              *s == '-'))
            *s = '-';
}

/* The server did not answer: retry no sooner than the backoff allows. */
static void server_away(struct worker *w, const char *what, const kg_err *err)
{
    w->backoff_ms =
        w->backoff_ms < BACKOFF_MIN_MS ? BACKOFF_MIN_MS : w->backoff_ms * 2;
    if (w->backoff_ms > BACKOFF_MAX_MS)
        w->backoff_ms = BACKOFF_MAX_MS;
    w->next_try_ms = kg_now_ms() + w->backoff_ms;
    kg_warn("%s: server unreachable (%s); retry in %.1f s", what, err->msg,
            w->backoff_ms / 1e3);
}

static void server_back(struct worker *w)
{
    w->backoff_ms = 0;
}

/* A reply the worker cannot get past: a token the server refuses. */
static int check_auth(struct worker *w, const char *what,
                      const kg_client_resp *r)
{
    if (r->status != 401)
        return 0;
    char e[300];
    kg_error("%s: %s; giving up", what, kg_client_error_text(r, e, sizeof e));
    w->fatal = 1;
    return 1;
}

/* POST path {worker_id, ...extra}; 0 and *r filled when the server answered,
 * else the backoff is set and a negative code returned. */
static int call(struct worker *w, const char *what, const char *path,
                json_t *extra, long timeout_ms, kg_client_resp *r)
{
    json_t *body = extra ? extra : json_object();
    json_object_set_new(body, "worker_id", json_string(w->id));
    /* every call proves it is this registration (docs/api.md) */
    if (w->secret[0])
        json_object_set_new(body, "worker_secret", json_string(w->secret));
    kg_err err = {{0}};
    int rc =
        kg_client_request(w->http, "POST", path, body, timeout_ms, r, &err);
    json_decref(body);
    if (rc == KG_ESTATE)
        return rc; /* aborted by a signal */
    if (rc) {
        server_away(w, what, &err);
        return rc;
    }
    if (r->status >= 500) {
        char e[300];
        kg_err why;
        kg_errf(&why, KG_EUNAVAIL, "%s", kg_client_error_text(r, e, sizeof e));
        server_away(w, what, &why);
        kg_client_resp_free(r);
        return KG_EUNAVAIL;
    }
    server_back(w);
    return 0;
}

static void do_register(struct worker *w)
{
    kg_client_resp r;
    json_t *b = json_pack("{s:s, s:s}", "device", w->device, "host", w->host);
    if (call(w, "register", "/worker/register", b, CALL_TIMEOUT_MS, &r))
        return;
    char e[300];
    const char *sec =
        json_string_value(json_object_get(r.json, "worker_secret"));
    if (r.status == 200 && (!sec || strlen(sec) >= sizeof w->secret)) {
        kg_error("register: the server sent no worker_secret (an older "
                 "server?); giving up");
        w->fatal = 1;
    } else if (r.status == 200) {
        snprintf(w->secret, sizeof w->secret, "%s", sec);
        json_t *hb = json_object_get(r.json, "heartbeat_interval_ms");
        json_t *ttl = json_object_get(r.json, "worker_ttl_ms");
        double iv = json_is_integer(hb) ? (double)json_integer_value(hb) : 0;
        if (iv <= 0 && json_is_integer(ttl))
            iv = (double)json_integer_value(ttl) / 3;
        if (iv <= 0)
            iv = 10000;
        w->hb_interval_ms = iv < 500 ? 500 : iv;
        w->next_hb_ms = kg_now_ms() + w->hb_interval_ms;
        w->registered = 1;
        kg_info("registered device %s on %s (heartbeat every %.1f s)",
                w->device, w->host, w->hb_interval_ms / 1e3);
    } else if (!check_auth(w, "register", &r)) {
        /* device_claimed: a dead worker's claim lapses after the ttl */
        w->backoff_ms = w->backoff_ms < 1000 ? 1000 : w->backoff_ms * 2;
        if (w->backoff_ms > BACKOFF_MAX_MS)
            w->backoff_ms = BACKOFF_MAX_MS;
        w->next_try_ms = kg_now_ms() + w->backoff_ms;
        kg_warn("register refused: %s; retry in %.1f s",
                kg_client_error_text(&r, e, sizeof e), w->backoff_ms / 1e3);
    }
    kg_client_resp_free(&r);
}

/* When the next heartbeat is due: every interval, and at least every
 * CANCEL_CHECK_MS while tasks run (the heartbeat is how a cancellation
 * reaches them). */
static double next_heartbeat(const struct worker *w)
{
    double iv = w->hb_interval_ms;
    if (w->inflight > 0 && iv > CANCEL_CHECK_MS)
        iv = CANCEL_CHECK_MS;
    return kg_now_ms() + iv;
}

/*
 * Stops the tasks the server says this worker no longer holds (cancelled,
 * or the lease was lost and the task requeued): their evaluation is
 * killed and no result is posted (it would be refused).
 */
static void stop_cancelled(struct worker *w, const json_t *ids)
{
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v)
    {
        const char *tid = json_string_value(v);
        struct job **pp = &w->jobs;
        while (tid && *pp && strcmp((*pp)->task_id, tid))
            pp = &(*pp)->next;
        if (!tid || !*pp)
            continue;
        struct job *j = *pp;
        int stopped = kg_engine_cancel(w->eng, j);
        *pp = j->next;
        w->inflight--;
        kg_info("task %s: cancelled on the server (or its lease was lost); "
                "evaluation %s after %.1f s, no result posted",
                j->task_id, stopped ? "stopped" : "already over",
                (kg_now_ms() - j->started_ms) / 1e3);
        free(j->task_id);
        free(j);
    }
}

static void do_heartbeat(struct worker *w)
{
    kg_client_resp r;
    w->next_hb_ms = next_heartbeat(w);
    /* every lease still held: tasks evaluating, and tasks whose result
     * waits in the outbox (not posted yet: listing only the first would
     * make the server think the lease was lost and requeue the task) */
    json_t *tasks = json_array();
    for (struct job *j = w->jobs; j; j = j->next)
        json_array_append_new(tasks, json_string(j->task_id));
    for (struct outbox *o = w->out; o; o = o->next)
        json_array_append_new(tasks, json_string(o->task_id));
    if (call(w, "heartbeat", "/worker/heartbeat",
             json_pack("{s:o}", "tasks", tasks), CALL_TIMEOUT_MS, &r)) {
        w->next_hb_ms = kg_now_ms(); /* as soon as the server is back */
        return;
    }
    char e[300];
    if (r.status == 200) {
        json_t *cancel = json_object_get(r.json, "cancel");
        if (json_is_array(cancel))
            stop_cancelled(w, cancel);
    } else if (r.status == 404 || r.status == 403) {
        /* 403: this id was registered again after it went silent, so its
         * secret is no longer this worker's */
        kg_warn("heartbeat: %s; registering again",
                r.status == 404 ? "the server does not know this worker"
                                : "this worker's registration was replaced");
        w->registered = 0;
    } else if (r.status != 200 && !check_auth(w, "heartbeat", &r)) {
        kg_warn("heartbeat: %s", kg_client_error_text(&r, e, sizeof e));
    }
    kg_client_resp_free(&r);
}

static void push_result(struct worker *w, const char *task_id, json_t *result)
{
    struct outbox *o = calloc(1, sizeof *o);
    if (!o || !(o->task_id = strdup(task_id))) {
        free(o);
        kg_error("task %s: out of memory; result dropped", task_id);
        return;
    }
    o->result = json_incref(result);
    *w->out_tail = o;
    w->out_tail = &o->next;
}

/* Posts the waiting results in order; stops at the first network error. */
static void flush_results(struct worker *w)
{
    while (w->out && kg_now_ms() >= w->next_try_ms) {
        struct outbox *o = w->out;
        kg_client_resp r;
        json_t *b =
            json_pack("{s:s, s:O}", "task_id", o->task_id, "result", o->result);
        if (call(w, "result", "/worker/result", b, CALL_TIMEOUT_MS, &r))
            return;
        char e[300];
        const char *st = json_string_value(json_object_get(r.json, "status"));
        if (r.status == 200)
            kg_info("task %s: result posted (verdict %s, task %s)", o->task_id,
                    json_string_value(json_object_get(o->result, "verdict")),
                    st ? st : "?");
        else if (r.status == 409)
            kg_warn("task %s: lease lost (%s); result dropped", o->task_id,
                    kg_client_error_text(&r, e, sizeof e));
        else if (check_auth(w, "result", &r)) {
            kg_client_resp_free(&r);
            return;
        } else
            kg_warn("task %s: result refused (%s); dropped", o->task_id,
                    kg_client_error_text(&r, e, sizeof e));
        kg_client_resp_free(&r);
        w->out = o->next;
        if (!w->out)
            w->out_tail = &w->out;
        json_decref(o->result);
        free(o->task_id);
        free(o);
    }
}

static void on_done(void *ctx, void *user, json_t *result)
{
    struct worker *w = ctx;
    struct job *j = user, **pp = &w->jobs;
    while (*pp && *pp != j)
        pp = &(*pp)->next;
    if (*pp)
        *pp = j->next;
    w->inflight--;
    kg_info("task %s: finished, verdict %s (%.1f s)", j->task_id,
            json_string_value(json_object_get(result, "verdict")),
            (kg_now_ms() - j->started_ms) / 1e3);
    push_result(w, j->task_id, result);
    free(j->task_id);
    free(j);
}

/* A leased task the worker cannot run: reported as its own failure. */
static void reject_task(struct worker *w, const char *task_id, const char *msg)
{
    kg_warn("task %s: bad request from the server: %s", task_id, msg);
    json_t *r = kg_result_new(task_id, "infra_error", "BAD_TASK", "worker", msg);
    push_result(w, task_id, r);
    json_decref(r);
}

/* One lease request; returns 1 when a task was started. */
static int do_lease(struct worker *w, int wait_s)
{
    kg_client_resp r;
    json_t *b = json_pack("{s:i}", "wait_s", wait_s);
    kg_client_set_abort(w->http, &stop_flag);
    int rc = call(w, "lease", "/worker/lease", b,
                  (long)wait_s * 1000 + CALL_TIMEOUT_MS, &r);
    kg_client_set_abort(w->http, NULL);
    if (rc)
        return 0;
    int started = 0;
    char e[300];
    const char *tid = json_string_value(json_object_get(r.json, "task_id"));
    json_t *req = json_object_get(r.json, "request");
    if (r.status == 200 && tid && json_is_object(req)) {
        json_t *in = json_deep_copy(req);
        json_object_set_new(in, "task_id", json_string(tid));
        int attempt =
            (int)json_integer_value(json_object_get(r.json, "attempt"));
        /* a retry draws inputs no earlier attempt's candidate saw */
        if (attempt > 1) {
            if (kg_request_reseed(in) == 0)
                kg_info("task %s: attempt %d, on inputs of a new seed", tid,
                        attempt);
            else
                kg_warn("task %s: attempt %d keeps its seed (no new one "
                        "could be drawn)",
                        tid, attempt);
        }
        int code;
        kg_err err = {{0}};
        json_t *task = kg_request_normalize(in, &code, NULL, &err);
        json_decref(in);
        struct job *j = task ? calloc(1, sizeof *j) : NULL;
        if (!task) {
            reject_task(w, tid, err.msg);
        } else if (!j || !(j->task_id = strdup(tid))) {
            free(j);
            reject_task(w, tid, "worker out of memory");
        } else {
            j->attempt = attempt;
            j->started_ms = kg_now_ms();
            if (kg_engine_submit(w->eng, task, j, &err)) {
                reject_task(w, tid, err.msg);
                free(j->task_id);
                free(j);
            } else {
                j->next = w->jobs;
                w->jobs = j;
                w->inflight++;
                started = 1;
                if (w->next_hb_ms > kg_now_ms() + CANCEL_CHECK_MS)
                    w->next_hb_ms = kg_now_ms() + CANCEL_CHECK_MS;
                kg_info("task %s: leased (attempt %d, backend %s)", tid,
                        j->attempt,
                        json_string_value(json_object_get(task, "backend")));
            }
        }
        json_decref(task);
    } else if (r.status == 404 || r.status == 403) {
        kg_warn("lease: %s; registering again",
                r.status == 404 ? "the server does not know this worker"
                                : "this worker's registration was replaced");
        w->registered = 0;
    } else if (r.status != 204 && !check_auth(w, "lease", &r)) {
        kg_warn("lease: %s", kg_client_error_text(&r, e, sizeof e));
        w->next_try_ms = kg_now_ms() + 1000;
    }
    kg_client_resp_free(&r);
    return started;
}

static void do_unregister(struct worker *w)
{
    kg_client_resp r;
    if (call(w, "unregister", "/worker/unregister", NULL, 5000, &r))
        return;
    char e[300];
    if (r.status == 200)
        kg_info("unregistered");
    else
        kg_warn("unregister: %s", kg_client_error_text(&r, e, sizeof e));
    kg_client_resp_free(&r);
}

/*
 * --device: "cuda:N" (N as CUDA_VISIBLE_DEVICES takes it: an index or a
 * GPU-/MIG- UUID), "cpu", or "cpu:N" (one of several cpu workers on a host:
 * the server lets one live worker hold a (host, device) pair). The engine
 * gets "cpu" for every cpu form.
 */
static int parse_device(const char *d, char *engine, size_t n)
{
    if (!d || strlen(d) >= n)
        return -1;
    if (!strcmp(d, "cpu") || !strncmp(d, "cuda:", 5)) {
        if (!strncmp(d, "cuda:", 5) && !d[5])
            return -1;
        snprintf(engine, n, "%s", d);
        return 0;
    }
    if (strncmp(d, "cpu:", 4) || !d[4] || strspn(d + 4, "0123456789") !=
                                               strlen(d + 4))
        return -1;
    snprintf(engine, n, "cpu");
    return 0;
}

/* The token from file descriptor fd (its first line); fd is closed. */
static int connect_fd(kg_client **out, const char *server, int fd,
                      kg_err *err)
{
    FILE *f = fdopen(fd, "r");
    if (!f)
        return kg_errf(err, KG_EIO, "--token-fd %d: %s", fd, strerror(errno));
    char tok[MAX_TOKEN + 2] = "";
    int ok = fgets(tok, sizeof tok, f) != NULL;
    fclose(f);
    tok[strcspn(tok, "\r\n")] = 0;
    int rc;
    if (!ok || !tok[0])
        rc = kg_errf(err, KG_EINVAL, "--token-fd %d: no token", fd);
    else {
        if (!server || !*server)
            server = getenv("KGYM_SERVER");
        rc = kg_client_new(out, server && *server ? server
                                                  : KG_CLI_DEFAULT_SERVER,
                           tok, err);
    }
    explicit_bzero(tok, sizeof tok);
    return rc;
}

/*
 * The worker's loop. Each turn: (re)register, heartbeat when due, post
 * waiting results, lease while a slot is free (a long poll when idle, a
 * quick ask when busy), then step the engine (at most a second, so
 * heartbeats keep their schedule while evaluations run).
 */
static int run(struct worker *w, double drain_s)
{
    int draining = 0;
    double drain_deadline = 0;
    for (;;) {
        double now = kg_now_ms();
        if (w->fatal)
            break;
        if (stop_flag && !draining) {
            draining = 1;
            drain_deadline = now + drain_s * 1e3;
            kg_info("stopping: no more leases; draining %d task(s)",
                    w->inflight);
        }
        if (draining) {
            if (w->inflight == 0 && !w->out)
                break;
            if (stop_flag > 1 || now > drain_deadline) {
                kg_warn("drain %s: abandoning %d task(s) in flight and %s",
                        stop_flag > 1 ? "cut short" : "timed out", w->inflight,
                        w->out ? "unposted results" : "no results");
                break;
            }
        }
        int leased = 0;
        if (now >= w->next_try_ms && !w->registered && !draining)
            do_register(w);
        if (kg_now_ms() >= w->next_try_ms && w->registered &&
            kg_now_ms() >= w->next_hb_ms)
            do_heartbeat(w);
        flush_results(w);
        if (w->registered && !draining && !stop_flag && !w->fatal &&
            w->inflight < w->concurrency && kg_now_ms() >= w->next_try_ms) {
            int wait = 0;
            if (w->inflight == 0) {
                wait = (int)((w->next_hb_ms - kg_now_ms()) / 1e3);
                wait = wait < 1 ? 1 : wait > MAX_WAIT_S ? MAX_WAIT_S : wait;
            }
            leased = do_lease(w, wait);
            if (wait > 0 && !leased)
                continue; /* the long poll was the wait */
        }
        /* how long the engine may wait for events */
        double next = kg_now_ms() + 1000;
        if (w->registered && w->next_hb_ms < next)
            next = w->next_hb_ms;
        if ((w->out || !w->registered) && w->next_try_ms < next)
            next = w->next_try_ms;
        int t = leased ? 0 : (int)(next - kg_now_ms());
        if (t < 0)
            t = 0;
        kg_err err = {{0}};
        if (kg_engine_step(w->eng, t, on_done, w, &err) < 0) {
            kg_error("engine failed: %s", err.msg);
            w->fatal = 1;
        }
    }
    if (w->registered || w->inflight || w->jobs) {
        w->next_try_ms = 0;
        do_unregister(w);
    }
    return w->fatal ? 1 : 0;
}

/* The command line of kgym worker. */
struct worker_opts {
    const char *server, *token_file, *wid;
    const char *conc_s; /* --concurrency as given: resolved with the device */
    long conc;
    int drain_s, token_fd;
};

/* Reads argv into o, w->device and cfg. Returns -1 to go on, else the
 * exit code (0: --help). */
static int parse_worker_args(int argc, char **argv, struct worker_opts *o,
                             struct worker *w, kg_engine_cfg *cfg)
{
    const kg_opt table[] = {
        KG_CLI_ENGINE_SWITCHES(cfg),
        KG_CLI_ENGINE_KNOBS(cfg),
        KG_OPT_S("--server", &o->server),
        KG_OPT_S("--token-file", &o->token_file),
        KG_OPT_I("--token-fd", &o->token_fd, 0, 1 << 20),
        KG_OPT_S("--device", &w->device),
        KG_OPT_S("--worker-id", &o->wid),
        KG_OPT_S("--python", &cfg->python),
        KG_OPT_S("--concurrency", &o->conc_s),
        KG_OPT_I("--drain-timeout", &o->drain_s, 0, 86400),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table};
    return kg_opts_main(&spec, argc, argv, usage);
}

/* Checks the options together and gives w its engine device, host, id and
 * concurrency. Returns -1 to go on, else the exit code. */
static int resolve_worker(const struct worker_opts *o, struct worker *w)
{
    if (parse_device(w->device, w->engine_device, sizeof w->engine_device)) {
        kg_error("--device %s: expected cpu, cpu:N or cuda:N (required)",
                 w->device ? w->device : "(missing)");
        return 2;
    }
    if (o->token_fd >= 0 && o->token_file) {
        kg_error("--token-fd and --token-file: give one");
        return 2;
    }
    if (gethostname(w->host, sizeof w->host - 1) != 0 || !w->host[0])
        snprintf(w->host, sizeof w->host, "localhost");
    if (o->wid) {
        if (!kg_task_id_valid(o->wid)) {
            kg_error("--worker-id: use 1..100 characters of [A-Za-z0-9._:-]");
            return 2;
        }
        snprintf(w->id, sizeof w->id, "%s", o->wid);
    } else {
        snprintf(w->id, sizeof w->id, "%.60s-%s-%ld", w->host, w->device,
                 (long)getpid());
        sanitize_id(w->id);
    }
    long conc = o->conc;
    kg_err err = {{0}};
    if (o->conc_s && kg_cli_concurrency("--concurrency", o->conc_s,
                                        w->engine_device, 1, &conc, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    w->concurrency = (int)conc;
    return -1;
}

/* Frees what is left of w's jobs and outbox. */
static void free_queues(struct worker *w)
{
    while (w->jobs) {
        struct job *j = w->jobs;
        w->jobs = j->next;
        free(j->task_id);
        free(j);
    }
    while (w->out) {
        struct outbox *o = w->out;
        w->out = o->next;
        json_decref(o->result);
        free(o->task_id);
        free(o);
    }
}

int kg_cli_worker(int argc, char **argv)
{
    static struct worker w;
    struct worker_opts o = {.conc = 1, .drain_s = 330, .token_fd = -1};
    char rootbuf[PATH_MAX];
    kg_engine_cfg cfg = {.concurrency = 1};
    memset(&w, 0, sizeof w);
    w.out_tail = &w.out;
    /* the worker's id joins the prefix once it is known */
    kg_log_init("kgym worker", NULL, 1);

    kg_cli_engine_knobs_env(&cfg); /* the old variables; flags win */
    int code = parse_worker_args(argc, argv, &o, &w, &cfg);
    if (code < 0)
        code = resolve_worker(&o, &w);
    if (code >= 0)
        return code;
    kg_log_init("kgym worker", w.id, 1);
    if (cfg.verbose)
        kg_log_level(KG_LOG_DEBUG);

    kg_err err = {{0}};
    if (o.token_fd >= 0
            ? connect_fd(&w.http, o.server, o.token_fd, &err)
            : kg_cli_connect(&w.http, o.server, o.token_file, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    kg_client_set_connect_timeout(w.http, 3000);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    cfg.device = w.engine_device;
    cfg.concurrency = w.concurrency;
    cfg.root = kg_cli_root(rootbuf, sizeof rootbuf);
    cfg.worker_id = w.id;
    kg_info("starting: device %s, concurrency %d, %s", w.device, w.concurrency,
            cfg.fresh ? "fresh interpreters" : "warm zygote");
    if (kg_engine_new(&w.eng, &cfg, &err)) {
        kg_error("engine: %s", err.msg);
        kg_client_free(w.http);
        return 1;
    }
    int rc = run(&w, (double)o.drain_s);
    kg_engine_free(w.eng);
    free_queues(&w);
    kg_client_free(w.http);
    kg_info("stopped");
    return rc;
}
