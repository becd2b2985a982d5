/*
 * sandbox.c - the per-task sandbox: child-side entry (setsid, PDEATHSIG,
 * netns, rlimits, fds, environment, credentials, seccomp), the seccomp
 * program compiled in the parent, the private work directory, and the
 * parent-side cleanup (process group, orphans, cgroups).
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
    char p[KG_SANDBOX_PATH_MAX];
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
static int make_readonly(kg_err *err)
{
    struct kg_mount_attr a = {.attr_set = KG_MOUNT_ATTR_RDONLY};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &a,
                sizeof a) == 0)
        return 0;
    if (errno != ENOSYS)
        return mount_fail(err, "read-only", "/", errno);
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
        return mount_fail(err, "read-only remount of", "/", errno);
    return 0;
}

/* One tmpfs (the task's quota) holds four directories: the workdir and
 * new /tmp, /var/tmp and /dev/shm. It is mounted on the workdir first (a
 * directory that exists and is the task's own), its parts are held by fd,
 * then bound into place; the workdir is bound last, recreated inside the
 * new /tmp when it was below it. */
static int mount_tmp(const kg_sandbox_cfg *cfg, kg_err *err)
{
    static const char *const part[] = {"home", "tmp", "var_tmp", "shm"};
    static const char *const where[] = {NULL, "/tmp", "/var/tmp", "/dev/shm"};
    enum { NPART = 4 };
    const char *w = cfg->workdir;
    char opts[96] = "mode=755,nr_inodes=65536,size=";
    u64_dec(cfg->tmp_bytes ? cfg->tmp_bytes : KG_SANDBOX_TMP_DEFAULT,
            opts + strlen(opts));
    if (mount("tmpfs", w, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return mount_fail(err, "tmpfs on", w, errno);
    int fd[NPART], r = 0;
    for (int i = 0; i < NPART; i++)
        fd[i] = -1;
    char p[KG_SANDBOX_PATH_MAX + 16];
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
        if (lstat(where[i], &st) == 0 && S_ISDIR(st.st_mode) &&
            bind_fd(fd[i], where[i], 0) < 0)
            r = mount_fail(err, "private", where[i], errno);
    }
    if (!r && (mkdir_p(w) < 0 || bind_fd(fd[0], w, 0) < 0))
        r = mount_fail(err, "private workdir", w, errno);
    for (int i = 0; i < NPART; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    return r;
}

/* Private mount namespace: tmpfs /tmp etc. (private_tmp), read-only
 * rest (readonly_root), keep_paths bound back writable where they were. */
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
    if (!r && cfg->readonly_root)
        r = make_readonly(err);
    if (!r && cfg->private_tmp)
        r = mount_tmp(cfg, err);
    for (int i = 0; i < KG_SANDBOX_MAX_KEEP && !r; i++) {
        const char *k = cfg->keep_paths[i];
        if (!k)
            continue;
        if (mkdir_p(k) < 0 || bind_fd(keep[i], k, MS_REC) < 0)
            r = mount_fail(err, "keep path", k, errno);
        /* the bind copied the read-only flag of its source: writable */
        else if (cfg->readonly_root &&
                 mount(NULL, k, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV,
                       NULL) < 0)
            r = mount_fail(err, "writable keep path", k, errno);
    }
    for (int i = 0; i < KG_SANDBOX_MAX_KEEP; i++)
        if (keep[i] >= 0)
            close(keep[i]);
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

/* ---- seccomp program, built in the parent ---------------------------- */

/* Killed on the spot: nothing legitimate calls these, and a caller is an
 * attack we want to see as a SIGSYS death. */
static const char deny_kill[] = "reboot kexec_load kexec_file_load "
                                "init_module finit_module delete_module "
                                "iopl ioperm";

/* Fail with EPERM: privileged, debugging or kernel-attack-surface calls an
 * evaluation never makes (docs/sandbox.md says why each). */
static const char deny_eperm[] =
    "ptrace process_vm_readv process_vm_writev pidfd_getfd process_madvise "
    "mount umount2 pivot_root chroot fsopen fsconfig fsmount fspick "
    "move_mount open_tree mount_setattr open_by_handle_at name_to_handle_at "
    "swapon swapoff setns unshare keyctl add_key request_key userfaultfd "
    "acct settimeofday clock_settime clock_adjtime adjtimex bpf "
    "io_uring_setup io_uring_enter io_uring_register quotactl quotactl_fd "
    "syslog vhangup uselib modify_ldt sethostname setdomainname "
    "fanotify_init lookup_dcookie nfsservctl _sysctl";

/* Address families a child may open: Unix sockets (Python, CUDA), IP
 * (isolated by the network namespace: fails with ENETUNREACH) and netlink
 * (glibc's getaddrinfo; namespace-local). Everything else (packet, vsock,
 * alg, bluetooth, ...) fails with EAFNOSUPPORT. */
static int family_allowed(unsigned f)
{
    return f == AF_UNIX || f == AF_INET || f == AF_INET6 || f == AF_NETLINK;
}

static int add_rule(scmp_filter_ctx ctx, uint32_t act, const char *name,
                    unsigned n, const struct scmp_arg_cmp *cmp, kg_err *err)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* unknown to this libseccomp/arch: nothing to deny */
    int r = seccomp_rule_add_array(ctx, act, nr, n, cmp);
    if (r < 0)
        return kg_errf(err, KG_EINVAL, "seccomp rule for %s: %s", name,
                       strerror(-r));
    return 0;
}

/* One unconditional rule per name of the space-separated list. */
static int add_list(scmp_filter_ctx ctx, uint32_t act, const char *list,
                    kg_err *err)
{
    char name[64];
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, " ");
        if (n && n < sizeof name) {
            memcpy(name, p, n);
            name[n] = 0;
            int r = add_rule(ctx, act, name, 0, NULL, err);
            if (r < 0)
                return r;
        }
        p += n + (p[n] == ' ');
    }
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, const kg_sandbox_profile *prof,
                     kg_err *err)
{
    int r;
    if ((r = add_list(ctx, SCMP_ACT_KILL_PROCESS, deny_kill, err)) < 0 ||
        (r = add_list(ctx, SCMP_ACT_ERRNO(EPERM), deny_eperm, err)) < 0)
        return r;
    if (!prof->allow_perf &&
        (r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "perf_event_open", 0, NULL,
                      err)) < 0)
        return r;

    /* clone3 passes its flags in memory seccomp cannot read: answer
     * ENOSYS and glibc falls back to clone, whose flags we can check */
    if ((r = add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err)) < 0)
        return r;
    static const uint64_t ns_flags[] = {
        CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
    };
    for (size_t i = 0; i < sizeof ns_flags / sizeof *ns_flags; i++) {
        struct scmp_arg_cmp c =
            SCMP_A0_64(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
        if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &c, err)) < 0)
            return r;
    }

    /* the kernel reads the family as an int: compare the low 32 bits only,
     * so garbage in the upper half cannot slip past */
    for (unsigned f = 0; f < 64; f++) {
        if (family_allowed(f))
            continue;
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffu, f);
        if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c,
                          err)) < 0)
            return r;
    }

    if (!prof->allow_wx) {
        const uint64_t wx = PROT_WRITE | PROT_EXEC;
        struct scmp_arg_cmp c = SCMP_A2_64(SCMP_CMP_MASKED_EQ, wx, wx);
        if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EACCES), "mmap", 1, &c, err)) <
                0 ||
            (r = add_rule(ctx, SCMP_ACT_ERRNO(EACCES), "mprotect", 1, &c,
                          err)) < 0 ||
            (r = add_rule(ctx, SCMP_ACT_ERRNO(EACCES), "pkey_mprotect", 1, &c,
                          err)) < 0)
            return r;
        /* READ_IMPLIES_EXEC would make every readable mapping executable
         * behind the mmap check. Deny any personality with that bit except
         * the query 0xffffffff: every other such value has some other bit
         * clear, one rule per bit. */
        for (unsigned b = 0; b < 32; b++) {
            uint32_t bit = 1u << b;
            if (bit == READ_IMPLIES_EXEC)
                continue;
            struct scmp_arg_cmp p = SCMP_A0_64(
                SCMP_CMP_MASKED_EQ, READ_IMPLIES_EXEC | bit, READ_IMPLIES_EXEC);
            if ((r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &p,
                              err)) < 0)
                return r;
        }
    }
    return 0;
}

