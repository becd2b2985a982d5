/* cmd_eval.c - `kgym eval`: evaluate candidates locally through the worker
 * engine (the same path `kgym worker` uses), no server. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "common/code_file.h"
#include "common/log.h"
#include "common/request.h"
#include "worker/engine.h"

#define MAX_CANDS 4096

struct evalrun {
    int json_out;
    int n;
    const char *names[MAX_CANDS];
    const char *refs[MAX_CANDS]; /* the --ref given before it (NULL: first) */
    const char *cur_ref;
    json_t *results[MAX_CANDS];
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kgym eval --ref R.py --cand C.py [--cand C2.py | --cand "
               "DIR ...]\n"
               "                 [--ref R2.py --cand ...] [options]\n"
               "\n"
               "Evaluates each candidate against the reference in a sandboxed "
               "child forked\n"
               "from one warm zygote, and prints a summary (or, with --json, "
               "one result\n"
               "object per line). Each --cand is checked against the --ref "
               "given before it\n"
               "(or the first --ref), so one run can mix problems.\n"
               "With --kernelbench DIR --candidates CANDDIR: KernelBench's tree "
               "(--kernelbench --help).\n"
               "\n"
               "options:\n"
               "  --backend cpu|triton|cuda   how the candidate is built "
               "(default triton)\n"
               "  --device cpu|cuda:N         device (default cuda:0 when a "
               "GPU is present, else cpu)\n"
               "  --concurrency N             tasks in flight (default 1)\n"
               "  --prewarm N                 warm judge+candidate pairs "
               "started ahead of\n"
               "                              their task (default: concurrency; "
               "on a GPU\n"
               "                              concurrency + 3, at most 32; "
               "2 x concurrency + 4"
               "\n"
               "                              when tasks profile with torch's "
               "profiler; 0: none)\n"
               "  --stage N                   up to N tasks more start in warm "
               "pairs: they set\n"
               "                              up and compile, then wait for one "
               "of the\n"
               "                              concurrency slots (default 0)\n"
               "  --cpu-threads N|auto        threads of torch's CPU pool in "
               "each child (default\n"
               "                              auto: the CPUs / (2 x "
               "concurrency), at least 1)\n"
               "  --compile-ahead on|off|auto Triton candidates compile their "
               "kernels before\n"
               "                              their first call (default auto: "
               "on for a GPU\n"
               "                              with concurrency > 1 or stage > "
               "0)\n"
               "  --spare-mem-floor F         keep fewer warm pairs when one "
               "leaves less than\n"
               "                              this share of the device's "
               "memory free (default\n"
               "                              0.25; 0: never)\n"
               "  --json                      one result object per line\n"
               "  --fresh                     a fresh interpreter per child "
               "(no zygote)\n"
               "  --no-sandbox                skip namespaces, seccomp and "
               "limits (debugging only)\n"
               "  --no-cgroups                no per-task cgroup (tests: the "
               "process-group\n"
               "                              kill on its own)\n"
               "  --python PATH               interpreter with torch (default: "
               "KGYM_PYTHON, .venv, python3)\n"
               "  --verbose                   show the children's output\n"
               "  --FIELD VALUE               any request field, underscores "
               "as dashes:\n"
               "                              --num-correct-trials 3 "
               "--num-perf-trials 20 --timeout 60\n"
               "                              --reference-backend "
               "torch_compile --strict true --seed 7\n");
}

/* Adds path, or every *.py in it when it is a directory (sorted). */
static int add_cands(struct evalrun *run, const char *path, kg_err *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return kg_errf(err, KG_ENOTFOUND, "--cand %s: %s", path,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (run->n >= MAX_CANDS)
            return kg_errf(err, KG_EINVAL, "too many candidates");
        run->refs[run->n] = run->cur_ref;
        run->names[run->n++] = strdup(path);
        return 0;
    }
    char *list[MAX_CANDS];
    int k = kg_cli_py_files("--cand", path, list, MAX_CANDS, err);
    if (k < 0)
        return k;
    for (int i = 0; i < k; i++) {
        if (run->n >= MAX_CANDS) {
            for (int j = i; j < k; j++)
                free(list[j]);
            return kg_errf(err, KG_EINVAL, "too many candidates");
        }
        run->refs[run->n] = run->cur_ref;
        run->names[run->n++] = list[i];
    }
    return 0;
}

