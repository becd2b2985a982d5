/*
 * sandbox.h - the sandbox every evaluation child enters before it runs
 * untrusted code. See docs/sandbox.md for what each layer stops and what it
 * does not.
 *
 * Two sides:
 *
 *   parent (trusted, before fork)      child (right after fork)
 *   -----------------------------      ------------------------
 *   kg_sandbox_cfg_init                kg_sandbox_enter(cfg, err)
 *   kg_sandbox_filter_build              ... then exec or run the role
 *   kg_sandbox_mkdtemp
 *   kg_sandbox_cgroup_open
 *   fork()
 *   kg_sandbox_kill_group / cgroup_close / reap_orphans / rmtree
 *
 * kg_sandbox_enter is a pure function of its config: it reads no state of
 * the worker, allocates nothing on its success path and calls only
 * system calls, so it can run in a child forked from a multi-threaded
 * process, from C or from the Python zygote through ctypes. Every field of
 * kg_sandbox_cfg is a plain integer or pointer for that reason.
 */
#ifndef KGYM_SANDBOX_H
#define KGYM_SANDBOX_H

#include <stdint.h>
#include <sys/types.h>

#include "kgym/kgym.h"

/* Exit status a child uses when kg_sandbox_enter failed (by convention). */
#define KG_SANDBOX_EXIT_SETUP 121

/* stdin_fd/stdout_fd/stderr_fd special values */
#define KG_SANDBOX_FD_LEAVE (-1) /* keep what the child inherited */
#define KG_SANDBOX_FD_NULL (-2)  /* /dev/null */

#define KG_SANDBOX_MAX_CGROUPS 2 /* v1: memory and pids hierarchies */
#define KG_SANDBOX_ENV_MAX 1024  /* entries of cfg->env, HOME/TMPDIR aside */
#define KG_SANDBOX_PATH_MAX 512
#define KG_SANDBOX_MAX_KEEP 4 /* keep_paths entries */
#define KG_SANDBOX_MAX_VIEW 32 /* view_paths entries */
#define KG_SANDBOX_TMP_DEFAULT ((uint64_t)1 << 30) /* private tmpfs size */

/*
 * A compiled seccomp program (classic BPF), built in the parent; the child
 * loads it with one system call. insns is malloc'd and owned by the
 * struct: free with kg_sandbox_filter_free.
 */
typedef struct kg_sandbox_filter {
    void *insns;      /* struct sock_filter[len] */
    unsigned int len; /* instructions */
    unsigned int wx;  /* 1 if the program denies W+X mappings */
} kg_sandbox_filter;

typedef struct kg_sandbox_cfg {
    /* Private directory (kg_sandbox_mkdtemp): chdir'd into, HOME and
     * TMPDIR point at it. NULL: stay where we are, leave HOME/TMPDIR. */
    const char *workdir;

    /* rlimits, soft = hard = value (CPU: hard = soft + 1 s); 0 = leave.
     * RLIMIT_CORE is always 0. nproc does not bind for uid 0: see doc. */
    uint64_t as_bytes;
    uint64_t cpu_seconds;
    uint64_t fsize_bytes;
    uint64_t nofile;
    uint64_t nproc;

    int new_netns; /* unshare(CLONE_NEWNET): no interface but a down lo */

    /* Loaded last, after NO_NEW_PRIVS. NULL: no seccomp. */
    const kg_sandbox_filter *filter;

    /* fds 0..2: a target fd to dup2, or KG_SANDBOX_FD_LEAVE/_NULL. */
    int stdin_fd, stdout_fd, stderr_fd;

    /* Every fd > 2 not listed here is closed; listed ones lose
     * FD_CLOEXEC so they survive an exec. */
    const int *keep_fds;
    int n_keep_fds;

    int parent_death_signal; /* PR_SET_PDEATHSIG; 0 = none */
    pid_t expect_parent;     /* getpid() of the forking parent, read before
                                fork; 0 = do not check for the race */

    /* NULL-ended NAME=VALUE list replacing environ (HOME/TMPDIR entries
     * are replaced by the workdir). NULL = keep environ. */
    const char *const *env;

    /* cgroup.procs files to join (kg_sandbox_cgroup_attach); NULL = none */
    const char *cgroup_procs[KG_SANDBOX_MAX_CGROUPS];

    /* Switch to this uid/gid (supplementary groups dropped); -1 = keep.
     * Capabilities are dropped in every case. */
    int64_t uid, gid;

    /* umask of the child (0..0777); -1 = keep. */
    int umask;

    /* Private mount namespace (needs CAP_SYS_ADMIN, i.e. root): one tmpfs
     * of tmp_bytes holds the workdir (as HOME/TMPDIR) and new, empty
     * /tmp, /var/tmp and /dev/shm. It is the task's disk quota (writes
     * beyond it fail with ENOSPC) and it vanishes with the task's last
     * process. Needs workdir. */
    int private_tmp;
    uint64_t tmp_bytes; /* 0: KG_SANDBOX_TMP_DEFAULT */
    /* Directories that stay the host's, writable, at the same path even
     * when /tmp is covered (the compile cache). NULL entries are unused. */
    const char *keep_paths[KG_SANDBOX_MAX_KEEP];
    /* Every mount but the private tmpfs and keep_paths becomes read-only
     * (recursively; device nodes stay usable). Needs CAP_SYS_ADMIN. */
    int readonly_root;
    /* A new root (needs private_tmp): the child sees only the system's
     * software (/usr, /bin, /sbin, /lib*), the few files of /etc that the
     * loader, libc, Python and gcc read, /proc, /sys, a /dev of device
     * nodes (null, zero, full, random, urandom, tty, nvidia*, dri), the
     * view_paths (read-only with readonly_root), its private tmpfs and
     * keep_paths. Nothing else of the host: no home, no data directory,
     * no other task's files. Missing view paths are skipped. */
    int new_root;
    const char *view_paths[KG_SANDBOX_MAX_VIEW]; /* absolute; NULL: unused */
} kg_sandbox_cfg;

