/* engine.c - task state machine of one worker (see engine.h). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <pwd.h>
#include <time.h>
#include <unistd.h>

#include "common/result.h"
#include "worker/engine.h"
#include "worker/frame.h"
#include "worker/sandbox.h"
#include "worker/sandbox_json.h"
#include "worker/zygote.h"

#define LOG_CAP (64 * 1024) /* bytes of a child's output kept */
#define MAX_SLOTS 64
#define MAX_SPARES 32
#define MAX_DYING 8 /* pairs whose result is out, still exiting (finish_early) */
#define MAX_STALE 64 /* task cgroups still emptying after their task */
#define KILL_GRACE_MS                                                          \
    5000 /* a judge that finished its frame gets this long to exit */

enum slot_state { S_FREE, S_RUNNING, S_HELD, S_SPARE, S_DYING };

struct buf {
    char *p;
    size_t n, cap;
    size_t dropped; /* log bytes dropped from the front */
};

struct child {
    pid_t pid;
    int exited;
    int status;
    int log_fd;
    int killed; /* the worker sent it SIGKILL (it may have died already) */
    struct buf log;
    char wd[PATH_MAX];
    kg_sandbox_cgroup cg;
    int has_cg;
};

struct slot {
    enum slot_state state;
    json_t *task;
    void *user;
    double t_submit, t_start, t_spawned, deadline, t_judge_done;
    struct child judge, cand;
    int res_fd;
    int task_fd; /* a spare's judge reads "go" here once its task is written */
    int interp;  /* children started with TRITON_INTERPRET=1 */
    int prof;    /* a spare that warms the profiler up (tasks that profile) */
    int warm;    /* the task runs in a pair started before it (a spare) */
    struct buf res;
    int timed_out;
    int released; /* the frame is in: both children were sent SIGKILL */
    int gated;    /* a staged task: its judge waits for 'D' on task_fd */
    int granted;  /* holds one of the concurrency device slots */
    int early_tried; /* finish_early looked at this frame (once) */
    double t_dying;  /* S_DYING: when its result went out */
    json_t *held; /* result waiting for the device probe */
};

struct pending {
    json_t *task;
    void *user;
    double t_submit;
    struct pending *next;
};

/* Candidates run as root: each in-flight pair gets its own uid from
 * CAND_UID0.. (so candidates cannot signal or inspect one another), all
 * with the group CAND_GID, which owns the shared candidate cache. */
#define CAND_GID 65400
#define CAND_UID0 65401
#define CAND_UIDS 99 /* 65401..65499: more than MAX_SLOTS + MAX_SPARES */
#define TASK_TMP_BYTES ((json_int_t)1 << 30) /* private tmpfs: disk quota */
/* A uid is held machine-wide by an flock on UID_LOCK_DIR/<uid>: several
 * workers (kgym serve --workers) never hand out the same one. */
#define UID_LOCK_DIR "/run/kgym-uids"
#define UID_FREE (-1)
#define UID_TAKEN (-2)

struct kg_engine {
    kg_engine_cfg cfg;
    int nslots; /* concurrency + stage: slots[] in use */
    char python[PATH_MAX], root[PATH_MAX], tmp_base[PATH_MAX],
        cache_dir[PATH_MAX];
    char pythonpath[PATH_MAX], sandbox_lib[PATH_MAX], lock_path[PATH_MAX];
    char cuda_env[64];
    kg_zygote *zy;
    struct slot slots[MAX_SLOTS];
    struct slot spares[MAX_SPARES]; /* S_SPARE or S_FREE */
    struct slot dying[MAX_DYING];   /* S_DYING or S_FREE: result out, exits due */
    int last_interp;                /* what the newest task's children need */
    int last_prof;                  /* the newest task profiles */
    struct pending *head, *tail;
    int npending;
    long next_id;
    int need_probe;
    int device_bad;
    kg_sandbox_filter filter; /* fresh mode: built once, before any fork */
    kg_sandbox_cgroups cgroups;
    int prewarm, idle_warm; /* resolved from cfg (engine.h) */
    int prewarm_noprof;     /* the default's cap while tasks do not profile */
    int spare_deaths;       /* spares that died unused, in a row */
    int spare_mem_cap;      /* most spares the device's memory allows
                             * (note_memory); -1: no limit seen */
    double mem_floor;       /* KGYM_SPARE_MEM_FLOOR: least free share */
    /* a candidate cgroup that did not empty within the kill grace (a fork
     * bomb's hundreds of exiting processes) is kept here with its pair's
     * uid and retried each step; the uid is not handed out again before */
    struct {
        kg_sandbox_cgroup cg;
        int uid;
    } stale[MAX_STALE];
    int nstale;
    int drop_uid;     /* running as root: the candidate runs as nobody */
    int uid_lock[CAND_UIDS]; /* per candidate uid: held lock fd, or
                                UID_FREE / UID_TAKEN (in /etc/passwd) */
    uint64_t mem_cap; /* per-task memory limit: at most half the RAM */
};

#define NOBODY 65534

