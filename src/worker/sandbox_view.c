/* sandbox_view.c - parent side of the new root (new_root): which paths a
 * child running a given Python must see besides the system's part, which
 * kg_sandbox_enter adds itself. Asked of the interpreter once, at start. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/sandbox.h"

/* The interpreter's prefixes, its directory (as named and resolved), the
 * directory of Debian's sitecustomize, its import path, and where torch
 * and triton live (found without importing them). -I: the import path of
 * the interpreter itself; the harness comes as an extra path. */
static const char py_code[] =
    "import sys, os, importlib.util as u\n"
    "p = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,"
    " os.path.dirname(sys.executable),"
    " os.path.dirname(os.path.realpath(sys.executable)),"
    " '/etc/python%d.%d' % sys.version_info[:2]] + sys.path\n"
    "for m in ('torch', 'triton'):\n"
    "    try:\n"
    "        p += list(u.find_spec(m).submodule_search_locations or [])\n"
    "    except Exception:\n"
    "        pass\n"
    "print('\\n'.join(x for x in p if x.startswith('/')))\n";

/* Already in the system's part of the view (sandbox.c), or never bound. */
static const char *const covered[] = {
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
    "/sys", "/dev", "/etc/alternatives", "/etc/ld.so.conf.d", NULL};

#define MAX_CAND 256

struct cands {
    int n;
    char *p[MAX_CAND];
};

static void add(struct cands *c, const char *s, size_t len)
{
    if (c->n < MAX_CAND && len > 1 && s[0] == '/' && len < PATH_MAX)
        c->p[c->n++] = strndup(s, len);
}

/* Each entry of a ':'-separated list (PATH, LD_LIBRARY_PATH). */
static void add_list(struct cands *c, const char *v)
{
    while (v && *v) {
        size_t len = strcspn(v, ":");
        add(c, v, len);
        v += len + (v[len] == ':');
    }
}

static void add_env(struct cands *c, const char *name)
{
    const char *v = getenv(name);
    if (v)
        add(c, v, strlen(v));
}

