/*
 * sandbox.c - the per-task sandbox, child side: what a sandboxed child
 * does to itself before it runs anything (setsid, PDEATHSIG, netns,
 * rlimits, fds, environment, credentials, private mounts, seccomp).
 * The seccomp program, the work directory, process cleanup and cgroups
 * are sandbox_filter.c, sandbox_dir.c, sandbox_proc.c, sandbox_cgroup.c.
 *
 * Design notes and measurements: docs/sandbox.md.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include "worker/sandbox.h"

void kg_sandbox_cfg_init(kg_sandbox_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->stdin_fd = KG_SANDBOX_FD_NULL;
    cfg->stdout_fd = KG_SANDBOX_FD_LEAVE;
    cfg->stderr_fd = KG_SANDBOX_FD_LEAVE;
    cfg->parent_death_signal = SIGKILL;
    cfg->uid = -1;
    cfg->gid = -1;
    cfg->umask = -1;
}

/* ---- child side: only system calls, no allocation on success --------- */

static int sys_fail(kg_err *err, const char *what, int e)
{
    return kg_errf(err, KG_EIO, "sandbox: %s: %s", what, strerror(e));
}

static int arm_pdeathsig(const kg_sandbox_cfg *cfg, kg_err *err)
{
    if (cfg->parent_death_signal &&
        prctl(PR_SET_PDEATHSIG, (unsigned long)cfg->parent_death_signal) < 0)
        return sys_fail(err, "PR_SET_PDEATHSIG", errno);
    /* The parent may have died between fork and the prctl: then no
     * signal will ever come, and we must not run on as an orphan. */
    if (cfg->expect_parent > 0 && getppid() != cfg->expect_parent)
        return kg_errf(err, KG_ESTATE, "sandbox: parent %d already exited",
                       (int)cfg->expect_parent);
    return 0;
}

static int join_cgroups(const kg_sandbox_cfg *cfg, kg_err *err)
{
    for (int i = 0; i < KG_SANDBOX_MAX_CGROUPS; i++) {
        const char *p = cfg->cgroup_procs[i];
        if (!p)
            continue;
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return sys_fail(err, p, errno);
        ssize_t n = write(fd, "0", 1); /* "0": the writing process */
        int e = errno;
        close(fd);
        if (n != 1)
            return sys_fail(err, p, e);
    }
    return 0;
}

static int set_limit(int res, uint64_t soft, uint64_t hard)
{
    struct rlimit r = {.rlim_cur = (rlim_t)soft, .rlim_max = (rlim_t)hard};
    return setrlimit(res, &r);
}

static int set_rlimits(const kg_sandbox_cfg *cfg, kg_err *err)
{
    if (set_limit(RLIMIT_CORE, 0, 0) < 0)
        return sys_fail(err, "RLIMIT_CORE", errno);
    if (cfg->as_bytes && set_limit(RLIMIT_AS, cfg->as_bytes, cfg->as_bytes))
        return sys_fail(err, "RLIMIT_AS", errno);
    /* soft limit: SIGXCPU (catchable, reported); hard: SIGKILL 1 s later */
    if (cfg->cpu_seconds &&
        set_limit(RLIMIT_CPU, cfg->cpu_seconds, cfg->cpu_seconds + 1))
        return sys_fail(err, "RLIMIT_CPU", errno);
    if (cfg->fsize_bytes &&
        set_limit(RLIMIT_FSIZE, cfg->fsize_bytes, cfg->fsize_bytes))
        return sys_fail(err, "RLIMIT_FSIZE", errno);
    if (cfg->nofile && set_limit(RLIMIT_NOFILE, cfg->nofile, cfg->nofile))
        return sys_fail(err, "RLIMIT_NOFILE", errno);
    if (cfg->nproc && set_limit(RLIMIT_NPROC, cfg->nproc, cfg->nproc))
        return sys_fail(err, "RLIMIT_NPROC", errno);
    return 0;
}

