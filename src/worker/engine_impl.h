/*
 * engine_impl.h - what the files of the worker engine share: the slot, its
 * states, the engine's struct and their internal functions. engine.h is the
 * API; only src/worker/engine*.c and the engine's unit tests include this.
 *
 * The engine's files, one job each:
 *   engine.c         the API and the step loop: start, wait, read, decide
 *   engine_state.c   the slot's states and the transitions allowed
 *   engine_admit.c   starting a task: device slots, staging, handing over
 *   engine_spare.c   the warm spare pool: which to take, how many to keep
 *   engine_spawn.c   forking a pair into its sandbox; killing and freeing it
 *   engine_uid.c     candidate uids and the candidates' shared cache
 *   engine_env.c     what a child is given; finding the Python
 *   engine_io.c      reading the children's pipes, noting their exits
 *   engine_result.c  results: the judge's frame or the engine's own verdict
 *   engine_probe.c   the device health probe after a CUDA failure
 *   engine_rerun.c   a judge's or reference's out of memory beside others:
 *                    the task runs once more, alone
 *   engine_setup.c   kg_engine_new: config, paths, checks, the zygote
 *
 * Names: slot_* act on one slot, eng_* are the engine's functions shared
 * between these files; everything else is static to its file.
 */
#ifndef KGYM_ENGINE_IMPL_H
#define KGYM_ENGINE_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/log.h"
#include "kgym/dynbuf.h"
#include "worker/engine.h"
#include "worker/sandbox.h"
#include "worker/zygote.h"

#define LOG_CAP (64 * 1024) /* bytes of a child's output kept */
#define MAX_SLOTS 64
#define MAX_FOOTPRINTS 4096 /* problems remembered (the oldest replaced) */
/* A task's device memory, judge and candidate together, is at most
 * MEM_FACTOR times its problem's footprint; tasks run together while their
 * sum stays within MEM_SHARE of the device's memory. */
#define MEM_FACTOR 3.0
#define MEM_SHARE 0.9
#define TIMING_NICE (-10) /* a pair timing alone (engine_notes.c) */
#define MAX_SPARES 32
#define MAX_DYING 8        /* pairs whose result is out, still exiting */
#define MAX_STALE 64       /* task cgroups still emptying after their task */
#define KILL_GRACE_MS 5000 /* a killed or finished child's time to exit */

/* Candidates run as root: each pair in flight gets its own uid from
 * CAND_UID0.. (so candidates cannot signal or inspect one another), all
 * with the group CAND_GID, which owns the shared candidate cache. A uid is
 * held machine-wide by an flock on UID_LOCK_DIR/<uid>, so several workers
 * (kgym serve --workers) never hand out the same one. */
#define CAND_GID 65400
#define CAND_UID0 65401
#define CAND_UIDS 99 /* 65401..65499: more than MAX_SLOTS + MAX_SPARES */
#define UID_LOCK_DIR "/run/kgym-uids"
#define UID_FREE (-1)
#define UID_TAKEN (-2)
#define NOBODY 65534
#define TASK_TMP_BYTES ((json_int_t)1 << 30) /* private tmpfs: disk quota */

/*
 * A slot's state. slots[] holds tasks, spares[] warm pairs, dying[] pairs
 * whose result is out; each entry is S_FREE or one of its array's states.
 * Every change goes through slot_set_state (engine_state.c holds the table
 * of allowed transitions); a pair moves between arrays with slot_move.
 *
 *   S_FREE -> S_SPARE               a warm pair is forked
 *   S_SPARE -> S_STAGED, S_RUNNING  a task takes it (all slots busy: staged)
 *   S_FREE -> S_RUNNING             a task forks its own pair
 *   S_STAGED -> S_RUNNING           it is granted a device slot
 *   S_STAGED, S_RUNNING -> S_RELEASED            its frame is in
 *   S_STAGED, S_RUNNING, S_RELEASED -> S_TIMED_OUT   its deadline passed
 *   any task state -> S_HELD        its result waits for the device probe
 *   S_RELEASED -> S_DYING           its result went out before the exits
 *   any but S_FREE -> S_FREE        finished, dropped or cancelled
 */
enum slot_state {
    S_FREE,      /* empty: no pair, no task, no fds */
    S_SPARE,     /* spares[]: a warm pair, no task; its judge waits on "go" */
    S_STAGED,    /* slots[]: a task in a spare's pair, set up; its judge
                    waits for 'D', one of the concurrency device slots */
    S_RUNNING,   /* slots[]: a task on a device slot, no frame yet */
    S_RELEASED,  /* slots[]: the frame is in and both children were sent
                    SIGKILL; their exits are due */
    S_TIMED_OUT, /* slots[]: past its deadline, both children killed; the
                    result will be a timeout */
    S_HELD,      /* slots[]: the result is built and waits for the probe */
    S_DYING,     /* dying[]: the result is out; exits due before the pair's
                    cgroup, work dirs and uid are freed */
    S_NSTATES
};
_Static_assert(S_FREE == 0, "a zeroed slot is free");

