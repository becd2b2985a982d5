/* cmd_selfcheck.c - `kgym selfcheck --kernelbench DIR` (each problem's
 * reference given as its own candidate) and `kgym eval --kernelbench DIR
 * --candidates CANDDIR` (candidates paired by file name): KernelBench's
 * tree read as is, every problem through one worker engine (as `kgym eval`
 * drives it), one JSONL line per result as it arrives, a progress line,
 * a summary table at the end; --resume skips what the JSONL holds. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "corpus/kernelbench.h"
#include "common/clock.h"
#include "common/code_file.h"
#include "common/log.h"
#include "common/request.h"
#include "worker/engine.h"

/* What makes a reference its own candidate (run_hack_checks off: such a
 * candidate has no custom kernel by construction). */
#define SELF_SUFFIX "\n\nclass ModelNew(Model):\n    pass\n"

struct kbrun {
    int self; /* selfcheck: the reference is the candidate */
    const char *cmd, *dir, *canddir, *globs, *out, *footprints;
    unsigned levels;
    int resume, progress, tty;
    kb_tree tree;
    kb_recs recs; /* the selection's results: resumed, then new */
    FILE *jf;     /* the JSONL: --out (appended) or stdout */
    FILE *sf;     /* the summary: stdout, or stderr when jf is stdout */
    int total, done, pass; /* this session's tasks */
    int not_run;           /* problems whose task could not be made */
    double t0;
};

static void usage(FILE *f, int self)
{
    fprintf(f,
            "usage: %s --kernelbench DIR%s [--level 1,2,3]\n"
            "         [--problems GLOB[,GLOB]] [--out FILE.jsonl [--resume]] "
            "[--progress]\n"
            "         [--concurrency N ...] [--FIELD VALUE ...]\n\n",
            self ? "kgym selfcheck" : "kgym eval",
            self ? "" : " --candidates CANDDIR");
    fprintf(f,
            "%s\n"
            "DIR is KernelBench's tree as published (DIR/level1/<N>_<Name>.py "
            "...; or its\n"
            "checkout, with DIR/KernelBench/level1). One JSON line per problem "
            "as results\n"
            "arrive (to --out, appended and flushed, else stdout), then a "
            "summary table.\n\n",
            self ? "Evaluates each problem's reference as its own candidate "
                   "(class ModelNew(Model):\npass; run_hack_checks false): "
                   "every problem should pass at a speedup near 1."
                 : "Evaluates CANDDIR/levelN/<N>_<Name>.py (or "
                   "CANDDIR/<N>_<Name>.py) against the\nproblem of the same "
                   "name.");
    fprintf(f,
            "options:\n"
            "  --level 1,2,3        levels to run (default: the published "
            "1, 2 and 3;\n"
            "                       level 4, whose models load from a hub, "
            "only when named)\n"
            "  --problems GLOB,...  problems whose name (19_ReLU), file name "
            "or levelN/name\n"
            "                       matches one of the globs\n"
            "  --out FILE.jsonl     the results; an existing file needs "
            "--resume\n"
            "  --resume             skip the problems FILE already holds "
            "(infra_error: again)\n"
            "  --progress           a progress line on stderr (default: when "
            "it is a TTY)\n"
            "  --no-progress        none\n"
            "  --footprints FILE    a JSONL of an earlier run: its problems' "
            "memory footprints,\n"
            "                       so that tasks start only while they fit "
            "the device\n"
            "  --device, --concurrency, --prewarm, --stage, --python, --fresh, "
            "--no-sandbox,\n"
            "  --no-cgroups, --cpu-threads, --compile-ahead, "
            "--spare-mem-floor, --verbose\n"
            "  and --FIELD VALUE (request fields) as for kgym eval\n");
}

static void usage_self(FILE *f)
{
    usage(f, 1);
}

static void usage_eval(FILE *f)
{
    usage(f, 0);
}

/* What the options' callbacks write to. */
struct kb_parse {
    struct kbrun *run;
    json_t *fields;
};

static int no_progress(void *ctx, const char *name, const char *v, kg_err *err)
{
    (void)name, (void)v, (void)err;
    ((struct kb_parse *)ctx)->run->progress = 0;
    return 0;
}

static int level_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    (void)name;
    return kb_parse_levels(v, &((struct kb_parse *)ctx)->run->levels, err);
}

/* --candidates (kgym eval --kernelbench's), --ref and --cand (kgym
 * eval's): refused where they do not belong. */
static int cand_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct kbrun *run = ((struct kb_parse *)ctx)->run;
    if (!strcmp(name, "--candidates") && !run->self) {
        run->canddir = v;
        return 0;
    }
    return kg_errf(err, KG_EINVAL, "%s: not with %s", name,
                   run->self ? "selfcheck" : "--kernelbench");
}