static int set_stdio(int target, int dest, kg_err *err)
{
    if (target == KG_SANDBOX_FD_LEAVE)
        return 0;
    if (target == KG_SANDBOX_FD_NULL) {
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return sys_fail(err, "/dev/null", errno);
        int r = dup2(fd, dest);
        int e = errno;
        if (fd != dest)
            close(fd);
        return r < 0 ? sys_fail(err, "dup2", e) : 0;
    }
    if (target < 0)
        return kg_errf(err, KG_EINVAL, "sandbox: bad fd %d for %d", target,
                       dest);
    if (target == dest)
        return fcntl(dest, F_SETFD, 0) < 0 ? sys_fail(err, "fcntl", errno) : 0;
    return dup2(target, dest) < 0 ? sys_fail(err, "dup2", errno) : 0;
}

static void close_from_to(unsigned lo, unsigned hi)
{
    if (lo > hi)
        return;
    if (syscall(SYS_close_range, lo, hi, 0) == 0)
        return;
    /* kernels before 5.9: close one by one up to the fd limit */
    struct rlimit r;
    unsigned max = 65536;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < max)
        max = (unsigned)r.rlim_cur;
    for (unsigned fd = lo; fd <= hi && fd < max; fd++)
        close((int)fd);
}

static int close_fds(const kg_sandbox_cfg *cfg, kg_err *err)
{
    for (int i = 0; i < cfg->n_keep_fds; i++) {
        int fd = cfg->keep_fds[i];
        if (fd < 0 || fcntl(fd, F_GETFD) < 0)
            return kg_errf(err, KG_EINVAL, "sandbox: keep fd %d is not open",
                           fd);
    }
    /* close the gaps between kept fds, lowest first, without sorting */
    unsigned lo = 3;
    for (;;) {
        long next = -1;
        for (int i = 0; i < cfg->n_keep_fds; i++) {
            long fd = cfg->keep_fds[i];
            if (fd >= (long)lo && (next < 0 || fd < next))
                next = fd;
        }
        if (next < 0) {
            close_from_to(lo, ~0U);
            break;
        }
        if ((unsigned)next > lo)
            close_from_to(lo, (unsigned)next - 1);
        lo = (unsigned)next + 1;
    }
    for (int i = 0; i < cfg->n_keep_fds; i++)
        if (fcntl(cfg->keep_fds[i], F_SETFD, 0) < 0)
            return sys_fail(err, "fcntl", errno);
    return 0;
}

/* The environment must outlive kg_sandbox_enter and cannot be malloc'd:
 * it lives in this (per-process, copied by fork) static storage. */
static char *env_vec[KG_SANDBOX_ENV_MAX + 3];
static char env_home[KG_SANDBOX_PATH_MAX + 8];
static char env_tmpdir[KG_SANDBOX_PATH_MAX + 8];

static void str_cat2(char *dst, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    memcpy(dst, a, na);
    memcpy(dst + na, b, nb + 1);
}

static int set_env(const kg_sandbox_cfg *cfg, kg_err *err)
{
    char **src = cfg->env ? (char **)cfg->env : environ;
    int n = 0;
    for (int i = 0; src && src[i]; i++) {
        if (cfg->workdir &&
            (!strncmp(src[i], "HOME=", 5) || !strncmp(src[i], "TMPDIR=", 7)))
            continue;
        if (n == KG_SANDBOX_ENV_MAX)
            return kg_errf(err, KG_EINVAL, "sandbox: more than %d env vars",
                           KG_SANDBOX_ENV_MAX);
        env_vec[n++] = src[i];
    }
    if (cfg->workdir) {
        str_cat2(env_home, "HOME=", cfg->workdir);
        str_cat2(env_tmpdir, "TMPDIR=", cfg->workdir);
        env_vec[n++] = env_home;
        env_vec[n++] = env_tmpdir;
    }
    env_vec[n] = NULL;
    environ = env_vec;
    return 0;
}

