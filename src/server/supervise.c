/* supervise.c - kgym serve's local workers: device discovery, start,
 * restart with backoff, stop (see supervise.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/supervise.h"

#define TICK_MS 100
#define DEFAULT_GRACE_MS 10000
#define DEFAULT_BACKOFF_MIN_MS 1000
#define DEFAULT_BACKOFF_MAX_MS 30000
#define DEFAULT_STABLE_MS 30000
#define DEFAULT_MAX_FAST 5
#define TOKEN_FD 3

/* ---- devices ------------------------------------------------------------ */

/* 1 when s is a CUDA_VISIBLE_DEVICES UUID entry (GPU-..., MIG-...) made of
 * characters a device name may hold. */
static int uuid_entry(const char *s, size_t n)
{
    if (n < 5 || (strncmp(s, "GPU-", 4) && strncmp(s, "MIG-", 4)))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '/' &&
            s[i] != '_' && s[i] != '.')
            return 0;
    return 1;
}

int kg_super_gpu_devices(const char *cvd, int count,
                         char out[][KG_SUPER_DEVICE], int max)
{
    int n = 0;
    if (!cvd) {
        for (int i = 0; i < count && n < max; i++)
            snprintf(out[n++], KG_SUPER_DEVICE, "cuda:%d", i);
        return n;
    }
    const char *p = cvd;
    while (*p && n < max) {
        size_t len = strcspn(p, ",");
        const char *s = p;
        size_t k = len;
        while (k && isspace((unsigned char)*s))
            s++, k--;
        while (k && isspace((unsigned char)s[k - 1]))
            k--;
        int ok = 0;
        if (k > 0 && k < 12 && strspn(s, "0123456789") >= k) {
            long idx = strtol(s, NULL, 10);
            ok = idx < count;
            if (ok)
                snprintf(out[n], KG_SUPER_DEVICE, "cuda:%ld", idx);
        } else if (k + 6 <= KG_SUPER_DEVICE && uuid_entry(s, k) && count > 0) {
            ok = 1;
            snprintf(out[n], KG_SUPER_DEVICE, "cuda:%.*s", (int)k, s);
        }
        if (!ok)
            break; /* CUDA ignores the rest of the list */
        for (int j = 0; j < n; j++)
            if (!strcmp(out[j], out[n]))
                return n; /* a repeated device: CUDA refuses the list */
        n++;
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

int kg_super_gpu_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            n += de->d_name[0] != '.';
        closedir(d);
        return n;
    }
    d = opendir("/dev");
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *s = de->d_name;
        if (!strncmp(s, "nvidia", 6) && s[6] &&
            strspn(s + 6, "0123456789") == strlen(s + 6))
            n++;
    }
    closedir(d);
    return n;
}

int kg_super_auto_cpu_workers(void)
{
    cpu_set_t set;
    long cpus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus <= 0)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = cpus / 2;
    if (n > 4)
        n = 4;
    return n < 1 ? 1 : (int)n;
}

int kg_super_devices(const char *spec, char out[][KG_SUPER_DEVICE], int max,
                     kg_err *err)
{
    int want = 0;
    if (strcmp(spec, "auto")) {
        char *end;
        errno = 0;
        long v = strtol(spec, &end, 10);
        if (errno || end == spec || *end || v < 1 || v > KG_SUPER_MAX)
            return kg_errf(err, KG_EINVAL,
                           "--workers %s: expected auto or a count in 1..%d",
                           spec, KG_SUPER_MAX);
        want = (int)v;
    }
    if (max > KG_SUPER_MAX)
        max = KG_SUPER_MAX;
    char gpus[KG_SUPER_MAX][KG_SUPER_DEVICE];
    int ng = kg_super_gpu_devices(getenv("CUDA_VISIBLE_DEVICES"),
                                  kg_super_gpu_count(), gpus, KG_SUPER_MAX);
    if (ng > 0) {
        if (want > ng)
            return kg_errf(err, KG_EINVAL,
                           "--workers %d: only %d GPU(s) visible (one worker "
                           "owns one GPU)",
                           want, ng);
        int n = want ? want : ng;
        if (n > max)
            n = max;
        for (int i = 0; i < n; i++)
            memcpy(out[i], gpus[i], KG_SUPER_DEVICE);
        return n;
    }
    int n = want ? want : kg_super_auto_cpu_workers();
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++)
        snprintf(out[i], KG_SUPER_DEVICE, "cpu:%d", i);
    return n;
}

/* ---- the supervisor ----------------------------------------------------- */

struct slot {
    char device[KG_SUPER_DEVICE];
    char id[KG_SUPER_ID];
    pid_t pid;          /* 0: not running */
    double started_ms;  /* of the current or last run */
    double next_ms;     /* when to start it again */
    int starts;         /* processes started so far */
    int fast;           /* fast crashes in a row */
    int given_up;
};

