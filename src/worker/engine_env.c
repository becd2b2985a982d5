/* engine_env.c - what a child is given: its environment (nothing of the
 * worker's but what the runtime needs, plus kgym's own settings), a judge's
 * task, and the Python interpreter that runs them all. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/request.h"
#include "worker/engine_impl.h"

/* snprintf for paths; a truncated path is an error, not a shorter path. */
int eng_pathf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return k < 0 || (size_t)k >= n ? KG_EINVAL : 0;
}

/* The device as a child names it: the zygote and its children see only
 * the worker's GPU (CUDA_VISIBLE_DEVICES=N), which is their cuda:0. The
 * result still reports the worker's own name for it (eng_stamp). */
const char *eng_child_device(const kg_engine *e)
{
    return e->cuda_env[0] ? "cuda:0" : e->cfg.device;
}

/* Threads of torch's CPU pool in each child (KGYM_CPU_THREADS in its
 * environment, applied by kgym_harness.role.apply_cpu_threads): cfg's
 * cpu_threads (--cpu-threads) when set, else the machine's CPUs shared
 * among the processes that may compute at once, the task's judge and
 * candidate times --concurrency. They do not take turns even on the CPU: an
 * OpenMP pool spins after every parallel region, and pools that outnumber
 * the CPUs slow each other down by orders of magnitude (docs/worker.md,
 * "What the engine guarantees", has the measurements). */
int eng_cpu_threads(const kg_engine *e)
{
    if (e->cfg.cpu_threads > 0)
        return e->cfg.cpu_threads;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long share = e->cfg.concurrency * 2L;
    long n = ncpu > 0 && share > 0 ? ncpu / share : 1;
    return n < 1 ? 1 : (int)n;
}

/* Whether Triton candidates compile ahead (KGYM_COMPILE_AHEAD in the
 * zygote's and the judge's environment, harness/kgym_harness/ahead.py):
 * cfg's compile_ahead (--compile-ahead) when on or off, else on for a GPU
 * engine that runs several tasks at once or stages them. There a first call
 * that compiles would hold the device lock shared for the compile and every
 * timing phase would wait for it; alone, the dry run's fork only adds to
 * each task (docs/worker.md). */
const char *eng_compile_ahead(const kg_engine *e)
{
    if (e->cfg.compile_ahead != KG_AHEAD_AUTO)
        return e->cfg.compile_ahead == KG_AHEAD_ON ? "1" : "0";
    return e->cuda_env[0] && (e->cfg.concurrency > 1 || e->cfg.stage > 0) ? "1"
                                                                          : "0";
}

/* A CUDA setting each child gets: the worker's own value of name when it
 * has one, else gpu_default on a GPU; NULL leaves CUDA's default (no GPU).
 * CUDA_DEVICE_MAX_CONNECTIONS, 1: hardware work queues per context; the
 * driver makes contexts (two per task) more than twice as fast with one
 * as with the default eight (docs/worker.md), and a candidate's kernels on
 * different streams then share one queue and do not overlap.
 * CUDA_SCALE_LAUNCH_QUEUES, 4x: the launch queue's depth; a level-3 RNN
 * queues about 1,000 launches per forward (VanillaRNNHidden), about the
 * default depth, and a full queue inside the timed call's lead has the
 * host launch in lockstep with the device, so the sample holds the
 * launching process's speed (docs/harness-notes.md, "The fitted lead"). */
static const struct {
    const char *name, *gpu_default;
} cuda_settings[] = {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
                     {"CUDA_SCALE_LAUNCH_QUEUES", "4x"}};

static const char *cuda_setting(const kg_engine *e, const char *name,
                                const char *gpu_default)
{
    const char *v = getenv(name);
    if (v && *v)
        return v;
    return e->cuda_env[0] ? gpu_default : NULL;
}

/* Copies the variables named in names[] (NULL-terminated) that the worker
 * has into env. */
static void pass_env(json_t *env, const char *const *names)
{
    for (const char *const *p = names; *p; p++) {
        const char *v = getenv(*p);
        if (v)
            json_object_set_new(env, *p, json_string(v));
    }
}

/* The judge's switches, from the worker's environment: the reference-time
 * cache, the device lock's trace (diagnosis), the timing phase's memory
 * reserve, the spares' yield to timing phases and their preload (each on
 * unless "0"); and, from the engine's config, compile ahead. The device
 * lock is not here: it comes in the judge's start message (eng_judge_task,
 * spawn_request in engine_spawn.c). */
static void judge_env(kg_engine *e, json_t *env)
{
    static const char *const pass[] = {
        "KGYM_REFTIME_CACHE", "KGYM_LOCK_TRACE",    "KGYM_TIMING_RESERVE",
        "KGYM_SPARE_YIELD",   "KGYM_SPARE_PRELOAD", NULL};
    pass_env(env, pass);
    json_object_set_new(env, "KGYM_COMPILE_AHEAD",
                        json_string(eng_compile_ahead(e)));
}

/* Whether a candidate on device for a task that profiles forks its profiler process
 * (harness/kgym_harness/profproc.py): KGYM_PROFILE_PROC "1" on a GPU, "0"
 * never, "cpu" also on the CPU (where it only tests that process), unset
 * ("auto") on a GPU with torch's profiler only. profproc.child_wanted is
 * the launcher's twin. */