int kg_sandbox_filter_build(const kg_sandbox_profile *prof,
                            kg_sandbox_filter *out, kg_err *err)
{
    kg_sandbox_profile dflt = {0, 0};
    if (!out)
        return kg_errf(err, KG_EINVAL, "filter_build: NULL out");
    memset(out, 0, sizeof *out);
    if (!prof)
        prof = &dflt;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return kg_errf(err, KG_ENOMEM, "seccomp_init failed");
    int r = 0, fd = -1;
    /* i386/x32 system calls from an x86-64 process would bypass every
     * rule below (other numbers): they kill the process instead */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) <
        0) {
        r = kg_errf(err, KG_EINVAL, "seccomp: cannot set bad-arch action");
        goto out;
    }
    if ((r = add_rules(ctx, prof, err)) < 0)
        goto out;
    fd = memfd_create("kgym-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        r = sys_fail(err, "memfd_create", errno);
        goto out;
    }
    int e = seccomp_export_bpf(ctx, fd);
    if (e < 0) {
        r = kg_errf(err, KG_EIO, "seccomp_export_bpf: %s", strerror(-e));
        goto out;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) ||
        size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
        r = kg_errf(err, KG_EIO, "seccomp: bad program size %lld",
                    (long long)size);
        goto out;
    }
    out->insns = malloc((size_t)size);
    if (!out->insns) {
        r = kg_errf(err, KG_ENOMEM, "out of memory");
        goto out;
    }
    if (pread(fd, out->insns, (size_t)size, 0) != (ssize_t)size) {
        r = sys_fail(err, "reading the seccomp program", errno);
        goto out;
    }
    out->len = (unsigned)(size / (off_t)sizeof(struct sock_filter));
    out->wx = !prof->allow_wx;