/* snprintf for paths; a truncated path is an error, not a shorter path. */
static int pathf(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return k < 0 || (size_t)k >= n ? KG_EINVAL : 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void buf_free(struct buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Appends, keeping at most cap bytes: with keep_tail the newest bytes stay. */
static int buf_add(struct buf *b, const char *s, size_t n, size_t cap,
                   int keep_tail)
{
    if (b->n + n > cap) {
        if (!keep_tail)
            return -1;
        if (n >= cap) {
            b->dropped += b->n + (n - cap);
            s += n - cap;
            n = cap;
            b->n = 0;
        } else {
            size_t drop = b->n + n - cap;
            memmove(b->p, b->p + drop, b->n - drop);
            b->n -= drop;
            b->dropped += drop;
        }
    }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np)
            return -1;
        b->p = np, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---- children ----------------------------------------------------------- */

/* The device as a child names it: the zygote and its children see only
 * the worker's GPU (CUDA_VISIBLE_DEVICES=N), which is their cuda:0. The
 * result still reports the worker's own name for it (stamp). */
static const char *child_device(const kg_engine *e)
{
    return e->cuda_env[0] ? "cuda:0" : e->cfg.device;
}

/* Threads of torch's CPU pool in each child (KGYM_CPU_THREADS, applied by
 * kgym_harness.role.apply_cpu_threads): the machine's CPUs shared among the
 * processes that may compute at once, the task's judge and candidate on a
 * GPU (on the CPU they take turns while timing), times --concurrency. An
 * OpenMP pool spins after every parallel region, and pools that outnumber
 * the CPUs slow each other down by orders of magnitude (bench/diag/
 * contention.py). KGYM_CPU_THREADS in the worker's environment overrides. */
static int child_cpu_threads(const kg_engine *e)
{
    const char *v = getenv("KGYM_CPU_THREADS");
    if (v && atoi(v) > 0)
        return atoi(v);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long share = e->cfg.concurrency * (e->cuda_env[0] ? 2 : 1);
    long n = ncpu > 0 && share > 0 ? ncpu / share : 1;
    return n < 1 ? 1 : (int)n;
}

/* Whether Triton candidates compile ahead (KGYM_COMPILE_AHEAD, harness/
 * kgym_harness/ahead.py): the worker's setting when it has one, else on for
 * a GPU engine that runs several tasks at once. There a first call that
 * compiles holds the device lock shared for the compile (0.2-0.9 s) and
 * every timing phase waits for it; alone, compiling inside that call costs
 * nothing else and the dry run's fork adds to each task (H200, distinct
 * candidates: 4 at a time 13.2 -> 11.6 s, one at a time 20.0 -> 21.3 s;
 * bench/results/2026-12-01-gpu-h200-s8.txt). */
static const char *compile_ahead(const kg_engine *e)
{
    const char *v = getenv("KGYM_COMPILE_AHEAD");
    if (v && *v)
        return v;
    return e->cuda_env[0] && (e->cfg.concurrency > 1 || e->cfg.stage > 0)
               ? "1"
               : "0"; /* staged tasks compile before their device slot */
}

/* How many hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS) each child's
 * CUDA context gets: the worker's own setting when it has one, else 1 on a
 * GPU. Every task makes two contexts and tears them down, and on the H200
 * the driver makes at most about 4.7 a second with the default 8 queues,
 * however many processes ask at once; with 1 queue 11 a second (2: 9.5),
 * and 4-way throughput rose from x0.90 to x2.18 over a serial engine with
 * 8 (x1.68-x1.92 with 1 in both, whose serial run got faster too), kernel
 * medians within 0.24% (bench/diag/ctx_rate.py,
 * bench/results/2026-12-01-gpu-h200-s12.txt). The cost: a candidate's
 * kernels on different streams share one queue and do not overlap. NULL:
 * leave CUDA's default (no GPU). */
static const char *cuda_connections(const kg_engine *e)
{
    const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (v && *v)
        return v;
    return e->cuda_env[0] ? "1" : NULL;
}

/* The environment a child starts with: nothing of the worker's but what the
 * runtime needs. */
static json_t *child_env(kg_engine *e, const char *role, const struct child *c,
                         int interp, int prof)
{
    static const char *pass[] = {"PATH",
                                 "LD_LIBRARY_PATH",
                                 "CUDA_HOME",
                                 "CUDA_PATH",
                                 "LANG",
                                 "CC",
                                 "CXX",
                                 "NCCL_NVLS_ENABLE",
                                 "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                 "NVSHMEM_DISABLE_NVLS",
                                 "TRITON_INTERPRET",
                                 "TRITON_PTXAS_PATH",
                                 /* the channel's CUDA IPC regions (on
                                  * unless "0", harness/kgym_harness/
                                  * devregion.py): both roles */
                                 "KGYM_CUDA_IPC",
                                 NULL};
    json_t *env = json_object();
    for (const char **p = pass; *p; p++) {
        const char *v = getenv(*p);
        if (v)
            json_object_set_new(env, *p, json_string(v));
    }
    const char *conns = cuda_connections(e);
    if (conns)
        json_object_set_new(env, "CUDA_DEVICE_MAX_CONNECTIONS", json_string(conns));
    if (!json_object_get(env, "PATH"))
        json_object_set_new(env, "PATH",
                            json_string("/usr/local/bin:/usr/bin:/bin"));
    json_object_set_new(env, "HOME", json_string(c->wd));
    /* candidate uids have no passwd entry: getpass.getuser() (the torch
     * profiler, inductor's cache) reads these before asking getpwuid */
    json_object_set_new(env, "USER", json_string("kgym"));
    json_object_set_new(env, "LOGNAME", json_string("kgym"));
    json_object_set_new(env, "TMPDIR", json_string(c->wd));
    json_object_set_new(env, "PYTHONPATH", json_string(e->pythonpath));
    json_object_set_new(env, "PYTHONDONTWRITEBYTECODE", json_string("1"));
    /* caches per role: the candidate must not be able to write what the
     * judge reads (reference timings) */
    char cd[PATH_MAX + 32], tc[PATH_MAX + 48];
    snprintf(cd, sizeof cd, "%s/%s", e->cache_dir, role);
    snprintf(tc, sizeof tc, "%s/triton", cd);
    json_object_set_new(env, "KGYM_CACHE_DIR", json_string(cd));
    json_object_set_new(env, "TRITON_CACHE_DIR", json_string(tc));
    json_object_set_new(env, "TORCH_EXTENSIONS_DIR", json_string(cd));
    json_object_set_new(
        env, "KGYM_WORKER_ID",
        json_string(e->cfg.worker_id ? e->cfg.worker_id : "local"));
    json_object_set_new(env, "KGYM_DEVICE", json_string(child_device(e)));
    /* a GPU worker's children see its one device; a CPU worker's see none:
     * a cpu evaluation must not compute on a GPU of the host, and CUDA's
     * start-up in a child under the CPU sandbox's address-space limit
     * fails (H200 red team, session 8: error 304, then ENOMEM) */
    json_object_set_new(env, "CUDA_VISIBLE_DEVICES",
                        json_string(e->cuda_env[0] ? e->cuda_env : ""));
    if (interp)
        json_object_set_new(env, "TRITON_INTERPRET", json_string("1"));
    char threads[24];
    snprintf(threads, sizeof threads, "%d", child_cpu_threads(e));
    json_object_set_new(env, "KGYM_CPU_THREADS", json_string(threads));
    if (!strcmp(role, "judge")) {
        /* the judge's switches, from the worker's environment: the
         * reference-time cache, the device lock's trace (diagnosis), the
         * timing phase's memory reserve, the spares' yield to timing
         * phases and their preload (each on unless "0"); and the
         * candidates' compile ahead (compile_ahead) */
        static const char *judge_pass[] = {"KGYM_REFTIME_CACHE", "KGYM_LOCK_TRACE",
                                           "KGYM_TIMING_RESERVE", "KGYM_SPARE_YIELD",
                                           "KGYM_SPARE_PRELOAD", NULL};
        for (const char **p = judge_pass; *p; p++) {
            const char *v = getenv(*p);
            if (v)
                json_object_set_new(env, *p, json_string(v));
        }
        json_object_set_new(env, "KGYM_COMPILE_AHEAD", json_string(compile_ahead(e)));
        json_object_set_new(env, "KGYM_DEVICE_LOCK", json_string(e->lock_path));
        if (prof)
            json_object_set_new(env, "KGYM_WARM_PROFILER", json_string("1"));
    }
    return env;
}

/* Triton's interpreter: a triton task on a cpu worker. */
static int task_interp(const kg_engine *e, const json_t *task)
{
    const char *backend = json_string_value(json_object_get(task, "backend"));
    return !strcmp(e->cfg.device, "cpu") && backend &&
           !strcmp(backend, "triton");
}

/* The task profiles (enable_profiling, true unless false). */
static int task_prof(const json_t *task)
{
    return !json_is_false(json_object_get(task, "enable_profiling"));
}

/* The task as the judge gets it: the request plus the device, its lock and
 * the worker's deadline. New reference, owned by the caller. */
static json_t *judge_task(kg_engine *e, const struct slot *sl)
{
    json_t *t = json_deep_copy(sl->task);
    json_object_set_new(t, "device_lock", json_string(e->lock_path));
    json_object_set_new(t, "device", json_string(child_device(e)));
    if (sl->gated)
        json_object_set_new(t, "device_gate", json_true());
    /* the judge's own clock must aim at the worker's deadline (absolute
     * Unix seconds), not at its start: a fresh interpreter's start-up
     * would otherwise eat the margin, and the worker's kill would come
     * before the judge's own timeout verdict (which names the phase) */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    json_object_set_new(t, "deadline",
                        json_real((double)rt.tv_sec + rt.tv_nsec / 1e9 +
                                  (sl->deadline - now_ms()) / 1e3));
    return t;
}

/* A memory limit larger than the machine is no limit: the kernel's OOM
 * killer would act first, on whatever it picks. Limits are capped at half
 * the physical memory. */
static uint64_t mem_limit(const kg_engine *e, uint64_t want)
{
    return e->mem_cap && e->mem_cap < want ? e->mem_cap : want;
}

/* 1 if path is dir or inside it. */
static int under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == 0 || path[n] == '/');
}

/* 1 if the candidate's private tmpfs covers path (sandbox.c mounts it on
 * /tmp, /var/tmp and /dev/shm). */
static int under_private_tmp(const char *path)
{
    return under(path, "/tmp") || under(path, "/var/tmp") ||
           under(path, "/dev/shm");
}

/* ---- candidate uids ------------------------------------------------------ */

/* Gives the candidate work dir wd the lowest candidate uid that no pair of
 * any worker on the machine holds (flock), and chowns wd to it: the owner
 * of the work dir is the record of the pair's uid. */
static int uid_take(kg_engine *e, const char *wd, kg_err *err)
{
    for (int i = 0; i < CAND_UIDS; i++) {
        if (e->uid_lock[i] != UID_FREE)
            continue;
        char p[64];
        snprintf(p, sizeof p, "%s/%d", UID_LOCK_DIR, CAND_UID0 + i);
        int fd = open(p, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return kg_errf(err, KG_EIO, "uid lock %s: %s", p, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
            close(fd); /* another worker's pair has it */
            continue;
        }
        if (chown(wd, (uid_t)(CAND_UID0 + i), CAND_GID) < 0) {
            int en = errno;
            close(fd);
            return kg_errf(err, KG_EIO, "chown %s: %s", wd, strerror(en));
        }
        e->uid_lock[i] = fd;
        return 0;
    }
    return kg_errf(err, KG_EUNAVAIL,
                   "all %d candidate uids from %d are in use on this machine",
                   CAND_UIDS, CAND_UID0);
}

/* The candidate uid of a work dir (its owner), or -1. */
static int uid_of(const char *wd)
{
    struct stat st;
    if (!wd[0] || stat(wd, &st) < 0 || st.st_uid < CAND_UID0 ||
        st.st_uid >= CAND_UID0 + CAND_UIDS)
        return -1;
    return (int)st.st_uid;
}

/* Once the pair is gone: unlocks its uid for every worker. */
static void uid_release(kg_engine *e, int uid)
{
    if (uid < CAND_UID0 || uid >= CAND_UID0 + CAND_UIDS)
        return;
    int *l = &e->uid_lock[uid - CAND_UID0];
    if (*l >= 0) {
        close(*l);
        *l = UID_FREE;
    }
}

/* Marks the uids /etc/passwd (or NSS) gives to someone as taken for good;
 * refuses a CAND_GID that names a group; makes the lock directory. */
static int uids_init(kg_engine *e, kg_err *err)
{
    int n = 0;
    for (int i = 0; i < CAND_UIDS; i++) {
        e->uid_lock[i] =
            getpwuid((uid_t)(CAND_UID0 + i)) ? UID_TAKEN : UID_FREE;
        n += e->uid_lock[i] == UID_FREE;
    }
    if (getgrgid(CAND_GID))
        return kg_errf(err, KG_EINVAL,
                       "gid %d, reserved for kgym's candidates, is a group "
                       "in /etc/group: candidates would share it",
                       CAND_GID);
    struct stat st;
    if ((mkdir(UID_LOCK_DIR, 0700) < 0 && errno != EEXIST) ||
        lstat(UID_LOCK_DIR, &st) < 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != 0)
        return kg_errf(err, KG_EIO,
                       "%s (candidate uid locks): not a directory of root's "
                       "(%s)",
                       UID_LOCK_DIR, strerror(errno));
    if (n < CAND_UIDS)
        fprintf(stderr,
                "kgym worker: only %d of the candidate uids %d..%d are free "
                "(the others are in /etc/passwd)\n",
                n, CAND_UID0, CAND_UID0 + CAND_UIDS - 1);
    return 0;
}

/* nftw callback: one cache entry to the candidates' group, group
 * read/write (directories setgid and searchable); links left alone. */
static int cache_entry_fix(const char *path, const struct stat *st, int type,
                           struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_SL || S_ISLNK(st->st_mode))
        return 0;
    mode_t want = S_ISDIR(st->st_mode) ? (st->st_mode & 07777) | 02070
                                       : (st->st_mode & 07777) | 0060;
    if (st->st_gid != CAND_GID && lchown(path, (uid_t)-1, CAND_GID) < 0)
        return 0; /* best effort: the rest may still be fine */
    if ((st->st_mode & 07777) != want)
        chmod(path, want);
    return 0;
}

/* The candidates' cache: root:CAND_GID, mode 2770 (setgid: what a
 * candidate makes there stays in the group; umask 007 keeps it group
 * writable, so any candidate uid can use and refresh any entry). A cache of
 * another layout (uid nobody, from an older kgym) is removed: it is only
 * a cache. */