/* Any other --FIELD VALUE: a request field. */
static int field_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    return kg_request_flag(((struct kb_parse *)ctx)->fields, name, v, err);
}

/* Reads argv into run, cfg and fields. -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, struct kbrun *run,
                      kg_engine_cfg *cfg, json_t *fields)
{
    int json_lines; /* kgym eval's --json: the lines are JSON here anyway */
    const kg_opt table[] = {
        KG_OPT_F("--json", &json_lines),
        KG_OPT_F("--resume", &run->resume),
        KG_OPT_F("--progress", &run->progress),
        KG_OPT_FN0("--no-progress", no_progress),
        KG_CLI_ENGINE_SWITCHES(cfg),
        KG_CLI_ENGINE_KNOBS(cfg),
        KG_CLI_ENGINE_LOCAL(cfg),
        KG_OPT_S("--kernelbench", &run->dir),
        KG_OPT_FN("--candidates", cand_opt),
        KG_OPT_FN("--ref", cand_opt),
        KG_OPT_FN("--cand", cand_opt),
        KG_OPT_FN("--level", level_opt),
        KG_OPT_S("--problems", &run->globs),
        KG_OPT_S("--out", &run->out),
        KG_OPT_S("--footprints", &run->footprints),
        KG_OPT_END,
    };
    struct kb_parse kp = {run, fields};
    kg_opts spec = {.opts = table, .ctx = &kp, .other = field_opt};
    int rc = kg_opts_main(&spec, argc, argv,
                          run->self ? usage_self : usage_eval);
    if (rc >= 0)
        return rc;
    const char *missing = !run->dir                       ? "--kernelbench DIR"
                          : !run->self && !run->canddir   ? "--candidates DIR"
                          : run->resume && !run->out      ? "--out (--resume)"
                                                          : NULL;
    if (missing) {
        kg_error("%s is needed (--help)", missing);
        return 2;
    }
    return -1;
}

/* The request of problem p (new reference), or NULL with the reason in
 * err: a file refused or unreadable, a request out of its limits. */
static json_t *make_task(const struct kbrun *run, const kb_problem *p,
                         const json_t *fields, kg_err *err)
{
    size_t rlen, clen;
    char *ref = kg_read_code_file(p->path, "reference_code", &rlen, err);
    if (!ref)
        return NULL;
    char *cand = NULL;
    if (run->self) {
        clen = rlen + strlen(SELF_SUFFIX);
        if ((cand = malloc(clen + 1)))
            snprintf(cand, clen + 1, "%s%s", ref, SELF_SUFFIX);
    } else {
        cand = kg_read_code_file(p->cand, "kernel_code", &clen, err);
    }
    json_t *task = NULL;
    if (cand) {
        json_t *req = json_deep_copy(fields);
        if (run->self && !json_object_get(req, "run_hack_checks"))
            json_object_set_new(req, "run_hack_checks", json_false());
        json_object_set_new(req, "reference_code", json_stringn(ref, rlen));
        json_object_set_new(req, "kernel_code", json_stringn(cand, clen));
        int code;
        task = kg_request_normalize(req, &code, NULL, err);
        json_decref(req);
    } else if (run->self) {
        kg_errf(err, KG_ENOMEM, "out of memory");
    }
    free(ref);
    free(cand);
    return task;
}

/* The request fields given, checked once on a stand-in program so that a
 * bad one is refused before anything runs (not once per problem). 0, or 2
 * after logging why. */
static int check_fields(const json_t *fields)
{
    kg_err err = {{0}};
    json_t *req = json_deep_copy(fields);
    json_object_set_new(req, "reference_code", json_string("x = 1\n"));
    json_object_set_new(req, "kernel_code", json_string("x = 1\n"));
    int code;
    json_t *task = kg_request_normalize(req, &code, NULL, &err);
    json_decref(req);
    if (!task) {
        kg_error("%s", err.msg);
        return 2;
    }
    json_decref(task);
    return 0;
}

/* The progress line: on a TTY one line rewritten in place, else (with
 * --progress) a log line per result. */
static void progress(struct kbrun *run, int last)
{
    if (!run->progress)
        return;
    double el = (kg_now_ms() - run->t0) / 1e3;
    double eta = run->done ? el / run->done * (run->total - run->done) : 0;
    char line[200];
    snprintf(line, sizeof line,
             "%d/%d done, %d pass, %d not pass, %.0f s, ETA %dm%02ds",
             run->done, run->total, run->pass, run->done - run->pass, el,
             (int)eta / 60, (int)eta % 60);
    if (run->tty)
        fprintf(stderr, "\r%s: %s\033[K%s", run->cmd, line, last ? "\n" : "");
    else if (!last)
        kg_info("%s", line);
}