out:
    if (fd >= 0)
        close(fd);
    seccomp_release(ctx);
    if (r < 0)
        kg_sandbox_filter_free(out);
    return r;
}

void kg_sandbox_filter_free(kg_sandbox_filter *f)
{
    if (!f)
        return;
    free(f->insns);
    f->insns = NULL;
    f->len = 0;
}

/* ---- private work directory ------------------------------------------ */

int kg_sandbox_mkdtemp(const char *base, char *out, size_t outlen, kg_err *err)
{
    if (!out || outlen == 0)
        return kg_errf(err, KG_EINVAL, "mkdtemp: no output buffer");
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    int n = snprintf(out, outlen, "%s/kgym-XXXXXX", base);
    if (n < 0 || (size_t)n >= outlen || (size_t)n >= KG_SANDBOX_PATH_MAX)
        return kg_errf(err, KG_EINVAL, "mkdtemp: path too long");
    if (!mkdtemp(out)) /* mode 0700 */
        return kg_errf(err, KG_EIO, "mkdtemp %s: %s", out, strerror(errno));
    return 0;
}

/* Opens name below dirfd as a directory on device dev, never through a
 * symlink; a directory the child made unreadable is chmod'ed first. */
static int open_subdir(int dirfd, const char *name, dev_t dev)
{
    int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(dirfd, name, flags);
    if (fd < 0 && errno == EACCES) {
        fchmodat(dirfd, name, S_IRWXU, AT_SYMLINK_NOFOLLOW);
        fd = openat(dirfd, name, flags);
    }
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_dev != dev) {
        close(fd);
        errno = EXDEV;
        return -1;
    }
    return fd;
}

/*
 * Unlinks every non-directory in dirfd. Returns 1 with the first
 * subdirectory's name in sub, 0 when the directory is empty, -1 on error.
 */
static int strip_dir(int dirfd, char *sub, size_t sublen)
{
    int dfd = dup(dirfd);
    if (dfd < 0)
        return -1;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    rewinddir(d);
    fchmod(dirfd, S_IRWXU); /* a child may have made it read-only */
    int found = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        int isdir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            isdir = S_ISDIR(st.st_mode);
        }
        if (isdir) {
            if (!found && strlen(nm) < sublen) {
                memcpy(sub, nm, strlen(nm) + 1);
                found = 1;
            }
            continue;
        }
        if (unlinkat(dirfd, nm, 0) < 0 && errno != ENOENT)
            rc = -1;
    }
    closedir(d);
    return rc < 0 ? -1 : found;
}