static int cand_cache_dir(const char *d, kg_err *err)
{
    struct stat st;
    if (lstat(d, &st) == 0 &&
        (!S_ISDIR(st.st_mode) || st.st_uid != 0 || st.st_gid != CAND_GID ||
         (st.st_mode & 07777) != 02770)) {
        int rc = kg_sandbox_rmtree(d, err);
        if (rc)
            return rc;
    }
    if (mkdir(d, 0700) < 0 && errno != EEXIST)
        return kg_errf(err, KG_EIO, "mkdir %s: %s", d, strerror(errno));
    if (chown(d, 0, CAND_GID) < 0 || chmod(d, 02770) < 0)
        return kg_errf(err, KG_EIO, "cache dir %s: %s", d, strerror(errno));
    /* entries made by someone else (a root process run without the uid
     * switch, e.g. the harness's own launcher) would make the cache
     * unusable for every candidate uid: give them to the group */
    nftw(d, cache_entry_fix, 16, FTW_PHYS);
    return 0;
}

/* Sandbox settings per role: the candidate gets everything; the judge
 * (trusted, runs the reference) is isolated from the network and from the
 * worker's fds but keeps a looser limit set. */
static json_t *sandbox_cfg(kg_engine *e, const char *role,
                           const struct child *c)
{
    int cand = !strcmp(role, "candidate");
    int gpu = strncmp(e->cfg.device, "cuda", 4) == 0;
    json_t *s = json_object();
    json_object_set_new(s, "workdir", json_string(c->wd));
    json_object_set_new(s, "required", json_boolean(!e->cfg.no_sandbox));
    json_object_set_new(s, "enabled", json_boolean(!e->cfg.no_sandbox));
    json_object_set_new(s, "new_netns", json_boolean(1));
    json_object_set_new(s, "seccomp", json_boolean(cand));
    /* CUDA maps a huge virtual range: no RLIMIT_AS on a GPU worker. */
    json_object_set_new(
        s, "as_bytes",
        json_integer(gpu ? 0 : (json_int_t)mem_limit(e, (uint64_t)16 << 30)));
    json_object_set_new(s, "cpu_seconds", json_integer(cand ? 600 : 1200));
    json_object_set_new(s, "fsize_bytes", json_integer((json_int_t)2 << 30));
    json_object_set_new(s, "nofile", json_integer(1024));
    json_object_set_new(s, "nproc", json_integer(cand ? 512 : 0));
    int uid = cand && e->drop_uid ? uid_of(c->wd) : -1;
    if (uid >= 0) {
        /* its own uid; the group that owns the shared cache, whose files
         * must stay writable by the group (umask 007) */
        json_object_set_new(s, "uid", json_integer(uid));
        json_object_set_new(s, "gid", json_integer(CAND_GID));
        json_object_set_new(s, "umask", json_integer(007));
        /* a private tmpfs for the workdir, /tmp, /var/tmp and /dev/shm
         * (the task's disk quota), the rest read-only but for the cache */
        json_object_set_new(s, "private_tmp", json_true());
        json_object_set_new(s, "tmp_bytes", json_integer(TASK_TMP_BYTES));
        /* CUDA's first initialisation in a process may create device
         * nodes (nvidia-uvm) and writes driver state: on a GPU worker the
         * root stays writable (the uid still owns nothing there) */
        json_object_set_new(s, "readonly_root", json_boolean(!gpu));
        char cd[PATH_MAX + 16];
        snprintf(cd, sizeof cd, "%s/candidate", e->cache_dir);
        json_t *keep = json_array();
        json_array_append_new(keep, json_string(cd));
        /* what the candidate still imports after the fork (the harness,
         * the interpreter's tree) must not vanish under the private tmpfs
         * when it lives in /tmp (a checkout or a CI clone there) */
        char pybin[PATH_MAX]; /* .../venv/bin: the venv is its parent; the
                               * interpreter link itself is not resolved */
        snprintf(pybin, sizeof pybin, "%s", e->python);
        char *slash = strrchr(pybin, '/');
        if (slash)
            *slash = 0;
        const char *need[2] = {e->root, slash ? pybin : "."};
        for (int i = 0; i < 2; i++) {
            char real[PATH_MAX];
            if (!realpath(need[i], real))
                continue;
            char *up = strrchr(real, '/');
            if (i == 1 && up && up != real)
                *up = 0;
            if (under_private_tmp(real) && !under(real, cd) &&
                (i == 0 || !under(real, e->root)))
                json_array_append_new(keep, json_string(real));
        }
        json_object_set_new(s, "keep_paths", keep);
    }
    if (c->has_cg) {
        json_t *procs = json_array();
        for (int i = 0; i < c->cg.n; i++)
            json_array_append_new(procs, json_string(c->cg.procs[i]));
        json_object_set_new(s, "cgroup_procs", procs);
    }
    return s;
}

/* Spawns one role; returns its pid or a negative code. fds named in names. */
static int spawn(kg_engine *e, struct slot *sl, const char *role,
                 struct child *c, int chan_fd, int res_fd, int task_fd,
                 kg_err *err)
{
    int lp[2];
    if (pipe2(lp, O_CLOEXEC) < 0)
        return kg_errf(err, KG_EIO, "pipe: %s", strerror(errno));
    int rc = kg_sandbox_mkdtemp(e->tmp_base, c->wd, sizeof c->wd, err);
    if (rc) {
        close(lp[0]), close(lp[1]);
        return rc;
    }
    int cand = !strcmp(role, "candidate");
    /* the candidate's uid is the owner of its work dir (uid_take) */
    if (cand && e->drop_uid && (rc = uid_take(e, c->wd, err))) {
        close(lp[0]), close(lp[1]);
        return rc;
    }
    if (cand && (e->cgroups.mem_version || e->cgroups.pids_version) &&
        !e->cfg.no_sandbox) {
        char name[64];
        snprintf(name, sizeof name, "kgym-%d-%ld", (int)getpid(),
                 e->next_id + 1);
        uint64_t mem = mem_limit(e, strncmp(e->cfg.device, "cuda", 4)
                                        ? (uint64_t)16 << 30
                                        : (uint64_t)64 << 30);
        kg_err cgerr;
        if (kg_sandbox_cgroup_open(&e->cgroups, name, mem, 1024, &c->cg,
                                   &cgerr) == 0)
            c->has_cg = 1;
    }
    json_t *req = json_object();
    json_object_set_new(req, "op", json_string("spawn"));
    json_object_set_new(req, "id", json_integer(++e->next_id));
    json_object_set_new(req, "role", json_string(role));
    json_object_set_new(req, "sandbox", sandbox_cfg(e, role, c));
    json_object_set_new(req, "env",
                        child_env(e, role, c, sl->interp, sl->prof));
    json_object_set_new(req, "device", json_string(child_device(e)));
    int fds[4], nfds = 0;
    json_t *names = json_array();
    if (chan_fd >= 0)
        fds[nfds++] = chan_fd,
        json_array_append_new(names, json_string("chan"));
    if (res_fd >= 0)
        fds[nfds++] = res_fd,
        json_array_append_new(names, json_string("result"));
    if (task_fd >= 0)
        fds[nfds++] = task_fd,
        json_array_append_new(names, json_string("task"));
    fds[nfds++] = lp[1], json_array_append_new(names, json_string("log"));
    json_object_set_new(req, "fds", names);
    if (!strcmp(role, "judge") && sl->task)
        json_object_set_new(req, "task", judge_task(e, sl));
    pid_t pid = -1;
    if (e->zy)
        rc = kg_zygote_spawn(e->zy, req, fds, nfds, &pid, err);
    else
        rc = kg_spawn_exec(e->python, req, fds, nfds, &e->filter, &pid, err);
    json_decref(req);
    close(lp[1]);
    if (rc) {
        close(lp[0]);
        return rc;
    }
    fcntl(lp[0], F_SETFL, O_NONBLOCK);
    c->pid = pid;
    c->log_fd = lp[0];
    c->exited = 0;
    return 0;
}

static void kill_child(struct child *c)
{
    if (c->pid > 0 && !c->exited) {
        c->killed = 1;
        /* In fresh mode the child is ours and kill_group reaps it: keep its
         * status, or its exit would never be seen (the slot would wait for
         * it forever). Zygote children are reported by the zygote. */
        int st = -1;
        kg_sandbox_kill_group(c->pid, 2000, &st, NULL);
        if (st != -1) {
            c->exited = 1;
            c->status = st;
        }
    }
    if (c->has_cg)
        kg_sandbox_cgroup_close(&c->cg, 2000,
                                NULL); /* what left the group too */
}

/* ---- results ------------------------------------------------------------ */

static const char *tail_of(const struct buf *b, size_t max)
{
    if (!b->p)
        return "";
    return b->n > max ? b->p + b->n - max : b->p;
}