/* Defaults: no limits, stdin /dev/null, stdout/stderr left, PDEATHSIG
 * SIGKILL, no netns, no filter, uid/gid and umask kept, no private mounts. */
void kg_sandbox_cfg_init(kg_sandbox_cfg *cfg);

/*
 * In the child, before any untrusted code: setsid, PDEATHSIG (and the
 * parent-died-already race), cgroup join, netns, fds, private mounts
 * (tmpfs /tmp, read-only root), rlimits, chdir, umask,
 * environment, uid/gid, capabilities dropped, NO_NEW_PRIVS, seccomp last.
 * On failure the child is half-sandboxed and must _exit (by convention
 * with KG_SANDBOX_EXIT_SETUP) after reporting err.
 */
int kg_sandbox_enter(const kg_sandbox_cfg *cfg, kg_err *err);

/*
 * The view_paths a child running python needs (parent side, allocates):
 * the interpreter's prefixes, its import path and the packages torch and
 * triton, each directory of PATH and LD_LIBRARY_PATH, CUDA_HOME,
 * CUDA_PATH and the extra paths given (NULL-ended). Kept are the paths
 * that exist, that every user may reach (o+x on each directory above:
 * binding one that is not would open the way to it), and that are not
 * already inside the system's part of the view or another kept path.
 */
typedef struct kg_sandbox_view {
    int n;
    char path[KG_SANDBOX_MAX_VIEW][KG_SANDBOX_PATH_MAX];
} kg_sandbox_view;
int kg_sandbox_view_collect(const char *python, const char *const *extra,
                            kg_sandbox_view *out, kg_err *err);

/*
 * Seccomp profile. Default allow; denies (EPERM unless noted) what an
 * evaluation never needs; see docs/sandbox.md for the list and why.
 */
typedef struct kg_sandbox_profile {
    int allow_wx;   /* 0: mmap/mprotect/pkey_mprotect with W and X fail */
    int allow_perf; /* 0: perf_event_open fails */
} kg_sandbox_profile;

/* Compiles the filter for the native architecture (other ABIs: the process
 * is killed). Call in the parent; *out is owned by the caller. */
int kg_sandbox_filter_build(const kg_sandbox_profile *prof,
                            kg_sandbox_filter *out, kg_err *err);
void kg_sandbox_filter_free(kg_sandbox_filter *f);

/*
 * Private temporary directory: <base>/kgym-XXXXXX, mode 0700 (base NULL:
 * $TMPDIR or /tmp). The path is written to out.
 */
int kg_sandbox_mkdtemp(const char *base, char *out, size_t outlen, kg_err *err);

/*
 * Removes path and everything below it without following symlinks or
 * crossing into other file systems, with a constant number of fds whatever
 * the depth. Run it once every process of the task is dead.
 */