static double num(json_t *r, const char *k)
{
    json_t *v = json_object_get(r, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}

static void print_summary(const char *name, json_t *r)
{
    printf("== %s\n", name);
    printf("verdict:   %s\n", json_string_value(json_object_get(r, "verdict")));
    const char *em = json_string_value(json_object_get(r, "error_message"));
    if (em && *em)
        printf("error:     %s\n", em);
    if (num(r, "speedup") >= 0)
        printf("speedup:   %.3fx (kernel %.4f ms, reference %.4f ms)\n",
               num(r, "speedup"), num(r, "kernel_runtime"),
               num(r, "reference_runtime"));
    json_t *prof = json_object_get(r, "profile");
    const char *sum = json_string_value(json_object_get(prof, "summary"));
    if (sum)
        printf("profile:   %s\n", sum);
    json_t *hr = json_object_get(r, "hack_reasons");
    if (json_array_size(hr) > 0) {
        printf("hacks:    ");
        size_t i;
        json_t *v;
        json_array_foreach(hr, i, v) printf(" %s", json_string_value(v));
        printf("\n");
    }
    json_t *t = json_object_get(r, "timings");
    if (json_is_object(t)) {
        printf("timings:  ");
        const char *k;
        json_t *v;
        json_object_foreach(t, k, v) if (json_is_number(v))
            printf(" %s=%.0fms", k, json_number_value(v));
        printf("\n");
    }
    const char *fb = json_string_value(json_object_get(r, "feedback"));
    if (fb)
        printf("feedback:\n%s\n", fb);
}

static void print_table(struct evalrun *run)
{
    printf("%-40s %-14s %9s %10s %10s %9s %8s  %s\n", "candidate", "verdict",
           "speedup", "kernel_ms", "ref_ms", "coverage", "wall_s",
           "hack_reasons");
    for (int i = 0; i < run->n; i++) {
        json_t *r = run->results[i];
        const char *nm = strrchr(run->names[i], '/');
        nm = nm ? nm + 1 : run->names[i];
        char sp[32] = "-", km[32] = "-", rm[32] = "-", cov[32] = "-",
             hacks[256] = "";
        if (num(r, "speedup") >= 0)
            snprintf(sp, sizeof sp, "%.3fx", num(r, "speedup"));
        if (num(r, "kernel_runtime") >= 0)
            snprintf(km, sizeof km, "%.4f", num(r, "kernel_runtime"));
        if (num(r, "reference_runtime") >= 0)
            snprintf(rm, sizeof rm, "%.4f", num(r, "reference_runtime"));
        json_t *c = json_object_get(json_object_get(r, "profile"), "coverage");
        if (json_is_number(c))
            snprintf(cov, sizeof cov, "%.1f%%", 100 * json_number_value(c));
        size_t k;
        json_t *v;
        json_array_foreach(json_object_get(r, "hack_reasons"), k, v)
        {
            if (strlen(hacks) + strlen(json_string_value(v)) + 2 <
                sizeof hacks) {
                if (k)
                    strcat(hacks, ",");
                strcat(hacks, json_string_value(v));
            }
        }
        json_t *t = json_object_get(r, "timings");
        double tot = json_is_object(t) ? num(t, "total") : -1;
        printf("%-40.40s %-14s %9s %10s %10s %9s %8.2f  %s\n", nm,
               json_string_value(json_object_get(r, "verdict")), sp, km, rm,
               cov, tot >= 0 ? tot / 1e3 : 0.0, hacks);
    }
}

/* The text of a --ref/--cand file as a JSON string; NULL (logged)
 * when it is refused (kg_read_code_file: not a regular file, too large,
 * empty, a NUL byte, not UTF-8) or cannot be read. */
static json_t *code_string(const char *flag, const char *path)
{
    kg_err err = {{0}};
    size_t len;
    char *text = kg_read_code_file(
        path, strcmp(flag, "--ref") ? "kernel_code" : "reference_code", &len,
        &err);
    if (!text) {
        kg_error("%s %s", flag, err.msg);
        return NULL;
    }
    json_t *s = json_stringn(text, len);
    free(text);
    if (!s)
        kg_error("%s %s: out of memory", flag, path);
    return s;
}

static void on_done(void *ctx, void *user, json_t *result)
{
    struct evalrun *run = ctx;
    int i = (int)(intptr_t)user;
    run->results[i] = json_incref(result);
    if (run->json_out) {
        /* completion order: say which candidate (and reference) it was */
        json_t *shown = json_copy(result);
        json_object_set_new(shown, "candidate", json_string(run->names[i]));
        if (run->refs[i])
            json_object_set_new(shown, "reference", json_string(run->refs[i]));
        char *s = json_dumps(shown, JSON_COMPACT);
        json_decref(shown);
        if (s) {
            printf("%s\n", s);
            fflush(stdout);
            free(s);
        }
    }
}

/* SIGINT/SIGTERM: the loop stops and kg_engine_free ends the tasks in
 * flight with their process groups and cgroups (killed at once, kgym would
 * leave what a candidate started behind); a second signal ends kgym. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
    signal(SIGINT, SIG_DFL); /* async-signal-safe: the next one ends kgym */
    signal(SIGTERM, SIG_DFL);
}

