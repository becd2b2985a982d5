/* engine_spawn.c - a judge+candidate pair's processes: forking each into its
 * sandbox (through the zygote, or a fresh interpreter), killing them with
 * their process groups, and freeing all a pair held once it is gone. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "worker/engine_impl.h"
#include "worker/sandbox_json.h"

/*
 * RLIMIT_FSIZE of both children. It also bounds ftruncate of a memfd: the
 * channel's shared-memory region (channel.py, a power of two from 16 MiB
 * up to MAX_MESSAGE_BYTES) is one, so a fixed 2 GiB failed every problem
 * whose inputs or outputs cross above 2 GiB ("[Errno 27] File too large"
 * in the judge sending inputs, exit status 70 in the candidate sending
 * outputs). The limit is the largest region the channel makes, so the
 * channel never meets it; what a runaway candidate writes is bounded by
 * its private tmpfs (TASK_TMP_BYTES, as root) and its memory cgroup, not by
 * this per-file limit. Must equal channel.py's MAX_MESSAGE_BYTES
 * (tests/integration/test_kernelbench_cli.py checks).
 */
#define FSIZE_BYTES ((json_int_t)16 << 30)

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

/*
 * Host memory per child, sized from the machine rather than fixed (a fixed
 * 16 GiB address space failed problems whose tensors, with the channel's
 * region and the judge's copies, need more: a 2.4 GB output costs the
 * judge its reference output, the mapped region (the next power of two)
 * and its copy). The candidate (untrusted) gets half the physical memory,
 * as RLIMIT_AS on a cpu worker and as its cgroup's memory.max: a runaway
 * candidate is stopped before the machine is, and a problem whose
 * reference runs in half the machine fits. The judge (trusted: it runs the
 * reference) gets the whole physical memory as RLIMIT_AS, so only a
 * reference that could not run on this machine at all is stopped. A GPU
 * worker sets no RLIMIT_AS (CUDA maps a huge virtual range). Unknown
 * physical memory: 16 GiB (cpu) and 64 GiB (GPU), as before.
 */
static uint64_t mem_limit(const kg_engine *e, int cand)
{
    int gpu = strncmp(e->cfg.device, "cuda", 4) == 0;
    if (!e->mem_cap) /* half the physical memory; 0: unknown */
        return gpu ? (uint64_t)64 << 30 : (uint64_t)16 << 30;
    return cand ? e->mem_cap : 2 * e->mem_cap;
}

/* What the candidate still imports after the fork (the harness, the
 * interpreter's tree) must not vanish under its private tmpfs when it lives
 * in /tmp (a checkout or a CI clone there): those paths, and its cache cd,
 * stay visible. New reference. */
static json_t *keep_paths(const kg_engine *e, const char *cd)
{
    json_t *keep = json_array();
    json_array_append_new(keep, json_string(cd));
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
    return keep;
}

/* The candidate's own uid and private mounts (root only): the group that
 * owns the shared cache, whose files must stay group-writable (umask 007),
 * and a private tmpfs for its work dir, /tmp, /var/tmp and /dev/shm (the
 * task's disk quota); the rest read-only but for the cache. */
static void cand_identity(const kg_engine *e, json_t *s, int uid, int gpu)
{
    json_object_set_new(s, "uid", json_integer(uid));
    json_object_set_new(s, "gid", json_integer(CAND_GID));
    json_object_set_new(s, "umask", json_integer(007));
    json_object_set_new(s, "private_tmp", json_true());
    json_object_set_new(s, "tmp_bytes", json_integer(TASK_TMP_BYTES));
    /* CUDA's first initialisation in a process may create device nodes
     * (nvidia-uvm) and writes driver state: on a GPU worker the root stays
     * writable (the uid still owns nothing there) */
    json_object_set_new(s, "readonly_root", json_boolean(!gpu));
    char cd[PATH_MAX + 16];
    snprintf(cd, sizeof cd, "%s/candidate", e->cache_dir);
    json_object_set_new(s, "keep_paths", keep_paths(e, cd));
    /* a new root: the system, the interpreter's trees and the harness;
     * no home, no data directory, no other task's files */
    json_t *view = json_array();
    for (int i = 0; i < e->view.n; i++)
        json_array_append_new(view, json_string(e->view.path[i]));
    json_object_set_new(s, "view_paths", view);
    json_object_set_new(s, "new_root", json_boolean(e->new_root));
}