static void describe_status(char *out, size_t n, const char *who,
                            const struct child *c)
{
    if (!c->exited)
        snprintf(out, n, "%s still running", who);
    else if (WIFSIGNALED(c->status))
        snprintf(out, n, "%s killed by signal %d (%s)", who,
                 WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
    else
        snprintf(out, n, "%s exited with status %d", who,
                 WEXITSTATUS(c->status));
}

/* A verdict the engine writes itself: the judge did not deliver. */
static json_t *engine_verdict(struct slot *sl, const char *verdict,
                              const char *code, const char *msg)
{
    const char *tid = json_string_value(json_object_get(sl->task, "task_id"));
    json_t *r = kg_result_new(tid, verdict, code, "worker", msg);
    json_object_set_new(json_object_get(r, "error"), "traceback",
                        json_string(tail_of(&sl->cand.log, 2000)));
    return r;
}

/* Every result leaves the engine here, in the form clients may read alone
 * (kg_result_finalize: no reward-bearing figure on a verdict other than
 * pass). */
static void hand_out(kg_engine_done_fn done, void *ctx, struct slot *sl,
                     json_t *r)
{
    kg_result_finalize(r);
    done(ctx, sl->user, r);
}

/* A judge that ended by itself (not SIGKILL: the OOM killer, or us) without
 * a frame while running the reference's code was ended by the reference
 * (os._exit, a crash in it), not by the candidate: problem_error. The judge
 * says which reference code runs, if any, in its TMPDIR's marker
 * (harness/kgym_harness/frame.py MARK_FILE: one 64-byte record, the phase,
 * NUL-padded). NULL when that is not so. */
static json_t *problem_verdict(struct slot *sl, const char *js)
{
    const struct child *j = &sl->judge;
    char path[PATH_MAX + 16], phase[65] = {0};
    if (!j->exited || !j->wd[0] ||
        (WIFSIGNALED(j->status) && WTERMSIG(j->status) == SIGKILL) ||
        pathf(path, sizeof path, "%s/kgym-phase", j->wd))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, phase, sizeof phase - 1);
    close(fd);
    if (n <= 0 || strncmp(phase, "reference:", 10))
        return NULL;
    for (const char *p = phase; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || *p == '_' || *p == ':'))
            return NULL;
    char msg[512], fb[1024];
    snprintf(msg, sizeof msg,
             "the reference (problem) is at fault, not the kernel: the %s "
             "while running reference code (%s)",
             js, phase);
    json_t *r = engine_verdict(sl, "problem_error", "PROBLEM_ERROR", msg);
    json_t *err = json_object_get(r, "error");
    json_object_set_new(err, "phase", json_string(phase));
    json_object_set_new(err, "traceback",
                        json_string(tail_of(&sl->judge.log, 2000)));
    snprintf(fb, sizeof fb,
             "Verdict: problem_error (PROBLEM_ERROR)\nThe problem's reference "
             "failed, not your kernel: this attempt is not scored.\n  %s\n",
             msg);
    json_object_set_new(r, "feedback", json_string(fb));
    return r;
}

static json_t *build_result(kg_engine *e, struct slot *sl)
{
    char js[256], cs[256], msg[1024];
    describe_status(js, sizeof js, "judge", &sl->judge);
    describe_status(cs, sizeof cs, "candidate", &sl->cand);
    if (sl->timed_out) {
        double t = json_number_value(json_object_get(sl->task, "timeout"));
        snprintf(
            msg, sizeof msg,
            "evaluation exceeded its timeout of %.0f s and was killed (%s; %s)",
            t, js, cs);
        return engine_verdict(sl, "timeout", "TIMEOUT", msg);
    }
    kg_err ferr = {{0}};
    json_t *r = NULL;
    if (sl->res.n > 0)
        r = kg_frame_parse(sl->res.p, sl->res.n, &ferr);
    else
        snprintf(ferr.msg, sizeof ferr.msg, "no result frame");
    if (!r && (r = problem_verdict(sl, js)))
        return r;
    if (!r) {
        snprintf(msg, sizeof msg,
                 "the evaluation ended without a complete result (%s; %s; %s)",
                 ferr.msg, js, cs);
        const char *t = tail_of(&sl->cand.log, 300);
        if (*t && strlen(msg) + strlen(t) + 32 < sizeof msg) {
            strcat(msg, "; candidate output: ");
            strcat(msg, t);
        }
        return engine_verdict(sl, "runtime_error", "CHILD_DIED", msg);
    }
    (void)e;
    /* The frame is the judge's; the engine owns status, device and clock. */
    json_object_set_new(r, "status", json_string("completed"));
    json_t *tid = json_object_get(sl->task, "task_id");
    if (tid)
        json_object_set(r, "task_id", tid);
    if (WIFSIGNALED(sl->cand.status) && sl->cand.exited &&
        sl->cand.status != SIGKILL) {
        json_object_set_new(r, "candidate_exit", json_string(cs));
    }
    /* The judge only saw the channel close; the worker knows how the
     * candidate ended (signal or exit status): say it in the message. */
    const char *code = json_string_value(json_object_get(r, "error_code"));
    const char *em0 = json_string_value(json_object_get(r, "error_message"));
    char em[512]; /* a copy: the string is replaced below */
    snprintf(em, sizeof em, "%s", em0 ? em0 : "");
    int by_us = sl->cand.killed && WIFSIGNALED(sl->cand.status) &&
                WTERMSIG(sl->cand.status) == SIGKILL;
    if (code && !strcmp(code, "CHILD_DIED") && *em && sl->cand.exited &&
        !by_us) {
        snprintf(msg, sizeof msg, "%s (%s)", em, cs);
        json_object_set_new(r, "error_message", json_string(msg));
        json_t *er = json_object_get(r, "error");
        if (json_is_object(er))
            json_object_set_new(er, "message", json_string(msg));
        /* and in the feedback the policy reads */
        const char *fb = json_string_value(json_object_get(r, "feedback"));
        const char *at = fb ? strstr(fb, em) : NULL;
        if (at) {
            size_t pre = (size_t)(at - fb), elen = strlen(em);
            size_t n = strlen(fb) + strlen(cs) + 4;
            char *nf = malloc(n);
            if (nf) {
                snprintf(nf, n, "%.*s%s (%s)%s", (int)pre, fb, em, cs,
                         at + elen);
                json_object_set_new(r, "feedback", json_string(nf));
                free(nf);
            }
        }
    }
    return r;
}

static void stamp(kg_engine *e, struct slot *sl, json_t *r)
{
    double end = now_ms();
    json_t *t = json_object_get(r, "timings");
    if (!json_is_object(t)) {
        t = json_object();
        json_object_set_new(r, "timings", t);
    }
    json_object_set_new(t, "queued", json_real(sl->t_start - sl->t_submit));
    json_object_set_new(t, "spawn", json_real(sl->t_spawned - sl->t_start));
    json_object_set_new(t, "total", json_real(end - sl->t_start));
    json_t *d = json_object_get(r, "device");
    if (!json_is_object(d)) {
        d = json_object();
        json_object_set_new(r, "device", d);
    }
    json_object_set_new(
        d, "worker_id",
        json_string(e->cfg.worker_id ? e->cfg.worker_id : "local"));
    json_object_set_new(d, "device", json_string(e->cfg.device));
    json_object_set(d, "backend", json_object_get(sl->task, "backend"));
    json_object_set_new(d, "mode", json_string(!e->zy     ? "fresh"
                                               : sl->warm ? "zygote+warm"
                                                          : "zygote"));
}

/* An empty slot: everything zero, no fds (S_FREE). */
static void slot_clear(struct slot *sl)
{
    memset(sl, 0, sizeof *sl);
    sl->res_fd = sl->task_fd = sl->judge.log_fd = sl->cand.log_fd = -1;
}

static void free_slot(kg_engine *e, struct slot *sl)
{
    close_fd(&sl->res_fd);
    close_fd(&sl->task_fd);
    close_fd(&sl->judge.log_fd);
    close_fd(&sl->cand.log_fd);
    buf_free(&sl->res);
    buf_free(&sl->judge.log);
    buf_free(&sl->cand.log);
    struct child *cs[2] = {&sl->judge, &sl->cand};
    int uid = uid_of(sl->cand.wd); /* the pair's; free once it is gone */
    for (int i = 0; i < 2; i++) {
        if (cs[i]->has_cg && kg_sandbox_cgroup_close(&cs[i]->cg, 2000, NULL) &&
            e->nstale < MAX_STALE) {
            e->stale[e->nstale].cg = cs[i]->cg;
            e->stale[e->nstale++].uid = uid;
            uid = -1; /* released with the cgroup (retry_stale) */
        }
        if (cs[i]->wd[0])
            kg_sandbox_rmtree(cs[i]->wd, NULL);
    }
    uid_release(e, uid);
    json_decref(sl->task);
    json_decref(sl->held);
    slot_clear(sl);
}

/* Tries again to remove task cgroups that were still emptying; each one
 * gone frees its uid. timeout_ms: per cgroup (0: just look). */
static void retry_stale(kg_engine *e, int timeout_ms)
{
    for (int i = 0; i < e->nstale;) {
        if (kg_sandbox_cgroup_close(&e->stale[i].cg, timeout_ms, NULL)) {
            i++;
            continue;
        }
        uid_release(e, e->stale[i].uid);
        e->stale[i] = e->stale[--e->nstale];
    }
}

static int is_cuda_failure(kg_engine *e, struct slot *sl, json_t *r)
{
    if (strncmp(e->cfg.device, "cuda", 4))
        return 0;
    const char *code = json_string_value(json_object_get(r, "error_code"));
    if (code && !strcmp(code, "CUDA_ERROR"))
        return 1;
    return sl->cand.exited && WIFSIGNALED(sl->cand.status) &&
           WTERMSIG(sl->cand.status) != SIGKILL;
}

/* ---- lifecycle ------------------------------------------------------------
 */

/* Forks the judge and candidate of sl (sl->task set: the judge gets it in
 * its spawn request; unset: a spare, whose judge waits on a "go" pipe). */
static int spawn_pair(kg_engine *e, struct slot *sl, kg_err *err)
{
    int chan[2], rp[2], tp[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0)
        return kg_errf(err, KG_EIO, "socketpair: %s", strerror(errno));
    if (pipe2(rp, O_CLOEXEC) < 0) {
        close(chan[0]), close(chan[1]);
        return kg_errf(err, KG_EIO, "pipe: %s", strerror(errno));
    }
    if (!sl->task && pipe2(tp, O_CLOEXEC) < 0) {
        close(chan[0]), close(chan[1]), close(rp[0]), close(rp[1]);
        return kg_errf(err, KG_EIO, "pipe: %s", strerror(errno));
    }
    /* the candidate first: it never sees the result pipe or the task */
    int rc = spawn(e, sl, "candidate", &sl->cand, chan[1], -1, -1, err);
    if (!rc)
        rc = spawn(e, sl, "judge", &sl->judge, chan[0], rp[1], tp[0], err);
    close(chan[0]), close(chan[1]), close(rp[1]);
    if (tp[0] >= 0)
        close(tp[0]);
    sl->task_fd = tp[1];
    sl->res_fd = rp[0];
    fcntl(sl->res_fd, F_SETFL, O_NONBLOCK);
    sl->t_spawned = now_ms();
    return rc;
}

/* Hands a spare's judge its task: the task file in the judge's private work
 * dir (written whole, then renamed), then one byte on the go pipe. */
