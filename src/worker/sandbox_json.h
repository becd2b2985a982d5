/*
 * sandbox_json.h - a sandbox configuration carried as JSON, so that the
 * worker can hand it to a child forked by the Python zygote (which calls
 * kg_sandbox_py_enter through ctypes) or by kg_spawn_exec.
 *
 *   {"enabled": true, "workdir": "...", "as_bytes": N, "cpu_seconds": N,
 *    "fsize_bytes": N, "nofile": N, "nproc": N, "new_netns": true,
 *    "seccomp": true, "uid": N, "gid": N, "cgroup_procs": ["..."],
 *    "keep_fds": [N...], "stdout_fd": N, "stderr_fd": N, "umask": N,
 *    "private_tmp": true, "tmp_bytes": N, "keep_paths": ["/abs", ...],
 *    "readonly_root": true, "new_root": true, "view_paths": ["/abs", ...]}
 */
#ifndef KGYM_SANDBOX_JSON_H
#define KGYM_SANDBOX_JSON_H

#include <jansson.h>

#include "worker/sandbox.h"

/* Storage the cfg points into; lives as long as the cfg is used. */
typedef struct kg_sandbox_json_store {
    char workdir[KG_SANDBOX_PATH_MAX];
    char procs[KG_SANDBOX_MAX_CGROUPS][KG_SANDBOX_PATH_MAX + 16];
    int keep[16];
    char keep_paths[KG_SANDBOX_MAX_KEEP][KG_SANDBOX_PATH_MAX];
    char view_paths[KG_SANDBOX_MAX_VIEW][KG_SANDBOX_PATH_MAX];
} kg_sandbox_json_store;

/* Fills cfg from s. filter is used when s asks for seccomp (may be NULL:
 * then asking for it is an error). *enabled is 0 when s says the sandbox
 * is off (debugging). */
int kg_sandbox_cfg_from_json(const json_t *s, const kg_sandbox_filter *filter,
                             kg_sandbox_cfg *cfg, kg_sandbox_json_store *st,
                             int *enabled, kg_err *err);

/*
 * Fresh-interpreter mode: forks, enters the sandbox described by
 * req["sandbox"] with req["env"] as the environment, and execs
 * `python -m kgym_harness.role ROLE --chan-fd N --result-fd M`; the judge's
 * task is written to its stdin. fds/nfds are named by req["fds"].
 */
int kg_spawn_exec(const char *python, const json_t *req, const int *fds,
                  int nfds, const kg_sandbox_filter *filter, pid_t *pid,
                  kg_err *err);

#endif
