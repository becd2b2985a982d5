/* cli_util.h - helpers shared by the kgym subcommands: files, request
 * fields given as flags, the server connection of client commands, and
 * where kgym itself is. */
#ifndef KGYM_CLI_UTIL_H
#define KGYM_CLI_UTIL_H

#include <jansson.h>

#include "cli/opts.h"
#include "common/http_client.h"
#include "kgym/kgym.h"
#include "worker/engine.h"

#define KG_CLI_DEFAULT_SERVER "http://127.0.0.1:10907"

/*
 * A client for `server` (NULL: $KGYM_SERVER, else the default) with the
 * first token of `token_file` (NULL: $KGYM_TOKEN_FILE, else no token).
 * *out owned by the caller.
 */
int kg_cli_connect(kg_client **out, const char *server, const char *token_file,
                   kg_err *err);

/* The path of this kgym executable (/proc/self/exe) in buf: 0, or -1 with
 * errno set. */
int kg_cli_exe_path(char *buf, size_t n);

/*
 * The kgym tree (holding harness/ and tests/): $KGYM_ROOT, else two levels
 * above this executable (<root>/build/kgym), else ".". Written into buf
 * (n bytes), which is returned.
 */
const char *kg_cli_root(char *buf, size_t n);

/*
 * The engine's options as option-table entries on cfg (a kg_engine_cfg *),
 * shared by kgym eval, worker and selfcheck: the switches --fresh,
 * --no-sandbox, --no-cgroups and --verbose (which also lowers the log
 * level), and the tuning knobs (kg_cli_engine_knob).
 */
int kg_cli_verbose_opt(void *cfg, const char *name, const char *v,
                       kg_err *err);
int kg_cli_knob_opt(void *cfg, const char *name, const char *v, kg_err *err);
#define KG_CLI_ENGINE_SWITCHES(cfg)                                            \
    KG_OPT_F("--fresh", &(cfg)->fresh),                                        \
        KG_OPT_F("--no-sandbox", &(cfg)->no_sandbox),                          \
        KG_OPT_F("--no-cgroups", &(cfg)->no_cgroups),                          \
        KG_OPT_FN0_ON("--verbose", kg_cli_verbose_opt, (cfg))
#define KG_CLI_ENGINE_KNOBS(cfg)                                               \
    KG_OPT_FN_ON("--cpu-threads", kg_cli_knob_opt, (cfg)),                     \
        KG_OPT_FN_ON("--compile-ahead", kg_cli_knob_opt, (cfg)),               \
        KG_OPT_FN_ON("--spare-mem-floor", kg_cli_knob_opt, (cfg))

/* The engine's options that kgym eval and selfcheck (an engine of their
 * own, no server) share: --device, --concurrency 1..64, --prewarm and
 * --stage 0..32 (kg_cli_count_opt; --prewarm 0: none, cfg's -1), --python. */
int kg_cli_count_opt(void *cfg, const char *name, const char *v, kg_err *err);
#define KG_CLI_ENGINE_LOCAL(cfg)                                               \
    KG_OPT_S("--device", &(cfg)->device),                                      \
        KG_OPT_I("--concurrency", &(cfg)->concurrency, 1, 64),                 \
        KG_OPT_FN_ON("--prewarm", kg_cli_count_opt, (cfg)),                    \
        KG_OPT_FN_ON("--stage", kg_cli_count_opt, (cfg)),                      \
        KG_OPT_S("--python", &(cfg)->python)

/*
 * The *.py files of directory dir, sorted by name, as malloc'd paths
 * "dir/name" in list[0..n) (the caller frees each). Returns n (at least 1),
 * or a negative KG_E* code with err naming the flag: the directory cannot
 * be read, holds no .py file or more than max.
 */
int kg_cli_py_files(const char *flag, const char *dir, char **list, int max,
                    kg_err *err);

/*
 * The engine's tuning knobs as flags with a value (kgym eval, worker,
 * selfcheck): --cpu-threads N|auto, --compile-ahead on|off|auto,
 * --spare-mem-floor F (engine.h's cpu_threads, compile_ahead,
 * spare_mem_floor). Returns 1 when `a` is one of them and v is good (set
 * in cfg), 0 when `a` is none of them, KG_EINVAL with the one-line reason
 * ("--cpu-threads must be a number from 1 to 1024, or auto, not 'x'") in
 * err when v is bad (or NULL).
 */
int kg_cli_engine_knob(kg_engine_cfg *cfg, const char *a, const char *v,
                       kg_err *err);

/*
 * The knobs' old environment variables, KGYM_CPU_THREADS,
 * KGYM_COMPILE_AHEAD and KGYM_SPARE_MEM_FLOOR, read into cfg as the
 * fallback of a flag not given: call it before the flags, which win. A
 * bad value is named in a warning and ignored (the default stays), as the
 * engine did when it read them itself.
 */
void kg_cli_engine_knobs_env(kg_engine_cfg *cfg);

/* What --concurrency auto means for a worker on device ("cuda:N", "cpu",
 * "cpu:N") that is one of nworkers on its host: KG_CLI_GPU_CONCURRENCY on
 * a GPU; on the CPU the host's CPUs / (2 x nworkers) (a task is a judge
 * and a candidate), 1 to 8. */
#define KG_CLI_GPU_CONCURRENCY 4
int kg_cli_auto_concurrency(const char *device, int nworkers);

/* Parses a --concurrency value: a number from 1 to 64 or auto (resolved
 * for device, one of nworkers). 0 or KG_EINVAL with the reason in err. */
int kg_cli_concurrency(const char *flag, const char *v, const char *device,
                       int nworkers, long *out, kg_err *err);


#endif
