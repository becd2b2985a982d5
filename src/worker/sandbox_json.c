/* sandbox_json.c - sandbox configuration from JSON; the fresh-interpreter
 * spawn path; the ctypes entry points the Python zygote calls. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/sandbox_json.h"

static uint64_t u64(const json_t *s, const char *k)
{
    json_t *v = json_object_get(s, k);
    return json_is_integer(v) && json_integer_value(v) > 0
               ? (uint64_t)json_integer_value(v)
               : 0;
}

static int fd_of(const json_t *s, const char *k)
{
    json_t *v = json_object_get(s, k);
    return json_is_integer(v) && json_integer_value(v) >= 0
               ? (int)json_integer_value(v)
               : KG_SANDBOX_FD_LEAVE;
}

int kg_sandbox_cfg_from_json(const json_t *s, const kg_sandbox_filter *filter,
                             kg_sandbox_cfg *cfg, kg_sandbox_json_store *st,
                             int *enabled, kg_err *err)
{
    kg_sandbox_cfg_init(cfg);
    memset(st, 0, sizeof *st);
    json_t *en = json_object_get(s, "enabled");
    *enabled = !json_is_false(en);
    const char *wd = json_string_value(json_object_get(s, "workdir"));
    if (wd) {
        if (strlen(wd) >= sizeof st->workdir)
            return kg_errf(err, KG_EINVAL, "sandbox workdir too long");
        strcpy(st->workdir, wd);
        cfg->workdir = st->workdir;
    }
    cfg->as_bytes = u64(s, "as_bytes");
    cfg->cpu_seconds = u64(s, "cpu_seconds");
    cfg->fsize_bytes = u64(s, "fsize_bytes");
    cfg->nofile = u64(s, "nofile");
    cfg->nproc = u64(s, "nproc");
    cfg->new_netns = json_is_true(json_object_get(s, "new_netns"));
    if (json_is_true(json_object_get(s, "seccomp"))) {
        if (!filter)
            return kg_errf(err, KG_ESTATE,
                           "seccomp asked for but no filter was built");
        cfg->filter = filter;
    }
    cfg->stdout_fd = fd_of(s, "stdout_fd");
    cfg->stderr_fd = fd_of(s, "stderr_fd");
    json_t *keep = json_object_get(s, "keep_fds");
    size_t i;
    json_t *v;
    json_array_foreach(keep, i, v)
    {
        if (i >= 16 || !json_is_integer(v))
            return kg_errf(err, KG_EINVAL,
                           "sandbox keep_fds: at most 16 integers");
        st->keep[i] = (int)json_integer_value(v);
        cfg->n_keep_fds = (int)i + 1;
    }
    cfg->keep_fds = st->keep;
    json_array_foreach(json_object_get(s, "cgroup_procs"), i, v)
    {
        const char *p = json_string_value(v);
        if (i >= KG_SANDBOX_MAX_CGROUPS || !p ||
            strlen(p) >= sizeof st->procs[0])
            return kg_errf(err, KG_EINVAL, "sandbox cgroup_procs: bad entry");
        strcpy(st->procs[i], p);
        cfg->cgroup_procs[i] = st->procs[i];
    }
    json_t *uid = json_object_get(s, "uid"), *gid = json_object_get(s, "gid");
    cfg->uid = json_is_integer(uid) ? json_integer_value(uid) : -1;
    cfg->gid = json_is_integer(gid) ? json_integer_value(gid) : -1;
    json_t *um = json_object_get(s, "umask");
    if (um && !(json_is_integer(um) && json_integer_value(um) >= 0 &&
                json_integer_value(um) <= 0777))
        return kg_errf(err, KG_EINVAL, "sandbox umask: an integer 0..0777");
    cfg->umask = um ? (int)json_integer_value(um) : -1;
    cfg->private_tmp = json_is_true(json_object_get(s, "private_tmp"));
    cfg->readonly_root = json_is_true(json_object_get(s, "readonly_root"));
    json_t *tb = json_object_get(s, "tmp_bytes");
    if (tb && !(json_is_integer(tb) && json_integer_value(tb) > 0))
        return kg_errf(err, KG_EINVAL,
                       "sandbox tmp_bytes: a positive integer (bytes)");
    cfg->tmp_bytes = u64(s, "tmp_bytes");
    json_t *kp = json_object_get(s, "keep_paths");
    if (kp && !json_is_array(kp))
        return kg_errf(err, KG_EINVAL, "sandbox keep_paths: an array");
    json_array_foreach(kp, i, v)
    {
        const char *p = json_string_value(v);
        if (i >= KG_SANDBOX_MAX_KEEP || !p || p[0] != '/' ||
            strlen(p) >= sizeof st->keep_paths[0])
            return kg_errf(err, KG_EINVAL,
                           "sandbox keep_paths: at most %d absolute paths "
                           "shorter than %d",
                           KG_SANDBOX_MAX_KEEP, KG_SANDBOX_PATH_MAX);
        strcpy(st->keep_paths[i], p);
        cfg->keep_paths[i] = st->keep_paths[i];
    }
    cfg->new_root = json_is_true(json_object_get(s, "new_root"));
    json_t *vp = json_object_get(s, "view_paths");
    if (vp && !json_is_array(vp))
        return kg_errf(err, KG_EINVAL, "sandbox view_paths: an array");
    json_array_foreach(vp, i, v)
    {
        const char *p = json_string_value(v);
        if (i >= KG_SANDBOX_MAX_VIEW || !p || p[0] != '/' ||
            strlen(p) >= sizeof st->view_paths[0])
            return kg_errf(err, KG_EINVAL,
                           "sandbox view_paths: at most %d absolute paths "
                           "shorter than %d",
                           KG_SANDBOX_MAX_VIEW, KG_SANDBOX_PATH_MAX);
        strcpy(st->view_paths[i], p);
        cfg->view_paths[i] = st->view_paths[i];
    }
    return 0;
}

/* The fds named "chan", "result" and "log" in req's "fds" (-1: none). */
static void named_fds(const json_t *req, const int *fds, int nfds, int *chan,
                      int *res, int *log)
{
    json_t *names = json_object_get(req, "fds");
    *chan = *res = *log = -1;
    for (int i = 0; i < nfds; i++) {
        const char *n = json_string_value(json_array_get(names, (size_t)i));
        if (n && !strcmp(n, "chan"))
            *chan = fds[i];
        else if (n && !strcmp(n, "result"))
            *res = fds[i];
        else if (n && !strcmp(n, "log"))
            *log = fds[i];
    }
}

