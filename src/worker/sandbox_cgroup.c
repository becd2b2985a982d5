/* sandbox_cgroup.c - per-task cgroups (v2 or v1 memory and pids): probed,
 * opened, counted, and closed with what is left in them killed (sandbox.h). */
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
    double deadline = kg_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
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
        if (kg_now_ms() >= deadline)
            return kg_errf(err, KG_ETIMEOUT,
                           "cgroup %s: %d processes left after %d ms",
                           g->n ? g->dir[0] : "?", live, timeout_ms);
        kg_sleep_ms(nap);
        nap = nap < 16 ? nap * 2 : nap;
    }
}