/* Where parse_eval_args puts what it reads. */
struct eval_parse {
    struct evalrun *run;
    const char **ref;
    kg_engine_cfg *cfg;
    json_t *fields;
};

/* --ref R: the reference of the --cand flags after it. */
static int ref_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct eval_parse *ep = ctx;
    (void)name, (void)err;
    if (!*ep->ref)
        *ep->ref = v;
    ep->run->cur_ref = v;
    return 0;
}

static int cand_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct eval_parse *ep = ctx;
    (void)name;
    return add_cands(ep->run, v, err);
}

/* Any other --FIELD VALUE: a request field. */
static int field_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct eval_parse *ep = ctx;
    return kg_request_flag(ep->fields, name, v, err);
}

/* Reads argv into run (the candidates), *ref (the first --ref), cfg and
 * fields (the request's fields). Returns -1 to go on, else the exit code
 * (0: --help). */
static int parse_eval_args(int argc, char **argv, struct evalrun *run,
                           const char **ref, kg_engine_cfg *cfg, json_t *fields)
{
    const kg_opt table[] = {
        KG_OPT_F("--json", &run->json_out),
        KG_CLI_ENGINE_SWITCHES(cfg),
        KG_CLI_ENGINE_KNOBS(cfg),
        KG_OPT_FN("--ref", ref_opt),
        KG_OPT_FN("--cand", cand_opt),
        KG_CLI_ENGINE_LOCAL(cfg),
        KG_OPT_END,
    };
    struct eval_parse ep = {run, ref, cfg, fields};
    kg_opts spec = {.opts = table, .ctx = &ep, .other = field_opt};
    int rc = kg_opts_main(&spec, argc, argv, usage);
    if (rc >= 0)
        return rc;
    if (!*ref || run->n == 0) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/*
 * Every candidate's normalized request into tasks[0..run->n) (the
 * caller's to decref), checked before anything starts. Returns 0, or -1
 * with the message logged and nothing left in tasks.
 */
static int make_tasks(struct evalrun *run, const char *ref,
                      const json_t *fields, json_t **tasks)
{
    kg_err err = {{0}};
    json_t *refjs = NULL; /* the reference's code, read once per --ref */
    const char *refjs_path = NULL;
    int ntasks = 0;
    for (; ntasks < run->n; ntasks++) {
        const char *rpath = run->refs[ntasks] ? run->refs[ntasks] : ref;
        if (rpath != refjs_path) {
            json_decref(refjs);
            refjs_path = rpath;
            if (!(refjs = code_string("--ref", rpath)))
                break;
        }
        json_t *code = code_string("--cand", run->names[ntasks]);
        if (!code)
            break;
        json_t *req = json_deep_copy(fields);
        json_object_set(req, "reference_code", refjs);
        json_object_set_new(req, "kernel_code", code);
        int code_rc;
        tasks[ntasks] = kg_request_normalize(req, &code_rc, NULL, &err);
        json_decref(req);
        if (!tasks[ntasks]) {
            kg_error("%s: %s", run->names[ntasks], err.msg);
            break;
        }
    }
    json_decref(refjs);
    if (ntasks < run->n) {
        for (int k = 0; k < ntasks; k++)
            json_decref(tasks[k]);
        return -1;
    }
    return 0;
}

/*
 * Runs the tasks (taken: decref'd here) on an engine made from cfg until
 * all are done or a signal stops them. Returns the exit code: 0, 1 (the
 * engine failed) or 128 + the signal.
 */
static int run_tasks(struct evalrun *run, const kg_engine_cfg *cfg,
                     json_t **tasks)
{
    kg_err err = {{0}};
    kg_engine *e = NULL;
    if (kg_engine_new(&e, cfg, &err)) {
        kg_error("%s", err.msg);
        for (int k = 0; k < run->n; k++)
            json_decref(tasks[k]);
        return 1;
    }
    for (int i = 0; i < run->n; i++) {
        kg_engine_submit(e, tasks[i], (void *)(intptr_t)i, &err);
        json_decref(tasks[i]);
    }
    int rc = 0;
    struct sigaction sa = {.sa_handler = on_stop_signal,
                           .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* the engine writes to its children's pipes: one that died must cost
       an EPIPE, not this process (as under kgym worker) */
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        if (stop_signal) {
            kg_warn("%s: stopping the tasks in flight", strsignal(stop_signal));
            rc = 128 + stop_signal;
            break;
        }
        int busy = kg_engine_step(e, 1000, on_done, run, &err);
        if (busy < 0) {
            kg_error("%s", err.msg);
            rc = 1;
            break;
        }
        if (busy == 0)
            break;
    }
    kg_engine_free(e);
    return rc;
}

int kg_cli_eval(int argc, char **argv)
{
    /* a KernelBench tree (cmd_selfcheck.c): its options are another
     * table, so the one switch is looked for before either parses */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--kernelbench") ||
            !strncmp(argv[i], "--kernelbench=", 14))
            return kg_cli_eval_kernelbench(argc, argv);
    static struct evalrun run;
    static json_t *tasks[MAX_CANDS];
    const char *ref = NULL;
    char rootbuf[PATH_MAX];
    kg_engine_cfg cfg = {.device = NULL, .concurrency = 1, .idle_warm = -1};
    json_t *fields = json_object();
    int rc;
    memset(&run, 0, sizeof run);
    kg_log_init("kgym eval", NULL, 0);

    kg_cli_engine_knobs_env(&cfg); /* the old variables; flags win */
    rc = parse_eval_args(argc, argv, &run, &ref, &cfg, fields);
    if (rc >= 0)
        goto out;
    rc = 2;
    if (make_tasks(&run, ref, fields, tasks))
        goto out;
    if (!cfg.device)
        cfg.device = access("/dev/nvidia0", F_OK) == 0 ? "cuda:0" : "cpu";
    cfg.root = kg_cli_root(rootbuf, sizeof rootbuf);
    rc = run_tasks(&run, &cfg, tasks);
    if (!run.json_out && rc == 0) {
        if (run.n == 1)
            print_summary(run.names[0], run.results[0]);
        else
            print_table(&run);
    }
out:
    for (int i = 0; i < run.n; i++) {
        json_decref(run.results[i]);
        free((char *)run.names[i]);
    }
    json_decref(fields);
    return rc;
}