/* In parent, removes the directory whose inode is child's. */
static int rmdir_by_inode(int parent, const struct stat *child)
{
    int dfd = dup(parent);
    if (dfd < 0)
        return -1;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    rewinddir(d);
    int rc = -1;
    errno = ENOENT;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(parent, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            st.st_ino == child->st_ino && st.st_dev == child->st_dev) {
            rc = unlinkat(parent, e->d_name, AT_REMOVEDIR);
            break;
        }
    }
    closedir(d);
    return rc;
}

/*
 * Depth-first without recursion: descend into the first subdirectory,
 * strip it, and when a directory is empty climb back through ".." and
 * remove it. Two fds at most, whatever the depth a child built.
 */
int kg_sandbox_rmtree(const char *path, kg_err *err)
{
    struct stat root;
    if (!path || !*path)
        return kg_errf(err, KG_EINVAL, "rmtree: empty path");
    if (lstat(path, &root) < 0)
        return errno == ENOENT ? 0
                               : kg_errf(err, KG_EIO, "rmtree %s: %s", path,
                                         strerror(errno));
    if (!S_ISDIR(root.st_mode))
        return unlink(path) < 0 ? kg_errf(err, KG_EIO, "rmtree %s: %s", path,
                                          strerror(errno))
                                : 0;
    int cur = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cur < 0)
        return kg_errf(err, KG_EIO, "rmtree %s: %s", path, strerror(errno));
    long depth = 0;
    char sub[NAME_MAX + 1];
    for (;;) {
        int r = strip_dir(cur, sub, sizeof sub);
        if (r < 0)
            break;
        if (r == 1) {
            int next = open_subdir(cur, sub, root.st_dev);
            if (next < 0)
                break;
            close(cur);
            cur = next;
            depth++;
            continue;
        }
        if (depth == 0) {
            close(cur);
            if (rmdir(path) < 0)
                return kg_errf(err, KG_EIO, "rmtree %s: %s", path,
                               strerror(errno));
            return 0;
        }
        struct stat me;
        if (fstat(cur, &me) < 0)
            break;
        int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (up < 0)
            break;
        close(cur);
        cur = up;
        depth--;
        if (rmdir_by_inode(cur, &me) < 0)
            break;
    }
    int e = errno;
    close(cur);
    return kg_errf(err, KG_EIO, "rmtree %s (depth %ld): %s", path, depth,
                   strerror(e));
}

/* ---- processes: group kill, orphans ---------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Reads state, ppid and pgrp of pid from /proc/pid/stat. */
static int proc_stat(long pid, char *state, long *ppid, long *pgrp)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* comm may hold spaces and ')' */
    if (!p || sscanf(p + 1, " %c %ld %ld", state, ppid, pgrp) != 3)
        return -1;
    return 0;
}

int kg_sandbox_proc_running(pid_t pid)
{
    char st;
    long ppid, pgrp;
    return proc_stat((long)pid, &st, &ppid, &pgrp) == 0 && st != 'Z' &&
           st != 'X';
}

/* Calls fn(pid, arg) for each process; stops when fn returns nonzero. */
static int each_process(int (*fn)(long, void *), void *arg)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *e;
    int r = 0;
    while (!r && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        r = fn(strtol(e->d_name, NULL, 10), arg);
    }
    closedir(d);
    return r;
}

static int live_in_group(long pid, void *arg)
{
    char st;
    long ppid, pgrp;
    if (proc_stat(pid, &st, &ppid, &pgrp) < 0)
        return 0;
    return pgrp == *(long *)arg && st != 'Z' && st != 'X';
}

int kg_sandbox_kill_group(pid_t pgid, int timeout_ms, int *leader_status,
                          kg_err *err)
{
    if (pgid <= 1)
        return kg_errf(err, KG_EINVAL, "kill_group: bad pgid %d", (int)pgid);
    double deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    long pg = pgid, nap = 1;
    for (;;) {
        int gone = kill(-pgid, SIGKILL) < 0 && errno == ESRCH;
        int st;
        pid_t p;
        while ((p = waitpid(-pgid, &st, WNOHANG)) > 0)
            if (p == pgid && leader_status)
                *leader_status = st;
        /* members that are zombies of someone else count as dead */
        if (gone || each_process(live_in_group, &pg) == 0) {
            while ((p = waitpid(-pgid, &st, WNOHANG)) > 0)
                if (p == pgid && leader_status)
                    *leader_status = st;
            return 0;
        }
        if (now_ms() >= deadline)
            return kg_errf(err, KG_ETIMEOUT,
                           "process group %d still alive after %d ms",
                           (int)pgid, timeout_ms);
        sleep_ms(nap);
        nap = nap < 16 ? nap * 2 : nap;
    }
}

