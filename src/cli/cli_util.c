/* cli_util.c - helpers shared by the kgym subcommands (cli_util.h). */
#include "cli/cli_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/request.h"

/* What a file that is not a regular file is, for a message. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "a special file";
}

/*
 * The offset of the first malformed sequence in s[0..n) (its first byte),
 * or n when all of it is UTF-8 as RFC 3629 (and Python's decoder) has it:
 * no overlong forms, no UTF-16 surrogates, nothing above U+10FFFF. *why
 * says what is wrong.
 */
static size_t utf8_bad(const unsigned char *s, size_t n, const char **why)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
        const char *second = "an overlong encoding";
        if (c < 0xc0) {
            *why = "a continuation byte without a lead byte";
            return i;
        } else if (c < 0xc2) {
            *why = "an overlong encoding";
            return i;
        } else if (c < 0xe0) {
            len = 2;
        } else if (c < 0xf0) {
            len = 3;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed) {
                hi = 0x9f;
                second = "a UTF-16 surrogate (U+D800..U+DFFF)";
            }
        } else if (c < 0xf5) {
            len = 4;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4) {
                hi = 0x8f;
                second = "a code point above U+10FFFF";
            }
        } else {
            *why = c < 0xf8 ? "a code point above U+10FFFF"
                            : "a byte that never occurs in UTF-8";
            return i;
        }
        for (size_t k = 1; k < len; k++) {
            if (i + k >= n) {
                *why = "a sequence cut off by the end of the file";
                return i;
            }
            unsigned d = s[i + k];
            if ((d & 0xc0) != 0x80) {
                *why = "a sequence cut short by a byte that does not "
                       "continue it";
                return i;
            }
            if (k == 1 && (d < lo || d > hi)) {
                *why = second;
                return i;
            }
        }
        i += len;
    }
    return n;
}

/*
 * Reads fd to its end or want bytes, whichever comes first, into a malloc'd
 * buffer with room for a NUL after them (*n bytes; *rerr an errno when a
 * read failed). size is what fstat said: the first guess, plus one byte, so
 * a file that grows shows it (files such as /proc's say 0). NULL when out
 * of memory.
 */
static char *read_up_to(int fd, size_t size, size_t want, size_t *n, int *rerr)
{
    size_t cap = size + 1;
    if (cap < 4096)
        cap = 4096 < want ? 4096 : want;
    char *b = malloc(cap + 1);
    while (b && *n < want) {
        if (*n == cap) {
            size_t nc = cap * 2 < want ? cap * 2 : want;
            char *nb = realloc(b, nc + 1);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap = nc;
        }
        ssize_t r = read(fd, b + *n, cap - *n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *rerr = errno;
            break;
        }
        if (r == 0)
            break;
        *n += (size_t)r;
    }
    return b;
}

