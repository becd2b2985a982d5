/* engine_setup.c - kg_engine_new: the config resolved (slots, spares), the
 * paths, the checks that candidates can run at all (sandbox library, uids,
 * reachable directories, caches), and the zygote, started and restarted. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "worker/engine_impl.h"

/* (Re)starts the zygote. Tasks in flight die with the old one: their
 * results are infra errors, found by the normal path (no frame, children
 * gone); spares die with it too. */
int eng_restart_zygote(kg_engine *e, kg_err *err)
{
    for (int i = 0; i < e->nslots; i++) {
        struct slot *sl = &e->slots[i];
        if (slot_active(sl)) {
            sl->judge.exited = sl->cand.exited = 1;
            eng_close_fd(&sl->res_fd);
        }
    }
    for (int i = 0; i < MAX_DYING; i++) /* killed already: no report now */
        if (e->dying[i].state == S_DYING)
            e->dying[i].judge.exited = e->dying[i].cand.exited = 1;
    eng_drop_spares(e);
    kg_zygote_stop(e->zy);
    e->zy = NULL;
    char dev[80], ahead[40];
    const char *env[4] = {
        "KGYM_SANDBOX_PROFILE={\"allow_wx\": true, \"allow_perf\": true}",
        NULL};
    int ne = 1;
    /* the zygote prepares what compile ahead's dry runs import (zygote.py) */
    snprintf(ahead, sizeof ahead, "KGYM_COMPILE_AHEAD=%s",
             eng_compile_ahead(e));
    env[ne++] = ahead;
    if (e->cuda_env[0]) {
        eng_pathf(dev, sizeof dev, "CUDA_VISIBLE_DEVICES=%s", e->cuda_env);
        env[ne++] = dev;
    }
    kg_zygote_cfg zc = {.python = e->python,
                        .pythonpath = e->pythonpath,
                        .sandbox_lib = e->cfg.no_sandbox ? "" : e->sandbox_lib,
                        .env = env,
                        .log_fd = e->cfg.verbose ? 2 : -1,
                        .ready_timeout_ms = 180000};
    int rc = kg_zygote_start(&e->zy, &zc, err);
    if (!rc)
        e->t_zygote_ready = kg_now_ms();
    return rc;
}

/* 1 if uid/gid nobody can search path (every directory on the way), as
 * the candidate's sandbox needs: checked in a child that switches uid. */
