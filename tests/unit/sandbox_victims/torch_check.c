/*
 * torch_check.c - manual check: does a torch/triton child work inside the
 * sandbox? Not part of `make unit` (a load_inline build alone takes about
 * a minute). Build and run from the repository root after `make`:
 *
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -o build/torch_check \
 *      tests/unit/sandbox_victims/torch_check.c build/libkgym-app.a \
 *      build/libkgym.a -lseccomp
 *   build/torch_check [--allow-wx] [--allow-perf] [--uid N] [--as BYTES]
 *                     [--python PATH] [--load-inline] [--gpu]
 *
 * It forks, enters the sandbox (new netns, seccomp, rlimits, private
 * workdir, clean environment) and execs python on torch_check.py, which
 * prints one STEP line per capability it tried. Results: docs/sandbox.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/sandbox.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    kg_sandbox_profile prof = {0, 0};
    const char *python = ".venv/bin/python";
    const char *script = "tests/unit/sandbox_victims/torch_check.py";
    long uid = -1;
    unsigned long long as = 0;
    int load_inline = 0, gpu = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--allow-wx"))
            prof.allow_wx = 1;
        else if (!strcmp(argv[i], "--allow-perf"))
            prof.allow_perf = 1;
        else if (!strcmp(argv[i], "--load-inline"))
            load_inline = 1;
        else if (!strcmp(argv[i], "--gpu"))
            gpu = 1;
        else if (!strcmp(argv[i], "--uid") && i + 1 < argc)
            uid = atol(argv[++i]);
        else if (!strcmp(argv[i], "--as") && i + 1 < argc)
            as = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--python") && i + 1 < argc)
            python = argv[++i];
        else {
            fprintf(stderr, "usage: see the comment in torch_check.c\n");
            return 2;
        }
    }
    /* absolute, but not resolved: a venv's python is a symlink whose
     * location tells Python which site-packages to use */
    char py[4096], sc[4096], cwd[2048];
    if (!getcwd(cwd, sizeof cwd) || !realpath(script, sc)) {
        perror("run from the repository root");
        return 2;
    }
    snprintf(py, sizeof py, "%s%s%s", python[0] == '/' ? "" : cwd,
             python[0] == '/' ? "" : "/", python);
    kg_err e = {{0}};
    kg_sandbox_filter f;
    if (kg_sandbox_filter_build(&prof, &f, &e) < 0) {
        fprintf(stderr, "filter: %s\n", e.msg);
        return 1;
    }
    char wd[KG_SANDBOX_PATH_MAX];
    if (kg_sandbox_mkdtemp(NULL, wd, sizeof wd, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    if (uid >= 0 && chown(wd, (uid_t)uid, (gid_t)uid) < 0)
        perror("chown");
    /* --gpu: compiled Triton, and the loader path CUDA may need */
    static char ldp[4096];
    const char *ld = getenv("LD_LIBRARY_PATH");
    snprintf(ldp, sizeof ldp, "LD_LIBRARY_PATH=%s", ld ? ld : "");
    const char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                         "PYTHONDONTWRITEBYTECODE=1", "LANG=C.UTF-8",
                         gpu ? ldp : "TRITON_INTERPRET=1", NULL};
    kg_sandbox_cfg cfg;
    kg_sandbox_cfg_init(&cfg);
    cfg.workdir = wd;
    cfg.new_netns = 1;
    cfg.filter = &f;
    cfg.as_bytes = as;
    cfg.cpu_seconds = 600;
    cfg.fsize_bytes = 1ull << 30;
    cfg.nofile = 1024;
    cfg.nproc = 512;
    cfg.env = env;
    cfg.uid = uid;
    cfg.gid = uid;
    cfg.expect_parent = getpid();
    printf("sandbox: wx %s, perf_event_open %s, uid %ld, AS %llu, filter "
           "%u insns, workdir %s\n",
           prof.allow_wx ? "allowed" : "denied",
           prof.allow_perf ? "allowed" : "denied", uid, as, f.len, wd);
    fflush(stdout);
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        if (kg_sandbox_enter(&cfg, &e) < 0) {
            fprintf(stderr, "enter: %s\n", e.msg);
            _exit(KG_SANDBOX_EXIT_SETUP);
        }
        char *args[5] = {py, sc, NULL, NULL, NULL};
        int na = 2;
        if (load_inline)
            args[na++] = "--load-inline";
        if (gpu)
            args[na++] = "--gpu";
        execv(py, args);
        fprintf(stderr, "exec %s: %s\n", py, strerror(errno));
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    double ms = now_ms() - t0;
    kg_sandbox_kill_group(pid, 2000, NULL, NULL);
    kg_sandbox_rmtree(wd, NULL);
    kg_sandbox_filter_free(&f);
    if (WIFSIGNALED(st))
        printf("child killed by signal %d after %.0f ms\n", WTERMSIG(st), ms);
    else
        printf("child exited %d after %.0f ms\n", WEXITSTATUS(st), ms);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