/* The child's sandbox: req's "sandbox", keeping chan and res open and
 * sending stdout and stderr to log. As kg_sandbox_cfg_from_json. */
static int child_sandbox(const json_t *req, int chan, int res, int log,
                         const kg_sandbox_filter *filter, kg_sandbox_cfg *cfg,
                         kg_sandbox_json_store *st, int *enabled, kg_err *err)
{
    json_t *sb = json_deep_copy(json_object_get(req, "sandbox"));
    if (!sb)
        sb = json_object();
    json_t *keep = json_array();
    if (chan >= 0)
        json_array_append_new(keep, json_integer(chan));
    if (res >= 0)
        json_array_append_new(keep, json_integer(res));
    json_object_set_new(sb, "keep_fds", keep);
    json_object_set_new(sb, "stdout_fd", json_integer(log));
    json_object_set_new(sb, "stderr_fd", json_integer(log));
    int rc = kg_sandbox_cfg_from_json(sb, filter, cfg, st, enabled, err);
    json_decref(sb);
    return rc;
}

/* The environment object env as a NULL-ended array of *nenv "k=v"
 * strings; the caller frees each and the array. */
static char **env_array(json_t *env, size_t *nenv)
{
    *nenv = json_object_size(env);
    char **envp = calloc(*nenv + 1, sizeof *envp);
    const char *k;
    json_t *v;
    size_t ei = 0;
    json_object_foreach(env, k, v)
    {
        const char *s = json_string_value(v);
        size_t l = strlen(k) + (s ? strlen(s) : 0) + 2;
        envp[ei] = malloc(l);
        snprintf(envp[ei++], l, "%s=%s", k, s ? s : "");
    }
    return envp;
}

/* In the forked child: enters the sandbox (or, without one, sets up the
 * session, fds and directory) and execs python. Never returns. */
static _Noreturn void exec_child(const char *python, const char *const *argv,
                                 char **envp, const kg_sandbox_cfg *cfg,
                                 int enabled, int log)
{
    kg_err e2;
    if (enabled && kg_sandbox_enter(cfg, &e2)) {
        dprintf(log >= 0 ? log : 2, "kgym sandbox: %s\n", e2.msg);
        _exit(KG_SANDBOX_EXIT_SETUP);
    }
    if (!enabled) {
        setsid();
        if (cfg->stdin_fd >= 0)
            dup2(cfg->stdin_fd, 0);
        if (log >= 0)
            dup2(log, 1), dup2(log, 2);
        for (int i = 0; i < cfg->n_keep_fds; i++)
            fcntl(cfg->keep_fds[i], F_SETFD, 0);
        if (cfg->workdir && chdir(cfg->workdir) != 0)
            _exit(KG_SANDBOX_EXIT_SETUP);
    }
    execve(python, (char *const *)argv, envp);
    dprintf(2, "kgym: exec %s: %s\n", python, strerror(errno));
    _exit(127);
}