struct buf {
    kg_dynbuf d;    /* zeroed: empty; its cap is buf_add's (engine_io.c) */
    size_t dropped; /* log bytes dropped from the front */
};

/* One process of a pair. Its flags are facts about that process alone. */
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
    json_t *task; /* the request (owned); NULL in a spare */
    void *user;
    double t_submit, t_start, t_spawned, deadline, t_judge_done;
    double t_dying; /* S_DYING: when its result went out */
    struct child judge, cand;
    int res_fd;
    int task_fd; /* the judge's go pipe: "T" (its task), then 'D' if staged */
    /* What the pair is, fixed when it is forked or takes its task, whatever
     * state it is in: */
    int interp; /* children started with TRITON_INTERPRET=1 */
    int prof;   /* a spare that warms the profiler up (tasks that profile) */
    int warm;   /* the task runs in a pair started before it (a spare) */
    /* Holds one of the concurrency device slots: set on entering S_RUNNING,
     * kept through S_RELEASED and S_TIMED_OUT (a pair still tearing down
     * on the device keeps its slot until it is finished), so not implied
     * by the state: a staged task may also be released or time out. */
    int device;
    double need; /* bytes of device memory admitted for it (0: unknown) */
    /* its problem's size is known to the engine (at its start, or from its
     * judge's first note): until then no other unknown problem starts */
    int sized;
    /* The most other pairs (tasks, spares, pairs still exiting) that shared
     * the device with it while it was active (eng_note_company). */
    int company;
    /* A rerun (engine_rerun.c): it runs alone on the device, and rerun is
     * what its result's checks.rerun says (owned); 0 and NULL otherwise. */
    int alone;
    json_t *rerun;
    struct buf res;
    json_t *held; /* S_HELD: the result waiting for the probe */
};

struct pending {
    json_t *task;
    void *user;
    double t_submit;
    int alone;     /* a rerun: runs alone (engine_rerun.c) */
    json_t *rerun; /* its checks.rerun (owned), or NULL */
    struct pending *next;
};

struct kg_engine {
    kg_engine_cfg cfg;
    int nslots; /* concurrency + stage: slots[] in use */
    char python[PATH_MAX], root[PATH_MAX], tmp_base[PATH_MAX],
        cache_dir[PATH_MAX];
    char pythonpath[PATH_MAX], sandbox_lib[PATH_MAX], lock_path[PATH_MAX];
    char cuda_env[64]; /* N of cuda:N; empty on a cpu worker */
    kg_zygote *zy;     /* NULL in fresh mode */
    struct slot slots[MAX_SLOTS];
    struct slot spares[MAX_SPARES];
    struct slot dying[MAX_DYING];
    int last_interp; /* what the newest task's children need */
    int last_prof;   /* the newest task profiles */
    struct pending *head, *tail;
    int npending;
    long next_id;
    int need_probe;           /* a CUDA failure: no new task before the probe */
    int device_bad;           /* the last probe failed */
    kg_sandbox_filter filter; /* fresh mode: built once, before any fork */
    kg_sandbox_cgroups cgroups;
    int prewarm, idle_warm; /* resolved from cfg (engine.h) */
    int prewarm_noprof;     /* the default's cap while tasks do not profile */
    int spare_deaths;       /* spares that died unused, in a row */
    int spare_mem_cap;      /* most spares the device's memory allows
                             * (eng_note_memory); -1: no limit seen */
    double mem_floor;       /* least free share (eng_mem_floor) */
    int nice_refused;       /* setpriority failed once (said once) */
    /* a candidate cgroup that did not empty within the kill grace (a fork
     * bomb's hundreds of exiting processes) is kept here with its pair's
     * uid and retried each step; the uid is not handed out again before */
    struct {
        kg_sandbox_cgroup cg;
        int uid;
    } stale[MAX_STALE];
    int nstale;
    int drop_uid;            /* running as root: candidates get own uids */
    int uid_lock[CAND_UIDS]; /* per candidate uid: held lock fd, or
                                UID_FREE / UID_TAKEN (in /etc/passwd) */
    uint64_t mem_cap;        /* per-task memory limit: at most half the RAM */
    int new_root;            /* candidates get their own root (view) */
    kg_sandbox_view view;    /* what a candidate sees of the host beyond the
                                system (kg_sandbox_view_collect); root only */
    /* admission by memory: each problem's footprint (bytes, the largest a
     * judge reported) by the hash of its reference code, and the device's
     * memory (from results; 0: not known yet) */
    struct {
        uint64_t key;
        double bytes;
        int estimated; /* from a judge's estimate, not yet measured */
    } foot[MAX_FOOTPRINTS];
    int nfoot;
    double dev_total;
    /* the engine's own start (timings.engine_start of its first result):
     * when kg_engine_new began, and when the zygote was last ready */
    double t_created, t_zygote_ready;
    int start_stamped;
};

