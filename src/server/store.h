/*
 * store.h - the persistent task store of `kgym serve`.
 *
 * One API, two implementations behind a vtable: embedded SQLite
 * (store_sqlite.c, the default, one machine) and Redis (store_redis.c,
 * workers on several machines). Both pass the same test suite
 * (tests/unit/test_store.c). docs/store.md describes the data layout and
 * the durability each one gives.
 *
 * Conventions
 * - Every function returns 0 (or 1 where noted) or a negative KG_E* code
 *   with a one-line message in err (err may be NULL).
 * - KG_EUNAVAIL: the backend cannot be reached (Redis down, timed out
 *   after ~1 s). The caller answers 503. The store reconnects by itself on
 *   a later call. A KG_EUNAVAIL write may or may not have been applied
 *   (the reply was lost); every write is idempotent by task id, so the
 *   client may retry.
 * - Thread safety: a kg_store is safe for concurrent use by any number of
 *   threads (SQLite: one writer connection with group commit, so writes
 *   from many threads share commits and fsyncs, plus a pool of reader
 *   connections; Redis: a pool of hiredis connections, one per call in
 *   flight). kg_store_close must not race with other calls.
 * - Times are milliseconds since the Unix epoch (int64_t), 0 = unset.
 *   SQLite uses the process's clock, Redis the Redis server's (TIME), so
 *   every machine sharing one Redis agrees on lease deadlines.
 * - Ownership: nothing returned borrows from the store. Structs filled by
 *   the store own their json_t members; release them with the matching
 *   *_free (which does not free the struct itself).
 * - Durability: a write that returned 0 is on disk (SQLite: WAL,
 *   synchronous=FULL by default; Redis: AOF, whatever appendfsync the
 *   server runs with: `always` loses nothing acknowledged, `everysec` up to
 *   about one second of writes if the machine (not just redis-server)
 *   dies). See docs/store.md for the measurements.
 */
#ifndef KGYM_STORE_H
#define KGYM_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/request.h"
#include "kgym/kgym.h"

#define KG_MAX_WORKER_ID 100 /* same character set as a task id */
#define KG_MAX_DEVICE 128
#define KG_MAX_HOST 255

/* Scheduling classes; lower value leases first. */
enum kg_priority { KG_PRIO_HIGH = 0, KG_PRIO_NORMAL = 1, KG_PRIO_LOW = 2 };
#define KG_NPRIO 3

/* Task lifecycle (docs/design.md's `status`). */
enum kg_task_status {
    KG_TASK_PENDING = 0,
    KG_TASK_RUNNING = 1,
    KG_TASK_COMPLETED = 2,
    KG_TASK_FAILED = 3,
    KG_TASK_CANCELLED = 4,
};
#define KG_NSTATUS 5

/* Verdicts counted by kg_store_counts (docs/design.md's result object). */
enum kg_verdict {
    KG_VERDICT_PASS = 0,
    KG_VERDICT_MISMATCH,
    KG_VERDICT_COMPILE_ERROR,
    KG_VERDICT_RUNTIME_ERROR,
    KG_VERDICT_TIMEOUT,
    KG_VERDICT_HACKED,
    KG_VERDICT_INFRA_ERROR,
    KG_VERDICT_OTHER, /* missing or unknown verdict */
    /* the reference (problem) failed, not the candidate (docs/harness.md);
     * after OTHER: the values are stored, an old store's 7 stays "other" */
    KG_VERDICT_PROBLEM_ERROR,
};
#define KG_NVERDICT 9

/* Static names ("high", "pending", "pass"...); "?" when out of range. */
const char *kg_priority_name(int prio);
const char *kg_task_status_name(int status);
const char *kg_verdict_name(int verdict);
/* Name -> value; KG_EINVAL (message names the value) when unknown. */
int kg_priority_parse(const char *name, int *prio, kg_err *err);
/* Verdict name -> enum kg_verdict; KG_VERDICT_OTHER when unknown/NULL. */
int kg_verdict_parse(const char *name);

/* Store-wide settings, fixed at open. */
typedef struct kg_store_opts {
    /*
     * A lease lasts lease_ms after kg_store_lease and after each
     * kg_store_worker_heartbeat of its holder. One value per store: Redis
     * measures expiry as the idle time of the stream entry (XAUTOCLAIM's
     * min-idle-time).
     */
    int64_t lease_ms;
    /* A worker without a heartbeat for worker_ttl_ms is dead. */
    int64_t worker_ttl_ms;
    /*
     * SQLite only: 1 = synchronous=FULL (default; a commit survives power
     * loss), 0 = NORMAL (survives kill -9 of kgym, not of the machine).
     * Also settable in the URL: sqlite:PATH?sync=normal.
     */
    int sqlite_sync_full;
    /*
     * Connections kept for concurrent callers (default 64, one per store
     * thread of kgym serve's HTTP layer: a Redis call holds its connection
     * while Redis fsyncs, and Redis shares one fsync among the calls it
     * has at once). Redis connects them as they are first needed; SQLite
     * opens min(pool_size, 16) readers (reads take microseconds).
     */
    int pool_size;
} kg_store_opts;