int kg_sandbox_rmtree(const char *path, kg_err *err);

/*
 * SIGKILLs process group pgid until no live member is left (zombies that
 * are not ours do not count), reaping those that are our children. If the
 * leader (pid == pgid) is our child and is reaped here, its wait status is
 * stored in *leader_status (may be NULL). KG_ETIMEOUT if members survive
 * timeout_ms (a process stuck in the kernel).
 */
int kg_sandbox_kill_group(pid_t pgid, int timeout_ms, int *leader_status,
                          kg_err *err);

/* 1 while pid still runs (it exists and is not a zombie), else 0. */
int kg_sandbox_proc_running(pid_t pid);

/* PR_SET_CHILD_SUBREAPER on the caller: orphans of tasks reparent to it. */
int kg_sandbox_become_subreaper(kg_err *err);

/*
 * Kills and reaps every child of the caller that is not listed in keep
 * (processes that escaped their group and reparented to us, the
 * subreaper), repeating until none is left. Returns how many were killed.
 */
int kg_sandbox_reap_orphans(const pid_t *keep, int nkeep);

/* ---- cgroups -------------------------------------------------------- */

/* What the machine offers, probed once by the worker. */
typedef struct kg_sandbox_cgroups {
    int mem_version;  /* 1 or 2; 0: no usable memory controller */
    int pids_version; /* 1 or 2; 0: no usable pids controller */
    char mem_base[KG_SANDBOX_PATH_MAX]; /* task groups are made here */
    char pids_base[KG_SANDBOX_PATH_MAX];
    char reason[KG_ERR_MAX]; /* why not (or what is missing), for the log */
} kg_sandbox_cgroups;

/* One task's group(s): one directory for v2, up to two for v1. */
typedef struct kg_sandbox_cgroup {
    int n;
    int version[KG_SANDBOX_MAX_CGROUPS];
    char dir[KG_SANDBOX_MAX_CGROUPS][KG_SANDBOX_PATH_MAX];
    char procs[KG_SANDBOX_MAX_CGROUPS][KG_SANDBOX_PATH_MAX + 16];
    int mem, pids; /* index into dir of each controller, -1 if none */
} kg_sandbox_cgroup;

/*
 * Finds writable memory and pids controllers (v2 preferred, else v1) below
 * the caller's own cgroups. 0 when both are usable, KG_EUNAVAIL otherwise
 * with cg->reason (and err) saying why, once, for the log; a partial
 * result (one controller) is still usable. On v2, when the controllers
 * are not yet enabled below the caller's (non-root) cgroup and the caller
 * is the only process in it, the caller is moved into a leaf
 * "<own>/kgym-worker" so that they can be: probe before starting the
 * zygote. If other processes share the cgroup, nothing is moved and the
 * reason says so.
 */
int kg_sandbox_cgroup_probe(kg_sandbox_cgroups *cg, kg_err *err);

/* Human-readable state for the log line ("cgroup v1 memory+pids at ..."
 * or the reason none is usable). */
const char *kg_sandbox_cgroup_reason(const kg_sandbox_cgroups *cg);

/*
 * Creates the task group "name" ([A-Za-z0-9._-], at most 64) with
 * memory limit mem_bytes and pids limit pids_max (0 = no limit).
 */
int kg_sandbox_cgroup_open(const kg_sandbox_cgroups *cgs, const char *name,
                           uint64_t mem_bytes, uint64_t pids_max,
                           kg_sandbox_cgroup *out, kg_err *err);

/* Points cfg->cgroup_procs at g's cgroup.procs files (g must outlive the
 * fork). The child joins in kg_sandbox_enter, before untrusted code. */
void kg_sandbox_cgroup_attach(const kg_sandbox_cgroup *g, kg_sandbox_cfg *cfg);

/* Number of processes in the group, or a negative KG_E* code. */
int kg_sandbox_cgroup_count(const kg_sandbox_cgroup *g);

/* OOM kills recorded for the group (0 if unknown). */
long kg_sandbox_cgroup_oom_kills(const kg_sandbox_cgroup *g);

/*
 * Kills everything in the group (v2: cgroup.kill; else SIGKILL each pid
 * until empty), waits up to timeout_ms for it to empty and removes the
 * directories. KG_ETIMEOUT leaves them in place (call again later).
 */
int kg_sandbox_cgroup_close(kg_sandbox_cgroup *g, int timeout_ms, kg_err *err);

#endif