/* Sandbox settings per role: the candidate gets everything; the judge
 * (trusted, runs the reference) is isolated from the network and from the
 * worker's fds but keeps a looser limit set. New reference. */
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
        s, "as_bytes", json_integer(gpu ? 0 : (json_int_t)mem_limit(e, cand)));
    json_object_set_new(s, "cpu_seconds", json_integer(cand ? 600 : 1200));
    json_object_set_new(s, "fsize_bytes", json_integer(FSIZE_BYTES));
    json_object_set_new(s, "nofile", json_integer(1024));
    json_object_set_new(s, "nproc", json_integer(cand ? 512 : 0));
    int uid = cand && e->drop_uid ? eng_uid_of(c->wd) : -1;
    if (uid >= 0)
        cand_identity(e, s, uid, gpu);
    if (c->has_cg) {
        json_t *procs = json_array();
        for (int i = 0; i < c->cg.n; i++)
            json_array_append_new(procs, json_string(c->cg.procs[i]));
        json_object_set_new(s, "cgroup_procs", procs);
    }
    return s;
}

/* The candidate's cgroup (memory and pids), where the host has one and the
 * sandbox is on; without one the process-group kill stands alone. */
static void cand_cgroup(kg_engine *e, struct child *c)
{
    if ((!e->cgroups.mem_version && !e->cgroups.pids_version) ||
        e->cfg.no_sandbox)
        return;
    char name[64];
    snprintf(name, sizeof name, "kgym-%d-%ld", (int)getpid(), e->next_id + 1);
    uint64_t mem = mem_limit(e, 1);
    kg_err cgerr;
    if (kg_sandbox_cgroup_open(&e->cgroups, name, mem, 1024, &c->cg, &cgerr) ==
        0)
        c->has_cg = 1;
}

/* The spawn request for one role: sandbox, environment, the fds' names
 * (chan, result, task, log: those >= 0, in that order into fds[]) and, for
 * a judge, its task (which names the device lock) or, for a warm spare's
 * judge, which has none yet, the device lock on its own: the judge's start
 * message is the one place it learns the lock from (docs/harness-notes.md,
 * "The device lock"). New reference. */
static json_t *spawn_request(kg_engine *e, struct slot *sl, const char *role,
                             struct child *c, const int in_fds[4], int *fds,
                             int *nfds)
{
    static const char *const names[4] = {"chan", "result", "task", "log"};
    json_t *req = json_object();
    json_object_set_new(req, "op", json_string("spawn"));
    json_object_set_new(req, "id", json_integer(++e->next_id));
    json_object_set_new(req, "role", json_string(role));
    json_object_set_new(req, "sandbox", sandbox_cfg(e, role, c));
    json_t *env = eng_child_env(e, role, c, sl->interp, sl->prof);
    json_object_set_new(req, "env", env);
    json_object_set_new(req, "device", json_string(eng_child_device(e)));
    json_t *fd_names = json_array();
    *nfds = 0;
    for (int i = 0; i < 4; i++) {
        if (in_fds[i] < 0)
            continue;
        fds[(*nfds)++] = in_fds[i];
        json_array_append_new(fd_names, json_string(names[i]));
    }
    json_object_set_new(req, "fds", fd_names);
    if (!strcmp(role, "judge") && sl->task)
        json_object_set_new(req, "task", eng_judge_task(e, sl));
    else if (!strcmp(role, "judge"))
        json_object_set_new(req, "device_lock", json_string(e->lock_path));
    return req;
}

/* Spawns one role of sl into c (its work dir, log pipe, cgroup, uid); the
 * fds >= 0 among chan_fd, res_fd and task_fd are passed to it. 0 or a
 * negative code. */
int eng_spawn(kg_engine *e, struct slot *sl, const char *role, struct child *c,
              int chan_fd, int res_fd, int task_fd, kg_err *err)
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
    /* the candidate's uid is the owner of its work dir (eng_uid_take) */
    if (cand && e->drop_uid && (rc = eng_uid_take(e, c->wd, err))) {
        close(lp[0]), close(lp[1]);
        return rc;
    }
    if (cand)
        cand_cgroup(e, c);
    int in_fds[4] = {chan_fd, res_fd, task_fd, lp[1]}, fds[4], nfds;
    json_t *req = spawn_request(e, sl, role, c, in_fds, fds, &nfds);
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

