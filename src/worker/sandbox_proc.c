/* sandbox_proc.c - the parent side's process cleanup: a child's whole
 * process group killed, orphans reaped as subreaper (sandbox.h). */
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
#include "common/clock.h"

/* ---- processes: group kill, orphans ---------------------------------- */

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
    double deadline = kg_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
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
        if (kg_now_ms() >= deadline)
            return kg_errf(err, KG_ETIMEOUT,
                           "process group %d still alive after %d ms",
                           (int)pgid, timeout_ms);
        kg_sleep_ms(nap);
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
        double deadline = kg_now_ms() + 2000;
        for (int i = 0; i < s.n; i++)
            while (waitpid(s.found[i], NULL, WNOHANG) == 0 &&
                   kg_now_ms() < deadline)
                kg_sleep_ms(1);
    }
    return killed;
}