/* What --verbose shows: at info level with it, at debug level without. */
#define eng_log_verbose(e, ...)                                                \
    kg_log((e)->cfg.verbose ? KG_LOG_INFO : KG_LOG_DEBUG, __VA_ARGS__)

/* ---- engine_state.c: the slot's states ---------------------------------- */
int slot_transition_ok(enum slot_state from, enum slot_state to);
void slot_set_state(struct slot *sl, enum slot_state to);
void slot_clear(struct slot *sl);
void slot_move(struct slot *dst, struct slot *src);
int slot_active(const struct slot *sl);

/* ---- engine_admit.c: starting tasks, device slots ------------------------ */
int eng_device_slots_used(const struct slot *slots, int n);
struct slot *eng_admit_next(struct slot *slots, int n, int concurrency);
void eng_grant_device(kg_engine *e);
int eng_start_task(kg_engine *e, struct slot *sl, struct pending *p, int staged,
                   kg_err *err);
/* Admission by memory: a task needing need bytes (its bound) and holding
 * no less than least bytes (its problem's footprint; 0: not known), with held
 * bytes admitted to the running tasks (running of them), on a device of
 * total bytes. ADMIT_GO: start it (an unknown need or total, 0, always
 * starts; so does any task with nothing else running). ADMIT_WAIT: not
 * while the others hold theirs. ADMIT_NEVER: its least is more than
 * share x total, so it cannot fit even alone. A problem's first task
 * needs an equal share (eng_equal_share). */
enum { ADMIT_GO, ADMIT_WAIT, ADMIT_NEVER };
int eng_mem_admit(double need, double least, double held, int running,
                  double total, double share);
double eng_mem_held(const struct slot *slots, int n, int *running);
double eng_equal_share(double total, double share, int slots);
uint64_t eng_problem_key(const json_t *task);
double eng_task_footprint(const kg_engine *e, const json_t *task);
double eng_task_need(const kg_engine *e, const json_t *task);
/* The same from the footprint already looked up (0: not known). */
double eng_need_of(const kg_engine *e, double footprint);
void eng_note_footprint(kg_engine *e, const struct slot *sl, const json_t *r);
/* Whether an active task's problem has not told its size yet (its judge's
 * estimate note not in): a task of an unknown problem then waits. */
int eng_unsized_active(const kg_engine *e);
/* Whether the queue's head, of footprint foot (0: unknown), waits for that:
 * an unknown problem starts only while every active task has told its
 * size, so that two never start blind beside each other. */
int eng_hold_unknown(const kg_engine *e, double foot);
/* ---- engine_notes.c: a judge's notes before its result ------------------ */
/* Takes the judge's notes from the front of sl's result pipe (frame.h). */
void eng_take_notes(kg_engine *e, struct slot *sl);
/* The timing pair's main threads at TIMING_NICE while it times alone
 * (timing), every thread of both back to 0 after. */
void eng_timing_priority(kg_engine *e, struct slot *sl, int timing);

/* ---- engine_spare.c: the warm spare pool --------------------------------- */
struct slot *eng_spare_pick(struct slot *spares, int n, int interp, int prof);
struct slot *eng_take_spare(kg_engine *e, const json_t *task);
int eng_spare_cap(const kg_engine *e);
int eng_spare_want(int npending, int idle_warm, int cap, int mem_cap);
int eng_spare_mem_cap(int mem_cap, int cap, double free_mib, double total,
                      double floor);
void eng_note_memory(kg_engine *e, const struct slot *sl, json_t *r);
void eng_top_up_spares(kg_engine *e);
void eng_drop_spares(kg_engine *e);

/* ---- engine_spawn.c: forking, killing, freeing pairs --------------------- */
int eng_spawn(kg_engine *e, struct slot *sl, const char *role, struct child *c,
              int chan_fd, int res_fd, int task_fd, kg_err *err);
int eng_spawn_pair(kg_engine *e, struct slot *sl, kg_err *err);
void eng_kill_child(struct child *c);
void eng_kill_pair(struct slot *sl);
void eng_release_children(struct slot *sl);
void eng_free_slot(kg_engine *e, struct slot *sl);