/* Runs python -I -c py_code and adds each line it prints. */
static int ask_python(const char *python, struct cands *c, kg_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return kg_errf(err, KG_EIO, "view: pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]), close(p[1]);
        return kg_errf(err, KG_EIO, "view: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(p[1], 1);
        execl(python, python, "-I", "-c", py_code, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char buf[1 << 16];
    size_t n = 0;
    for (;;) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int r = poll(&pf, 1, 30000);
        if (r <= 0) { /* 30 s: the interpreter hangs */
            kill(pid, SIGKILL);
            break;
        }
        ssize_t got = read(p[0], buf + n, sizeof buf - 1 - n);
        if (got <= 0)
            break;
        n += (size_t)got;
        if (n == sizeof buf - 1)
            break;
    }
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return kg_errf(err, KG_EIO,
                       "view: %s could not list its paths (status 0x%x)",
                       python, st);
    buf[n] = 0;
    for (char *l = buf, *nl; *l; l = nl + 1) {
        nl = strchr(l, '\n');
        if (!nl)
            nl = l + strlen(l);
        add(c, l, (size_t)(nl - l));
        if (!*nl)
            break;
    }
    return 0;
}

/* 1 if every directory on the way to p (p too, when it is one) is
 * searchable by others: a path a candidate uid could reach on the host. */
static int reachable(const char *p)
{
    char q[PATH_MAX];
    size_t n = strlen(p);
    if (n >= sizeof q)
        return 0;
    memcpy(q, p, n + 1);
    for (char *s = q + 1;; s++) {
        if (*s && *s != '/')
            continue;
        char ch = *s;
        *s = 0;
        struct stat st;
        if (stat(q, &st) < 0)
            return 0;
        if (S_ISDIR(st.st_mode) && !(st.st_mode & S_IXOTH))
            return 0;
        *s = ch;
        if (!ch)
            return 1;
    }
}

static int under(const char *p, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(p, dir, n) && (p[n] == 0 || p[n] == '/');
}

static int by_length(const void *a, const void *b)
{
    size_t x = strlen(*(char *const *)a), y = strlen(*(char *const *)b);
    return x < y ? -1 : x > y;
}

/* C compilers a candidate's build may run (Triton's driver stub, torch's
 * extensions): each reads and runs files of its own installation (gcc:
 * libexec/gcc/.../cc1, lib/gcc/.../crtbegin.o), not only its bin. */
static const char *const compilers[] = {"gcc", "cc", "g++", "c++", "clang",
                                        "clang++", "nvcc", NULL};

/* The installation prefix of an executable file: the directory above the
 * bin directory that holds it, links resolved; nothing if it is no bin. */
static void add_prefix_of(struct cands *c, const char *file)
{
    char real[PATH_MAX];
    if (!realpath(file, real) || access(real, X_OK) < 0)
        return;
    char *slash = strrchr(real, '/');
    if (!slash)
        return;
    *slash = 0; /* its directory */
    size_t n = strlen(real);
    if (n <= 4 || strcmp(real + n - 4, "/bin"))
        return;
    real[n - 4] = 0; /* the prefix: /opt/gcc for /opt/gcc/bin/gcc */
    add(c, real, strlen(real));
}

/* The prefix of every compiler found on the ':'-separated path. */
static void add_compiler_prefixes(struct cands *c, const char *path)
{
    while (path && *path) {
        size_t len = strcspn(path, ":");
        for (int i = 0; compilers[i] && len && len < PATH_MAX - 16; i++) {
            char f[PATH_MAX];
            snprintf(f, sizeof f, "%.*s/%s", (int)len, path, compilers[i]);
            add_prefix_of(c, f);
        }
        path += len + (path[len] == ':');
    }
}

int kg_sandbox_view_collect(const char *python, const char *const *extra,
                            kg_sandbox_view *out, kg_err *err)
{
    struct cands c = {0};
    memset(out, 0, sizeof *out);
    int rc = ask_python(python, &c, err);
    add_list(&c, getenv("PATH"));
    add_list(&c, getenv("LD_LIBRARY_PATH"));
    static const char *const vars[] = {"CUDA_HOME", "CUDA_PATH",
                                       "TRITON_PTXAS_PATH", "CC", "CXX", NULL};
    for (int i = 0; vars[i]; i++)
        add_env(&c, vars[i]);
    add_compiler_prefixes(&c, getenv("PATH"));
    static const char *const named[] = {"CC", "CXX", NULL};
    for (int i = 0; named[i]; i++) { /* a compiler named by its path */
        const char *v = getenv(named[i]);
        if (v && strchr(v, '/'))
            add_prefix_of(&c, v);
    }
    for (int i = 0; extra && extra[i]; i++)
        add(&c, extra[i], strlen(extra[i]));
    /* shortest first: a path inside one already kept is dropped */
    qsort(c.p, (size_t)c.n, sizeof *c.p, by_length);
    for (int i = 0; i < c.n && !rc; i++) {
        const char *p = c.p[i];
        char real[PATH_MAX];
        int skip = !realpath(p, real) || !reachable(p) || !reachable(real) ||
                   strlen(p) >= KG_SANDBOX_PATH_MAX;
        for (int k = 0; covered[k] && !skip; k++)
            skip = under(p, covered[k]);
        for (int k = 0; k < out->n && !skip; k++)
            skip = under(p, out->path[k]);
        if (skip)
            continue;
        if (out->n == KG_SANDBOX_MAX_VIEW)
            rc = kg_errf(err, KG_EINVAL,
                         "view: the candidate needs more than %d paths "
                         "(PATH and LD_LIBRARY_PATH count, one per entry)",
                         KG_SANDBOX_MAX_VIEW);
        else
            snprintf(out->path[out->n++], KG_SANDBOX_PATH_MAX, "%s", p);
    }
    for (int i = 0; i < c.n; i++)
        free(c.p[i]);
    return rc;
}
