/*
 * engine.h - the evaluation engine of one worker: one device, a warm
 * zygote, and up to `concurrency` tasks in flight, each as a sandboxed
 * judge child and a sandboxed candidate child.
 *
 * The engine is the trusted side: it owns the result pipe, the clock of
 * last resort and the kill switch. A task's result is the judge's framed
 * result when the engine saw it complete; otherwise the engine writes the
 * verdict itself (timeout, runtime_error, infra_error). Both `kgym eval`
 * and `kgym worker` drive this same engine.
 */
#ifndef KGYM_ENGINE_H
#define KGYM_ENGINE_H

#include <jansson.h>

#include "kgym/kgym.h"

typedef struct kg_engine kg_engine;

typedef struct kg_engine_cfg {
    const char *device; /* "cpu" or "cuda:N" */
    int concurrency;    /* tasks in flight (>= 1) */
    const char *python; /* interpreter with torch (NULL: scripts/find-python) */
    const char *root;   /* kgym tree holding harness/ and build/ */
    const char
        *tmp_base; /* parent of private work dirs (NULL: $TMPDIR or /tmp) */
    const char
        *cache_dir; /* extension/Triton caches (NULL: <tmp_base>/kgym-cache) */
    int fresh;      /* 1: a fresh interpreter per child, no zygote */
    int no_sandbox; /* 1: skip namespaces/seccomp/rlimits (debugging) */
    int no_cgroups; /* 1: no per-task cgroup even where one could be made
                     * (tests: the process-group kill shown on its own) */
    const char *worker_id; /* reported in results */
    /* Warm spares: judge+candidate pairs forked before their task, which
     * initialise CUDA, cuBLAS and the profiler while other tasks run, then
     * wait; a task takes a ready pair instead of forking one. Each pair is
     * still used for one task only. prewarm: most spares (-1: none, 0:
     * default = concurrency; on a GPU, where a pair's start-up takes
     * seconds, concurrency + 3, or 2 x concurrency + 4 while tasks
     * profile in a profiler's process with torch's profiler, whose start
     * alone is over 4 s: eng_profile_child_wanted; at most 32). idle_warm: spares kept when no task is queued (-1: none,
     * 0: default = prewarm); `kgym eval` keeps none beyond its queue. Zygote
     * mode only. */
    int prewarm;
    int idle_warm;
    int stage; /* tasks started beyond concurrency in warm spares: they set
                * up and compile (no device work of the harness's), then
                * wait for one of the concurrency device slots (0: none) */
    int verbose;           /* log children's output to stderr */
    /* Tuning knobs (`--cpu-threads`, `--compile-ahead`, `--spare-mem-floor`
     * of kgym eval, worker and serve --workers); a zeroed field is the
     * default, and kg_engine_new refuses a value out of range.
     * cpu_threads: threads of torch's CPU pool in each child (0: the
     * machine's CPUs / (2 x concurrency), at least 1; at most
     * KG_ENGINE_MAX_CPU_THREADS). compile_ahead: whether Triton candidates
     * compile their kernels ahead (KG_AHEAD_AUTO: on for a GPU engine with
     * concurrency > 1 or stage > 0). spare_mem_floor: the least share of
     * the device's memory (the host's on a cpu engine) a warm spare's
     * start-up may leave free before the engine keeps fewer spares (0: the
     * default KG_ENGINE_MEM_FLOOR; < 0: no floor; at most 1). */
    int cpu_threads;
    int compile_ahead;
    double spare_mem_floor;
} kg_engine_cfg;

enum { KG_AHEAD_AUTO = 0, KG_AHEAD_ON = 1, KG_AHEAD_OFF = 2 };
#define KG_ENGINE_MAX_CPU_THREADS 1024
#define KG_ENGINE_MEM_FLOOR 0.25

/* Called once per finished task with its result (borrowed: copy or
 * json_incref to keep it) and the pointer given to kg_engine_submit. */
typedef void (*kg_engine_done_fn)(void *ctx, void *user, json_t *result);

/* Creates an engine and starts its zygote. *out owned by the caller. */
int kg_engine_new(kg_engine **out, const kg_engine_cfg *cfg, kg_err *err);

/* Queues a normalized request (kg_request_normalize); takes a reference. */
int kg_engine_submit(kg_engine *e, json_t *task, void *user, kg_err *err);

/*
 * Starts queued tasks, waits up to timeout_ms for events and finishes what
 * is done, calling done() for each (a result goes out once its frame is
 * in, before its pair's exits: see finish_early). Returns the number of
 * tasks queued or in flight after the step, plus the pairs whose result is
 * out but whose exits are not yet seen, or a negative code.
 */
int kg_engine_step(kg_engine *e, int timeout_ms, kg_engine_done_fn done,
                   void *ctx, kg_err *err);

/*
 * Stops the task submitted with `user` (the same pointer as given to
 * kg_engine_submit): a queued one is dropped, a running one has its judge
 * and candidate killed with their process groups. done() is not called for
 * it. Returns 1 when the task was found, 0 when not (already finished).
 * Used by `kgym worker` when the server says a task was cancelled.
 */
int kg_engine_cancel(kg_engine *e, void *user);

/* Admission by memory: tells the engine a problem's footprint (bytes, the
 * memory.footprint_bytes a judge reported for a task of this reference
 * code) and the device's memory (memory.device_total_bytes; 0: unknown),
 * as a finished task of it would. Tasks of a known problem then start only
 * while MEM_FACTOR x their footprints fit the device together (or alone);
 * one whose footprint alone is more than the device gets problem_error
 * naming both sizes. */
void kg_engine_note_footprint(kg_engine *e, const char *reference_code,
                              double bytes, double device_total);

/* The zygote's ready message (torch/triton versions, import time), or
 * NULL in fresh mode. */
const json_t *kg_engine_info(const kg_engine *e);

/* Kills everything in flight (their results are dropped) and frees e. */
void kg_engine_free(kg_engine *e);

#endif