#define KG_STORE_DEFAULT_LEASE_MS 60000
#define KG_STORE_DEFAULT_WORKER_TTL_MS 30000

/* Fills the defaults above. */
void kg_store_opts_default(kg_store_opts *o);

typedef struct kg_store kg_store;

/*
 * Opens (creating if needed) the store named by url:
 *   sqlite:PATH[?sync=full|normal]   a database file (its directory must
 *                                    exist); the caller picks the default
 *                                    path under its data dir
 *   redis://HOST:PORT[/DB]           a Redis server (>= 6.2), DB default 0
 * opts may be NULL (defaults). On success *out is the caller's, released
 * with kg_store_close. Redis: fails with KG_EUNAVAIL when the server is
 * not reachable at open.
 */
int kg_store_open(kg_store **out, const char *url, const kg_store_opts *opts,
                  kg_err *err);
void kg_store_close(kg_store *s);

/* "sqlite" or "redis". */
const char *kg_store_backend(const kg_store *s);

/*
 * Deferred durability (sqldb.h's kg_sqldb_defer_*): 1 when s's writes can
 * return before their fsync on a thread between kg_store_defer_begin and
 * kg_store_defer_end, which calls done_fn once they are durable or lost
 * (SQLite with group commit); 0 when writes always wait (Redis: a command
 * returns once Redis fsynced it).
 */
typedef void (*kg_store_done_fn)(void *arg, int rc, const char *msg);
int kg_store_defers(const kg_store *s);
void kg_store_defer_begin(void);
int kg_store_defer_pending(void);
int kg_store_defer_blocked(void);
int kg_store_defer_end(kg_store_done_fn done_fn, void *arg);

/*
 * One line for the server's start-up log: backend, place, durability mode
 * (e.g. "redis 127.0.0.1:6379/0, redis 7.0.15, appendonly=yes
 * appendfsync=always"). Writes at most size bytes into buf.
 */
int kg_store_describe(kg_store *s, char *buf, size_t size, kg_err *err);

/* ---- tasks ---- */

/* A task as stored. Free the members with kg_task_free. */
typedef struct kg_task {
    char id[KG_MAX_TASK_ID + 1];
    int priority;       /* enum kg_priority */
    int status;         /* enum kg_task_status */
    char cache_key[65]; /* "" when none */
    json_t *request;    /* normalized request; NULL unless asked for */
    char *request_text; /* kg_store_lease_text: the request as stored,
                           compact JSON (malloc'd, NUL-terminated) */
    json_t *result;     /* result object; NULL when none or not asked */
    int attempts;       /* leases handed out so far */
    char worker[KG_MAX_WORKER_ID + 1];       /* holder while running, else the
                                                last holder ("" if never leased) */
    char avoid_worker[KG_MAX_WORKER_ID + 1]; /* see kg_store_retry */
    int64_t submitted_ms;                    /* accepted */
    int64_t started_ms;                      /* last lease */
    int64_t finished_ms;       /* completed, failed or cancelled */
    int64_t lease_deadline_ms; /* while running */
} kg_task;

/* Releases t->request, t->request_text and t->result (not t); t may be
 * NULL. */
void kg_task_free(kg_task *t);

/* What kg_store_get fills besides the scalar fields. */
#define KG_GET_REQUEST 1u
#define KG_GET_RESULT 2u
#define KG_GET_REQUEST_TEXT 4u /* kg_store_lease_text only */

/* One submission. Borrowed by the store for the duration of the call. */
typedef struct kg_submit {
    const char *id;        /* kg_task_id_valid */
    int priority;          /* enum kg_priority */
    const json_t *request; /* normalized request (kg_request_normalize) */
    const char *cache_key; /* 64 hex chars, or NULL */
    /*
     * 1: an existing task that is completed, failed or cancelled is reset
     * to pending with this request (force_refresh). A pending or running
     * task is never replaced.
     */
    int replace_finished;
} kg_submit;

/*
 * Accepts a task as pending, durably (see the top). Returns 0 when the
 * task was created (or replaced), 1 when a task with that id already
 * exists and was left as it is (the caller reads it with kg_store_get).
 */