struct kg_super {
    kg_super_cfg cfg; /* strings point into the copies below */
    char *exe, *url, *token, *token_file, *prefix, *python;
    char *args[KG_SUPER_MAX_ARGS];
    int nargs;
    struct slot slots[KG_SUPER_MAX];
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stopping;
    long long restarts;
};

static void describe_exit(char *out, size_t n, int st)
{
    if (WIFSIGNALED(st))
        snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    else
        snprintf(out, n, "exited with status %d", WEXITSTATUS(st));
}

/* Closes every fd from lo up, in a child after fork. */
static void close_from(int lo)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = lo; fd < max; fd++)
        close(fd);
}

/*
 * Starts the worker of slot sl; called with the lock held. The child gets
 * stdin from /dev/null, stdout and stderr on the server's stderr, the token
 * on fd 3 (a pipe holding one line), no other fd, an empty signal mask, its
 * own process group (a terminal's ^C goes to the server, which stops it)
 * and SIGTERM when the supervisor's thread dies (the server was killed).
 * Everything the child does between fork and exec is async-signal-safe.
 */
static int spawn(kg_super *s, struct slot *sl, kg_err *err)
{
    char id[KG_SUPER_ID], drain[32];
    snprintf(id, sizeof id, "%s%s-%d", s->prefix, sl->device, sl->starts + 1);
    for (char *c = id; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("._:-", *c))
            *c = '-';
    int drain_s = s->cfg.grace_ms / 1000 - 2;
    snprintf(drain, sizeof drain, "%d", drain_s < 1 ? 1 : drain_s);
    const char *argv[20 + KG_SUPER_MAX_ARGS];
    int k = 0;
    argv[k++] = s->exe;
    argv[k++] = "worker";
    argv[k++] = "--server";
    argv[k++] = s->url;
    argv[k++] = "--device";
    argv[k++] = sl->device;
    argv[k++] = "--worker-id";
    argv[k++] = id;
    argv[k++] = "--drain-timeout";
    argv[k++] = drain;
    if (s->token) {
        argv[k++] = "--token-fd";
        argv[k++] = "3";
    } else if (s->token_file) {
        argv[k++] = "--token-file";
        argv[k++] = s->token_file;
    }
    if (s->python) {
        argv[k++] = "--python";
        argv[k++] = s->python;
    }
    for (int i = 0; i < s->nargs; i++)
        argv[k++] = s->args[i];
    argv[k] = NULL;

    int tp[2] = {-1, -1};
    if (s->token) {
        if (pipe2(tp, O_CLOEXEC) < 0)
            return kg_errf(err, KG_EIO, "pipe: %s", strerror(errno));
        size_t n = strlen(s->token);
        if (write(tp[1], s->token, n) != (ssize_t)n ||
            write(tp[1], "\n", 1) != 1) {
            close(tp[0]), close(tp[1]);
            return kg_errf(err, KG_EIO, "token pipe: %s", strerror(errno));
        }
        close(tp[1]);
    }
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0) {
        if (tp[0] >= 0)
            close(tp[0]);
        return kg_errf(err, KG_EIO, "/dev/null: %s", strerror(errno));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            sigaction(sigs[i], &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(null, 0);
        dup2(2, 1);
        if (tp[0] >= 0) {
            if (tp[0] == TOKEN_FD)
                fcntl(TOKEN_FD, F_SETFD, 0);
            else
                dup2(tp[0], TOKEN_FD);
        }
        close_from(tp[0] >= 0 ? TOKEN_FD + 1 : TOKEN_FD);
        execv(s->exe, (char *const *)argv);
        static const char msg[] = "kgym serve: cannot run the worker\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    int fork_errno = errno;
    close(null);
    if (tp[0] >= 0)
        close(tp[0]);
    if (pid < 0)
        return kg_errf(err, KG_EIO, "fork: %s", strerror(fork_errno));
    sl->pid = pid;
    sl->started_ms = kg_now_ms();
    sl->starts++;
    memcpy(sl->id, id, sizeof id);
    return 0;
}

/* Calls the on_exit hook without the lock (it may wait on the store). */
static void notify_exit(kg_super *s, const char *id)
{
    if (!s->cfg.on_exit)
        return;
    char copy[KG_SUPER_ID];
    memcpy(copy, id, sizeof copy);
    pthread_mutex_unlock(&s->lock);
    s->cfg.on_exit(s->cfg.ctx, copy);
    pthread_mutex_lock(&s->lock);
}

/* A worker died while the server runs: decide when (whether) to restart. */
static void on_death(kg_super *s, struct slot *sl, int st)
{
    double ran = kg_now_ms() - sl->started_ms;
    char how[96];
    describe_exit(how, sizeof how, st);
    sl->pid = 0;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (ran < s->cfg.stable_ms)
        sl->fast++;
    else
        sl->fast = 0;
    if (code == 2 || code == 127) {
        sl->given_up = 1;
        kg_error(
            "worker %s (id %s) %s after %.1f s: it would fail the same way "
            "again (%s); not restarting it",
            sl->device, sl->id, how, ran / 1e3,
            code == 2 ? "bad usage" : "could not run kgym worker");
    } else if (sl->fast >= s->cfg.max_fast) {
        sl->given_up = 1;
        kg_error(
            "worker %s (id %s) %s after %.1f s: %d crashes in a row within "
            "%.0f s of starting; giving up on it (the server goes on "
            "without it; its log lines above say why)",
            sl->device, sl->id, how, ran / 1e3, sl->fast,
            s->cfg.stable_ms / 1e3);
    } else {
        double delay = s->cfg.backoff_min_ms;
        for (int i = 1; i < sl->fast && delay < s->cfg.backoff_max_ms; i++)
            delay *= 2;
        if (delay > s->cfg.backoff_max_ms)
            delay = s->cfg.backoff_max_ms;
        sl->next_ms = kg_now_ms() + delay;
        kg_warn("worker %s (id %s) %s after %.1f s; restarting it in %.1f s",
                sl->device, sl->id, how, ran / 1e3, delay / 1e3);
    }
    notify_exit(s, sl->id);
}

/* SIGTERM to every worker, SIGKILL to the process groups of those still
 * there after the grace period; every one reaped. Lock held. */
static void stop_all(kg_super *s)
{
    int live = 0;
    for (int i = 0; i < s->cfg.n; i++)
        if (s->slots[i].pid > 0) {
            kill(s->slots[i].pid, SIGTERM);
            live++;
        }
    if (live)
        kg_info("stopping %d local worker(s) (SIGTERM; SIGKILL after "
                "%.1f s)",
                live, s->cfg.grace_ms / 1e3);
    double deadline = kg_now_ms() + s->cfg.grace_ms;
    int killed = 0;
    for (;;) {
        if (!killed && kg_now_ms() >= deadline) {
            killed = 1;
            for (int i = 0; i < s->cfg.n; i++)
                if (s->slots[i].pid > 0) {
                    kill(-s->slots[i].pid, SIGKILL);
                    kill(s->slots[i].pid, SIGKILL);
                }
        }
        live = 0;
        for (int i = 0; i < s->cfg.n; i++) {
            struct slot *sl = &s->slots[i];
            int st;
            if (sl->pid <= 0)
                continue;
            pid_t r = waitpid(sl->pid, &st, WNOHANG);
            if (r == sl->pid || (r < 0 && errno == ECHILD)) {
                char how[96] = "is gone";
                if (r == sl->pid)
                    describe_exit(how, sizeof how, st);
                kg_info("worker %s (id %s) %s%s", sl->device, sl->id, how,
                        killed ? " (after the grace period)" : "");
                sl->pid = 0;
                notify_exit(s, sl->id);
            } else {
                live++;
            }
        }
        if (!live)
            return;
        if (killed && kg_now_ms() >= deadline + 5000) {
            kg_error("%d local worker(s) did not exit after SIGKILL", live);
            return;
        }
        pthread_mutex_unlock(&s->lock);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->lock);
    }
}

