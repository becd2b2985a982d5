/* cmd_serve.c - `kgym serve`: the REST API over the task store. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "common/log.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/sched.h"
#include "server/store.h"
#include "server/supervise.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kgym serve [--listen 127.0.0.1:10907] [--store "
            "sqlite:PATH | redis://HOST:PORT/DB]\n"
            "                  [--token-file F] [--worker-token-file W] "
            "[--data-dir D] [options]\n"
            "\n"
            "Serves the task API (docs/api.md): clients submit with POST "
            "/evaluate, workers\n"
            "lease with POST /worker/lease. Runs until SIGINT or SIGTERM; "
            "SIGHUP re-reads\n"
            "the token files.\n"
            "\n"
            "options:\n"
            "  --listen HOST:PORT       address (default 127.0.0.1:10907; "
            "port 0 picks one)\n"
            "  --store URL              sqlite:PATH[?sync=normal] or "
            "redis://HOST:PORT[/DB]\n"
            "                           (default sqlite:DATA_DIR/kgym.db)\n"
            "  --data-dir D             default $KGYM_DATA_DIR, else "
            "~/.local/share/kgym\n"
            "  --token-file F           client bearer tokens, one per line "
            "(several: rotation)\n"
            "  --worker-token-file W    workers' tokens (default: F's)\n"
            "  --trust-clients-from CIDR[,CIDR...]\n"
            "                           clients from these ranges (e.g. "
            "10.0.0.0/8,fd00::/8)\n"
            "                           need no token (a token they send "
            "must be valid);\n"
            "                           worker endpoints always need one. "
            "Needs --token-file\n"
            "  --threads N              HTTP threads (default: 4 per "
            "online CPU)\n"
            "  --max-connections N      refused beyond (default 4096)\n"
            "  --max-connections-per-client N\n"
            "                           from one client address (default "
            "512)\n"
            "  --request-timeout-s S    a request must be in whole (head "
            "and body) within S\n"
            "                           seconds, else its connection is "
            "closed (default 30)\n"
            "  --lease-s S              lease length (default 60)\n"
            "  --worker-ttl-s S         a worker without heartbeat this long "
            "is dead (default 30)\n"
            "  --max-attempts N         leases a task may get (default 3)\n"
            "  --workers auto|N         also run local workers and restart "
            "them when they die:\n"
            "                           auto = one per visible GPU, else "
            "min(4, CPUs/2) cpu\n"
            "                           workers; N = the first N GPUs, or N "
            "cpu workers\n"
            "  --worker-concurrency N|auto  each local worker's tasks in "
            "flight (default\n"
            "                           auto: 4 on a GPU; on the CPU the "
            "CPUs / (2 x workers),\n"
            "                           1 to 8)\n"
            "  --worker-grace-s S       on stop, SIGKILL local workers still "
            "draining after S\n"
            "                           seconds (default 10)\n"
            "  --cpu-threads N|auto, --compile-ahead on|off|auto, "
            "--spare-mem-floor F\n"
            "                           the local workers' engine settings, "
            "as kgym worker's\n"
            "                           (kgym worker --help; with --workers)\n");
}

/* mkdir -p with mode 0700 for the directories it creates. */
static int mkdirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0700) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0700) && errno != EEXIST ? -1 : 0;
}

/* Warns when a token file can be read by others. */
static void check_mode(const char *path)
{
    struct stat st;
    if (path && stat(path, &st) == 0 && (st.st_mode & 077))
        kg_warn("warning: %s is readable by group or others (chmod 600 it)",
                path);
}

/* 64 random hex digits: the local workers' token. */
static int new_token(char out[65])
{
    unsigned char r[32];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return -1;
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    explicit_bzero(r, sizeof r);
    return 0;
}

/* What the supervisor's exit hook needs. */
struct local_ctx {
    kg_store *store;
    kg_http *http;
};

/*
 * A local worker exited (killed, crashed, or stopped): unregister it, so
 * the tasks it held go back to pending now rather than after the worker
 * ttl, and its device is free for the worker that replaces it.
 */
static void on_worker_exit(void *ctx, const char *worker_id)
{
    struct local_ctx *lc = ctx;
    kg_err err;
    int rc = kg_store_worker_unregister(lc->store, worker_id, &err);
    if (rc == 0) {
        kg_warn("worker %s had not unregistered: released it (what it held "
                "is pending again)",
                worker_id);
        kg_http_wake(lc->http, -1);
    } else if (rc != KG_ENOTFOUND) {
        kg_warn("worker %s: could not release it (%s); the sweep will, after "
                "the worker ttl",
                worker_id, err.msg);
    }
}