int kg_store_submit(kg_store *s, const kg_submit *t, kg_err *err);

/*
 * n submissions in one durable, all-or-nothing write. created[i] (caller's
 * array of n) gets 0 or 1 as kg_store_submit would return. Ids within one
 * batch must be distinct (KG_EINVAL).
 */
int kg_store_submit_batch(kg_store *s, const kg_submit *t, size_t n,
                          int *created, kg_err *err);

/*
 * kg_store_submit_batch with the result cache in front: a task with a
 * cache_key and replace_finished 0 whose key the cache holds, and whose
 * id names no task, is answered from the cache instead: created[i] = 2,
 * cached[i] = that result (caller owns; NULL for the others) and nothing
 * is written for it. A task whose id exists is submitted as usual
 * (created[i] = 1), so a cached answer never hides a task the client
 * submitted. The others are submitted in one all-or-nothing write.
 * cached is the caller's array of n. On error every cached[i] is NULL.
 * Redis does the lookups and the submission in one script (one round
 * trip and, under appendfsync always, one wait for the AOF's fsync
 * instead of two); SQLite reads the cache, then writes.
 */
int kg_store_submit_batch_cached(kg_store *s, const kg_submit *t, size_t n,
                                 int *created, json_t **cached, kg_err *err);

/* The same for one task: returns 0, 1 or 2 (*cached set) as created. */
int kg_store_submit_cached(kg_store *s, const kg_submit *t, json_t **cached,
                           kg_err *err);

/*
 * Reads task id into *out (the caller's struct; members per `what`, a mask
 * of KG_GET_*). KG_ENOTFOUND when there is no such task. On success the
 * caller releases *out with kg_task_free; on error *out holds no memory.
 */
int kg_store_get(kg_store *s, const char *id, unsigned what, kg_task *out,
                 kg_err *err);

/*
 * The status of each of n tasks at once (SQLite: one read transaction;
 * Redis: one round trip), for a poll of many: status[i] (the caller's
 * array of n) gets its enum kg_task_status, or -1 when there is no such
 * task. Nothing else is read.
 */
int kg_store_status_many(kg_store *s, const char *const *ids, size_t n,
                         int *status, kg_err *err);

/*
 * Atomically hands the highest-priority, oldest pending task to worker_id
 * for lease_ms (store option): status running, attempts + 1, deadline set.
 * A task whose avoid_worker is worker_id is skipped while its avoidance
 * lasts (kg_store_retry). Returns 1 and fills *out (request included; the
 * caller releases it with kg_task_free) when a task was leased, 0 when
 * there is nothing to lease. KG_ENOTFOUND: worker_id is not registered
 * (it should register again). Leasing counts as a heartbeat.
 */
int kg_store_lease(kg_store *s, const char *worker_id, kg_task *out,
                   kg_err *err);

/*
 * kg_store_lease, but the request comes as the JSON text the store holds
 * (out->request_text) instead of parsed (out->request NULL): the HTTP
 * layer puts it into the lease reply as it is, without parsing and
 * printing it again.
 */
int kg_store_lease_text(kg_store *s, const char *worker_id, kg_task *out,
                        kg_err *err);

/*
 * The final result of task id from its lease holder: status `status`
 * (KG_TASK_COMPLETED or KG_TASK_FAILED), result stored (borrowed; the
 * store keeps a copy), lease released. KG_ESTATE when worker_id does not
 * hold the task (lease expired and requeued, cancelled, or never its);
 * KG_ENOTFOUND when there is no such task. The scheduler (sched.h) decides
 * the status; the HTTP layer calls kg_sched_result, not this.
 */
int kg_store_complete(kg_store *s, const char *id, const char *worker_id,
                      int status, const json_t *result, kg_err *err);

/*
 * Gives a leased task back for another attempt (infra_error): pending
 * again at the back of its priority's queue, and worker_id is avoided by
 * kg_store_lease for avoid_ms (another worker gets it first). Only by the
 * holder (KG_ESTATE otherwise). result (may be NULL) is kept as the last
 * attempt's result. The caller (sched.c) has checked the retry limit.
 */
int kg_store_retry(kg_store *s, const char *id, const char *worker_id,
                   const json_t *result, int64_t avoid_ms, kg_err *err);

/*
 * pending -> cancelled; running -> cancelled, and the holder's later
 * complete/retry gets KG_ESTATE. Returns 0 when cancelled now, 1 when the
 * task had already finished (completed, failed or cancelled; unchanged),
 * KG_ENOTFOUND when unknown.
 */
int kg_store_cancel(kg_store *s, const char *id, kg_err *err);