/* The watch loop: reap, restart when due, until kg_super_stop. */
static void *watch(void *arg)
{
    kg_super *s = arg;
    pthread_mutex_lock(&s->lock);
    /* the first starts: one line each on stdout */
    for (int i = 0; i < s->cfg.n; i++) {
        struct slot *sl = &s->slots[i];
        kg_err err;
        if (spawn(s, sl, &err)) {
            kg_warn("worker %s: %s; retrying", sl->device, err.msg);
            sl->next_ms = kg_now_ms() + s->cfg.backoff_min_ms;
            continue;
        }
        printf("kgym serve: worker %d/%d on %s started (pid %d, id %s)\n",
               i + 1, s->cfg.n, sl->device, (int)sl->pid, sl->id);
    }
    fflush(stdout);
    while (!s->stopping) {
        for (int i = 0; i < s->cfg.n && !s->stopping; i++) {
            struct slot *sl = &s->slots[i];
            int st;
            if (sl->pid > 0) {
                if (waitpid(sl->pid, &st, WNOHANG) == sl->pid)
                    on_death(s, sl, st);
            } else if (!sl->given_up && kg_now_ms() >= sl->next_ms) {
                kg_err err;
                if (spawn(s, sl, &err)) {
                    kg_warn("worker %s: %s; retrying", sl->device, err.msg);
                    sl->next_ms = kg_now_ms() + s->cfg.backoff_max_ms;
                    continue;
                }
                if (sl->starts > 1)
                    s->restarts++;
                kg_info("worker %s %s (pid %d, id %s)", sl->device,
                        sl->starts > 1 ? "restarted" : "started", (int)sl->pid,
                        sl->id);
            }
        }
        if (s->stopping)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cond, &s->lock, &ts);
    }
    stop_all(s);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static char *dup_or_null(const char *v, int *oom)
{
    if (!v)
        return NULL;
    char *c = strdup(v);
    *oom |= !c;
    return c;
}

