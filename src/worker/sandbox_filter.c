/* sandbox_filter.c - the seccomp program of a sandboxed child, compiled in
 * the parent (sandbox.h: kg_sandbox_filter_build). */
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
        r = kg_errf(err, KG_EIO, "sandbox: memfd_create: %s", strerror(errno));
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
        r = kg_errf(err, KG_EIO, "sandbox: reading the seccomp program: %s",
                    strerror(errno));
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