/*
 * Local workers whose ids carry this host's local prefix but not this
 * server's: left by an earlier `kgym serve` on this host that was killed.
 * They are unregistered so their tasks are requeued and their devices
 * free (a survivor still draining has its late result refused).
 */
static void release_stale(kg_store *store, const char *host_prefix)
{
    kg_worker *w = NULL;
    size_t n = 0;
    kg_err err;
    if (kg_store_worker_list(store, &w, &n, &err)) {
        kg_error("listing workers: %s", err.msg);
        return;
    }
    size_t len = strlen(host_prefix);
    for (size_t i = 0; i < n; i++)
        if (!strncmp(w[i].id, host_prefix, len) &&
            kg_store_worker_unregister(store, w[i].id, &err) == 0)
            kg_info("released %s, a local worker of an earlier server",
                    w[i].id);
    free(w);
}

/* The local workers' ids begin HOST-local-: host is filled with this
 * host's name as an id may hold it. */
static void host_name(char host[64])
{
    if (gethostname(host, 63) || !host[0])
        snprintf(host, 64, "localhost");
    host[40] = 0;
    for (char *c = host; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789._-",
                    *c))
            *c = '-';
}

/* Makes the supervisor of the local workers (see supervise.h); they start
 * with run_workers once the server listens. */
static int new_workers(struct local_ctx *lc, kg_super **super,
                       char (*devices)[KG_SUPER_DEVICE], int ndev,
                       const char *token, const char *token_file, int grace_s,
                       const char *const *wargs, int nwargs)
{
    char exe[PATH_MAX], host[64], prefix[128];
    if (kg_cli_exe_path(exe, sizeof exe)) {
        kg_error("cannot find the kgym binary: %s", strerror(errno));
        return -1;
    }
    host_name(host);
    snprintf(prefix, sizeof prefix, "%s-local-%ld-", host, (long)getpid());
    kg_super_cfg cfg = {.exe = exe,
                        .token = token,
                        .token_file = token ? NULL : token_file,
                        .n = ndev,
                        .devices = (const char(*)[KG_SUPER_DEVICE])devices,
                        .id_prefix = prefix,
                        .grace_ms = grace_s * 1000,
                        .python = getenv("KGYM_PYTHON"),
                        .worker_args = wargs,
                        .n_worker_args = nwargs,
                        .on_exit = on_worker_exit,
                        .ctx = lc};
    kg_err err;
    if (kg_super_new(super, &cfg, &err)) {
        kg_error("local workers: %s", err.msg);
        return -1;
    }
    return 0;
}

/* Releases an earlier server's local workers, then starts this one's
 * against the address the server listens on. */
static int run_workers(struct local_ctx *lc, kg_super *super)
{
    char url[160], host[64], prefix[128];
    /* a wildcard listen address is reached through loopback */
    const char *addr = kg_http_address(lc->http);
    if (!strncmp(addr, "0.0.0.0:", 8))
        snprintf(url, sizeof url, "http://127.0.0.1:%s", addr + 8);
    else if (!strncmp(addr, "[::]:", 5))
        snprintf(url, sizeof url, "http://[::1]:%s", addr + 5);
    else
        snprintf(url, sizeof url, "http://%s", addr);
    host_name(host);
    snprintf(prefix, sizeof prefix, "%s-local-", host);
    release_stale(lc->store, prefix);
    kg_err err;
    if (kg_super_run(super, url, &err)) {
        kg_error("local workers: %s", err.msg);
        return -1;
    }
    return 0;
}

/* The command line of kgym serve, and what it resolves to. */
struct serve_opts {
    const char *listen, *store_url;
    const char *token_file, *worker_token_file;
    const char *data_dir, *workers;
    const char *knob; /* a local workers' knob given (--cpu-threads...) */
    const char *wconc; /* --worker-concurrency as given (NULL: auto) */
    char wconc_buf[16]; /* what it resolves to, on their command line */
    const char *wargs[KG_SUPER_MAX_ARGS]; /* the knobs, for their command line */
    int nwargs;
    int threads, lease_s, ttl_s, max_attempts, grace_s;
    int max_conns, per_client, request_s;
    const char *trust[16];
    int ntrust;
    char devices[KG_SUPER_MAX][KG_SUPER_DEVICE];
    int ndev;
    char dflt_dir[PATH_MAX], dflt_store[PATH_MAX + 16];
};