/* Forks the judge and candidate of sl (sl->task set: the judge gets it in
 * its spawn request; unset: a spare, whose judge waits on a "go" pipe). */
int eng_spawn_pair(kg_engine *e, struct slot *sl, kg_err *err)
{
    assert(sl->state == S_SPARE || sl->state == S_RUNNING);
    assert((sl->state == S_SPARE) == !sl->task);
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
    int rc = eng_spawn(e, sl, "candidate", &sl->cand, chan[1], -1, -1, err);
    if (!rc)
        rc = eng_spawn(e, sl, "judge", &sl->judge, chan[0], rp[1], tp[0], err);
    close(chan[0]), close(chan[1]), close(rp[1]);
    if (tp[0] >= 0)
        close(tp[0]);
    sl->task_fd = tp[1];
    sl->res_fd = rp[0];
    fcntl(sl->res_fd, F_SETFL, O_NONBLOCK);
    sl->t_spawned = kg_now_ms();
    return rc;
}

/* Kills c with its process group (and what left the group but not its
 * cgroup). In fresh mode the child is ours and the group kill reaps it:
 * its status is kept, or its exit would never be seen (the slot would wait
 * for it forever). Zygote children are reported by the zygote. */
void eng_kill_child(struct child *c)
{
    if (c->pid > 0 && !c->exited) {
        c->killed = 1;
        int st = -1;
        kg_sandbox_kill_group(c->pid, 2000, &st, NULL);
        if (st != -1) {
            c->exited = 1;
            c->status = st;
        }
    }
    if (c->has_cg)
        kg_sandbox_cgroup_close(&c->cg, 2000, NULL);
}

void eng_kill_pair(struct slot *sl)
{
    eng_kill_child(&sl->judge);
    eng_kill_child(&sl->cand);
}

/* The result frame is in: nothing either child does now can change it.
 * Both process groups get SIGKILL at once, without waiting, so the two
 * teardowns (seconds of CUDA context and address space on a GPU) overlap
 * instead of following one another while the slot stays taken. A child
 * that already ended by itself is left alone: its own status (a signal,
 * an exit code) still goes into the result. */
void eng_release_children(struct slot *sl)
{
    struct child *cs[2] = {&sl->judge, &sl->cand};
    slot_set_state(sl, S_RELEASED);
    for (int k = 0; k < 2; k++) {
        struct child *c = cs[k];
        if (c->pid > 0 && !c->exited && kg_sandbox_proc_running(c->pid)) {
            c->killed = 1;
            kill(-c->pid, SIGKILL);
        }
    }
}

/* Frees all the pair of sl held: fds, buffers, cgroups (one still emptying
 * is kept in e->stale with the uid), work dirs, the uid, the task and a
 * held result. sl is S_FREE after. */
void eng_free_slot(kg_engine *e, struct slot *sl)
{
    eng_close_fd(&sl->res_fd);
    eng_close_fd(&sl->task_fd);
    eng_close_fd(&sl->judge.log_fd);
    eng_close_fd(&sl->cand.log_fd);
    eng_buf_free(&sl->res);
    eng_buf_free(&sl->judge.log);
    eng_buf_free(&sl->cand.log);
    struct child *cs[2] = {&sl->judge, &sl->cand};
    int uid = eng_uid_of(sl->cand.wd); /* the pair's; free once it is gone */
    for (int i = 0; i < 2; i++) {
        if (cs[i]->has_cg && kg_sandbox_cgroup_close(&cs[i]->cg, 2000, NULL) &&
            e->nstale < MAX_STALE) {
            e->stale[e->nstale].cg = cs[i]->cg;
            e->stale[e->nstale++].uid = uid;
            uid = -1; /* released with the cgroup (eng_retry_stale) */
        }
        if (cs[i]->wd[0])
            kg_sandbox_rmtree(cs[i]->wd, NULL);
    }
    eng_uid_release(e, uid);
    json_decref(sl->task);
    json_decref(sl->held);
    json_decref(sl->rerun);
    slot_set_state(sl, S_FREE);
    slot_clear(sl);
}
