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
            "  --worker-grace-s S       on stop, SIGKILL local workers still "
            "draining after S\n"
            "                           seconds (default 10)\n");
}

static int parse_pos(const char *opt, const char *v, long max, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > max) {
        kg_error("%s: expected an integer in 1..%ld", opt, max);
        return -1;
    }
    *out = x;
    return 0;
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
                       const char *token, const char *token_file, int grace_s)
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

int kg_cli_serve(int argc, char **argv)
{
    const char *listen = "127.0.0.1:10907", *store_url = NULL;
    const char *token_file = NULL, *worker_token_file = NULL;
    const char *data_dir = getenv("KGYM_DATA_DIR"), *workers = NULL;
    long threads = 0, lease_s = 0, ttl_s = 0, max_attempts = 0, grace_s = 10;
    long max_conns = 0, per_client = 0, request_s = 0;
    const char *trust[16];
    int ntrust = 0;
    kg_log_init("kgym serve", NULL, 1);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            kg_error("unknown option or missing value: %s", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--listen"))
            listen = v;
        else if (!strcmp(a, "--store"))
            store_url = v;
        else if (!strcmp(a, "--token-file"))
            token_file = v;
        else if (!strcmp(a, "--worker-token-file"))
            worker_token_file = v;
        else if (!strcmp(a, "--data-dir"))
            data_dir = v;
        else if (!strcmp(a, "--workers"))
            workers = v;
        else if (!strcmp(a, "--trust-clients-from")) {
            if (ntrust == (int)(sizeof trust / sizeof trust[0])) {
                kg_error("--trust-clients-from given too often (list the "
                         "ranges with commas)");
                return 2;
            }
            trust[ntrust++] = v;
        }
        else if (!strcmp(a, "--threads")) {
            if (parse_pos(a, v, 1024, &threads))
                return 2;
        } else if (!strcmp(a, "--max-connections")) {
            if (parse_pos(a, v, 1000000, &max_conns))
                return 2;
        } else if (!strcmp(a, "--max-connections-per-client")) {
            if (parse_pos(a, v, 1000000, &per_client))
                return 2;
        } else if (!strcmp(a, "--request-timeout-s")) {
            if (parse_pos(a, v, 3600, &request_s))
                return 2;
        } else if (!strcmp(a, "--lease-s")) {
            if (parse_pos(a, v, 86400, &lease_s))
                return 2;
        } else if (!strcmp(a, "--worker-ttl-s")) {
            if (parse_pos(a, v, 86400, &ttl_s))
                return 2;
        } else if (!strcmp(a, "--max-attempts")) {
            if (parse_pos(a, v, 1000, &max_attempts))
                return 2;
        } else if (!strcmp(a, "--worker-grace-s")) {
            if (parse_pos(a, v, 3600, &grace_s))
                return 2;
        } else {
            kg_error("unknown option %s", a);
            usage(stderr);
            return 2;
        }
    }
    char devices[KG_SUPER_MAX][KG_SUPER_DEVICE];
    int ndev = 0;
    kg_err err;
    if (workers &&
        (ndev = kg_super_devices(workers, devices, KG_SUPER_MAX, &err)) < 0) {
        kg_error("%s", err.msg);
        return 2;
    }
    if (worker_token_file && !token_file) {
        kg_error("--worker-token-file needs --token-file (the clients' "
                 "tokens)");
        return 2;
    }

    char dflt_dir[PATH_MAX], dflt_store[PATH_MAX + 16];
    if (!store_url) {
        if (!data_dir) {
            const char *home = getenv("HOME");
            snprintf(dflt_dir, sizeof dflt_dir, "%s/.local/share/kgym",
                     home && home[0] ? home : ".");
            data_dir = dflt_dir;
        }
        if (mkdirs(data_dir)) {
            kg_error("--data-dir %s: %s", data_dir, strerror(errno));
            return 1;
        }
        snprintf(dflt_store, sizeof dflt_store, "sqlite:%s/kgym.db", data_dir);
        store_url = dflt_store;
    }

    kg_auth *auth = NULL;
    if (kg_auth_open(token_file, worker_token_file, &auth, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    for (int i = 0; i < ntrust; i++)
        if (kg_auth_trust(auth, trust[i], &err)) {
            kg_error("%s", err.msg);
            kg_auth_free(auth);
            return 2;
        }
    if (ntrust && !token_file) {
        kg_error("--trust-clients-from needs --token-file (workers, and "
                 "clients outside the ranges, are authenticated by token; "
                 "without a token file clients are open on loopback "
                 "already)");
        kg_auth_free(auth);
        return 2;
    }
    check_mode(token_file);
    check_mode(worker_token_file);
    /* local workers without a worker token file get a token of their own,
     * kept in memory and handed to them over a pipe */
    char local_token[65] = "";
    if (ndev > 0 && !worker_token_file) {
        if (new_token(local_token) ||
            kg_auth_add_worker_token(auth, local_token, &err)) {
            kg_error("worker token: %s",
                     local_token[0] ? err.msg : "no randomness");
            kg_auth_free(auth);
            return 1;
        }
    }
    int auth_on = kg_auth_enabled(auth);
    if (!auth_on && !kg_http_is_loopback(listen)) {
        kg_error("--listen %s: refusing a non-loopback address with no token "
                 "configured (give --token-file)",
                 listen);
        kg_auth_free(auth);
        return 2;
    }

    /* every thread started from here on inherits the blocked signals */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    kg_store *store = NULL;
    kg_sched *sched = NULL;
    kg_metrics *metrics = NULL;
    kg_api *api = NULL;
    kg_http *http = NULL;
    kg_super *super = NULL;
    struct local_ctx lc = {NULL, NULL};
    kg_store_opts so;
    kg_store_opts_default(&so);
    if (lease_s)
        so.lease_ms = lease_s * 1000;
    if (ttl_s)
        so.worker_ttl_ms = ttl_s * 1000;
    kg_sched_policy sp;
    kg_sched_policy_default(&sp);
    if (max_attempts)
        sp.max_attempts = (int)max_attempts;

    if (kg_store_open(&store, store_url, &so, &err)) {
        kg_error("--store %s: %s", store_url, err.msg);
        goto out;
    }
    if (kg_sched_start(&sched, store, &sp, 1, &err)) {
        kg_error("scheduler: %s", err.msg);
        goto out;
    }
    metrics = kg_metrics_new();
    api = metrics ? kg_api_new(store, sched, &so, metrics) : NULL;
    if (!api) {
        kg_error("out of memory");
        goto out;
    }
    /* made before the server answers, so /health shows the local workers
     * from its first reply */
    lc.store = store;
    if (ndev > 0 && new_workers(&lc, &super, devices, ndev,
                                local_token[0] ? local_token : NULL,
                                worker_token_file, (int)grace_s))
        goto out;
    kg_api_set_supervisor(api, super);
    kg_http_config hc = {.listen = listen,
                         .threads = (int)threads,
                         .conn_limit = (int)max_conns,
                         .per_ip_limit = (int)per_client,
                         .request_timeout_s = (int)request_s,
                         .allow_remote = auth_on};
    if (kg_http_start(&hc, api, auth, metrics, &http, &err)) {
        kg_error("%s", err.msg);
        goto out;
    }
    kg_api_set_http(api, http);
    lc.http = http;

    char desc[512] = "";
    kg_store_describe(store, desc, sizeof desc, NULL);
    int nc = 0, nw = 0;
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
    printf("kgym serve: listening on http://%s\n", kg_http_address(http));
    printf("kgym serve: store %s\n", desc[0] ? desc : store_url);
    if (auth_on)
        printf("kgym serve: %d client token(s), %d worker token(s)%s\n", nc, nw,
               worker_token_file ? ""
               : local_token[0]   ? " (the client file's and the local "
                                    "workers' own)"
                                  : " (the same file)");
    fflush(stdout);

    if (super && run_workers(&lc, super))
        goto out;

    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig))
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
    rc = 0;
out:
    /* the workers first: they post their last results and unregister
     * through the server, which still answers */
    kg_super_stop(super);
    explicit_bzero(local_token, sizeof local_token);
    kg_http_stop(http);
    kg_super_free(super);
    kg_sched_stop(sched);
    kg_api_free(api);
    kg_metrics_free(metrics);
    if (store)
        kg_store_close(store);
    kg_auth_free(auth);
    return rc;
}