static int give_task(kg_engine *e, struct slot *sl, kg_err *err)
{
    char path[PATH_MAX + 16], tmp[PATH_MAX + 16];
    if (pathf(path, sizeof path, "%s/task.json", sl->judge.wd) ||
        pathf(tmp, sizeof tmp, "%s/task.json.tmp", sl->judge.wd))
        return kg_errf(err, KG_EINVAL, "work dir path too long");
    json_t *t = judge_task(e, sl);
    int rc = json_dump_file(t, tmp, JSON_COMPACT);
    json_decref(t);
    if (rc || rename(tmp, path))
        return kg_errf(err, KG_EIO, "writing the task for the judge: %s",
                       strerror(errno));
    char go = 'T';
    if (write(sl->task_fd, &go, 1) != 1)
        return kg_errf(err, KG_EIO, "the warm judge is gone: %s",
                       strerror(errno));
    if (!sl->gated) /* a staged task's judge reads 'D' here later */
        close_fd(&sl->task_fd);
    return 0;
}

/* The spare for a task, or NULL (none, or no zygote): one whose children
 * are both alive and suit it (interp), preferably one that warmed the
 * profiler when the task profiles, and of those the oldest, the one most
 * likely done warming (a younger one would make the task wait for the rest
 * of its start-up). */
static struct slot *take_spare(kg_engine *e, const json_t *task)
{
    if (!e->zy)
        return NULL;
    int interp = task_interp(e, task), prof = task_prof(task);
    struct slot *best = NULL;
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE || sp->interp != interp ||
            sp->judge.exited || sp->cand.exited)
            continue;
        if (!best)
            best = sp;
        else if ((sp->prof >= prof) != (best->prof >= prof)) {
            if (sp->prof >= prof)
                best = sp;
        } else if (sp->t_spawned < best->t_spawned)
            best = sp;
    }
    return best;
}

/* Device slots taken: running tasks that were not staged, or were given
 * their slot (grant_device). At most cfg.concurrency. */
static int device_slots_used(const kg_engine *e)
{
    int used = 0;
    for (int i = 0; i < e->nslots; i++) {
        const struct slot *sl = &e->slots[i];
        used += sl->state == S_RUNNING && (!sl->gated || sl->granted);
    }
    return used;
}

/* Free device slots go to staged tasks, oldest first: 'D' on the task pipe
 * their judge waits on after its set-up and compile (judge.wait_for_device).
 * Not while a device probe is due. */
static void grant_device(kg_engine *e)
{
    if (e->need_probe)
        return;
    for (int left = e->cfg.concurrency - device_slots_used(e); left > 0;
         left--) {
        struct slot *best = NULL;
        for (int i = 0; i < e->nslots; i++) {
            struct slot *sl = &e->slots[i];
            if (sl->state == S_RUNNING && sl->gated && !sl->granted &&
                (!best || sl->t_start < best->t_start))
                best = sl;
        }
        if (!best)
            return;
        best->granted = 1;
        char go = 'D';
        if (best->task_fd >= 0 && write(best->task_fd, &go, 1) != 1 &&
            e->cfg.verbose)
            fprintf(stderr, "kgym worker: a staged judge is gone: %s\n",
                    strerror(errno)); /* its exit ends the task */
        close_fd(&best->task_fd);
    }
}

static int start_task(kg_engine *e, struct slot *sl, struct pending *p,
                      int gated, kg_err *err)
{
    struct slot *sp = take_spare(e, p->task);
    if (sp) {
        e->spare_deaths = 0;
        *sl = *sp; /* the pair, its fds and buffers move to the slot */
        slot_clear(sp);
        sl->warm = 1;
    } else {
        slot_clear(sl);
        sl->interp = task_interp(e, p->task);
    }
    sl->task = p->task;
    sl->user = p->user;
    sl->gated = gated && sl->warm; /* a pair forked now has no gate pipe */
    sl->t_submit = p->t_submit;
    sl->t_start = now_ms();
    sl->state = S_RUNNING;
    double timeout = json_number_value(json_object_get(sl->task, "timeout"));
    if (timeout <= 0)
        timeout = 300;
    sl->deadline = sl->t_start + timeout * 1e3;
    if (sl->warm) {
        int rc = give_task(e, sl, err);
        sl->t_spawned = now_ms();
        return rc;
    }
    return spawn_pair(e, sl, err);
}

static void drain_log(kg_engine *e, struct child *c, const char *who);

static void drop_spare(kg_engine *e, struct slot *sp)
{
    kill_child(&sp->judge);
    kill_child(&sp->cand);
    free_slot(e, sp);
}

/* The spares wanted at most, before memory: prewarm, or the non-profiling
 * default while the newest task does not profile. */
static int spare_cap(const kg_engine *e)
{
    return e->prewarm_noprof && !e->last_prof ? e->prewarm_noprof : e->prewarm;
}

/* Spares hold device memory (about 2 GiB a pair on the H200) that tasks
 * may need: a warm spare's judge reports the device's free and total
 * memory at the end of its warm-up (timings.warm_spare.mem_mib; the host's
 * on a cpu worker). Below KGYM_SPARE_MEM_FLOOR (a share, default 0.25)
 * free, the engine keeps two spares fewer from now on (at least one);
 * with twice that free, one more again, up to the default. */
static void note_memory(kg_engine *e, const struct slot *sl, json_t *r)
{
    json_t *m = json_object_get(
        json_object_get(json_object_get(r, "timings"), "warm_spare"), "mem_mib");
    if (!sl->warm || !json_is_array(m) || json_array_size(m) != 2)
        return;
    double free_mib = json_number_value(json_array_get(m, 0));
    double total = json_number_value(json_array_get(m, 1));
    if (!(total > 0) || free_mib < 0)
        return;
    int cap = e->spare_mem_cap >= 0 ? e->spare_mem_cap : spare_cap(e);
    if (free_mib < e->mem_floor * total && cap > 1) {
        e->spare_mem_cap = cap > 2 ? cap - 2 : 1;
        fprintf(stderr,
                "kgym worker: device memory low after a warm spare's start-up "
                "(%.0f of %.0f MiB free): at most %d spare(s) now\n",
                free_mib, total, e->spare_mem_cap);
    } else if (e->spare_mem_cap >= 0 && free_mib >= 2 * e->mem_floor * total &&
               ++e->spare_mem_cap >= spare_cap(e)) {
        e->spare_mem_cap = -1;
    }
}

/* Keeps warm spares ready: as many as the queue can use, at most prewarm;
 * with nothing queued, idle_warm. Not while the device is in doubt. */
static void top_up_spares(kg_engine *e)
{
    int live = 0;
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE)
            continue;
        if (sp->judge.exited || sp->cand.exited) {
            drain_log(e, &sp->judge, "spare judge");
            drain_log(e, &sp->cand, "spare candidate");
            if (e->cfg.verbose)
                fprintf(stderr, "kgym worker: a warm spare died: %s%s\n",
                        tail_of(&sp->judge.log, 300),
                        tail_of(&sp->cand.log, 300));
            drop_spare(e, sp);
            /* a spare that cannot start would be re-forked every step:
             * after a few in a row, tasks fork their own pair again */
            if (++e->spare_deaths == 3 && e->prewarm) {
                fprintf(stderr, "kgym worker: warm spares keep dying before "
                                "their task; starting pairs per task "
                                "instead\n");
                e->prewarm = e->idle_warm = e->prewarm_noprof = 0;
            }
            continue;
        }
        live++;
    }
    if (!e->zy || e->need_probe || e->device_bad)
        return;
    int want = e->npending + e->idle_warm;
    int cap = spare_cap(e);
    if (e->spare_mem_cap >= 0 && cap > e->spare_mem_cap)
        cap = e->spare_mem_cap;
    if (want > cap)
        want = cap;
    for (int i = 0; i < MAX_SPARES && live < want; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_FREE)
            continue;
        slot_clear(sp);
        sp->interp = e->last_interp;
        sp->prof = e->last_prof;
        sp->state = S_SPARE;
        kg_err serr;
        if (spawn_pair(e, sp, &serr)) {
            if (e->cfg.verbose)
                fprintf(stderr, "kgym worker: warm spare: %s\n", serr.msg);
            drop_spare(e, sp);
            return; /* try again next step */
        }
        live++;
    }
}

/* Kills every spare (a zygote restart, a device in doubt, the end). */
static void drop_spares(kg_engine *e)
{
    for (int i = 0; i < MAX_SPARES; i++)
        if (e->spares[i].state == S_SPARE)
            drop_spare(e, &e->spares[i]);
}

int kg_engine_submit(kg_engine *e, json_t *task, void *user, kg_err *err)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    p->task = json_incref(task);
    p->user = user;
    p->t_submit = now_ms();
    e->last_interp = task_interp(e, task);
    e->last_prof = task_prof(task);
    if (e->tail)
        e->tail->next = p;
    else
        e->head = p;
    e->tail = p;
    e->npending++;
    return 0;
}