int eng_profile_child_wanted(const char *device)
{
    const char *v = getenv("KGYM_PROFILE_PROC");
    const char *prof = getenv("KGYM_PROFILER");
    if (v && !strcmp(v, "0"))
        return 0;
    if (v && !strcmp(v, "cpu"))
        return 1;
    if (strncmp(device, "cuda", 4))
        return 0;
    /* "auto" (unset): only for torch's profiler, whose first start costs
     * seconds; CUPTI's activity API starts in a millisecond in the
     * candidate, after its timing (profproc.child_wanted: the same rule) */
    return (v && !strcmp(v, "1")) || (prof && !strcmp(prof, "torch"));
}

/* The environment a child of role starts with (new reference). */
json_t *eng_child_env(kg_engine *e, const char *role, const struct child *c,
                      int interp, int prof)
{
    static const char *const pass[] = {
        "PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "LANG", "CC",
        "CXX", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS", "TRITON_INTERPRET", "TRITON_PTXAS_PATH",
        /* the channel's CUDA IPC regions (on unless "0",
         * harness/kgym_harness/devregion.py): both roles */
        "KGYM_CUDA_IPC",
        /* the device profiler, cupti or torch (profiling.backend) */
        "KGYM_PROFILER",
        /* the timed calls' fitted lead (on unless "0", lead.py): both
         * roles, an A/B switch for bench/kernelbench/lead.sh */
        "KGYM_LEAD_FIT", NULL};
    json_t *env = json_object();
    pass_env(env, pass);
    for (size_t i = 0; i < sizeof cuda_settings / sizeof cuda_settings[0]; i++) {
        const char *v = cuda_setting(e, cuda_settings[i].name,
                                     cuda_settings[i].gpu_default);
        if (v)
            json_object_set_new(env, cuda_settings[i].name, json_string(v));
    }
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
    json_object_set_new(env, "KGYM_DEVICE", json_string(eng_child_device(e)));
    /* a GPU worker's children see its one device; a CPU worker's see none:
     * a cpu evaluation must not compute on a GPU of the host, and CUDA's
     * start-up under the CPU sandbox's address-space limit fails */
    json_object_set_new(env, "CUDA_VISIBLE_DEVICES",
                        json_string(e->cuda_env[0] ? e->cuda_env : ""));
    if (interp)
        json_object_set_new(env, "TRITON_INTERPRET", json_string("1"));
    char threads[24];
    snprintf(threads, sizeof threads, "%d", eng_cpu_threads(e));
    json_object_set_new(env, "KGYM_CPU_THREADS", json_string(threads));
    if (!strcmp(role, "judge"))
        judge_env(e, env);
    else if (prof && eng_profile_child_wanted(e->cfg.device))
        json_object_set_new(env, "KGYM_PROFILE_CHILD", json_string("1"));
    return env;
}

/* Triton's interpreter: a triton task on a cpu worker. */
int eng_task_interp(const kg_engine *e, const json_t *task)
{
    kg_request_view req;
    kg_request_view_of(task, &req);
    return !strcmp(e->cfg.device, "cpu") && !strcmp(req.backend, "triton");
}

/* The task profiles (enable_profiling, true unless false). */
int eng_task_prof(const json_t *task)
{
    kg_request_view req;
    kg_request_view_of(task, &req);
    return req.enable_profiling;
}

/* The task as the judge gets it: the request plus the device, the gate (a
 * staged task), the worker's deadline and, for a judge forked with its task,
 * the device lock. A warm spare's judge was given the lock in its start
 * message, before it had a task (spawn_request in engine_spawn.c), and puts
 * it into its task itself: the lock reaches each judge once. New
 * reference. */
json_t *eng_judge_task(kg_engine *e, const struct slot *sl)
{
    json_t *t = json_deep_copy(sl->task);
    if (!sl->warm)
        json_object_set_new(t, "device_lock", json_string(e->lock_path));
    else
        json_object_del(t, "device_lock");
    json_object_set_new(t, "device", json_string(eng_child_device(e)));
    if (sl->state == S_STAGED)
        json_object_set_new(t, "device_gate", json_true());
    json_object_set_new(t, "result_notes", json_true()); /* eng_take_notes */
    /* the judge's own clock must aim at the worker's deadline (absolute
     * Unix seconds), not at its start: a fresh interpreter's start-up
     * would otherwise eat the margin, and the worker's kill would come
     * before the judge's own timeout verdict (which names the phase) */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    json_object_set_new(t, "deadline",
                        json_real((double)rt.tv_sec + rt.tv_nsec / 1e9 +
                                  (sl->deadline - kg_now_ms()) / 1e3));
    return t;
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
            if (!eng_pathf(full, sizeof full, "%s/%s", dir, path) &&
                access(full, X_OK) == 0)
                return eng_pathf(path, n, "%s", full);
        }
        p += len + (p[len] == ':');
    }
    return -1;
}

/* Sets e->python: cfg.python, else KGYM_PYTHON, else <root>/.venv's, else
 * what scripts/find-python prints (the first python3 that has torch,
 * found without importing it: this is on every cold start's path). */
int eng_find_python(kg_engine *e, kg_err *err)
{
    const char *env = getenv("KGYM_PYTHON");
    if (e->cfg.python) {
        eng_pathf(e->python, sizeof e->python, "%s", e->cfg.python);
    } else if (env && *env) {
        eng_pathf(e->python, sizeof e->python, "%s", env);
    } else {
        eng_pathf(e->python, sizeof e->python, "%s/.venv/bin/python", e->root);
        if (access(e->python, X_OK) != 0) {
            char cmd[PATH_MAX + 32];
            eng_pathf(cmd, sizeof cmd, "%s/scripts/find-python", e->root);
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