/* --cpu-threads, --compile-ahead, --spare-mem-floor: checked here, and
 * handed to each local worker on its command line. */
static int knob_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct serve_opts *o = ctx;
    kg_engine_cfg scratch;
    memset(&scratch, 0, sizeof scratch);
    int rc = kg_cli_knob_opt(&scratch, name, v, err);
    if (rc)
        return rc;
    if (o->nwargs + 2 > KG_SUPER_MAX_ARGS)
        return kg_errf(err, KG_EINVAL, "%s: too many flags for the local "
                       "workers", name);
    o->knob = name;
    o->wargs[o->nwargs++] = name;
    o->wargs[o->nwargs++] = v;
    return 0;
}

static int trust_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct serve_opts *o = ctx;
    (void)name;
    if (o->ntrust == (int)(sizeof o->trust / sizeof o->trust[0]))
        return kg_errf(err, KG_EINVAL, "--trust-clients-from given too often "
                       "(list the ranges with commas)");
    o->trust[o->ntrust++] = v;
    return 0;
}

/* Reads argv into o. Returns -1 to go on, else the exit code (0: --help). */
static int parse_serve_args(int argc, char **argv, struct serve_opts *o)
{
    const kg_opt table[] = {
        KG_OPT_FN("--cpu-threads", knob_opt),
        KG_OPT_FN("--compile-ahead", knob_opt),
        KG_OPT_FN("--spare-mem-floor", knob_opt),
        KG_OPT_S("--listen", &o->listen),
        KG_OPT_S("--store", &o->store_url),
        KG_OPT_S("--token-file", &o->token_file),
        KG_OPT_S("--worker-token-file", &o->worker_token_file),
        KG_OPT_S("--data-dir", &o->data_dir),
        KG_OPT_S("--workers", &o->workers),
        KG_OPT_S("--worker-concurrency", &o->wconc),
        KG_OPT_FN("--trust-clients-from", trust_opt),
        KG_OPT_I("--threads", &o->threads, 1, 1024),
        KG_OPT_I("--max-connections", &o->max_conns, 1, 1000000),
        KG_OPT_I("--max-connections-per-client", &o->per_client, 1, 1000000),
        KG_OPT_I("--request-timeout-s", &o->request_s, 1, 3600),
        KG_OPT_I("--lease-s", &o->lease_s, 1, 86400),
        KG_OPT_I("--worker-ttl-s", &o->ttl_s, 1, 86400),
        KG_OPT_I("--max-attempts", &o->max_attempts, 1, 1000),
        KG_OPT_I("--worker-grace-s", &o->grace_s, 1, 3600),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table, .ctx = o};
    return kg_opts_main(&spec, argc, argv, usage);
}

/* Checks the options together and resolves the devices and the default
 * store. Returns -1 to go on, else the exit code. */
static int resolve_serve_opts(struct serve_opts *o)
{
    kg_err err;
    if (o->workers && (o->ndev = kg_super_devices(o->workers, o->devices,
                                                  KG_SUPER_MAX, &err)) < 0) {
        kg_error("%s", err.msg);
        return 2;
    }
    if (o->knob && !o->workers) {
        kg_error("%s is for the local workers: it needs --workers", o->knob);
        return 2;
    }
    if (o->wconc && !o->workers) {
        kg_error("--worker-concurrency is for the local workers: it needs "
                 "--workers");
        return 2;
    }
    if (o->ndev > 0) {
        /* each local worker's tasks in flight, on its command line: auto
         * shares the host's CPUs among the cpu workers; a GPU worker owns
         * its GPU */
        long conc;
        if (kg_cli_concurrency("--worker-concurrency",
                               o->wconc ? o->wconc : "auto", o->devices[0],
                               o->ndev, &conc, &err)) {
            kg_error("%s", err.msg);
            return 2;
        }
        if (o->nwargs + 2 > KG_SUPER_MAX_ARGS) {
            kg_error("--worker-concurrency: too many flags for the local "
                     "workers");
            return 2;
        }
        snprintf(o->wconc_buf, sizeof o->wconc_buf, "%ld", conc);
        o->wargs[o->nwargs++] = "--concurrency";
        o->wargs[o->nwargs++] = o->wconc_buf;
    }
    if (o->worker_token_file && !o->token_file) {
        kg_error("--worker-token-file needs --token-file (the clients' "
                 "tokens)");
        return 2;
    }
    if (!o->store_url) {
        if (!o->data_dir) {
            const char *home = getenv("HOME");
            snprintf(o->dflt_dir, sizeof o->dflt_dir, "%s/.local/share/kgym",
                     home && home[0] ? home : ".");
            o->data_dir = o->dflt_dir;
        }
        if (mkdirs(o->data_dir)) {
            kg_error("--data-dir %s: %s", o->data_dir, strerror(errno));
            return 1;
        }
        snprintf(o->dflt_store, sizeof o->dflt_store, "sqlite:%s/kgym.db",
                 o->data_dir);
        o->store_url = o->dflt_store;
    }
    return -1;
}