/* Reads whatever is ready on a child's log pipe. */
static void drain_log(kg_engine *e, struct child *c, const char *who)
{
    char tmp[8192];
    while (c->log_fd >= 0) {
        ssize_t n = read(c->log_fd, tmp, sizeof tmp);
        if (n > 0) {
            buf_add(&c->log, tmp, (size_t)n, LOG_CAP, 1);
            if (e->cfg.verbose)
                fprintf(stderr, "[%s %d] %.*s", who, (int)c->pid, (int)n, tmp);
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            close_fd(&c->log_fd);
        break;
    }
}

static void drain_result(struct slot *sl)
{
    char tmp[65536];
    while (sl->res_fd >= 0) {
        ssize_t n = read(sl->res_fd, tmp, sizeof tmp);
        if (n > 0) {
            if (buf_add(&sl->res, tmp, (size_t)n, KG_FRAME_MAX + 24, 0) < 0) {
                close_fd(&sl->res_fd); /* oversized: never a result */
                buf_free(&sl->res);
            }
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close_fd(&sl->res_fd);
            if (!sl->t_judge_done)
                sl->t_judge_done = now_ms();
        }
        break;
    }
}

/* The result frame is in: nothing either child does now can change it.
 * Both process groups get SIGKILL at once, without waiting, so the two
 * teardowns (seconds of CUDA context and address space on a GPU) overlap
 * instead of following one another while the slot stays taken. A child
 * that already ended by itself is left alone: its own status (a signal,
 * an exit code) still goes into the result. */
static void release_children(struct slot *sl)
{
    struct child *cs[2] = {&sl->judge, &sl->cand};
    sl->released = 1;
    for (int k = 0; k < 2; k++) {
        struct child *c = cs[k];
        if (c->pid > 0 && !c->exited && kg_sandbox_proc_running(c->pid)) {
            c->killed = 1;
            kill(-c->pid, SIGKILL);
        }
    }
}

static struct slot *slot_at(kg_engine *e, int i)
{
    int n = e->nslots;
    return i < n                ? &e->slots[i]
           : i < n + MAX_SPARES ? &e->spares[i - n]
                                : &e->dying[i - n - MAX_SPARES];
}

static void note_exit(kg_engine *e, pid_t pid, int status)
{
    for (int i = 0; i < e->nslots + MAX_SPARES + MAX_DYING; i++) {
        struct slot *sl = slot_at(e, i);
        if (sl->state != S_RUNNING && sl->state != S_SPARE &&
            sl->state != S_DYING)
            continue;
        struct child *c = sl->judge.pid == pid  ? &sl->judge
                          : sl->cand.pid == pid ? &sl->cand
                                                : NULL;
        if (c && !c->exited) {
            c->exited = 1;
            c->status = status;
            /* the session may hold more processes: the whole group goes */
            kg_sandbox_kill_group(pid, 2000, NULL, NULL);
            /* a candidate that ended by a signal of its own after its result
             * went out (finish_early) leaves the device in doubt, as in
             * finish(): no new task before the probe */
            if (sl->state == S_DYING && c == &sl->cand &&
                !strncmp(e->cfg.device, "cuda", 4) && WIFSIGNALED(status) &&
                WTERMSIG(status) != SIGKILL) {
                e->need_probe = 1;
                drop_spares(e);
            }
        }
    }
}

static void collect_exits(kg_engine *e)
{
    if (e->zy) {
        pid_t pid;
        int st;
        kg_err err;
        while (kg_zygote_next_exit(e->zy, &pid, &st, &err) == 1)
            note_exit(e, pid, st);
        return;
    }
    pid_t live[2 * (MAX_SLOTS + MAX_DYING)];
    int nlive = 0;
    for (int i = 0; i < e->nslots + MAX_SPARES + MAX_DYING; i++) {
        struct slot *sl = slot_at(e, i);
        if (sl->state != S_RUNNING && sl->state != S_DYING)
            continue;
        pid_t ps[2] = {sl->judge.pid, sl->cand.pid};
        int ex[2] = {sl->judge.exited, sl->cand.exited};
        for (int k = 0; k < 2; k++) {
            int st;
            if (ps[k] > 0 && !ex[k] && waitpid(ps[k], &st, WNOHANG) == ps[k])
                note_exit(e, ps[k], st);
            else if (ps[k] > 0 && !ex[k])
                live[nlive++] = ps[k];
        }
    }
    /* what a task left behind reparented to us (the subreaper) */
    kg_sandbox_reap_orphans(live, nlive);
}

static int restart_zygote(kg_engine *e, kg_err *err);

/* Runs the device probe child synchronously; 0 = healthy. */
static int probe_device(kg_engine *e)
{
    struct slot tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.task = json_pack("{s:s}", "backend", "cpu");
    struct child c;
    memset(&c, 0, sizeof c);
    kg_err err;
    int healthy = 0;
    for (int attempt = 0; attempt < 3 && !healthy; attempt++) {
        if (attempt > 0 && e->zy && restart_zygote(e, &err))
            continue;
        if (spawn(e, &tmp, "probe", &c, -1, -1, -1, &err))
            continue;
        double deadline = now_ms() + 60000;
        int status = -1, got = 0;
        while (!got && now_ms() < deadline) {
            drain_log(e, &c, "probe");
            if (e->zy) {
                pid_t pid;
                int st;
                while (kg_zygote_next_exit(e->zy, &pid, &st, &err) == 1) {
                    if (pid == c.pid)
                        status = st, got = 1;
                    else
                        note_exit(e, pid, st);
                }
            } else if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
                got = 1;
            }
            if (!got)
                usleep(20000);
        }
        if (!got)
            kg_sandbox_kill_group(c.pid, 2000, NULL, NULL);
        healthy = got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        close_fd(&c.log_fd);
        buf_free(&c.log);
        kg_sandbox_rmtree(c.wd, NULL);
    }
    json_decref(tmp.task);
    return healthy ? 0 : -1;
}

static void finish(kg_engine *e, struct slot *sl, kg_engine_done_fn done,
                   void *ctx)
{
    json_t *r = build_result(e, sl);
    stamp(e, sl, r);
    note_memory(e, sl, r);
    if (is_cuda_failure(e, sl, r)) {
        e->need_probe = 1;
        drop_spares(e); /* their contexts may be on a broken device */
    }
    if (e->need_probe) {
        sl->held = r;
        sl->state = S_HELD;
        return;
    }
    hand_out(done, ctx, sl, r);
    json_decref(r);
    free_slot(e, sl);
}

/* The result of a slot whose judge's frame is complete and whose children
 * were sent SIGKILL (release_children), handed out without waiting for
 * their exits: on a GPU each exit tears a CUDA context down, which took the
 * slot 100 ms per task alone and 200-580 ms at --concurrency 4 on the H200
 * (the part of timings.total no phase accounts for: 14-19 ms on the CPU,
 * 3-10 ms since; bench/results/2026-12-02-gpu-h200-s14.txt,
 * -overhead-cpu-s14.txt). The slot takes its next task
 * at once; the pair waits in e->dying until both exits are seen, then its
 * cgroup, work dirs and uid are released as before (free_slot). Not when
 * the result needs how the children ended: an incomplete frame, CHILD_DIED
 * (its message names the candidate's signal), a CUDA failure (the device
 * is probed first); nor while a probe is due, nor when the pairs alive
 * could outgrow the candidate uids. Returns 1 when the result went out. */
static int finish_early(kg_engine *e, struct slot *sl, kg_engine_done_fn done,
                        void *ctx)
{
    if (sl->early_tried || e->need_probe || sl->timed_out)
        return 0;
    sl->early_tried = 1;
    struct slot *dy = NULL;
    int ndying = 0;
    for (int i = 0; i < MAX_DYING; i++) {
        if (e->dying[i].state == S_DYING)
            ndying++;
        else if (!dy)
            dy = &e->dying[i];
    }
    if (!dy || e->nslots + MAX_SPARES + ndying + 1 > CAND_UIDS)
        return 0;
    json_t *r = build_result(e, sl);
    const char *code = json_string_value(json_object_get(r, "error_code"));
    if ((code && !strcmp(code, "CHILD_DIED")) || is_cuda_failure(e, sl, r)) {
        json_decref(r);
        return 0;
    }
    stamp(e, sl, r);
    note_memory(e, sl, r);
    hand_out(done, ctx, sl, r);
    json_decref(r);
    close_fd(&sl->res_fd);
    close_fd(&sl->judge.log_fd); /* killed: nothing more to read */
    close_fd(&sl->cand.log_fd);
    *dy = *sl; /* the pair, its cgroups, work dirs and uid move */
    dy->state = S_DYING;
    dy->t_dying = now_ms();
    slot_clear(sl);
    return 1;
}

/* Frees the dying pairs whose exits are in, and those whose exits never
 * come (killed again, as the last resort of a running slot). */
static void settle_dying(kg_engine *e)
{
    double t = now_ms();
    for (int i = 0; i < MAX_DYING; i++) {
        struct slot *dy = &e->dying[i];
        if (dy->state != S_DYING)
            continue;
        if (!(dy->judge.exited && dy->cand.exited)) {
            if (t < dy->t_dying + KILL_GRACE_MS)
                continue;
            kill_child(&dy->judge);
            kill_child(&dy->cand);
        }
        free_slot(e, dy);
    }
}

/* After a CUDA failure: once nothing else runs, probe the device, then hand
 * out the held results (infra_error if the device is unhealthy: not the
 * candidate's fault, to be retried elsewhere). */
static void settle_probe(kg_engine *e, kg_engine_done_fn done, void *ctx)
{
    for (int i = 0; i < e->nslots; i++)
        if (e->slots[i].state == S_RUNNING)
            return;
    for (int i = 0; i < MAX_DYING; i++)
        if (e->dying[i].state == S_DYING)
            return; /* a quiet device: the pairs still exiting go first */
    int healthy = probe_device(e) == 0;
    e->device_bad = !healthy;
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_HELD)
            continue;
        json_t *r = sl->held;
        sl->held = NULL;
        if (!healthy) {
            json_decref(r);
            r = engine_verdict(
                sl, "infra_error", "DEVICE_UNHEALTHY",
                "the device failed its health probe after this task; "
                "the task will be retried on a healthy device");
            stamp(e, sl, r);
        }
        hand_out(done, ctx, sl, r);
        json_decref(r);
        free_slot(e, sl);
    }
    e->need_probe = 0;
}