static int set_ids(const kg_sandbox_cfg *cfg, kg_err *err)
{
    if (cfg->gid >= 0) {
        if (setgroups(0, NULL) < 0)
            return sys_fail(err, "setgroups", errno);
        gid_t g = (gid_t)cfg->gid;
        if (setresgid(g, g, g) < 0)
            return sys_fail(err, "setresgid", errno);
    }
    if (cfg->uid >= 0) {
        uid_t u = (uid_t)cfg->uid;
        if (setresuid(u, u, u) < 0)
            return sys_fail(err, "setresuid", errno);
    }
    /* a credential change clears PDEATHSIG: arm it again */
    if (cfg->gid >= 0 || cfg->uid >= 0)
        return arm_pdeathsig(cfg, err);
    return 0;
}

/* ---- private mounts (child side: system calls only) ------------------- */

#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442 /* same number on every architecture */
#endif
struct kg_mount_attr { /* struct mount_attr (Linux 5.12) */
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#define KG_MOUNT_ATTR_RDONLY 0x1

/* Decimal of v into buf (>= 21 bytes), without stdio. */
static void u64_dec(uint64_t v, char *buf)
{
    char t[24];
    int n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    for (int i = 0; i < n; i++)
        buf[i] = t[n - 1 - i];
    buf[n] = 0;
}

/* out = a + "/" + b; -1 if it does not fit */
static int path_join(char *out, size_t len, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na + nb + 2 > len)
        return -1;
    memcpy(out, a, na);
    out[na] = '/';
    memcpy(out + na + 1, b, nb + 1);
    return 0;
}

/* mkdir -p: missing directories are made 0755, owned by the caller. */
static int mkdir_p(const char *path)
{
    char p[2 * KG_SANDBOX_PATH_MAX + 32];
    size_t n = strlen(path);
    if (n >= sizeof p || path[0] != '/') {
        errno = n >= sizeof p ? ENAMETOOLONG : EINVAL;
        return -1;
    }
    memcpy(p, path, n + 1);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        struct stat st;
        if (mkdir(p, 0755) < 0 &&
            !(stat(p, &st) == 0 && S_ISDIR(st.st_mode)))
            return -1;
        *s = c;
        if (!c)
            return 0;
    }
}

/* Bind-mounts the directory held by fd (O_PATH) onto target. The source
 * is named through /proc/self/fd, so it need not be reachable by path:
 * it may lie under a directory covered meanwhile. */
static int bind_fd(int fd, const char *target, unsigned long extra)
{
    char src[40] = "/proc/self/fd/";
    u64_dec((uint64_t)fd, src + strlen(src));
    return mount(src, target, NULL, MS_BIND | extra, NULL);
}

static int mount_fail(kg_err *err, const char *what, const char *path, int e)
{
    return kg_errf(err, KG_EIO, "sandbox: %s %s: %s", what, path, strerror(e));
}

/* Every mount of our (private) namespace read-only, recursively; device
 * nodes stay usable (the read-only flag stops changes to the file system,
 * not writes to a device). Before Linux 5.12: the root mount only. */