/* ---- engine_uid.c: candidate uids, the candidates' cache ----------------- */
int eng_uid_take(kg_engine *e, const char *wd, kg_err *err);
int eng_uid_of(const char *wd);
void eng_uid_release(kg_engine *e, int uid);
int eng_uids_init(kg_engine *e, kg_err *err);
int eng_cand_cache_dir(const char *d, kg_err *err);
void eng_retry_stale(kg_engine *e, int timeout_ms);

/* ---- engine_env.c: what a child is given; the Python --------------------- */
int eng_pathf(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *eng_child_device(const kg_engine *e);
int eng_cpu_threads(const kg_engine *e);
const char *eng_compile_ahead(const kg_engine *e);
json_t *eng_child_env(kg_engine *e, const char *role, const struct child *c,
                      int interp, int prof);
json_t *eng_judge_task(kg_engine *e, const struct slot *sl);
int eng_task_interp(const kg_engine *e, const json_t *task);
int eng_task_prof(const json_t *task);
/* A candidate on device for a task that profiles forks the profiler's own
 * process (KGYM_PROFILE_PROC, KGYM_PROFILER: profproc.child_wanted). */
int eng_profile_child_wanted(const char *device);
int eng_find_python(kg_engine *e, kg_err *err);

/* ---- engine_io.c: the children's pipes and exits ------------------------- */
void eng_close_fd(int *fd);
void eng_buf_free(struct buf *b);
const char *eng_tail_of(const struct buf *b, size_t max);
void eng_drain_log(kg_engine *e, struct child *c, const char *who);
void eng_drain_result(struct slot *sl);
void eng_note_exit(kg_engine *e, pid_t pid, int status);
void eng_collect_exits(kg_engine *e);

/* ---- engine_result.c: results ------------------------------------------- */
json_t *eng_verdict(struct slot *sl, const char *verdict, const char *code,
                    const char *msg);
void eng_stamp(kg_engine *e, struct slot *sl, json_t *r);
void eng_hand_out(kg_engine_done_fn done, void *ctx, struct slot *sl,
                  json_t *r);
void eng_finish(kg_engine *e, struct slot *sl, kg_engine_done_fn done,
                void *ctx);
int eng_finish_early(kg_engine *e, struct slot *sl, kg_engine_done_fn done,
                     void *ctx);
void eng_settle_dying(kg_engine *e);

/* ---- engine_probe.c: the device health probe ----------------------------- */
void eng_settle_probe(kg_engine *e, kg_engine_done_fn done, void *ctx);

/* ---- engine_rerun.c: out of memory beside others, run again alone -------- */
/* r is an infra_error of the judge's or the reference's (INFRA_ERROR,
 * REFERENCE_ERROR) whose error says the device ran out of memory; never a
 * candidate's verdict (runtime_error). */
int eng_oom_not_candidates(const json_t *r);
/* r is the candidate's runtime_error OUT_OF_MEMORY, or CUDA_ERROR saying
 * out of memory: its claim, which can earn it one run alone, no verdict. */
int eng_oom_candidates(const json_t *r);
/* Whether r is to be run again alone: either out of memory, with other
 * pairs beside it on the device, and not a rerun already (reran). */
int eng_rerun_wanted(const json_t *r, int others, int reran);
/* Raises each active task's company to the other pairs on the device now
 * (each step, once the step's tasks and spares are started). */
void eng_note_company(kg_engine *e);
/* What may start now: GATE_OPEN (no rerun waits or runs: as usual),
 * GATE_SHUT (a rerun runs, or heads the queue while other tasks or exiting
 * pairs are on the device: nothing starts, no spare is kept), GATE_LONE
 * (the rerun at the head may start: the device holds no other task). */
enum { GATE_OPEN, GATE_SHUT, GATE_LONE };
int eng_alone_gate(const kg_engine *e);
/* Before a result goes out: 1 when the task was queued again to run alone
 * (r is not handed out); else 0, with an out of memory not the candidate's
 * named with its company and sizes. */
int eng_rerun_take(kg_engine *e, struct slot *sl, json_t *r);
/* A rerun's result gets checks.rerun and a warning saying so. */
void eng_rerun_mark(const struct slot *sl, json_t *r);

/* ---- engine_setup.c: the config, the zygote ------------------------------ */
int eng_check_knobs(const kg_engine_cfg *cfg, kg_err *err);
/* Whether candidates get their own root, from KGYM_NEW_ROOT (NULL: unset). */
int eng_wants_new_root(const char *knob);
double eng_mem_floor(const kg_engine_cfg *cfg);
int eng_restart_zygote(kg_engine *e, kg_err *err);

#endif