static void on_done(void *ctx, void *user, json_t *result)
{
    struct kbrun *run = ctx;
    const kb_problem *p = &run->tree.p[(intptr_t)user];
    json_t *line = kb_line(p, result);
    char *s = json_dumps(line, JSON_COMPACT);
    if (s) {
        fprintf(run->jf, "%s\n", s);
        fflush(run->jf);
        free(s);
    }
    kb_recs_put(&run->recs, line);
    const char *v = json_string_value(json_object_get(line, "verdict"));
    run->done++;
    run->pass += v && !strcmp(v, "pass");
    if (v && strcmp(v, "pass") && (!run->progress || !run->tty))
        kg_info("level%d/%s: %s%s%s", p->level, p->name, v,
                json_is_string(json_object_get(line, "error")) ? ": " : "",
                json_is_string(json_object_get(line, "error"))
                    ? json_string_value(json_object_get(line, "error"))
                    : "");
    json_decref(line);
    progress(run, 0);
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
    signal(SIGINT, SIG_DFL); /* the next one ends kgym */
    signal(SIGTERM, SIG_DFL);
}

/* Submits every problem still to run and steps the engine until all are
 * done or a signal stops it. Returns 0, 1 (the engine failed) or 128 +
 * the signal. */
static int run_engine(struct kbrun *run, kg_engine *e, const json_t *fields,
                      const unsigned char *skip)
{
    kg_err err = {{0}};
    for (int i = 0; i < run->tree.n; i++) {
        const kb_problem *p = &run->tree.p[i];
        if (skip[i])
            continue;
        json_t *task = make_task(run, p, fields, &err);
        if (!task) {
            kg_error("level%d/%s: not run: %s", p->level, p->name, err.msg);
            run->not_run++;
            continue;
        }
        if (kg_engine_submit(e, task, (void *)(intptr_t)i, &err) == 0)
            run->total++;
        else
            kg_error("level%d/%s: %s", p->level, p->name, err.msg);
        json_decref(task);
    }
    struct sigaction sa = {.sa_handler = on_stop_signal,
                           .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    run->t0 = kg_now_ms();
    progress(run, 0);
    for (;;) {
        if (stop_signal) {
            kg_warn("%s: stopping the tasks in flight (--resume continues)",
                    strsignal(stop_signal));
            return 128 + stop_signal;
        }
        int busy = kg_engine_step(e, 1000, on_done, run, &err);
        if (busy < 0) {
            kg_error("%s", err.msg);
            return 1;
        }
        if (busy == 0)
            return 0;
    }
}

/* Marks in skip[] the problems without a candidate (eval) and, with
 * --resume, those the JSONL holds (but for infra_error), whose records go
 * into run->recs. Opens run->jf. 0, or 2 after logging why. */
static int prepare(struct kbrun *run, unsigned char *skip)
{
    kg_err err = {{0}};
    int clean = 1, no_cand = 0, resumed = 0;
    kb_recs old = {0};
    struct stat st;
    if (run->out && !run->resume && stat(run->out, &st) == 0 && st.st_size) {
        kg_error("--out %s exists: --resume to continue it, or another file",
                 run->out);
        return 2;
    }
    if (run->out && kb_jsonl_load(run->out, &old, &clean, &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    for (int i = 0; i < run->tree.n; i++) {
        const kb_problem *p = &run->tree.p[i];
        const kb_rec *r = kb_recs_find(&old, p->level, p->name);
        if (r && strcmp(r->verdict, "infra_error")) {
            skip[i] = 1, resumed++;
            kb_recs_add(&run->recs, r);
        } else if (!run->self && !p->cand) {
            skip[i] = 1, no_cand++;
        }
    }
    kb_recs_free(&old);
    if (no_cand)
        kg_warn("%d of %d problems have no candidate in %s: not run", no_cand,
                run->tree.n, run->canddir);
    if (resumed)
        kg_info("%s: %d problems done already, skipped", run->out, resumed);
    run->jf = run->out ? fopen(run->out, "a") : stdout;
    if (!run->jf) {
        kg_error("--out %s: %s", run->out, strerror(errno));
        return 2;
    }
    if (!clean)
        fputc('\n', run->jf); /* a line cut by an interrupt ends here */
    run->sf = run->out ? stdout : stderr;
    return 0;
}

/* Tells the engine the footprints an earlier run's JSONL holds for the
 * problems of this one (admission by memory from the first task on, not
 * only from each problem's second). Returns how many; a file that cannot
 * be read is an error (2, after logging why). */
static int seed_footprints(struct kbrun *run, kg_engine *e, int *count)
{
    *count = 0;
    FILE *f = fopen(run->footprints, "r");
    if (!f) {
        kg_error("--footprints %s: %s", run->footprints, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *m = json_object_get(j, "memory");
        double fp = json_number_value(json_object_get(m, "footprint_bytes"));
        double tot = json_number_value(json_object_get(m, "device_total_bytes"));
        const char *name = json_string_value(json_object_get(j, "problem"));
        int lv = (int)json_integer_value(json_object_get(j, "level"));
        for (int i = 0; name && fp > 0 && i < run->tree.n; i++) {
            const kb_problem *p = &run->tree.p[i];
            if (p->level != lv || strcmp(p->name, name))
                continue;
            kg_err err = {{0}};
            size_t len;
            char *ref = kg_read_code_file(p->path, "reference_code", &len, &err);
            if (ref) {
                kg_engine_note_footprint(e, ref, fp, tot);
                (*count)++;
                free(ref);
            }
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    return 0;
}

/* What the run comes to: the summary, then the exit code (0; 1 when a
 * problem could not be run or, for selfcheck, did not pass). */
static int finish(struct kbrun *run, int rc)
{
    progress(run, 1);
    kb_summary(run->sf, &run->recs, run->self);
    double el = run->t0 > 0 ? (kg_now_ms() - run->t0) / 1e3 : 0;
    if (run->done && el > 0)
        fprintf(run->sf, "throughput: %d problems in %.1f s, %.1f problems "
                         "per minute\n",
                run->done, el, run->done * 60.0 / el);
    if (run->not_run)
        fprintf(run->sf, "not run (unreadable or refused, see above): %d\n",
                run->not_run);
    if (rc)
        return rc;
    int bad = run->not_run > 0;
    for (int i = 0; i < run->recs.n && run->self; i++)
        bad |= strcmp(run->recs.r[i].verdict, "pass") != 0;
    return bad;
}

static int kb_main(int argc, char **argv, int self)
{
    static struct kbrun run;
    kg_err err = {{0}};
    char rootbuf[4096];
    kg_engine_cfg cfg = {.device = NULL, .concurrency = 1, .idle_warm = -1};
    json_t *fields = json_object();
    unsigned char *skip = NULL;
    kg_engine *e = NULL;
    memset(&run, 0, sizeof run);
    run.self = self;
    run.cmd = self ? "kgym selfcheck" : "kgym eval";
    run.tty = isatty(2);
    run.progress = run.tty;
    kg_log_init(run.cmd, NULL, 0);
    kg_cli_engine_knobs_env(&cfg); /* the old variables; flags win */
    int rc = parse_args(argc, argv, &run, &cfg, fields);
    if (rc >= 0)
        goto out;
    rc = 2;
    if (check_fields(fields))
        goto out;
    if (kb_tree_read(&run.tree, run.dir, run.levels, run.globs, &err)) {
        kg_error("%s", err.msg);
        goto out;
    }
    for (int lv = 1; lv <= KB_MAX_LEVEL; lv++)
        if (run.tree.skipped & (1u << lv))
            kg_info("level%d: not run (not a published level; --level %d "
                    "runs it)",
                    lv, lv);
    if (!self && kb_tree_pair(&run.tree, run.canddir) == 0) {
        kg_error("--candidates %s: no file named like a problem of %s "
                 "(CANDDIR/levelN/<N>_<Name>.py or CANDDIR/<N>_<Name>.py)",
                 run.canddir, run.tree.root);
        goto out;
    }
    if (!(skip = calloc((size_t)run.tree.n, 1)) || prepare(&run, skip))
        goto out;
    if (!cfg.device)
        cfg.device = access("/dev/nvidia0", F_OK) == 0 ? "cuda:0" : "cpu";
    cfg.root = kg_cli_root(rootbuf, sizeof rootbuf);
    int todo = 0;
    for (int i = 0; i < run.tree.n; i++)
        todo += !skip[i];
    kg_info("%d problems in %s, %d to run (%s)", run.tree.n, run.tree.root,
            todo, cfg.device);
    if (todo == 0) {
        rc = finish(&run, 0);
        goto out;
    }
    if (kg_engine_new(&e, &cfg, &err)) {
        kg_error("%s", err.msg);
        rc = 1;
        goto out;
    }
    int seeded = 0;
    if (run.footprints && seed_footprints(&run, e, &seeded)) {
        kg_engine_free(e);
        rc = 2;
        goto out;
    }
    if (run.footprints)
        kg_info("--footprints %s: %d problems' memory known", run.footprints,
                seeded);
    rc = finish(&run, run_engine(&run, e, fields, skip));
    kg_engine_free(e);
out:
    if (run.jf && run.jf != stdout)
        fclose(run.jf);
    free(skip);
    kb_tree_free(&run.tree);
    kb_recs_free(&run.recs);
    json_decref(fields);
    return rc;
}

int kg_cli_selfcheck(int argc, char **argv)
{
    return kb_main(argc, argv, 1);
}

int kg_cli_eval_kernelbench(int argc, char **argv)
{
    return kb_main(argc, argv, 0);
}