int kg_sandbox_become_subreaper(kg_err *err)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return kg_errf(err, KG_EIO, "PR_SET_CHILD_SUBREAPER: %s",
                       strerror(errno));
    return 0;
}

struct orphan_scan {
    long self;
    const pid_t *keep;
    int nkeep;
    pid_t found[256];
    int live[256]; /* not yet a zombie: gets killed */
    int n;
};

static int collect_orphan(long pid, void *arg)
{
    struct orphan_scan *s = arg;
    char st;
    long ppid, pgrp;
    if (proc_stat(pid, &st, &ppid, &pgrp) < 0 || ppid != s->self)
        return 0;
    for (int i = 0; i < s->nkeep; i++)
        if (s->keep[i] == pid)
            return 0;
    s->live[s->n] = st != 'Z' && st != 'X';
    s->found[s->n++] = (pid_t)pid;
    return s->n == (int)(sizeof s->found / sizeof *s->found);
}

int kg_sandbox_reap_orphans(const pid_t *keep, int nkeep)
{
    struct orphan_scan s = {.self = getpid(), .keep = keep, .nkeep = nkeep};
    int killed = 0;
    /* grandchildren reparent to us only once their parent dies: repeat */
    for (int round = 0; round < 64; round++) {
        s.n = 0;
        each_process(collect_orphan, &s);
        if (s.n == 0)
            break;
        for (int i = 0; i < s.n; i++)
            if (s.live[i] && kill(s.found[i], SIGKILL) == 0)
                killed++;
        double deadline = now_ms() + 2000;
        for (int i = 0; i < s.n; i++)
            while (waitpid(s.found[i], NULL, WNOHANG) == 0 &&
                   now_ms() < deadline)
                sleep_ms(1);
    }
    return killed;
}

/* ---- cgroups ---------------------------------------------------------- */