static int reachable_by_nobody(const char *path)
{
    pid_t p = fork();
    if (p < 0)
        return 1; /* cannot tell: let the candidate's error say it */
    if (p == 0) {
        if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
            _exit(2);
        _exit(access(path, X_OK) == 0 ? 0 : 1);
    }
    int st;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return 1;
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

/* The spares' floor of free device memory as a share: cfg's
 * spare_mem_floor, 0 for none (< 0), KG_ENGINE_MEM_FLOOR when unset (0). */
double eng_mem_floor(const kg_engine_cfg *cfg)
{
    if (cfg->spare_mem_floor == 0)
        return KG_ENGINE_MEM_FLOOR;
    return cfg->spare_mem_floor < 0 ? 0 : cfg->spare_mem_floor;
}

/* The tuning knobs of cfg in range (engine.h): 0, or KG_EINVAL naming the
 * field and its value. */
int eng_check_knobs(const kg_engine_cfg *cfg, kg_err *err)
{
    if (cfg->cpu_threads < 0 || cfg->cpu_threads > KG_ENGINE_MAX_CPU_THREADS)
        return kg_errf(err, KG_EINVAL,
                       "cpu_threads must be from 0 (auto) to %d, not %d",
                       KG_ENGINE_MAX_CPU_THREADS, cfg->cpu_threads);
    if (cfg->compile_ahead != KG_AHEAD_AUTO &&
        cfg->compile_ahead != KG_AHEAD_ON && cfg->compile_ahead != KG_AHEAD_OFF)
        return kg_errf(err, KG_EINVAL,
                       "compile_ahead must be KG_AHEAD_AUTO, _ON or _OFF, "
                       "not %d",
                       cfg->compile_ahead);
    if (!(cfg->spare_mem_floor <= 1)) /* NaN too */
        return kg_errf(err, KG_EINVAL,
                       "spare_mem_floor must be a share of at most 1, not %g",
                       cfg->spare_mem_floor);
    return 0;
}

/* Slots and spares from cfg (engine.h says what each setting means). While
 * tasks do not profile a GPU engine keeps concurrency + 3 spares: with the
 * queue full, more of them slow every task in flight while they are made
 * (docs/worker.md, "How many"). */
static void resolve_counts(kg_engine *e, const kg_engine_cfg *cfg)
{
    if (e->cfg.concurrency < 1)
        e->cfg.concurrency = 1;
    if (e->cfg.concurrency > MAX_SLOTS)
        e->cfg.concurrency = MAX_SLOTS;
    if (e->cfg.stage < 0 || cfg->fresh)
        e->cfg.stage = 0; /* staged tasks wait in warm spares: zygote only */
    e->nslots = e->cfg.concurrency + e->cfg.stage;
    if (e->nslots > MAX_SLOTS)
        e->nslots = MAX_SLOTS;
    for (int i = 0; i < MAX_SLOTS; i++)
        slot_clear(&e->slots[i]);
    for (int i = 0; i < MAX_SPARES; i++)
        slot_clear(&e->spares[i]);
    for (int i = 0; i < MAX_DYING; i++)
        slot_clear(&e->dying[i]);
    int gpu = !strncmp(cfg->device, "cuda:", 5);
    e->prewarm = cfg->prewarm < 0 ? 0
                 : cfg->prewarm == 0
                     ? (gpu && eng_profile_child_wanted(cfg->device)
                            ? 2 * e->cfg.concurrency + 4
                            : gpu ? e->cfg.concurrency + 3 : e->cfg.concurrency)
                     : cfg->prewarm;
    if (e->prewarm > MAX_SPARES)
        e->prewarm = MAX_SPARES;
    e->idle_warm = cfg->idle_warm < 0    ? 0
                   : cfg->idle_warm == 0 ? e->prewarm
                                         : cfg->idle_warm;
    int noprof = e->cfg.concurrency + 3;
    if (noprof > MAX_SPARES)
        noprof = MAX_SPARES;
    e->spare_mem_cap = -1;
    e->mem_floor = eng_mem_floor(cfg);
    if (gpu && cfg->prewarm == 0 && noprof != e->prewarm)
        e->prewarm_noprof = noprof;
    if (cfg->fresh)
        e->prewarm = e->idle_warm = e->prewarm_noprof = 0;
}

/* "cpu" or "cuda:N" (N: up to 8 digits). */
static int valid_device(const char *d)
{
    if (!strcmp(d, "cpu"))
        return 1;
    return !strncmp(d, "cuda:", 5) && d[5] &&
           strspn(d + 5, "0123456789") == strlen(d + 5) && strlen(d + 5) <= 8;
}

/* The engine's paths: tree, work dirs' parent, caches, harness, sandbox
 * library, device lock (one per device per machine). */
static int init_paths(kg_engine *e, const kg_engine_cfg *cfg, kg_err *err)
{
    if (!strncmp(cfg->device, "cuda:", 5))
        snprintf(e->cuda_env, sizeof e->cuda_env, "%s", cfg->device + 5);
    snprintf(e->root, sizeof e->root, "%s", cfg->root ? cfg->root : ".");
    const char *tmp = cfg->tmp_base ? cfg->tmp_base : getenv("TMPDIR");
    snprintf(e->tmp_base, sizeof e->tmp_base, "%s", tmp && *tmp ? tmp : "/tmp");
    int bad = 0;
    if (cfg->cache_dir)
        bad |=
            eng_pathf(e->cache_dir, sizeof e->cache_dir, "%s", cfg->cache_dir);
    else
        bad |= eng_pathf(e->cache_dir, sizeof e->cache_dir, "%s/kgym-cache",
                         e->tmp_base);
    mkdir(e->cache_dir, 0755);
    bad |=
        eng_pathf(e->pythonpath, sizeof e->pythonpath, "%s/harness", e->root);
    bad |= eng_pathf(e->sandbox_lib, sizeof e->sandbox_lib,
                     "%s/build/libkgym_sandbox.so", e->root);
    bad |= eng_pathf(e->lock_path, sizeof e->lock_path,
                     "%s/kgym-device-%s.lock", e->tmp_base, cfg->device);
    if (bad)
        return kg_errf(err, KG_EINVAL, "paths too long");
    for (char *p = strrchr(e->lock_path, '/') + 1; *p; p++)
        if (*p == ':')
            *p = '_';
    return 0;
}

/* The sandbox's preconditions: its library, the subreaper (orphans of a
 * task come back to us), cgroups, and whether candidates get their own
 * uids (root) or run as this user (warned). */
static int init_sandbox(kg_engine *e, const kg_engine_cfg *cfg, kg_err *err)
{
    int rc = 0;
    if (!cfg->no_sandbox && access(e->sandbox_lib, R_OK))
        rc = kg_errf(err, KG_ENOTFOUND, "sandbox library %s missing (run make)",
                     e->sandbox_lib);
    if (!rc)
        rc = kg_sandbox_become_subreaper(err);
    e->drop_uid = geteuid() == 0 && !cfg->no_sandbox;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0)
        e->mem_cap = (uint64_t)pages * (uint64_t)psz / 2;
    if (rc || cfg->no_sandbox)
        return rc;
    kg_err cgerr;
    /* no_cgroups: e->cgroups stays empty, as on a host without them */
    if (!cfg->no_cgroups && kg_sandbox_cgroup_probe(&e->cgroups, &cgerr))
        eng_log_verbose(e, "%s", kg_sandbox_cgroup_reason(&e->cgroups));
    if (!e->drop_uid)
        kg_warn("not root: candidates run as this user (they could read the "
                "judge's memory), without a private /tmp, a per-task disk "
                "quota or a read-only root; run as root for a uid switch and "
                "private mounts");
    return 0;
}

