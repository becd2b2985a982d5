/*
 * supervise.h - kgym serve's local workers (`--workers auto|N`): which
 * devices to use, and a supervisor that starts one `kgym worker` process
 * per device, restarts it with backoff when it dies, gives up on one that
 * keeps crashing, and stops them all when the server stops.
 *
 * The supervisor knows processes, not the store: when a worker exits it
 * calls the on_exit hook with the worker's id so the server can release at
 * once what that worker held (kgym serve unregisters it).
 */
#ifndef KGYM_SERVER_SUPERVISE_H
#define KGYM_SERVER_SUPERVISE_H

#include <stddef.h>

#include "kgym/kgym.h"

#define KG_SUPER_MAX 64      /* local workers at most */
#define KG_SUPER_DEVICE 80   /* a device name, "cuda:GPU-<uuid>" included */
#define KG_SUPER_ID 101      /* a worker id and its NUL */
#define KG_SUPER_MAX_ARGS 8  /* flags added to each worker's command line */

/*
 * The GPUs this process may use, found without initialising CUDA:
 * `count` is the number of GPUs the driver shows (kg_super_gpu_count), and
 * cvd the value of CUDA_VISIBLE_DEVICES (NULL: unset). As CUDA reads it, the
 * list stops at the first entry that is not a valid index below count or a
 * GPU-/MIG- UUID; an empty value means no GPU. Writes "cuda:<entry>" into
 * out[0..max-1] and returns how many. Pure (the unit tests' entry point).
 */
int kg_super_gpu_devices(const char *cvd, int count,
                         char out[][KG_SUPER_DEVICE], int max);

/* GPUs the NVIDIA driver shows: entries of /proc/driver/nvidia/gpus, else
 * /dev/nvidia<N> nodes. 0 when there is no driver. */
int kg_super_gpu_count(void);

/* Cpu workers `--workers auto` starts on a machine without a GPU:
 * min(4, usable CPUs / 2), at least 1. */
int kg_super_auto_cpu_workers(void);

/*
 * The devices for `--workers spec` ("auto" or a count 1..KG_SUPER_MAX):
 * auto = every visible GPU, else kg_super_auto_cpu_workers() cpu workers;
 * N = the first N visible GPUs (more than there are is an error), or N cpu
 * workers when there is no GPU. Cpu workers are "cpu:0", "cpu:1"...
 * Returns the number of devices written to out, or a negative KG_E* code.
 */
int kg_super_devices(const char *spec, char out[][KG_SUPER_DEVICE], int max,
                     kg_err *err);

typedef struct kg_super_cfg {
    const char *exe;        /* the kgym binary */
    const char *server_url; /* what the workers connect to */
    /* the worker token, handed over a pipe (`--token-fd`), or NULL */
    const char *token;
    const char *token_file; /* else a token file (`--token-file`), or NULL */
    int n;                  /* workers, one per device */
    const char (*devices)[KG_SUPER_DEVICE];
    /* ids are <id_prefix><device>-<start number>; at most 60 chars */
    const char *id_prefix;
    /* stop: SIGTERM, then SIGKILL after grace_ms; the workers' drain
     * timeout is set a little below it (0: 10 s) */
    int grace_ms;
    const char *python; /* passed as --python when set */
    /* more flags for each worker's command line (kgym serve's
     * --cpu-threads N...), at most KG_SUPER_MAX_ARGS strings */
    const char *const *worker_args;
    int n_worker_args;
    /* called from the supervisor's thread after a worker exited */
    void (*on_exit)(void *ctx, const char *worker_id);
    void *ctx;
    /* restart policy (0: the default in brackets): the first restart after
     * backoff_min_ms [1000], doubling per fast crash up to backoff_max_ms
     * [30000]; a run shorter than stable_ms [30000] is a fast crash, and
     * after max_fast [5] fast crashes in a row the worker is not restarted
     * again. An exit with status 2 (bad usage: it would fail the same way
     * again) is given up at once. */
    int backoff_min_ms, backoff_max_ms, stable_ms, max_fast;
} kg_super_cfg;

/* What the supervisor sees, for /health and /metrics. */
typedef struct kg_super_stats {
    int configured; /* workers it was asked for */
    int running;    /* processes alive now */
    int given_up;   /* workers it stopped restarting */
    long long restarts;
} kg_super_stats;

typedef struct kg_super kg_super;

/*
 * Makes a supervisor that starts nothing yet (its stats already show the
 * configured workers): cfg and the strings it points to are copied;
 * cfg->server_url may be NULL until kg_super_run. *out is the caller's,
 * released with kg_super_free.
 */
int kg_super_new(kg_super **out, const kg_super_cfg *cfg, kg_err *err);

/*
 * Starts the workers against server_url (NULL: cfg's), one line each on
 * stdout (device, pid, id), and the thread that watches them. Once only.
 */
int kg_super_run(kg_super *s, const char *server_url, kg_err *err);

/* kg_super_new, then kg_super_run with cfg->server_url. */
int kg_super_start(kg_super **out, const kg_super_cfg *cfg, kg_err *err);

/* Thread-safe. s may be NULL (all zero). */
void kg_super_stats_get(kg_super *s, kg_super_stats *out);

/*
 * Stops every worker (SIGTERM, SIGKILL to its process group after the
 * grace period) and waits for them. The server must still answer
 * meanwhile, so the workers can post their last results and unregister.
 * Stats stay readable until kg_super_free. NULL is fine.
 */
void kg_super_stop(kg_super *s);

/* Frees s (stopping it first if needed). NULL is fine. */
void kg_super_free(kg_super *s);

#endif