int kg_engine_step(kg_engine *e, int timeout_ms, kg_engine_done_fn done,
                   void *ctx, kg_err *err)
{
    int n = e->nslots;
    if (e->zy && !kg_zygote_alive(e->zy)) {
        int rc = restart_zygote(e, err);
        if (rc)
            return rc;
    }
    /* start what fits: on a free device slot, or staged in a warm spare */
    for (int i = 0; i < n && e->head && !e->need_probe; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_FREE)
            continue;
        int gated = device_slots_used(e) >= e->cfg.concurrency;
        if (gated && !take_spare(e, e->head->task))
            break; /* staged tasks only go to spares (their gate pipe) */
        struct pending *p = e->head;
        e->head = p->next;
        if (!e->head)
            e->tail = NULL;
        e->npending--;
        kg_err serr;
        if (start_task(e, sl, p, gated, &serr)) {
            kill_child(&sl->cand);
            kill_child(&sl->judge);
            json_t *r =
                engine_verdict(sl, "infra_error", "SPAWN_FAILED", serr.msg);
            stamp(e, sl, r);
            hand_out(done, ctx, sl, r);
            json_decref(r);
            free_slot(e, sl);
        }
        free(p);
    }
    grant_device(e);
    top_up_spares(e);
    if (e->nstale)
        retry_stale(e, 0);

    /* wait */
    struct pollfd pf[1 + 3 * MAX_SLOTS + 2 * MAX_SPARES];
    int np = 0;
    double wake = now_ms() + timeout_ms;
    if (e->zy)
        pf[np++] = (struct pollfd){.fd = kg_zygote_fd(e->zy), .events = POLLIN};
    for (int i = 0; i < n; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_RUNNING)
            continue;
        int fds[3] = {sl->res_fd, sl->judge.log_fd, sl->cand.log_fd};
        for (int k = 0; k < 3; k++)
            if (fds[k] >= 0)
                pf[np++] = (struct pollfd){.fd = fds[k], .events = POLLIN};
        /* past the deadline (killed, exits awaited): the last resort's */
        double dl = sl->timed_out ? sl->deadline + KILL_GRACE_MS : sl->deadline;
        if (dl < wake)
            wake = dl;
    }
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE)
            continue;
        if (sp->judge.log_fd >= 0)
            pf[np++] = (struct pollfd){.fd = sp->judge.log_fd, .events = POLLIN};
        if (sp->cand.log_fd >= 0)
            pf[np++] = (struct pollfd){.fd = sp->cand.log_fd, .events = POLLIN};
    }
    int wait = (int)(wake - now_ms());
    if (!e->zy && wait > 50)
        wait = 50; /* fresh mode: exits are found by waitpid */
    if (wait < 0)
        wait = 0;
    poll(pf, (nfds_t)np, wait);

    /* read and reap */
    collect_exits(e);
    for (int i = 0; i < n; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_RUNNING)
            continue;
        drain_result(sl);
        drain_log(e, &sl->judge, "judge");
        drain_log(e, &sl->cand, "candidate");
    }
    for (int i = 0; i < MAX_SPARES; i++) {
        struct slot *sp = &e->spares[i];
        if (sp->state != S_SPARE)
            continue;
        drain_log(e, &sp->judge, "spare judge");
        drain_log(e, &sp->cand, "spare candidate");
    }
    collect_exits(e);

    /* decide */
    double t = now_ms();
    for (int i = 0; i < n; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state != S_RUNNING)
            continue;
        if (sl->res_fd < 0 && sl->t_judge_done && !sl->released &&
            sl->res.n > 0)
            release_children(sl);
        if (sl->released && !(sl->judge.exited && sl->cand.exited) &&
            finish_early(e, sl, done, ctx))
            continue;
        int judge_done = sl->judge.exited && sl->res_fd < 0;
        if (t >= sl->deadline + KILL_GRACE_MS) {
            /* the clock of last resort: killed children whose exits never
             * arrive (stuck in the kernel, reaped elsewhere) do not hold the
             * slot, or the worker, forever */
            sl->timed_out |= sl->res_fd >= 0; /* no finished frame */
            kill_child(&sl->judge);
            kill_child(&sl->cand);
            drain_log(e, &sl->cand, "candidate");
            finish(e, sl, done, ctx);
            continue;
        }
        if (!judge_done && sl->res_fd < 0 &&
            t - sl->t_judge_done > KILL_GRACE_MS)
            kill_child(&sl->judge); /* frame delivered but the judge lingers */
        if (!judge_done && t >= sl->deadline) {
            sl->timed_out = 1;
            kill_child(&sl->judge);
            kill_child(&sl->cand);
            continue; /* exits arrive in the next step */
        }
        if (judge_done && !sl->cand.exited)
            kill_child(&sl->cand); /* the judge is done: so is the candidate */
        if (judge_done && sl->cand.exited) {
            drain_log(e, &sl->cand, "candidate");
            finish(e, sl, done, ctx);
        }
    }
    settle_dying(e);
    if (e->need_probe)
        settle_probe(e, done, ctx);
    grant_device(e);

    /* pairs still exiting count: a caller that stops at 0 leaves none */
    int busy = e->npending;
    for (int i = 0; i < n; i++)
        busy += e->slots[i].state != S_FREE;
    for (int i = 0; i < MAX_DYING; i++)
        busy += e->dying[i].state == S_DYING;
    return busy;
}

/* ---- setup ------------------------------------------------------------------
 */

static int restart_zygote(kg_engine *e, kg_err *err)
{
    /* tasks in flight die with the zygote: their results are infra errors,
     * found by the normal path (no frame, children gone) */
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state == S_RUNNING) {
            sl->judge.exited = sl->cand.exited = 1;
            close_fd(&sl->res_fd);
        }
    }
    for (int i = 0; i < MAX_DYING; i++) /* killed already: no report now */
        if (e->dying[i].state == S_DYING)
            e->dying[i].judge.exited = e->dying[i].cand.exited = 1;
    drop_spares(e); /* they die with the zygote */
    kg_zygote_stop(e->zy);
    e->zy = NULL;
    char dev[80], ahead[40];
    const char *env[4] = {
        "KGYM_SANDBOX_PROFILE={\"allow_wx\": true, \"allow_perf\": true}",
        NULL};
    int ne = 1;
    /* the zygote prepares what compile ahead's dry runs import (zygote.py) */
    snprintf(ahead, sizeof ahead, "KGYM_COMPILE_AHEAD=%s", compile_ahead(e));
    env[ne++] = ahead;
    if (e->cuda_env[0]) {
        pathf(dev, sizeof dev, "CUDA_VISIBLE_DEVICES=%s", e->cuda_env);
        env[ne++] = dev;
    }
    kg_zygote_cfg zc = {.python = e->python,
                        .pythonpath = e->pythonpath,
                        .sandbox_lib = e->cfg.no_sandbox ? "" : e->sandbox_lib,
                        .env = env,
                        .log_fd = e->cfg.verbose ? 2 : -1,
                        .ready_timeout_ms = 180000};
    return kg_zygote_start(&e->zy, &zc, err);
}

/* 1 if uid/gid nobody can search path (every directory on the way), as
 * the candidate's sandbox needs: checked in a child that switches uid. */