/* A candidate (uid nobody or its own) must reach its work dir, its cache
 * and the code it imports: a private TMPDIR (mode 0700, or a 0700 directory
 * above it) would fail every candidate with an error blamed on it. */
static int check_reachable(kg_engine *e, kg_err *err)
{
    if (!reachable_by_nobody(e->tmp_base))
        return kg_errf(err, KG_EINVAL,
                       "%s is not reachable by uid %d, which candidates "
                       "run as: make every directory on its path "
                       "searchable by others (chmod o+x) or set TMPDIR to "
                       "one that is",
                       e->tmp_base, NOBODY);
    char pydir[PATH_MAX];
    eng_pathf(pydir, sizeof pydir, "%s", e->python);
    char *slash = strrchr(pydir, '/');
    if (slash)
        *slash = 0;
    if (!reachable_by_nobody(e->pythonpath))
        return kg_errf(err, KG_EINVAL,
                       "the harness %s is not reachable by uid %d, which "
                       "candidates run as: make the directories above it "
                       "searchable by others (chmod o+x)",
                       e->pythonpath, NOBODY);
    if (!reachable_by_nobody(pydir))
        return kg_errf(err, KG_EINVAL,
                       "the interpreter's directory %s is not reachable by "
                       "uid %d, which candidates run as (chmod o+x on its "
                       "parents, or a Python installed outside /root)",
                       pydir, NOBODY);
    if (!reachable_by_nobody(e->cache_dir))
        return kg_errf(err, KG_EINVAL,
                       "cache dir %s is not reachable by uid %d, which "
                       "candidates run as (chmod o+x on its parents)",
                       e->cache_dir, NOBODY);
    return 0;
}

/* The candidate's view of the host (a new root, docs/sandbox.md): the
 * interpreter's trees, PATH and LD_LIBRARY_PATH, and the harness. */
static int init_view(kg_engine *e, kg_err *err)
{
    char harness[PATH_MAX];
    const char *extra[] = {realpath(e->pythonpath, harness) ? harness
                                                            : e->pythonpath,
                           e->pythonpath, NULL};
    int rc = kg_sandbox_view_collect(e->python, extra, &e->view, err);
    for (int i = 0; !rc && i < e->view.n; i++)
        eng_log_verbose(e, "candidate view: %s", e->view.path[i]);
    return rc;
}

/* Per-role caches; the candidates' is shared by the candidate uids through
 * their group (eng_uids_init, eng_cand_cache_dir). */
static int init_caches(kg_engine *e, const kg_engine_cfg *cfg, kg_err *err)
{
    char d[PATH_MAX + 32];
    snprintf(d, sizeof d, "%s/judge", e->cache_dir);
    mkdir(d, 0700);
    snprintf(d, sizeof d, "%s/candidate", e->cache_dir);
    int rc = 0;
    if (e->drop_uid)
        rc = eng_uids_init(e, err);
    if (!rc && e->drop_uid)
        rc = eng_cand_cache_dir(d, err);
    else if (!rc)
        mkdir(d, 0700);
    if (!cfg->cache_dir)
        chmod(e->cache_dir, 0755); /* ours, made under the umask */
    if (!rc && e->drop_uid)
        rc = check_reachable(e, err);
    /* The candidate's own root (docs/sandbox.md), when run as root */
    int want = eng_wants_new_root(getenv("KGYM_NEW_ROOT"));
    e->new_root = e->drop_uid && want;
    if (!rc && e->new_root)
        rc = init_view(e, err);
    return rc;
}

/* On by default on every device (the GPU's Triton driver build and the
 * GPU suites pass inside it); KGYM_NEW_ROOT=0 turns it off. */
int eng_wants_new_root(const char *knob)
{
    return !(knob && !strcmp(knob, "0"));
}

int kg_engine_new(kg_engine **out, const kg_engine_cfg *cfg, kg_err *err)
{
    int rc = eng_check_knobs(cfg, err);
    if (rc)
        return rc;
    kg_engine *e = calloc(1, sizeof *e);
    if (!e)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    e->cfg = *cfg;
    e->t_created = kg_now_ms();
    resolve_counts(e, cfg);
    rc = valid_device(cfg->device)
             ? 0
             : kg_errf(err, KG_EINVAL, "device must be cpu or cuda:N, not '%s'",
                       cfg->device);
    if (!rc)
        rc = init_paths(e, cfg, err);
    if (!rc)
        rc = eng_find_python(e, err);
    if (!rc)
        rc = init_sandbox(e, cfg, err);
    if (!rc)
        rc = init_caches(e, cfg, err);
    if (!rc && cfg->fresh && !cfg->no_sandbox) {
        kg_sandbox_profile prof = {.allow_wx = 1, .allow_perf = 1};
        rc = kg_sandbox_filter_build(&prof, &e->filter, err);
    }
    if (!rc && !cfg->fresh)
        rc = eng_restart_zygote(e, err);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}