/*
 * Opens the tokens into *auth (the caller's, freed here on error), trusts
 * the --trust-clients-from ranges and gives local workers without a worker
 * token file a token of their own in local_token. Returns 0 to go on,
 * else the exit code.
 */
static int open_auth(const struct serve_opts *o, kg_auth **auth,
                     char local_token[65])
{
    kg_err err;
    if (kg_auth_open(o->token_file, o->worker_token_file, auth, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    for (int i = 0; i < o->ntrust; i++)
        if (kg_auth_trust(*auth, o->trust[i], &err)) {
            kg_error("%s", err.msg);
            kg_auth_free(*auth);
            return 2;
        }
    if (o->ntrust && !o->token_file) {
        kg_error("--trust-clients-from needs --token-file (workers, and "
                 "clients outside the ranges, are authenticated by token; "
                 "without a token file clients are open on loopback "
                 "already)");
        kg_auth_free(*auth);
        return 2;
    }
    check_mode(o->token_file);
    check_mode(o->worker_token_file);
    /* local workers without a worker token file get a token of their own,
     * kept in memory and handed to them over a pipe */
    if (o->ndev > 0 && !o->worker_token_file) {
        if (new_token(local_token) ||
            kg_auth_add_worker_token(*auth, local_token, &err)) {
            kg_error("worker token: %s",
                     local_token[0] ? err.msg : "no randomness");
            kg_auth_free(*auth);
            return 1;
        }
    }
    if (!kg_auth_enabled(*auth) && !kg_http_is_loopback(o->listen)) {
        kg_error("--listen %s: refusing a non-loopback address with no token "
                 "configured (give --token-file)",
                 o->listen);
        kg_auth_free(*auth);
        return 2;
    }
    return 0;
}

/* What a running server holds; server_stop frees it all. */
struct server {
    kg_store *store;
    kg_sched *sched;
    kg_metrics *metrics;
    kg_api *api;
    kg_http *http;
    kg_super *super;
    struct local_ctx lc;
};

/* Opens the store, starts the scheduler, the local workers' supervisor and
 * the HTTP server into s. Returns 0, or -1 with the message logged. */
static int server_start(struct server *s, struct serve_opts *o, kg_auth *auth,
                        const char *local_token)
{
    kg_err err;
    kg_store_opts so;
    kg_store_opts_default(&so);
    if (o->lease_s)
        so.lease_ms = o->lease_s * 1000;
    if (o->ttl_s)
        so.worker_ttl_ms = o->ttl_s * 1000;
    kg_sched_policy sp;
    kg_sched_policy_default(&sp);
    if (o->max_attempts)
        sp.max_attempts = o->max_attempts;

    if (kg_store_open(&s->store, o->store_url, &so, &err)) {
        kg_error("--store %s: %s", o->store_url, err.msg);
        return -1;
    }
    if (kg_sched_start(&s->sched, s->store, &sp, 1, &err)) {
        kg_error("scheduler: %s", err.msg);
        return -1;
    }
    s->metrics = kg_metrics_new();
    s->api =
        s->metrics ? kg_api_new(s->store, s->sched, &so, s->metrics) : NULL;
    if (!s->api) {
        kg_error("out of memory");
        return -1;
    }
    /* made before the server answers, so /health shows the local workers
     * from its first reply */
    s->lc.store = s->store;
    if (o->ndev > 0 && new_workers(&s->lc, &s->super, o->devices, o->ndev,
                                   local_token[0] ? local_token : NULL,
                                   o->worker_token_file, o->grace_s,
                                   o->wargs, o->nwargs))
        return -1;
    kg_api_set_supervisor(s->api, s->super);
    kg_http_config hc = {.listen = o->listen,
                         .threads = o->threads,
                         .conn_limit = o->max_conns,
                         .per_ip_limit = o->per_client,
                         .request_timeout_s = o->request_s,
                         .allow_remote = kg_auth_enabled(auth)};
    kg_http_handler handler = kg_api_handler(s->api);
    if (kg_http_start(&hc, &handler, auth, s->metrics, &s->http, &err)) {
        kg_error("%s", err.msg);
        return -1;
    }
    kg_api_set_http(s->api, s->http);
    s->lc.http = s->http;
    return 0;
}

/* Says where the server listens, its store, its tokens and its warnings. */
static void announce(const struct server *s, const struct serve_opts *o,
                     kg_auth *auth, const char *local_token)
{
    char desc[512] = "";
    kg_store_describe(s->store, desc, sizeof desc, NULL);
    int nc = 0, nw = 0, auth_on = kg_auth_enabled(auth);
    kg_auth_counts(auth, &nc, &nw);
    if (!auth_on)
        kg_warn("warning: no token configured: loopback only, and anyone on "
                "this machine can submit%s",
                local_token[0] ? " (the local workers have a token of their "
                                 "own: no one else may act as a worker)"
                               : "");
    const kg_cidr *ranges;
    int nranges = kg_auth_trusted(auth, &ranges);
    for (int i = 0; i < nranges; i++) {
        char r[64];
        kg_cidr_format(&ranges[i], r, sizeof r);
        kg_warn("WARNING: clients from %s are accepted without a token "
                "(--trust-clients-from; worker endpoints still need one)",
                r);
    }
    printf("kgym serve: listening on http://%s\n", kg_http_address(s->http));
    printf("kgym serve: store %s\n", desc[0] ? desc : o->store_url);
    if (auth_on)
        printf("kgym serve: %d client token(s), %d worker token(s)%s\n", nc, nw,
               o->worker_token_file ? ""
               : local_token[0]     ? " (the client file's and the local "
                                      "workers' own)"
                                    : " (the same file)");
    fflush(stdout);
}

/* Waits for SIGINT or SIGTERM; SIGHUP reloads the tokens. */
static void wait_for_stop(const sigset_t *sigs, kg_auth *auth)
{
    kg_err err;
    for (;;) {
        int sig = 0;
        if (sigwait(sigs, &sig))
            break;
        if (sig == SIGHUP) {
            if (kg_auth_reload(auth, &err))
                kg_error("tokens not reloaded: %s", err.msg);
            else
                kg_info("tokens reloaded");
            continue;
        }
        kg_info("%s, stopping", strsignal(sig));
        break;
    }
}

/* Stops and frees what server_start made, wiping local_token between. */
static void server_stop(struct server *s, char local_token[65])
{
    /* the workers first: they post their last results and unregister
     * through the server, which still answers */
    kg_super_stop(s->super);
    explicit_bzero(local_token, 65);
    kg_http_stop(s->http);
    kg_super_free(s->super);
    kg_sched_stop(s->sched);
    kg_api_free(s->api);
    kg_metrics_free(s->metrics);
    if (s->store)
        kg_store_close(s->store);
}

int kg_cli_serve(int argc, char **argv)
{
    struct serve_opts o = {.listen = "127.0.0.1:10907",
                           .data_dir = getenv("KGYM_DATA_DIR"),
                           .grace_s = 10};
    kg_log_init("kgym serve", NULL, 1);

    int code = parse_serve_args(argc, argv, &o);
    if (code < 0)
        code = resolve_serve_opts(&o);
    if (code >= 0)
        return code;
    kg_auth *auth = NULL;
    char local_token[65] = "";
    if ((code = open_auth(&o, &auth, local_token)))
        return code;

    /* every thread started from here on inherits the blocked signals */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    struct server s = {.lc = {NULL, NULL}};
    if (server_start(&s, &o, auth, local_token))
        goto out;
    announce(&s, &o, auth, local_token);
    if (s.super && run_workers(&s.lc, s.super))
        goto out;
    wait_for_stop(&sigs, auth);
    rc = 0;
out:
    server_stop(&s, local_token);
    kg_auth_free(auth);
    return rc;
}