static int write_file(const char *dir, const char *file, const char *val)
{
    char path[KG_SANDBOX_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = strlen(val);
    ssize_t w = write(fd, val, n);
    int e = errno;
    close(fd);
    errno = e;
    return w == (ssize_t)n ? 0 : -1;
}

/* Reads a small file into buf (NUL-terminated); -1 on error. */
static int read_file(const char *dir, const char *file, char *buf, size_t len)
{
    char path[KG_SANDBOX_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    ssize_t n;
    while (got < len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = 0;
    return 0;
}

static int has_word(const char *list, const char *word, const char *seps)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n) {
        int left = p == list || strchr(seps, p[-1]);
        int right = p[n] == 0 || strchr(seps, p[n]);
        if (left && right)
            return 1;
    }
    return 0;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] && s[3]) {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

struct cg_mount {
    char point[KG_SANDBOX_PATH_MAX];
    char root[KG_SANDBOX_PATH_MAX];
};

/* Finds the mount of cgroup2 (ctl NULL) or of the v1 hierarchy holding
 * ctl. Returns 0 when found. */
static int find_mount(const char *ctl, struct cg_mount *m)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int found = -1;
    while (found < 0 && getline(&line, &cap, f) > 0) {
        char *sep = strstr(line, " - ");
        if (!sep)
            continue;
        *sep = 0;
        char fstype[64], source[256], opts[1024];
        if (sscanf(sep + 3, "%63s %255s %1023s", fstype, source, opts) != 3)
            continue;
        if (ctl ? strcmp(fstype, "cgroup") || !has_word(opts, ctl, ",")
                : strcmp(fstype, "cgroup2"))
            continue;
        char root[KG_SANDBOX_PATH_MAX], point[KG_SANDBOX_PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %511s %511s", root, point) != 2)
            continue;
        unescape(root);
        unescape(point);
        memcpy(m->root, root, sizeof root);
        memcpy(m->point, point, sizeof point);
        found = 0;
    }
    free(line);
    fclose(f);
    return found;
}

/* The caller's cgroup path in the v2 hierarchy (ctl NULL) or the v1
 * hierarchy holding ctl, from /proc/self/cgroup. */
static int own_cgroup(const char *ctl, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int found = -1;
    while (found < 0 && getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = 0;
        const char *ctls = c1 + 1, *path = c2 + 1;
        int match = ctl ? has_word(ctls, ctl, ",") : !strcmp(line, "0");
        if (match && strlen(path) < len) {
            memcpy(out, path, strlen(path) + 1);
            found = 0;
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* mount point + own path (relative to the mount's root) */
static int cgroup_dir(const char *ctl, char *out, size_t len)
{
    struct cg_mount m;
    char own[KG_SANDBOX_PATH_MAX];
    if (find_mount(ctl, &m) < 0 || own_cgroup(ctl, own, sizeof own) < 0)
        return -1;
    const char *rel = own;
    size_t nr = strlen(m.root);
    if (strcmp(m.root, "/") && !strncmp(own, m.root, nr))
        rel = own + nr;
    int n = snprintf(out, len, "%s%s", m.point, strcmp(rel, "/") ? rel : "");
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* mkdir + rmdir of a probe group: the only reliable writability test */
static int probe_mkdir(const char *dir)
{
    char p[KG_SANDBOX_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/kgym-probe-%d", dir, (int)getpid());
    if (mkdir(p, 0755) < 0)
        return -1;
    rmdir(p);
    return 0;
}

/* A reason for the log; truncation is fine. */
static void why_set(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* Processes in dir other than the caller; -1 if unreadable. */
static int other_procs(const char *dir)
{
    char path[KG_SANDBOX_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long pid;
    int n = 0;
    while (fscanf(f, "%ld", &pid) == 1)
        n += pid != (long)getpid();
    fclose(f);
    return n;
}

/* v2: both controllers available in our cgroup and enabled for its
 * children (moving ourselves to a leaf if the no-internal-process rule
 * demands it). */
static int probe_v2(kg_sandbox_cgroups *cg, char *why, size_t whylen)
{
    char dir[KG_SANDBOX_PATH_MAX], buf[512];
    if (cgroup_dir(NULL, dir, sizeof dir) < 0) {
        why_set(why, whylen, "no cgroup2 mount");
        return -1;
    }
    if (read_file(dir, "cgroup.controllers", buf, sizeof buf) < 0) {
        why_set(why, whylen, "cannot read %.150s/cgroup.controllers", dir);
        return -1;
    }
    int mem = has_word(buf, "memory", " \n"),
        pids = has_word(buf, "pids", " \n");
    if (!mem && !pids) {
        why_set(why, whylen, "cgroup2 at %.150s has neither memory nor pids",
                dir);
        return -1;
    }
    if (read_file(dir, "cgroup.subtree_control", buf, sizeof buf) < 0)
        buf[0] = 0;
    int need = (mem && !has_word(buf, "memory", " \n")) ||
               (pids && !has_word(buf, "pids", " \n"));
    const char *en = mem && pids ? "+memory +pids" : mem ? "+memory" : "+pids";
    if (need && write_file(dir, "cgroup.subtree_control", en) < 0) {
        if (errno != EBUSY) {
            why_set(why, whylen, "cgroup2 %.150s: enabling controllers: %s",
                    dir, strerror(errno));
            return -1;
        }
        /* processes live in this (non-root) cgroup. If we are the only
         * one, move to a leaf and enable; if not, moving would not help
         * and would only disturb the others. */
        int others = other_procs(dir);
        if (others != 0) {
            why_set(why, whylen,
                    "cgroup2 %.150s holds %d other processes, so %s cannot "
                    "be enabled for task groups (give the worker its own "
                    "delegated cgroup)",
                    dir, others, en);
            return -1;
        }
        char leaf[KG_SANDBOX_PATH_MAX + 16];
        snprintf(leaf, sizeof leaf, "%s/kgym-worker", dir);
        if ((mkdir(leaf, 0755) < 0 && errno != EEXIST) ||
            write_file(leaf, "cgroup.procs", "0") < 0 ||
            write_file(dir, "cgroup.subtree_control", en) < 0) {
            why_set(why, whylen, "cgroup2 %.150s: cannot enable %s: %s", dir,
                    en, strerror(errno));
            return -1;
        }
    }
    if (probe_mkdir(dir) < 0) {
        why_set(why, whylen, "cgroup2 %.150s not writable: %s", dir,
                strerror(errno));
        return -1;
    }
    if (mem) {
        cg->mem_version = 2;
        memcpy(cg->mem_base, dir, sizeof dir);
    }
    if (pids) {
        cg->pids_version = 2;
        memcpy(cg->pids_base, dir, sizeof dir);
    }
    return 0;
}

static int probe_v1(const char *ctl, char *base, char *why, size_t whylen)
{
    char dir[KG_SANDBOX_PATH_MAX];
    if (cgroup_dir(ctl, dir, sizeof dir) < 0) {
        why_set(why, whylen, "no cgroup v1 %.150s hierarchy", ctl);
        return -1;
    }
    if (probe_mkdir(dir) < 0) {
        why_set(why, whylen, "cgroup v1 %.150s not writable: %s", dir,
                strerror(errno));
        return -1;
    }
    memcpy(base, dir, sizeof dir);
    return 1;
}

int kg_sandbox_cgroup_probe(kg_sandbox_cgroups *cg, kg_err *err)
{
    memset(cg, 0, sizeof *cg);
    char w2[200] = "", wm[200] = "", wp[200] = "";
    probe_v2(cg, w2, sizeof w2);
    if (!cg->mem_version && probe_v1("memory", cg->mem_base, wm, sizeof wm) > 0)
        cg->mem_version = 1;
    if (!cg->pids_version && probe_v1("pids", cg->pids_base, wp, sizeof wp) > 0)
        cg->pids_version = 1;
    if (cg->mem_version && cg->pids_version) {
        snprintf(cg->reason, sizeof cg->reason,
                 "cgroup v%d memory at %.100s, v%d pids at %.100s",
                 cg->mem_version, cg->mem_base, cg->pids_version,
                 cg->pids_base);
        return 0;
    }
    /* a log line: truncation is acceptable (hence the checked result) */
    int n = snprintf(cg->reason, sizeof cg->reason,
                     "no usable cgroup %s%s%s (%s%s%s%s%s); %s",
                     cg->mem_version ? "" : "memory",
                     !cg->mem_version && !cg->pids_version ? "+" : "",
                     cg->pids_version ? "" : "pids", w2, *wm ? "; " : "", wm,
                     *wp ? "; " : "", wp,
                     cg->mem_version || cg->pids_version
                         ? "the other one is used"
                         : "memory bounded by rlimits only, strays by "
                           "process group and subreaper");
    if (n < 0)
        cg->reason[0] = 0;
    return kg_errf(err, KG_EUNAVAIL, "%s", cg->reason);
}

const char *kg_sandbox_cgroup_reason(const kg_sandbox_cgroups *cg)
{
    return cg->reason;
}

static int name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64 || !strcmp(s, ".") || !strcmp(s, ".."))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
            return 0;
    return 1;
}

/* Adds (or finds) the directory <base>/<name> in g; returns its index. */
static int add_dir(kg_sandbox_cgroup *g, int version, const char *base,
                   const char *name)
{
    char d[KG_SANDBOX_PATH_MAX];
    int n = snprintf(d, sizeof d, "%s/%s", base, name);
    if (n < 0 || (size_t)n >= sizeof d) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->dir[i], d))
            return i;
    if (mkdir(d, 0755) < 0)
        return -1;
    int i = g->n++;
    g->version[i] = version;
    memcpy(g->dir[i], d, sizeof d);
    snprintf(g->procs[i], sizeof g->procs[i], "%s/cgroup.procs", d);
    return i;
}

int kg_sandbox_cgroup_open(const kg_sandbox_cgroups *cgs, const char *name,
                           uint64_t mem_bytes, uint64_t pids_max,
                           kg_sandbox_cgroup *g, kg_err *err)
{
    memset(g, 0, sizeof *g);
    g->mem = g->pids = -1;
    if (!name_ok(name))
        return kg_errf(err, KG_EINVAL, "cgroup: bad name");
    if (!cgs->mem_version && !cgs->pids_version)
        return kg_errf(err, KG_EUNAVAIL, "cgroup: %s", cgs->reason);
    char v[32];
    if (cgs->mem_version) {
        if ((g->mem = add_dir(g, cgs->mem_version, cgs->mem_base, name)) < 0)
            goto fail;
        const char *dir = g->dir[g->mem];
        if (cgs->mem_version == 2) {
            snprintf(v, sizeof v, "%llu", (unsigned long long)mem_bytes);
            if (write_file(dir, "memory.max", mem_bytes ? v : "max") < 0)
                goto fail;
            write_file(dir, "memory.swap.max", "0"); /* absent w/o swap */
        } else {
            snprintf(v, sizeof v, "%llu", (unsigned long long)mem_bytes);
            if (mem_bytes && write_file(dir, "memory.limit_in_bytes", v) < 0)
                goto fail;
            if (mem_bytes) /* memory+swap: absent without swap accounting */
                write_file(dir, "memory.memsw.limit_in_bytes", v);
        }
    }
    if (cgs->pids_version) {
        if ((g->pids = add_dir(g, cgs->pids_version, cgs->pids_base, name)) < 0)
            goto fail;
        snprintf(v, sizeof v, "%llu", (unsigned long long)pids_max);
        if (write_file(g->dir[g->pids], "pids.max", pids_max ? v : "max") < 0)
            goto fail;
    }
    return 0;
fail:;
    int e = errno;
    kg_errf(err, KG_EIO, "cgroup %s: %s", name, strerror(e));
    for (int i = 0; i < g->n; i++)
        rmdir(g->dir[i]);
    g->n = 0;
    return e == EEXIST ? KG_ESTATE : KG_EIO;
}

void kg_sandbox_cgroup_attach(const kg_sandbox_cgroup *g, kg_sandbox_cfg *cfg)
{
    for (int i = 0; i < KG_SANDBOX_MAX_CGROUPS; i++)
        cfg->cgroup_procs[i] = i < g->n ? g->procs[i] : NULL;
}

/* Calls kill(SIGKILL) on every pid in dir's cgroup.procs if do_kill;
 * returns how many were listed, -1 if unreadable. */
static int procs_scan(const char *dir, int do_kill)
{
    char path[KG_SANDBOX_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long pid;
    int n = 0;
    while (fscanf(f, "%ld", &pid) == 1) {
        n++;
        if (do_kill && pid > 1)
            kill((pid_t)pid, SIGKILL);
    }
    fclose(f);
    return n;
}

int kg_sandbox_cgroup_count(const kg_sandbox_cgroup *g)
{
    int most = 0;
    for (int i = 0; i < g->n; i++) {
        int c = procs_scan(g->dir[i], 0);
        if (c < 0)
            return KG_EIO;
        most = c > most ? c : most;
    }
    return most;
}

long kg_sandbox_cgroup_oom_kills(const kg_sandbox_cgroup *g)
{
    if (g->mem < 0)
        return 0;
    char buf[1024];
    const char *file =
        g->version[g->mem] == 2 ? "memory.events" : "memory.oom_control";
    if (read_file(g->dir[g->mem], file, buf, sizeof buf) < 0)
        return 0;
    const char *p = strstr(buf, "oom_kill ");
    return p ? strtol(p + 9, NULL, 10) : 0;
}

int kg_sandbox_cgroup_close(kg_sandbox_cgroup *g, int timeout_ms, kg_err *err)
{
    double deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (int i = 0; i < g->n; i++)
        if (g->version[i] == 2)
            write_file(g->dir[i], "cgroup.kill", "1"); /* Linux >= 5.14 */
    long nap = 1;
    for (;;) {
        /* kill what is listed until nothing is: a process forking
         * meanwhile is caught on the next pass, and a process with a
         * pending SIGKILL cannot fork */
        int live = 0;
        for (int i = 0; i < g->n; i++) {
            int c = procs_scan(g->dir[i], 1);
            live += c > 0 ? c : 0;
        }
        if (!live) {
            int left = 0;
            for (int i = 0; i < g->n; i++) {
                if (!g->dir[i][0])
                    continue;
                if (rmdir(g->dir[i]) == 0 || errno == ENOENT)
                    g->dir[i][0] = 0;
                else
                    left++;
            }
            if (!left) {
                g->n = 0;
                return 0;
            }
        }
        if (now_ms() >= deadline)
            return kg_errf(err, KG_ETIMEOUT,
                           "cgroup %s: %d processes left after %d ms",
                           g->n ? g->dir[0] : "?", live, timeout_ms);
        sleep_ms(nap);
        nap = nap < 16 ? nap * 2 : nap;
    }
}