/* Writes the task whole to fd: it is small next to a pipe's buffer. */
static void write_task(int fd, const char *task)
{
    size_t len = strlen(task), off = 0;
    signal(SIGPIPE, SIG_IGN);
    while (off < len) {
        ssize_t w = write(fd, task + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

int kg_spawn_exec(const char *python, const json_t *req, const int *fds,
                  int nfds, const kg_sandbox_filter *filter, pid_t *pid,
                  kg_err *err)
{
    const char *role = json_string_value(json_object_get(req, "role"));
    int chan, res, log;
    named_fds(req, fds, nfds, &chan, &res, &log);
    /* everything the child needs is prepared before the fork */
    kg_sandbox_cfg cfg;
    kg_sandbox_json_store st;
    int enabled;
    int rc =
        child_sandbox(req, chan, res, log, filter, &cfg, &st, &enabled, err);
    if (rc)
        return rc;
    size_t nenv;
    char **envp = env_array(json_object_get(req, "env"), &nenv);
    cfg.env = (const char *const *)envp;
    char chan_s[16], res_s[16];
    snprintf(chan_s, sizeof chan_s, "%d", chan);
    snprintf(res_s, sizeof res_s, "%d", res);
    const char *argv[10] = {python, "-m", "kgym_harness.role", role};
    int ac = 4;
    if (chan >= 0)
        argv[ac++] = "--chan-fd", argv[ac++] = chan_s;
    if (res >= 0)
        argv[ac++] = "--result-fd", argv[ac++] = res_s;
    if (!strcmp(role, "probe"))
        argv[ac++] = "--device",
        argv[ac++] = json_string_value(json_object_get(req, "device"));
    argv[ac] = NULL;
    int in[2] = {-1, -1};
    char *task = NULL;
    json_t *t = json_object_get(req, "task");
    if (t) {
        task = json_dumps(t, JSON_COMPACT);
        if (!task || pipe2(in, O_CLOEXEC) < 0) {
            rc = kg_errf(err, KG_EIO, "cannot pass the task to the judge");
            goto out;
        }
        cfg.stdin_fd = in[0];
    }
    pid_t me = getpid();
    cfg.expect_parent = me;
    pid_t p = fork();
    if (p < 0) {
        rc = kg_errf(err, KG_EIO, "fork: %s", strerror(errno));
        goto out;
    }
    if (p == 0)
        exec_child(python, argv, envp, &cfg, enabled, log);
    *pid = p;
    if (task) {
        close(in[0]);
        in[0] = -1;
        write_task(in[1], task);
    }
out:
    if (in[0] >= 0)
        close(in[0]);
    if (in[1] >= 0)
        close(in[1]);
    free(task);
    for (size_t i = 0; i < nenv; i++)
        free(envp[i]);
    free(envp);
    return rc;
}

/* ---- ctypes entry points of libkgym_sandbox.so (the Python zygote) ---- */

static kg_sandbox_filter py_filter;
static int py_filter_ready;

int kg_sandbox_py_prepare(const char *profile_json, char *errbuf,
                          size_t errlen);
int kg_sandbox_py_enter(const char *cfg_json, char *errbuf, size_t errlen);
int kg_sandbox_py_subreaper(void);

/* In the zygote, before any fork: compiles the seccomp filter once. */
int kg_sandbox_py_prepare(const char *profile_json, char *errbuf, size_t errlen)
{
    kg_err err = {{0}};
    json_error_t je;
    json_t *p = json_loads(profile_json, 0, &je);
    kg_sandbox_profile prof = {0, 0};
    if (p) {
        prof.allow_wx = json_is_true(json_object_get(p, "allow_wx"));
        prof.allow_perf = !json_is_false(json_object_get(p, "allow_perf"));
        json_decref(p);
    }
    int rc = 0;
    if (!py_filter_ready) {
        rc = kg_sandbox_filter_build(&prof, &py_filter, &err);
        py_filter_ready = rc == 0;
    }
    if (rc && errbuf && errlen)
        snprintf(errbuf, errlen, "%s", err.msg);
    return rc;
}

/* In a freshly forked zygote child: enters the sandbox cfg_json describes. */
int kg_sandbox_py_enter(const char *cfg_json, char *errbuf, size_t errlen)
{
    kg_err err = {{0}};
    json_error_t je;
    json_t *s = json_loads(cfg_json, 0, &je);
    int rc;
    if (!s) {
        rc = kg_errf(&err, KG_EPARSE, "sandbox config: %s", je.text);
    } else {
        kg_sandbox_cfg cfg;
        kg_sandbox_json_store st;
        int enabled;
        rc = kg_sandbox_cfg_from_json(s, py_filter_ready ? &py_filter : NULL,
                                      &cfg, &st, &enabled, &err);
        if (!rc && enabled) {
            rc = kg_sandbox_enter(&cfg, &err);
        } else if (!rc) {
            /* sandbox off (debugging): still a session of its own and the
             * output on the log pipe */
            setsid();
            if (cfg.stdout_fd >= 0)
                dup2(cfg.stdout_fd, 1);
            if (cfg.stderr_fd >= 0)
                dup2(cfg.stderr_fd, 2);
            if (cfg.workdir && chdir(cfg.workdir) != 0)
                rc = kg_errf(&err, KG_EIO, "chdir %s failed", cfg.workdir);
        }
        json_decref(s);
    }
    if (rc && errbuf && errlen)
        snprintf(errbuf, errlen, "%s", err.msg);
    return rc;
}

int kg_sandbox_py_subreaper(void)
{
    return kg_sandbox_become_subreaper(NULL);
}