/* What one scheduler sweep did. */
typedef struct kg_requeue_counts {
    int requeued;     /* back to pending */
    int failed;       /* attempts >= max_attempts: failed, with reason */
    int dead_workers; /* holders found dead or gone in this sweep */
} kg_requeue_counts;

/*
 * The scheduler's sweep: every running task whose lease expired, or whose
 * holder is dead (no heartbeat for worker_ttl_ms) or gone, goes back to
 * pending at the back of its queue, or, once it has been leased
 * max_attempts times, to failed with result {"status": "failed",
 * "verdict": "infra_error", "error_code": "LEASE_EXPIRED_TOO_OFTEN",
 * "error_message": ...}. Each counts as one lease expiry. Dead workers
 * stay listed (alive = 0) until they unregister or register again.
 * *out (may be NULL) gets what was done.
 */
int kg_store_requeue_expired(kg_store *s, int max_attempts,
                             kg_requeue_counts *out, kg_err *err);

/* ---- result cache ---- */

/*
 * Looks up key (64 hex chars). Returns 1 and sets *result (caller owns
 * the reference) on a hit, 0 on a miss (*result = NULL).
 */
int kg_store_cache_get(kg_store *s, const char *key, json_t **result,
                       kg_err *err);
/*
 * kg_store_cache_get for n keys at once (SQLite: one read transaction;
 * Redis: one round trip). results (the caller's array of n) gets a new
 * reference per hit and NULL per miss; a NULL key is skipped (NULL).
 * Returns the number of hits, or < 0 with every results[i] NULL.
 */
int kg_store_cache_get_many(kg_store *s, const char *const *keys, size_t n,
                            json_t **results, kg_err *err);

/* Stores result (borrowed) under key, replacing any earlier one. */
int kg_store_cache_put(kg_store *s, const char *key, const json_t *result,
                       kg_err *err);

/* ---- metrics ---- */

typedef struct kg_store_counts {
    long long pending[KG_NPRIO];       /* queue depth by priority */
    long long by_status[KG_NSTATUS];   /* tasks in each status */
    long long by_verdict[KG_NVERDICT]; /* finished tasks by result verdict */
    long long lease_expiries;          /* total, since the store was made */
    long long workers_alive, workers_dead;
} kg_store_counts;

/* Fills *out (the caller's struct). Cheap: counters, not scans. */
int kg_store_counts_get(kg_store *s, kg_store_counts *out, kg_err *err);

/* ---- workers ---- */

typedef struct kg_worker {
    char id[KG_MAX_WORKER_ID + 1];
    char device[KG_MAX_DEVICE + 1]; /* e.g. "cuda:0", "cpu:3" */
    char host[KG_MAX_HOST + 1];
    int64_t registered_ms, last_seen_ms;
    int alive;   /* heartbeat within worker_ttl_ms */
    int running; /* tasks it holds now */
} kg_worker;

/*
 * Registers (or re-registers) worker id on (host, device). KG_ESTATE when
 * another live worker holds that (host, device). A dead worker's claim is
 * taken over (its leases are requeued by the next sweep). Counts as a
 * heartbeat. Re-registering an id starts a new session: tasks the id still
 * held go back to pending at once (their attempt counts), as after
 * kg_store_worker_unregister.
 */
int kg_store_worker_register(kg_store *s, const char *id, const char *device,
                             const char *host, kg_err *err);

/*
 * The worker is alive: last_seen = now, and every lease it holds is
 * extended to now + lease_ms; *running (when not NULL) gets how many tasks
 * it holds, as kg_store_worker_list counts them, so a heartbeat need not
 * list every worker. KG_ENOTFOUND when not registered (the worker should
 * register again).
 */
int kg_store_worker_heartbeat(kg_store *s, const char *id, int *running,
                              kg_err *err);

/*
 * Removes the worker; tasks it still holds go back to pending at once
 * (their attempt counts). KG_ENOTFOUND when not registered.
 */
int kg_store_worker_unregister(kg_store *s, const char *id, kg_err *err);

/*
 * Every registered worker, ordered by id: *out is a malloc'd array of *n
 * (caller frees it with free(); NULL when n == 0).
 */
int kg_store_worker_list(kg_store *s, kg_worker **out, size_t *n, kg_err *err);

/*
 * The SHA-256 (64 lowercase hex characters) of the secret the server gave
 * worker id when it last registered (docs/api.md, "Worker identity"): set
 * after a registration, read to check every later call of that worker.
 * get returns 1 with digest filled, 0 when none is recorded.
 */
int kg_store_worker_secret_set(kg_store *s, const char *id, const char *digest,
                               kg_err *err);
int kg_store_worker_secret_get(kg_store *s, const char *id, char digest[65],
                               kg_err *err);

#endif