static int reachable_by_nobody(const char *path)
{
    pid_t p = fork();
    if (p < 0)
        return 1; /* cannot tell: let the candidate's error say it */
    if (p == 0) {
        if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
            _exit(2);
        _exit(access(path, X_OK) == 0 ? 0 : 1);
    }
    int st;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return 1;
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

/* A bare interpreter name ("python3") becomes the absolute path PATH gives:
 * the fresh-interpreter mode execs it with execve, which does not search. */
static int resolve_in_path(char *path, size_t n)
{
    if (strchr(path, '/'))
        return access(path, X_OK) == 0 ? 0 : -1;
    const char *p = getenv("PATH");
    char dir[PATH_MAX];
    while (p && *p) {
        size_t len = strcspn(p, ":");
        if (len > 0 && len < sizeof dir) {
            memcpy(dir, p, len);
            dir[len] = 0;
            char full[PATH_MAX];
            if (!pathf(full, sizeof full, "%s/%s", dir, path) &&
                access(full, X_OK) == 0)
                return pathf(path, n, "%s", full);
        }
        p += len + (p[len] == ':');
    }
    return -1;
}

static int find_python(kg_engine *e, kg_err *err)
{
    const char *env = getenv("KGYM_PYTHON");
    if (e->cfg.python) {
        pathf(e->python, sizeof e->python, "%s", e->cfg.python);
    } else if (env && *env) {
        pathf(e->python, sizeof e->python, "%s", env);
    } else {
        pathf(e->python, sizeof e->python, "%s/.venv/bin/python", e->root);
        if (access(e->python, X_OK) != 0) {
            char cmd[PATH_MAX + 32];
            pathf(cmd, sizeof cmd, "%s/scripts/find-python", e->root);
            FILE *f = popen(cmd, "r");
            if (!f || !fgets(e->python, sizeof e->python, f)) {
                if (f)
                    pclose(f);
                return kg_errf(err, KG_ENOTFOUND,
                               "no Python with torch found (set KGYM_PYTHON)");
            }
            pclose(f);
            e->python[strcspn(e->python, "\n")] = 0;
        }
    }
    if (resolve_in_path(e->python, sizeof e->python))
        return kg_errf(err, KG_ENOTFOUND,
                       "Python interpreter '%s' not found or not executable",
                       e->python);
    return 0;
}

int kg_engine_new(kg_engine **out, const kg_engine_cfg *cfg, kg_err *err)
{
    kg_engine *e = calloc(1, sizeof *e);
    if (!e)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    e->cfg = *cfg;
    if (e->cfg.concurrency < 1)
        e->cfg.concurrency = 1;
    if (e->cfg.concurrency > MAX_SLOTS)
        e->cfg.concurrency = MAX_SLOTS;
    if (e->cfg.stage < 0 || cfg->fresh)
        e->cfg.stage = 0; /* staged tasks wait in warm spares: zygote only */
    e->nslots = e->cfg.concurrency + e->cfg.stage;
    if (e->nslots > MAX_SLOTS)
        e->nslots = MAX_SLOTS;
    for (int i = 0; i < MAX_SLOTS; i++)
        slot_clear(&e->slots[i]);
    for (int i = 0; i < MAX_SPARES; i++)
        slot_clear(&e->spares[i]);
    for (int i = 0; i < MAX_DYING; i++)
        slot_clear(&e->dying[i]);
    int gpu = !strncmp(cfg->device, "cuda:", 5);
    e->prewarm = cfg->prewarm < 0    ? 0
                 : cfg->prewarm == 0 ? (gpu ? 2 * e->cfg.concurrency + 4
                                            : e->cfg.concurrency)
                                     : cfg->prewarm;
    if (e->prewarm > MAX_SPARES)
        e->prewarm = MAX_SPARES;
    e->idle_warm = cfg->idle_warm < 0    ? 0
                   : cfg->idle_warm == 0 ? e->prewarm
                                         : cfg->idle_warm;
    /* while tasks do not profile: concurrency + 3 (4 alone, 7 at 4-way).
     * Measured with the queue kept full, where every task uses a spare
     * and one more is made (H200, 16 distinct candidates, 4-way against
     * serial 19.0-19.6 s): 7 spares 13.5 s, 11: 15.4 s, 15: 17.7 s, 23:
     * 17.0-18.0 s. While spares are being made every task in flight does
     * its device work slower (which part of a pair's life does it is not
     * isolated yet: bench/diag/churn.py), so more of them than the tasks
     * need cost throughput. (Session 9's 6 x
     * concurrency - 1 was measured on a window that ended with the queue
     * running dry, where no spare was being made: bench/results/
     * 2026-12-01-gpu-h200-s10.txt.) Each pair holds about 2 GiB of device
     * memory (note_memory). The profiling default above is left as
     * measured before (CUPTI's start is seconds of CPU). */
    int noprof = e->cfg.concurrency + 3;
    if (noprof > MAX_SPARES)
        noprof = MAX_SPARES;
    e->spare_mem_cap = -1;
    e->mem_floor = 0.25;
    const char *mf = getenv("KGYM_SPARE_MEM_FLOOR");
    if (mf && *mf) {
        char *end;
        double v = strtod(mf, &end);
        if (*end || !(v >= 0 && v <= 1))
            fprintf(stderr,
                    "kgym worker: KGYM_SPARE_MEM_FLOOR must be a share from 0 "
                    "to 1, not '%s': using 0.25\n",
                    mf);
        else
            e->mem_floor = v;
    }
    if (gpu && cfg->prewarm == 0 && noprof != e->prewarm)
        e->prewarm_noprof = noprof;
    if (cfg->fresh)
        e->prewarm = e->idle_warm = e->prewarm_noprof = 0;
    if (strcmp(cfg->device, "cpu") &&
        (strncmp(cfg->device, "cuda:", 5) || !cfg->device[5] ||
         strspn(cfg->device + 5, "0123456789") != strlen(cfg->device + 5) ||
         strlen(cfg->device + 5) > 8)) {
        free(e);
        return kg_errf(err, KG_EINVAL, "device must be cpu or cuda:N, not '%s'",
                       cfg->device);
    }
    if (!strncmp(cfg->device, "cuda:", 5))
        snprintf(e->cuda_env, sizeof e->cuda_env, "%s", cfg->device + 5);
    snprintf(e->root, sizeof e->root, "%s", cfg->root ? cfg->root : ".");
    const char *tmp = cfg->tmp_base ? cfg->tmp_base : getenv("TMPDIR");
    snprintf(e->tmp_base, sizeof e->tmp_base, "%s", tmp && *tmp ? tmp : "/tmp");
    int bad = 0;
    if (cfg->cache_dir)
        bad |= pathf(e->cache_dir, sizeof e->cache_dir, "%s", cfg->cache_dir);
    else
        bad |= pathf(e->cache_dir, sizeof e->cache_dir, "%s/kgym-cache",
                     e->tmp_base);
    mkdir(e->cache_dir, 0755);
    bad |= pathf(e->pythonpath, sizeof e->pythonpath, "%s/harness", e->root);
    bad |= pathf(e->sandbox_lib, sizeof e->sandbox_lib,
                 "%s/build/libkgym_sandbox.so", e->root);
    bad |= pathf(e->lock_path, sizeof e->lock_path, "%s/kgym-device-%s.lock",
                 e->tmp_base, cfg->device);
    if (bad) {
        free(e);
        return kg_errf(err, KG_EINVAL, "paths too long");
    }
    for (char *p = strrchr(e->lock_path, '/') + 1; *p; p++)
        if (*p == ':')
            *p = '_';
    int rc = find_python(e, err);
    if (!rc && !cfg->no_sandbox && access(e->sandbox_lib, R_OK))
        rc = kg_errf(err, KG_ENOTFOUND, "sandbox library %s missing (run make)",
                     e->sandbox_lib);
    /* orphans of a task (daemonized grandchildren) come back to us */
    if (!rc)
        rc = kg_sandbox_become_subreaper(err);
    e->drop_uid = geteuid() == 0 && !cfg->no_sandbox;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0)
        e->mem_cap = (uint64_t)pages * (uint64_t)psz / 2;
    if (!rc && !cfg->no_sandbox) {
        kg_err cgerr;
        /* no_cgroups: e->cgroups stays empty, as on a host without them */
        if (!cfg->no_cgroups && kg_sandbox_cgroup_probe(&e->cgroups, &cgerr) &&
            cfg->verbose)
            fprintf(stderr, "kgym worker: %s\n",
                    kg_sandbox_cgroup_reason(&e->cgroups));
        if (!e->drop_uid)
            fprintf(stderr,
                    "kgym worker: not root: candidates run as this user "
                    "(they could read the judge's memory), without a private "
                    "/tmp, a per-task disk quota or a read-only root; run as "
                    "root for a uid switch and private mounts\n");
    }
    if (!rc) {
        /* per-role caches; the candidate's is shared by the candidate uids
         * through their group (uids_init) */
        char d[PATH_MAX + 32];
        snprintf(d, sizeof d, "%s/judge", e->cache_dir);
        mkdir(d, 0700);
        snprintf(d, sizeof d, "%s/candidate", e->cache_dir);
        if (e->drop_uid)
            rc = uids_init(e, err);
        if (!rc && e->drop_uid)
            rc = cand_cache_dir(d, err);
        else if (!rc)
            mkdir(d, 0700);
        /* the candidate (nobody) must reach its work dir and its cache:
         * a private TMPDIR (mode 0700, or a 0700 directory above it) would
         * fail every candidate with an error blamed on the candidate */
        if (!cfg->cache_dir)
            chmod(e->cache_dir, 0755); /* ours, made under the umask */
        if (!rc && e->drop_uid && !reachable_by_nobody(e->tmp_base))
            rc = kg_errf(err, KG_EINVAL,
                         "%s is not reachable by uid %d, which candidates "
                         "run as: make every directory on its path "
                         "searchable by others (chmod o+x) or set TMPDIR to "
                         "one that is",
                         e->tmp_base, NOBODY);
        /* and the code it imports: the harness and the interpreter's tree */
        char pydir[PATH_MAX];
        pathf(pydir, sizeof pydir, "%s", e->python);
        char *slash = strrchr(pydir, '/');
        if (slash)
            *slash = 0;
        if (!rc && e->drop_uid && !reachable_by_nobody(e->pythonpath))
            rc = kg_errf(err, KG_EINVAL,
                         "the harness %s is not reachable by uid %d, which "
                         "candidates run as: make the directories above it "
                         "searchable by others (chmod o+x)",
                         e->pythonpath, NOBODY);
        if (!rc && e->drop_uid && !reachable_by_nobody(pydir))
            rc = kg_errf(err, KG_EINVAL,
                         "the interpreter's directory %s is not reachable by "
                         "uid %d, which candidates run as (chmod o+x on its "
                         "parents, or a Python installed outside /root)",
                         pydir, NOBODY);
        if (!rc && e->drop_uid && !reachable_by_nobody(e->cache_dir))
            rc = kg_errf(err, KG_EINVAL,
                         "cache dir %s is not reachable by uid %d, which "
                         "candidates run as (chmod o+x on its parents)",
                         e->cache_dir, NOBODY);
    }
    if (!rc && cfg->fresh && !cfg->no_sandbox) {
        kg_sandbox_profile prof = {.allow_wx = 1, .allow_perf = 1};
        rc = kg_sandbox_filter_build(&prof, &e->filter, err);
    }
    if (!rc && !cfg->fresh)
        rc = restart_zygote(e, err);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* ---- cancellation (kgym worker, issue 6) --------------------------------
 */

int kg_engine_cancel(kg_engine *e, void *user)
{
    for (struct pending **pp = &e->head, *prev = NULL; *pp;
         prev = *pp, pp = &(*pp)->next) {
        struct pending *p = *pp;
        if (p->user != user)
            continue;
        *pp = p->next;
        if (e->tail == p)
            e->tail = prev;
        e->npending--;
        json_decref(p->task);
        free(p);
        return 1;
    }
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state == S_FREE || sl->user != user)
            continue;
        /* as kg_engine_free does for one slot: the zygote's later exit
         * reports name pids no slot holds any more, and are ignored */
        if (sl->state == S_RUNNING) {
            kill_child(&sl->judge);
            kill_child(&sl->cand);
        }
        free_slot(e, sl);
        return 1;
    }
    return 0;
}

const json_t *kg_engine_info(const kg_engine *e)
{
    return e->zy ? kg_zygote_info(e->zy) : NULL;
}

void kg_engine_free(kg_engine *e)
{
    if (!e)
        return;
    for (int i = 0; i < MAX_SLOTS; i++) {
        struct slot *sl = &e->slots[i];
        if (sl->state == S_RUNNING) {
            kill_child(&sl->judge);
            kill_child(&sl->cand);
        }
        if (sl->state != S_FREE)
            free_slot(e, sl);
    }
    while (e->head) {
        struct pending *p = e->head;
        e->head = p->next;
        json_decref(p->task);
        free(p);
    }
    for (int i = 0; i < MAX_DYING; i++) {
        struct slot *dy = &e->dying[i];
        if (dy->state != S_DYING)
            continue;
        kill_child(&dy->judge);
        kill_child(&dy->cand);
        free_slot(e, dy);
    }
    drop_spares(e);
    retry_stale(e, 10000);
    kg_zygote_stop(e->zy);
    kg_sandbox_filter_free(&e->filter);
    free(e);
}