static int make_readonly(const char *top, kg_err *err)
{
    struct kg_mount_attr a = {.attr_set = KG_MOUNT_ATTR_RDONLY};
    if (syscall(SYS_mount_setattr, AT_FDCWD, top, AT_RECURSIVE, &a,
                sizeof a) == 0)
        return 0;
    if (errno != ENOSYS)
        return mount_fail(err, "read-only", top, errno);
    if (mount(NULL, top, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
        return mount_fail(err, "read-only remount of", top, errno);
    return 0;
}

/* out = a + b; -1 if it does not fit */
static int path_cat(char *out, size_t len, const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na + nb + 1 > len)
        return -1;
    memcpy(out, a, na);
    memcpy(out + na, b, nb + 1);
    return 0;
}

#define KG_BIG_PATH (2 * KG_SANDBOX_PATH_MAX + 32)

/* One tmpfs (the task's quota) holds four directories: the workdir and
 * new /tmp, /var/tmp and /dev/shm. It is mounted on the workdir first (a
 * directory that exists and is the task's own), its parts are held by fd,
 * then bound into place; the workdir is bound last, recreated inside the
 * new /tmp when it was below it. top is the root being built ("" for the
 * host's own, else the new root's directory). */
static int mount_tmp(const kg_sandbox_cfg *cfg, const char *top, kg_err *err)
{
    static const char *const part[] = {"home", "tmp", "var_tmp", "shm"};
    static const char *const where[] = {NULL, "/tmp", "/var/tmp", "/dev/shm"};
    enum { NPART = 4 };
    char w[KG_BIG_PATH], at[KG_BIG_PATH];
    if (path_cat(w, sizeof w, top, cfg->workdir) < 0)
        return mount_fail(err, "private workdir", cfg->workdir, ENAMETOOLONG);
    char opts[96] = "mode=755,nr_inodes=65536,size=";
    u64_dec(cfg->tmp_bytes ? cfg->tmp_bytes : KG_SANDBOX_TMP_DEFAULT,
            opts + strlen(opts));
    if (mount("tmpfs", w, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return mount_fail(err, "tmpfs on", w, errno);
    int fd[NPART], r = 0;
    for (int i = 0; i < NPART; i++)
        fd[i] = -1;
    char p[KG_BIG_PATH + 16];
    for (int i = 0; i < NPART && !r; i++) {
        mode_t mode = i == 0 ? 0700 : 01777;
        if (path_join(p, sizeof p, w, part[i]) < 0 || mkdir(p, 0700) < 0 ||
            chmod(p, mode) < 0 ||
            (i == 0 && (cfg->uid >= 0 || cfg->gid >= 0) &&
             chown(p, (uid_t)cfg->uid, (gid_t)cfg->gid) < 0) ||
            (fd[i] = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
            r = mount_fail(err, "private", part[i], errno);
    }
    /* new /tmp last: the others may lie below it */
    for (int i = NPART - 1; i > 0 && !r; i--) {
        struct stat st; /* a symlink (/var/tmp -> /tmp) is left alone */
        if (path_cat(at, sizeof at, top, where[i]) == 0 &&
            lstat(at, &st) == 0 && S_ISDIR(st.st_mode) &&
            bind_fd(fd[i], at, 0) < 0)
            r = mount_fail(err, "private", where[i], errno);
    }
    if (!r && (mkdir_p(w) < 0 || bind_fd(fd[0], w, 0) < 0))
        r = mount_fail(err, "private workdir", w, errno);
    for (int i = 0; i < NPART; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    return r;
}

/* ---- the new root: what the child sees of the host -------------------- */

/* Shown to every child with a new root, besides cfg->view_paths: the
 * system's programs, libraries and headers (the compilers need them), and
 * the files of /etc that the loader, libc (users, time zone), Debian's
 * Python and gcc (the c++ alternative) read. Absent ones are skipped. */
static const char *const view_system[] = {
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/ld.so.preload", "/etc/alternatives", "/etc/passwd", "/etc/group",
    "/etc/nsswitch.conf", "/etc/localtime", NULL};

/* The device nodes of the new /dev (more: every /dev/nvidia* and dri). */
static const char *const view_dev[] = {"null",    "zero", "full", "random",
                                       "urandom", "tty",  NULL};

/* Host paths bound into the new root so far: nothing is made below them
 * (that would write into the host's tree). Static: no allocation. */
static char view_bound[KG_SANDBOX_MAX_VIEW + 24][KG_SANDBOX_PATH_MAX];
static int view_nbound;

static int view_covered(const char *p)
{
    for (int i = 0; i < view_nbound; i++) {
        size_t n = strlen(view_bound[i]);
        if (!strncmp(p, view_bound[i], n) && (p[n] == 0 || p[n] == '/'))
            return 1;
    }
    return 0;
}

static void view_mark(const char *p)
{
    if (view_nbound < (int)(sizeof view_bound / sizeof *view_bound) &&
        strlen(p) < KG_SANDBOX_PATH_MAX)
        memcpy(view_bound[view_nbound++], p, strlen(p) + 1);
}

/* Binds host path src onto top+src (a directory or a file made there as
 * the mount point), recursively, and marks it. */
static int view_bind(const char *top, const char *src, int dir)
{
    char dst[KG_BIG_PATH];
    if (path_cat(dst, sizeof dst, top, src) < 0)
        return errno = ENAMETOOLONG, -1;
    if (dir) {
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
            return -1;
    } else {
        int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            return -1;
        if (fd >= 0)
            close(fd);
    }
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
        return -1;
    view_mark(src);
    return 0;
}

/* Makes host path p visible at the same path below top: each directory on
 * the way is made (0755, root's), each symlink on the way is copied and
 * the path goes on from its target, and the last component is bound from
 * the host. cur is resolved as it goes, so top+cur never passes through a
 * symlink: everything made lands in the new root, nothing below a bound
 * (host) path is made. A path that does not exist is skipped. */
static int view_add(const char *top, const char *p, int depth, kg_err *err)
{
    char cur[KG_SANDBOX_PATH_MAX], dst[KG_BIG_PATH];
    size_t n = 0;
    cur[0] = 0;
    const char *s = p;
    for (;;) {
        while (*s == '/')
            s++;
        if (!*s)
            return 0; /* "/" itself: never bound whole */
        size_t len = strcspn(s, "/");
        const char *rest = s + len;
        if (len == 1 && s[0] == '.') {
            s = rest;
            continue;
        }
        if (len == 2 && s[0] == '.' && s[1] == '.') {
            char *up = strrchr(cur, '/');
            if (up)
                *up = 0;
            n = strlen(cur);
            s = rest;
            continue;
        }
        if (n + 1 + len >= sizeof cur)
            return mount_fail(err, "view path", p, ENAMETOOLONG);
        cur[n] = '/';
        memcpy(cur + n + 1, s, len);
        n += 1 + len;
        cur[n] = 0;
        s = rest;
        int last = s[strspn(s, "/")] == 0;
        int covered = view_covered(cur);
        struct stat st;
        if (lstat(cur, &st) < 0)
            return 0; /* absent (or not ours to see): skipped */
        if (S_ISLNK(st.st_mode)) {
            char t[KG_SANDBOX_PATH_MAX], next[KG_BIG_PATH];
            ssize_t tl = readlink(cur, t, sizeof t - 1);
            if (tl <= 0 || depth >= 16)
                return 0; /* a loop or an unreadable link: skipped */
            t[tl] = 0;
            if (!covered) {
                if (path_cat(dst, sizeof dst, top, cur) < 0 ||
                    (symlink(t, dst) < 0 && errno != EEXIST))
                    return mount_fail(err, "view link", cur, errno);
            }
            /* next = the link's target, then what followed it */
            *strrchr(cur, '/') = 0;
            size_t nt = strlen(t), nr = strlen(s), nc = strlen(cur);
            if (nc + nt + nr + 2 > sizeof next)
                return mount_fail(err, "view path", p, ENAMETOOLONG);
            size_t o = 0;
            if (t[0] != '/') {
                memcpy(next, cur, nc);
                next[nc] = '/';
                o = nc + 1;
            }
            memcpy(next + o, t, nt);
            memcpy(next + o + nt, s, nr + 1);
            return view_add(top, next, depth + 1, err);
        }
        if (covered)
            continue; /* visible already; links further on still count */
        if (!last) {
            if (!S_ISDIR(st.st_mode))
                return 0;
            if (path_cat(dst, sizeof dst, top, cur) < 0 ||
                (mkdir(dst, 0755) < 0 && errno != EEXIST))
                return mount_fail(err, "view dir", cur, errno);
            continue;
        }
        if (view_bind(top, cur, S_ISDIR(st.st_mode)) < 0)
            return mount_fail(err, "view bind", cur, errno);
        return 0;
    }
}

/* The new /dev: a small tmpfs with the usual nodes, every nvidia* node or
 * directory and dri bound from the host, and the fd links. The names are
 * read with getdents64 into a stack buffer (no allocation). */
static int view_dev_fill(const char *top, kg_err *err)
{
    char d[KG_BIG_PATH], h[64];
    if (path_cat(d, sizeof d, top, "/dev") < 0 || mkdir(d, 0755) < 0 ||
        mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NOEXEC,
              "mode=755,size=65536,nr_inodes=512") < 0)
        return mount_fail(err, "new", "/dev", errno);
    struct stat st;
    for (int i = 0; view_dev[i]; i++) {
        path_cat(h, sizeof h, "/dev/", view_dev[i]);
        if (stat(h, &st) == 0 && view_bind(top, h, 0) < 0)
            return mount_fail(err, "view bind", h, errno);
    }
    int fd = open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return mount_fail(err, "read", "/dev", errno);
    char buf[4096];
    long nb;
    int r = 0;
    while (!r && (nb = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < nb && !r;) {
            const struct dirent64 *e = (const void *)(buf + off);
            off += e->d_reclen;
            if (strncmp(e->d_name, "nvidia", 6) && strcmp(e->d_name, "dri"))
                continue;
            if (path_cat(h, sizeof h, "/dev/", e->d_name) < 0)
                continue;
            if (lstat(h, &st) < 0 || S_ISLNK(st.st_mode))
                continue;
            if (view_bind(top, h, S_ISDIR(st.st_mode)) < 0)
                r = mount_fail(err, "view bind", h, errno);
        }
    }
    close(fd);
    static const char *const link[][2] = {{"/proc/self/fd", "/dev/fd"},
                                          {"/proc/self/fd/0", "/dev/stdin"},
                                          {"/proc/self/fd/1", "/dev/stdout"},
                                          {"/proc/self/fd/2", "/dev/stderr"}};
    for (int i = 0; i < 4 && !r; i++)
        if (path_cat(d, sizeof d, top, link[i][1]) < 0 ||
            symlink(link[i][0], d) < 0)
            r = mount_fail(err, "view link", link[i][1], errno);
    if (!r && (path_cat(d, sizeof d, top, "/dev/shm") < 0 || mkdir(d, 0755)))
        r = mount_fail(err, "view dir", "/dev/shm", errno);
    view_mark("/dev");
    return r;
}

/* Builds the new root on a tmpfs mounted on the workdir (a directory that
 * exists and is the task's own; the task's own tmpfs goes on top+workdir
 * later): /proc and /sys bound whole, the new /dev, the system's part and
 * cfg->view_paths, and empty mount points for /tmp, /var/tmp, the workdir
 * and the kept directories. */
static int view_build(const kg_sandbox_cfg *cfg, const char *top, kg_err *err)
{
    view_nbound = 0;
    if (mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=755,size=1048576,nr_inodes=4096") < 0)
        return mount_fail(err, "new root on", top, errno);
    static const char *const whole[] = {"/proc", "/sys"};
    for (int i = 0; i < 2; i++)
        if (view_bind(top, whole[i], 1) < 0)
            return mount_fail(err, "view bind", whole[i], errno);
    int r = view_dev_fill(top, err);
    for (int i = 0; view_system[i] && !r; i++)
        r = view_add(top, view_system[i], 0, err);
    for (int i = 0; i < KG_SANDBOX_MAX_VIEW && !r; i++)
        if (cfg->view_paths[i])
            r = view_add(top, cfg->view_paths[i], 0, err);
    char d[KG_BIG_PATH];
    static const char *const dirs[] = {"/tmp", "/var", "/var/tmp"};
    for (int i = 0; i < 3 && !r; i++)
        if (path_cat(d, sizeof d, top, dirs[i]) < 0 ||
            (mkdir(d, 0755) < 0 && errno != EEXIST))
            r = mount_fail(err, "view dir", dirs[i], errno);
    for (int i = -1; i < KG_SANDBOX_MAX_KEEP && !r; i++) {
        const char *k = i < 0 ? cfg->workdir : cfg->keep_paths[i];
        if (k && !view_covered(k) &&
            (path_cat(d, sizeof d, top, k) < 0 || mkdir_p(d) < 0))
            r = mount_fail(err, "view dir", k, errno);
    }
    return r;
}

/* Into the new root, which becomes "/"; the host's root is detached. */
static int view_enter(const char *top, kg_err *err)
{
    if (chdir(top) < 0)
        return mount_fail(err, "chdir", top, errno);
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return mount_fail(err, "pivot_root to", top, errno);
    /* the old root now sits on top of the new one: detach it */
    if (umount2(".", MNT_DETACH) < 0)
        return mount_fail(err, "detach of the old root at", top, errno);
    if (chdir("/") < 0)
        return sys_fail(err, "chdir /", errno);
    /* the skeleton is root's and never the child's to change */
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
        return mount_fail(err, "read-only remount of", "/", errno);
    return 0;
}

/* Private mount namespace: tmpfs /tmp etc. (private_tmp), read-only
 * rest (readonly_root), keep_paths bound back writable where they were,
 * all of it in a new root of allowed paths when new_root is set. */
static int private_mounts(const kg_sandbox_cfg *cfg, kg_err *err)
{
    if (!cfg->private_tmp && !cfg->readonly_root)
        return 0;
    if (cfg->private_tmp && !cfg->workdir)
        return kg_errf(err, KG_EINVAL, "sandbox: private_tmp needs a workdir");
    if (unshare(CLONE_NEWNS) < 0)
        return sys_fail(err, "unshare(CLONE_NEWNS)", errno);
    /* nothing mounted here leaks out, nothing of the host's comes in */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return sys_fail(err, "mount private /", errno);
    int keep[KG_SANDBOX_MAX_KEEP], r = 0;
    /* the kept directories, held before anything covers them */
    for (int i = 0; i < KG_SANDBOX_MAX_KEEP; i++) {
        const char *k = cfg->keep_paths[i];
        keep[i] = k ? open(k, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
        if (k && keep[i] < 0 && !r)
            r = mount_fail(err, "keep path", k, errno);
    }
    /* everything is put in place below top while the host's paths (and
     * the held fds' mounts) are still in the namespace; the pivot comes
     * last */
    int view = cfg->new_root;
    const char *top = view ? cfg->workdir : "";
    if (!r && view)
        r = view_build(cfg, top, err);
    if (!r && cfg->readonly_root)
        r = make_readonly(view ? top : "/", err);
    if (!r && cfg->private_tmp)
        r = mount_tmp(cfg, top, err);
    for (int i = 0; i < KG_SANDBOX_MAX_KEEP && !r; i++) {
        const char *k = cfg->keep_paths[i];
        char at[KG_BIG_PATH];
        if (!k)
            continue;
        if (path_cat(at, sizeof at, top, k) < 0 || mkdir_p(at) < 0 ||
            bind_fd(keep[i], at, MS_REC) < 0)
            r = mount_fail(err, "keep path", k, errno);
        /* the bind copied the read-only flag of its source: writable */
        else if (cfg->readonly_root &&
                 mount(NULL, at, NULL,
                       MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
            r = mount_fail(err, "writable keep path", k, errno);
    }
    for (int i = 0; i < KG_SANDBOX_MAX_KEEP; i++)
        if (keep[i] >= 0)
            close(keep[i]);
    if (!r && view)
        r = view_enter(top, err);
    return r;
}

/* Empties the bounding, ambient, effective, permitted and inheritable
 * sets, so that even uid 0 keeps no privilege, also across exec. */
static int drop_caps(kg_err *err)
{
    for (unsigned long c = 0; c < 64; c++) {
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == 0)
            continue;
        if (errno == EINVAL)
            break; /* past the last capability */
        if (errno == EPERM)
            break; /* no CAP_SETPCAP: we hold nothing to drop */
        return sys_fail(err, "PR_CAPBSET_DROP", errno);
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct h = {.version =
                                             _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capset, &h, d) < 0)
        return sys_fail(err, "capset", errno);
    return 0;
}

static int load_filter(const kg_sandbox_filter *f, kg_err *err)
{
    struct sock_fprog prog = {.len = (unsigned short)f->len,
                              .filter = (struct sock_filter *)f->insns};
    if (!f->insns || f->len == 0 || f->len > BPF_MAXINSNS)
        return kg_errf(err, KG_EINVAL, "sandbox: empty seccomp filter");
    /* TSYNC: a child of a multi-threaded parent is single-threaded, but
     * if threads exist by now they get the filter too. */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                &prog) == 0)
        return 0;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0)
        return 0;
    return sys_fail(err, "seccomp", errno);
}

int kg_sandbox_enter(const kg_sandbox_cfg *cfg, kg_err *err)
{
    int r;
    if (!cfg || (cfg->n_keep_fds > 0 && !cfg->keep_fds) || cfg->n_keep_fds < 0)
        return kg_errf(err, KG_EINVAL, "sandbox: bad config");
    if (cfg->workdir && strlen(cfg->workdir) >= KG_SANDBOX_PATH_MAX)
        return kg_errf(err, KG_EINVAL, "sandbox: workdir too long");
    for (int i = 0; i < KG_SANDBOX_MAX_KEEP; i++)
        if (cfg->keep_paths[i] && (strlen(cfg->keep_paths[i]) >=
                                       KG_SANDBOX_PATH_MAX ||
                                   cfg->keep_paths[i][0] != '/'))
            return kg_errf(err, KG_EINVAL,
                           "sandbox: keep path must be absolute and shorter "
                           "than %d",
                           KG_SANDBOX_PATH_MAX);
    if (cfg->private_tmp && (!cfg->workdir || cfg->workdir[0] != '/'))
        return kg_errf(err, KG_EINVAL,
                       "sandbox: private_tmp needs an absolute workdir");
    if (cfg->new_root && !cfg->private_tmp)
        return kg_errf(err, KG_EINVAL, "sandbox: new_root needs private_tmp");
    for (int i = 0; i < KG_SANDBOX_MAX_VIEW; i++)
        if (cfg->view_paths[i] &&
            (strlen(cfg->view_paths[i]) >= KG_SANDBOX_PATH_MAX ||
             cfg->view_paths[i][0] != '/'))
            return kg_errf(err, KG_EINVAL,
                           "sandbox: view path must be absolute and shorter "
                           "than %d",
                           KG_SANDBOX_PATH_MAX);

    /* own session and process group: killed as a whole, no tty */
    if (setsid() < 0 && getsid(0) != getpid())
        return sys_fail(err, "setsid", errno);
    if ((r = arm_pdeathsig(cfg, err)) < 0)
        return r;
    /* join first, so everything below is charged to the task's group */
    if ((r = join_cgroups(cfg, err)) < 0)
        return r;
    if (cfg->new_netns && unshare(CLONE_NEWNET) < 0)
        return sys_fail(err, "unshare(CLONE_NEWNET)", errno);
    if ((r = set_stdio(cfg->stdin_fd, 0, err)) < 0 ||
        (r = set_stdio(cfg->stdout_fd, 1, err)) < 0 ||
        (r = set_stdio(cfg->stderr_fd, 2, err)) < 0)
        return r;
    /* fds before RLIMIT_NOFILE: the fallback closer reads the limit */
    if ((r = close_fds(cfg, err)) < 0)
        return r;
    /* mounts after the fds (it opens and closes a few of its own), while
     * we still hold CAP_SYS_ADMIN, and before the chdir into the workdir */
    if ((r = private_mounts(cfg, err)) < 0)
        return r;
    if ((r = set_rlimits(cfg, err)) < 0)
        return r;
    if (cfg->workdir && chdir(cfg->workdir) < 0)
        return sys_fail(err, cfg->workdir, errno);
    if (cfg->umask >= 0)
        umask((mode_t)(cfg->umask & 0777));
    if ((r = set_env(cfg, err)) < 0)
        return r;
    if ((r = set_ids(cfg, err)) < 0)
        return r;
    if ((r = drop_caps(err)) < 0)
        return r;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sys_fail(err, "PR_SET_NO_NEW_PRIVS", errno);
    if (cfg->filter && (r = load_filter(cfg->filter, err)) < 0)
        return r;
    return 0;
}