static void free_super(kg_super *s)
{
    free(s->exe);
    free(s->url);
    if (s->token) {
        explicit_bzero(s->token, strlen(s->token));
        free(s->token);
    }
    free(s->token_file);
    free(s->prefix);
    free(s->python);
    for (int i = 0; i < s->nargs; i++)
        free(s->args[i]);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

int kg_super_new(kg_super **out, const kg_super_cfg *cfg, kg_err *err)
{
    *out = NULL;
    if (!cfg->exe || cfg->n < 1 || cfg->n > KG_SUPER_MAX)
        return kg_errf(err, KG_EINVAL,
                       "local workers: 1..%d, with an executable",
                       KG_SUPER_MAX);
    if (cfg->id_prefix && strlen(cfg->id_prefix) > 60)
        return kg_errf(err, KG_EINVAL, "worker id prefix over 60 characters");
    if (cfg->n_worker_args < 0 || cfg->n_worker_args > KG_SUPER_MAX_ARGS)
        return kg_errf(err, KG_EINVAL, "local workers: at most %d more flags",
                       KG_SUPER_MAX_ARGS);
    kg_super *s = calloc(1, sizeof *s);
    if (!s)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    int oom = 0;
    s->exe = dup_or_null(cfg->exe, &oom);
    s->url = dup_or_null(cfg->server_url, &oom);
    s->token = dup_or_null(cfg->token, &oom);
    s->token_file = dup_or_null(cfg->token_file, &oom);
    s->prefix = dup_or_null(cfg->id_prefix ? cfg->id_prefix : "local-", &oom);
    s->python = dup_or_null(cfg->python, &oom);
    for (; s->nargs < cfg->n_worker_args; s->nargs++)
        s->args[s->nargs] = dup_or_null(cfg->worker_args[s->nargs], &oom);
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (oom) {
        free_super(s);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    s->cfg = *cfg;
    s->cfg.devices = NULL; /* copied into the slots */
#define DEF(f, v)                                                              \
    if (s->cfg.f <= 0)                                                         \
    s->cfg.f = (v)
    DEF(grace_ms, DEFAULT_GRACE_MS);
    DEF(backoff_min_ms, DEFAULT_BACKOFF_MIN_MS);
    DEF(backoff_max_ms, DEFAULT_BACKOFF_MAX_MS);
    DEF(stable_ms, DEFAULT_STABLE_MS);
    DEF(max_fast, DEFAULT_MAX_FAST);
#undef DEF
    for (int i = 0; i < cfg->n; i++)
        snprintf(s->slots[i].device, KG_SUPER_DEVICE, "%s", cfg->devices[i]);
    *out = s;
    return 0;
}

int kg_super_run(kg_super *s, const char *server_url, kg_err *err)
{
    if (s->thread_started || s->stopping)
        return kg_errf(err, KG_ESTATE, "local workers: already started");
    if (server_url) {
        free(s->url);
        if (!(s->url = strdup(server_url)))
            return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    if (!s->url)
        return kg_errf(err, KG_EINVAL, "local workers: no server URL");
    s->cfg.server_url = s->url;
    int rc = pthread_create(&s->thread, NULL, watch, s);
    if (rc)
        return kg_errf(err, KG_EIO, "thread: %s", strerror(rc));
    s->thread_started = 1;
    return 0;
}

int kg_super_start(kg_super **out, const kg_super_cfg *cfg, kg_err *err)
{
    int rc = kg_super_new(out, cfg, err);
    if (!rc && (rc = kg_super_run(*out, cfg->server_url, err))) {
        kg_super_free(*out);
        *out = NULL;
    }
    return rc;
}

void kg_super_stats_get(kg_super *s, kg_super_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    out->configured = s->cfg.n;
    for (int i = 0; i < s->cfg.n; i++) {
        out->running += s->slots[i].pid > 0;
        out->given_up += s->slots[i].given_up;
    }
    out->restarts = s->restarts;
    pthread_mutex_unlock(&s->lock);
}

void kg_super_stop(kg_super *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    s->thread_started = 0;
}

void kg_super_free(kg_super *s)
{
    if (!s)
        return;
    kg_super_stop(s);
    free_super(s);
}
