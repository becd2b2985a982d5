/* cmd_report.c - `kgym report ROLLOUTS.jsonl [more ...] --out DIR`: the
 * tables of docs/report.md on stdout, DIR/report.json, and DIR/report.html
 * drawn from it by python/kgym/report_html.py under the project's Python
 * (KGYM_PYTHON, else <root>/.venv/bin/python, else python3). Bad usage or
 * input exits 2 with one line; a failed HTML step exits 1. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/report.h"
#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "common/log.h"

#define MAX_RUNS 64

static const char usage_text[] =
    "usage: kgym report ROLLOUTS.jsonl [MORE.jsonl ...] --out DIR\n"
    "                   [--strict] [--baseline KERNELBENCH_TIMES.json] "
    "[--no-html]\n"
    "Fast@p (p = 0 correct, 1, 1.2, 1.5, 2, 3) per run, level and turn,\n"
    "last turn and best of history, over all samples and among correct\n"
    "ones; hacking ratio by reason; mean reward, coverage, geometric-mean\n"
    "speedup; groups with no GRPO/TRLOO gradient; evaluation seconds and\n"
    "generated tokens. Two or more files: B - A per level and turn against\n"
    "the first. Writes DIR/report.json and DIR/report.html.\n"
    "  --strict      count speedup > p (KernelBench's rule) instead of >= p\n"
    "  --baseline F  speedups against KernelBench's baseline timing JSON\n"
    "                (mean ms per problem; other hardware) instead of the\n"
    "                rows' own (eager, or torch.compile when evaluated so)\n"
    "  --no-html     report.json and the tables only\n";

static void help(FILE *f)
{
    fputs(usage_text, f);
}

static int write_json(const char *dir, const json_t *report)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/report.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(report, tmp, JSON_INDENT(1) | JSON_REAL_PRECISION(10)) ||
        rename(tmp, path)) {
        kg_error("%s: cannot write (%s)", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Runs python -m kgym.report_html DIR/report.json DIR/report.html. */
static int write_html(const char *dir)
{
    char root[PATH_MAX], py[PATH_MAX + 32], pp[PATH_MAX + 16];
    char in[PATH_MAX], out[PATH_MAX];
    kg_cli_root(root, sizeof root);
    const char *env = getenv("KGYM_PYTHON");
    if (env && *env)
        snprintf(py, sizeof py, "%s", env);
    else {
        snprintf(py, sizeof py, "%s/.venv/bin/python", root);
        if (access(py, X_OK))
            snprintf(py, sizeof py, "python3");
    }
    snprintf(pp, sizeof pp, "%s/python", root);
    snprintf(in, sizeof in, "%s/report.json", dir);
    snprintf(out, sizeof out, "%s/report.html", dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        kg_error("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setenv("PYTHONPATH", pp, 1);
        setenv("MPLBACKEND", "svg", 1);
        execlp(py, py, "-m", "kgym.report_html", in, out, (char *)NULL);
        fprintf(stderr, "kgym report: %s: %s\n", py, strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        kg_error("%s not written (%s -m kgym.report_html exited %d)", out, py,
                 WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        return -1;
    }
    return 0;
}

/* The report object (new reference), or NULL after an error line. */
static json_t *build(char **files, int nf, const char *baseline, int strict)
{
    json_t *runs = json_array(), *diffs = json_array();
    char label[512] = "";
    for (int i = 0; i < nf; i++) {
        rp_run run;
        kg_err err = {{0}};
        int rc = rp_read(&run, files[i], &err), read = rc == 0;
        if (rc == 0 && baseline) {
            rc = rp_baseline_apply(&run, baseline, label, sizeof label, &err);
            if (rc == 0)
                run.baseline = label;
        }
        json_t *st = rc ? NULL : rp_stats(&run, strict, &err);
        if (st) { /* a name given twice gets its position */
            size_t k;
            json_t *o;
            json_array_foreach(runs, k,
                               o) if (json_equal(json_object_get(o, "name"),
                                                 json_object_get(st, "name")))
            {
                char nm[600];
                snprintf(nm, sizeof nm, "%s#%d",
                         json_string_value(json_object_get(st, "name")), i + 1);
                json_object_set_new(st, "name", json_string(nm));
                break;
            }
        }
        if (read) /* rp_read frees what it read when it fails */
            rp_run_free(&run);
        if (!st) {
            kg_error("%s", err.msg);
            json_decref(runs);
            json_decref(diffs);
            return NULL;
        }
        json_array_append_new(runs, st);
    }
    for (size_t i = 1; i < json_array_size(runs); i++)
        json_array_append_new(
            diffs, rp_diff(json_array_get(runs, 0), json_array_get(runs, i)));
    return json_pack("{s:s, s:s, s:s, s:o, s:o}", "schema", "kgym.report/1",
                     "comparison", strict ? ">" : ">=", "baseline_note",
                     baseline ? "speedups against a KernelBench baseline "
                                "timing file, taken on other hardware"
                              : "speedups against the reference as the rows "
                                "were evaluated (eager unless torch_compile)",
                     "runs", runs, "diffs", diffs);
}

/* What kgym report was asked. */
struct ropts {
    char *files[MAX_RUNS];
    int nf, strict, no_html;
    const char *out, *baseline;
};

static int add_file(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct ropts *o = ctx;
    (void)name;
    if (o->nf == MAX_RUNS)
        return kg_errf(err, KG_EINVAL, "at most %d rollout files", MAX_RUNS);
    o->files[o->nf++] = (char *)v;
    return 0;
}

/* --out DIR, --baseline F: an empty value is none. */
static int set_path(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct ropts *o = ctx;
    if (!*v)
        return kg_errf(err, KG_EINVAL, "%s: needs a value", name);
    *(!strcmp(name, "--out") ? &o->out : &o->baseline) = v;
    return 0;
}

int kg_cli_report(int argc, char **argv)
{
    kg_log_init("kgym report", NULL, 0);
    struct ropts o = {.nf = 0};
    const kg_opt table[] = {
        KG_OPT_F("--strict", &o.strict),
        KG_OPT_F("--no-html", &o.no_html),
        KG_OPT_FN("--out", set_path),
        KG_OPT_FN("--baseline", set_path),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table,
                    .ctx = &o,
                    .positional = add_file,
                    .hint = " (kgym report --help)"};
    int prc = kg_opts_main(&spec, argc, argv, help);
    if (prc >= 0)
        return prc;
    if (!o.nf || !o.out) {
        kg_error("%s (kgym report --help)",
                 !o.nf ? "no rollout file given" : "--out DIR is required");
        return 2;
    }
    json_t *report = build(o.files, o.nf, o.baseline, o.strict);
    if (!report)
        return 2;
    struct stat st;
    if (mkdir(o.out, 0777) &&
        !(errno == EEXIST && stat(o.out, &st) == 0 && S_ISDIR(st.st_mode))) {
        kg_error("--out %s: %s", o.out,
                 errno == EEXIST ? "exists and is not a directory"
                                 : strerror(errno));
        json_decref(report);
        return 2;
    }
    int rc = write_json(o.out, report) ? 1 : 0;
    if (rc == 0) {
        rp_print(stdout, report);
        if (!o.no_html && write_html(o.out))
            rc = 1;
    }
    json_decref(report);
    return rc;
}
