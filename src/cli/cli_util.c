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

int kg_cli_verbose_opt(void *cfg, const char *name, const char *v,
                       kg_err *err)
{
    (void)name, (void)v, (void)err;
    ((kg_engine_cfg *)cfg)->verbose = 1;
    kg_log_level(KG_LOG_DEBUG);
    return 0;
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

int kg_cli_knob_opt(void *cfg, const char *name, const char *v, kg_err *err)
{
    int rc = kg_cli_engine_knob(cfg, name, v, err);
    return rc < 0 ? rc : rc ? 0 : kg_errf(err, KG_ENOTFOUND, "%s: not a knob",
                                            name);
}

int kg_cli_count_opt(void *cfg, const char *name, const char *v, kg_err *err)
{
    kg_engine_cfg *c = cfg;
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > 32)
        return kg_errf(err, KG_EINVAL, "%s: a number from 0 to 32, not '%s'",
                       name, v);
    if (!strcmp(name, "--stage"))
        c->stage = (int)n;
    else
        c->prewarm = n ? (int)n : -1;
    return 0;
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