char *kg_cli_read_code(const char *path, const char *field, size_t *len,
                       kg_err *err)
{
    size_t limit = strcmp(field, "reference_code") ? KG_MAX_KERNEL_CODE
                                                   : KG_MAX_REFERENCE_CODE;
    struct stat st;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO returns at once instead of waiting for a
     * writer; O_NOCTTY: a terminal does not become ours; O_NOFOLLOW: a
     * symbolic link is refused like any other file that is not a regular
     * one, so a link planted for kgym (often run as root) cannot make it
     * read, and echo in a compile error, a file its owner never gave */
    int fd =
        open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            kg_errf(err, KG_EINVAL,
                    "%s: a symbolic link, not a regular file (give the "
                    "file itself)",
                    path);
        else if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a socket */
            kg_errf(err, KG_EINVAL, "%s: %s, not a regular file", path,
                    file_kind(st.st_mode));
        else
            kg_errf(err, e == ENOENT ? KG_ENOTFOUND : KG_EIO, "%s: %s", path,
                    strerror(e));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        kg_errf(err, KG_EIO, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        kg_errf(err, KG_EINVAL, "%s: %s, not a regular file", path,
                file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    if ((unsigned long long)st.st_size > limit) {
        kg_errf(err, KG_EINVAL,
                "%s: %lld bytes, over the %s limit of %zu bytes (%zu KiB)",
                path, (long long)st.st_size, field, limit, limit / 1024);
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    size_t n = 0;
    int rerr = 0;
    char *b = read_up_to(fd, (size_t)st.st_size, limit + 1, &n, &rerr);
    close(fd);
    if (!b) {
        kg_errf(err, KG_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    const char *why = NULL, *nul = memchr(b, 0, n);
    size_t at;
    if (rerr)
        kg_errf(err, KG_EIO, "%s: %s", path, strerror(rerr));
    else if (n > limit)
        kg_errf(err, KG_EINVAL,
                "%s: over the %s limit of %zu bytes when read (its size "
                "said %lld: it grew, or is a file such as /proc's)",
                path, field, limit, (long long)st.st_size);
    else if (n == 0)
        kg_errf(err, KG_EINVAL, "%s: empty file", path);
    else if (nul)
        kg_errf(err, KG_EINVAL, "%s: a NUL byte at byte offset %zu", path,
                (size_t)(nul - b));
    else if ((at = utf8_bad((const unsigned char *)b, n, &why)) < n)
        kg_errf(err, KG_EINVAL,
                "%s: not valid UTF-8 at byte offset %zu (0x%02x: %s)", path,
                at, (unsigned char)b[at], why);
    else {
        b[n] = 0;
        *len = n;
        return b;
    }
    free(b);
    return NULL;
}

int kg_cli_connect(kg_client **out, const char *server, const char *token_file,
                   kg_err *err)
{
    *out = NULL;
    if (!server || !*server)
        server = getenv("KGYM_SERVER");
    if (!server || !*server)
        server = KG_CLI_DEFAULT_SERVER;
    if (!token_file || !*token_file)
        token_file = getenv("KGYM_TOKEN_FILE");
    char *token = NULL;
    if (token_file && *token_file) {
        int rc = kg_client_read_token(token_file, &token, err);
        if (rc)
            return rc;
    }
    int rc = kg_client_new(out, server, token, err);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    return rc;
}

int kg_cli_exe_path(char *buf, size_t n)
{
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k <= 0) {
        if (k == 0)
            errno = ENOENT;
        return -1;
    }
    buf[k] = 0;
    return 0;
}

const char *kg_cli_root(char *buf, size_t n)
{
    const char *env = getenv("KGYM_ROOT");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return buf;
    }
    if (kg_cli_exe_path(buf, n)) {
        snprintf(buf, n, ".");
        return buf;
    }
    for (int up = 0; up < 2; up++) { /* <root>/build/kgym */
        char *s = strrchr(buf, '/');
        if (s)
            *s = 0;
    }
    return buf;
}

int kg_cli_engine_flag(kg_engine_cfg *cfg, const char *a)
{
    if (!strcmp(a, "--fresh"))
        cfg->fresh = 1;
    else if (!strcmp(a, "--no-sandbox"))
        cfg->no_sandbox = 1;
    else if (!strcmp(a, "--no-cgroups"))
        cfg->no_cgroups = 1;
    else if (!strcmp(a, "--verbose")) {
        cfg->verbose = 1;
        kg_log_level(KG_LOG_DEBUG);
    } else
        return 0;
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int kg_cli_py_files(const char *flag, const char *dir, char **list, int max,
                    kg_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return kg_errf(err, KG_EIO, "%s %s: %s", flag, dir, strerror(errno));
    int k = 0, rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= 3 || strcmp(de->d_name + l - 3, ".py"))
            continue;
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", dir, de->d_name);
        if (k == max)
            rc = kg_errf(err, KG_EINVAL, "%s %s: more than %d .py files", flag,
                         dir, max);
        else if (!(list[k++] = strdup(full)))
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
    }
    closedir(d);
    if (!rc && k == 0)
        rc = kg_errf(err, KG_ENOTFOUND, "%s %s: no .py files", flag, dir);
    if (rc) {
        while (k > 0)
            free(list[--k]);
        return rc;
    }
    qsort(list, (size_t)k, sizeof list[0], cmp_str);
    return k;
}

/* ---- the engine's tuning knobs ------------------------------------------ */

_Static_assert(KG_ENGINE_MAX_CPU_THREADS == 1024, "the message says 1024");

static int parse_cpu_threads(kg_engine_cfg *cfg, const char *v)
{
    if (!strcmp(v, "auto")) {
        cfg->cpu_threads = 0;
        return 0;
    }
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 1 || n > KG_ENGINE_MAX_CPU_THREADS)
        return -1;
    cfg->cpu_threads = (int)n;
    return 0;
}

static int parse_compile_ahead(kg_engine_cfg *cfg, const char *v)
{
    if (!strcmp(v, "auto"))
        cfg->compile_ahead = KG_AHEAD_AUTO;
    else if (!strcmp(v, "on") || !strcmp(v, "1"))
        cfg->compile_ahead = KG_AHEAD_ON;
    else if (!strcmp(v, "off") || !strcmp(v, "0"))
        cfg->compile_ahead = KG_AHEAD_OFF;
    else
        return -1;
    return 0;
}

/* A share from 0 to 1; 0 (no floor) is kept as -1, cfg's 0 being the
 * default (engine.h). */
static int parse_mem_floor(kg_engine_cfg *cfg, const char *v)
{
    char *end;
    errno = 0;
    double f = strtod(v, &end);
    if (errno || end == v || *end || !(f >= 0 && f <= 1))
        return -1;
    cfg->spare_mem_floor = f > 0 ? f : -1;
    return 0;
}

/* One knob: its flag, the environment variable that stands in for the
 * flag when it is not given (the old way, kept as a fallback), what a
 * value must be, and its parser (0 with cfg set, or -1). */
static const struct knob {
    const char *flag, *env, *want;
    int (*parse)(kg_engine_cfg *cfg, const char *v);
} knobs[] = {
    {"--cpu-threads", "KGYM_CPU_THREADS", "a number from 1 to 1024, or auto",
     parse_cpu_threads},
    {"--compile-ahead", "KGYM_COMPILE_AHEAD", "on, off or auto (or 1, 0)",
     parse_compile_ahead},
    {"--spare-mem-floor", "KGYM_SPARE_MEM_FLOOR", "a share from 0 to 1",
     parse_mem_floor},
};

static const struct knob *find_knob(const char *flag)
{
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        if (!strcmp(flag, knobs[i].flag))
            return &knobs[i];
    return NULL;
}

int kg_cli_engine_knob(kg_engine_cfg *cfg, const char *a, const char *v,
                       kg_err *err)
{
    const struct knob *k = find_knob(a);
    if (!k)
        return 0;
    if (!v || k->parse(cfg, v))
        return kg_errf(err, KG_EINVAL, "%s must be %s, not '%s'", a, k->want,
                       v ? v : "");
    return 1;
}

void kg_cli_engine_knobs_env(kg_engine_cfg *cfg)
{
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        const char *v = getenv(knobs[i].env);
        if (v && *v && knobs[i].parse(cfg, v))
            kg_warn("%s must be %s, not '%s': ignored (the default is used; "
                    "%s is the flag)",
                    knobs[i].env, knobs[i].want, v, knobs[i].flag);
    }
}


int kg_cli_auto_concurrency(const char *device, int nworkers)
{
    if (device && !strncmp(device, "cuda", 4))
        return KG_CLI_GPU_CONCURRENCY;
    cpu_set_t set;
    long cpus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus <= 0)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = cpus / (2L * (nworkers > 0 ? nworkers : 1));
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

int kg_cli_concurrency(const char *flag, const char *v, const char *device,
                       int nworkers, long *out, kg_err *err)
{
    if (v && !strcmp(v, "auto")) {
        *out = kg_cli_auto_concurrency(device, nworkers);
        return 0;
    }
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < 1 || x > 64)
        return kg_errf(err, KG_EINVAL,
                       "%s must be a number from 1 to 64, or auto, not '%s'",
                       flag, v ? v : "");
    *out = x;
    return 0;
}
