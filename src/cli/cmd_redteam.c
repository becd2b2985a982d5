/* cmd_redteam.c - `kgym redteam`: runs the red-team corpus (cheating and
 * honest candidates, tests/redteam/corpus) through the worker engine, the
 * same path `kgym eval` and `kgym worker` use, and compares every verdict
 * with the one its header expects. Format and table: docs/redteam.md. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/opts.h"
#include "corpus/redteam_case.h"
#include "common/clock.h"
#include "common/code_file.h"
#include "common/log.h"
#include "common/request.h"
#include "worker/engine.h"

#define MAX_CANDS 1024

enum { ENG_CPU, ENG_GPU, N_ENG };
static const char *const STATUS[] = {"-", "OK", "MISS", "FALSE_ALARM",
                                     "ERROR"}; /* by KG_RT_* */

/* One candidate: its header, where it runs and what came back. */
struct cand {
    char *path;     /* file, as found under the corpus dir */
    char *name;     /* path relative to the corpus dir, without .py */
    kg_rt_case h;   /* its header */
    json_t *task;   /* normalized request (owned until submitted) */
    json_t *result; /* owned */
    int engine;
    int status;    /* KG_RT_*, 0 until the result is in */
    double wall_s; /* submission to result, this process's clock */
};

struct redteam {
    char root[PATH_MAX];
    const char *dir;
    const char *filter;
    int json_out;
    int backends; /* bit per backend: 1 cpu, 2 triton, 4 cuda */
    int gpu;      /* a GPU is present */
    const char *gpu_device;
    int n;
    struct cand c[MAX_CANDS];
    int skipped_gpu;  /* candidates that need a GPU, none here */
    json_t *defaults; /* request fields from --FIELD VALUE (header wins) */
    int done;
    double started;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kgym redteam [--backend cpu|triton|cuda|all] [--dir DIR] "
        "[--json]\n"
        "                    [--jobs N] [--filter SUBSTR] [--device cuda:N] "
        "[--python PATH]\n"
        "\n"
        "Runs every candidate under DIR (default <kgym>/tests/redteam/corpus, "
        "searched\n"
        "recursively for *.py) against the problem its header names, through "
        "one warm\n"
        "engine per device, and prints family, candidate, expected, got "
        "(verdict and\n"
        "hack reasons), time and OK / MISS (a cheat not caught as expected) /\n"
        "FALSE_ALARM (an honest candidate not passing) / ERROR (kgym's own "
        "failure).\n"
        "Exit status: 0 all OK, 1 any MISS, FALSE_ALARM or ERROR, 2 bad usage "
        "or input.\n"
        "\n"
        "Each candidate starts with one header line (docs/redteam.md):\n"
        "  # redteam: family=F problem=PATH backend=B expect=V[|V] "
        "[reasons=R[|R],...]\n"
        "             [code=C[|C]] [warn=W] [needs=gpu] "
        "[fields=name:value,...]\n"
        "\n"
        "options:\n"
        "  --backend LIST   cpu, triton, cuda, all, or a comma list (default: "
        "all with a\n"
        "                   GPU, else cpu,triton: triton runs in Triton's "
        "interpreter)\n"
        "  --dir DIR        corpus directory\n"
        "  --json           one JSON object with every row and result\n"
        "  --jobs N         tasks in flight per engine (default 1)\n"
        "  --filter SUBSTR  only candidates whose path contains SUBSTR\n"
        "  --device cuda:N  the GPU for triton and cuda candidates (default "
        "cuda:0)\n"
        "  --python PATH    interpreter with torch (default: KGYM_PYTHON, "
        ".venv, python3)\n"
        "  --verbose        show the children's output\n"
        "  --FIELD VALUE    a request field for every candidate, underscores "
        "as dashes\n"
        "                   (e.g. --num-perf-trials 20); a header's fields= "
        "wins\n");
}

/* Frees what c owns and zeroes it. */
static void free_cand(struct cand *c)
{
    kg_rt_case_free(&c->h);
    json_decref(c->task);
    json_decref(c->result);
    free(c->path);
    free(c->name);
    memset(c, 0, sizeof *c);
}

static int cmp_cand(const void *a, const void *b)
{
    return strcmp(((const struct cand *)a)->name,
                  ((const struct cand *)b)->name);
}

/* Adds every *.py below dir (recursively) to rt; rel is dir's path
 * relative to the corpus root ("" at the top). */
static int walk(struct redteam *rt, const char *dir, const char *rel,
                kg_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return kg_errf(err, KG_EIO, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "__pycache__"))
            continue;
        char full[PATH_MAX], sub[PATH_MAX];
        int k1 = snprintf(full, sizeof full, "%s/%s", dir, de->d_name);
        int k2 = snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "",
                          de->d_name);
        if (k1 < 0 || (size_t)k1 >= sizeof full || k2 < 0 ||
            (size_t)k2 >= sizeof sub) {
            rc = kg_errf(err, KG_EINVAL, "%s/%s: path too long", dir,
                         de->d_name);
            break;
        }
        struct stat st;
        if (lstat(full, &st) < 0) {
            rc = kg_errf(err, KG_EIO, "%s: %s", full, strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = walk(rt, full, sub, err);
            continue;
        }
        /* a link to a file is listed, for kg_read_code_file to refuse by
         * name (code is read only from regular files); links to
         * directories are not followed (no cycles) */
        if (S_ISLNK(st.st_mode) &&
            (stat(full, &st) < 0 || !S_ISREG(st.st_mode)))
            continue;
        size_t l = strlen(sub);
        if (l < 4 || strcmp(sub + l - 3, ".py"))
            continue;
        if (rt->filter && !strstr(sub, rt->filter))
            continue;
        if (rt->n >= MAX_CANDS) {
            rc = kg_errf(err, KG_EINVAL, "more than %d candidates", MAX_CANDS);
            break;
        }
        struct cand *c = &rt->c[rt->n++];
        c->path = strdup(full);
        c->name = strndup(sub, l - 3);
        if (!c->path || !c->name)
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
    }
    closedir(d);
    return rc;
}

/* Reads a candidate and its problem and builds its request. */
static int load_cand(struct redteam *rt, struct cand *c, kg_err *err)
{
    size_t code_len, ref_len;
    kg_err cerr;
    char *code = kg_read_code_file(c->path, "kernel_code", &code_len, &cerr);
    if (!code) { /* the caller names the file: the reason alone */
        size_t l = strlen(c->path);
        int named = !strncmp(cerr.msg, c->path, l) &&
                    !strncmp(cerr.msg + l, ": ", 2);
        return kg_errf(err, KG_EIO, "%s", cerr.msg + (named ? l + 2 : 0));
    }
    int rc = kg_rt_case_parse(&c->h, code, err);
    if (rc) {
        free(code);
        return rc;
    }
    char prob[PATH_MAX];
    int k = c->h.problem[0] == '/'
                ? snprintf(prob, sizeof prob, "%s", c->h.problem)
                : snprintf(prob, sizeof prob, "%s/%s", rt->root, c->h.problem);
    struct stat st;
    if (k < 0 || (size_t)k >= sizeof prob || stat(prob, &st) < 0 ||
        !S_ISREG(st.st_mode)) {
        free(code);
        return kg_errf(err, KG_ENOTFOUND,
                       "problem=%s: no such file (looked for %s)", c->h.problem,
                       prob);
    }
    kg_err ferr;
    char *ref = kg_read_code_file(prob, "reference_code", &ref_len, &ferr);
    if (!ref) {
        free(code);
        return kg_errf(err, KG_EIO, "problem=%s: %s", c->h.problem, ferr.msg);
    }
    json_t *req = json_deep_copy(rt->defaults);
    json_object_update(req, c->h.fields);
    json_object_set_new(req, "reference_code", json_stringn(ref, ref_len));
    json_object_set_new(req, "kernel_code", json_stringn(code, code_len));
    json_object_set_new(req, "backend", json_string(c->h.backend));
    free(ref);
    free(code);
    if (!json_object_get(req, "reference_code") ||
        !json_object_get(req, "kernel_code")) {
        json_decref(req);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    int code_rc;
    kg_err nerr;
    c->task = kg_request_normalize(req, &code_rc, NULL, &nerr);
    json_decref(req);
    if (!c->task)
        return kg_errf(err, KG_EINVAL, "fields: %s", nerr.msg);
    const char *key;
    json_t *v;
    json_object_foreach(c->h.fields, key, v)
    {
        if (!json_object_get(c->task, key))
            return kg_errf(err, KG_EINVAL, "fields: unknown request field '%s'",
                           key);
    }
    return 0;
}

/* Which backends --backend names; -1 on a bad value. */
static int parse_backends(const char *v)
{
    int mask = 0;
    char *copy = strdup(v), *save = NULL;
    if (!copy)
        return -1;
    for (char *t = strtok_r(copy, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "cpu"))
            mask |= 1;
        else if (!strcmp(t, "triton"))
            mask |= 2;
        else if (!strcmp(t, "cuda"))
            mask |= 4;
        else if (!strcmp(t, "all"))
            mask |= 7;
        else {
            mask = -1;
            break;
        }
    }
    free(copy);
    return mask ? mask : -1;
}

static int backend_bit(const char *b)
{
    return !strcmp(b, "cpu") ? 1 : !strcmp(b, "triton") ? 2 : 4;
}

/* ---- the table --------------------------------------------------------- */

static const char *str(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

struct widths {
    int family, name, expect, got;
};

static void print_row(const struct cand *c, const struct widths *w)
{
    char exp[512], got[512];
    kg_rt_expected_text(&c->h, exp, sizeof exp);
    kg_rt_got_text(c->result, got, sizeof got);
    json_t *t = json_object_get(c->result, "timings");
    json_t *tot = json_object_get(t, "total");
    double secs =
        json_is_number(tot) ? json_number_value(tot) / 1e3 : c->wall_s;
    printf("%-*s  %-*s  %-*s  %-*s  %6.1f  %s\n", w->family, c->h.family,
           w->name, c->name, w->expect, exp, w->got, got, secs,
           STATUS[c->status]);
    fflush(stdout);
}

static void print_header(const struct widths *w)
{
    printf("%-*s  %-*s  %-*s  %-*s  %6s  %s\n", w->family, "family", w->name,
           "candidate", w->expect, "expected", w->got, "got", "time_s",
           "status");
}

static void table_widths(const struct redteam *rt, struct widths *w)
{
    w->family = 6, w->name = 9, w->expect = 8, w->got = 36;
    for (int i = 0; i < rt->n; i++) {
        const struct cand *c = &rt->c[i];
        char exp[512];
        kg_rt_expected_text(&c->h, exp, sizeof exp);
        int lf = (int)strlen(c->h.family), ln = (int)strlen(c->name),
            le = (int)strlen(exp);
        w->family = lf > w->family ? lf : w->family;
        w->name = ln > w->name ? ln : w->name;
        w->expect = le > w->expect ? le : w->expect;
    }
}

/* ---- running ----------------------------------------------------------- */

struct runctx {
    struct redteam *rt;
    struct widths w;
};

static void on_done(void *ctx, void *user, json_t *result)
{
    struct runctx *x = ctx;
    struct cand *c = &x->rt->c[(int)(intptr_t)user];
    c->result = json_incref(result);
    c->wall_s = kg_now_ms() / 1e3 - x->rt->started;
    c->status = kg_rt_case_judge(&c->h, result);
    x->rt->done++;
    if (!x->rt->json_out)
        print_row(c, &x->w);
}

static json_t *row_json(const struct cand *c, json_error_t *je)
{
    json_t *r = c->result;
    json_t *row = json_pack_ex(
        je, 0,
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:s?, s:s?, s:b, s:O, s:s, "
        "s:{s:s, s:s?, s:O?, s:O?, s:O?, s:s?}, s:O?}",
        "candidate", c->name, "path", c->path, "family", c->h.family, "problem",
        c->h.problem, "backend", c->h.backend, "expect", c->h.expect, "reasons",
        c->h.reasons, "code", c->h.code, "warn", c->h.warn, "needs_gpu",
        c->h.needs_gpu, "fields", c->h.fields, "status", STATUS[c->status],
        "got", "verdict", str(r, "verdict"), "error_code",
        json_string_value(json_object_get(r, "error_code")), "hack_reasons",
        json_object_get(r, "hack_reasons"), "warnings",
        json_object_get(r, "warnings"), "speedup",
        json_object_get(r, "speedup"), "error_message",
        json_string_value(json_object_get(r, "error_message")), "result", r);
    return row;
}

/* Prints the whole run as one JSON object; 0, or 1 when it could not be
 * built (the reason logged). */
static int print_json(const struct redteam *rt, const int counts[])
{
    json_error_t je;
    json_t *rows = json_array();
    for (int i = 0; i < rt->n; i++) {
        if (!rt->c[i].result)
            continue;
        json_t *row = row_json(&rt->c[i], &je);
        if (!row || json_array_append_new(rows, row)) {
            kg_error("JSON row of %s: %s", rt->c[i].name,
                     row ? "out of memory" : je.text);
            json_decref(rows);
            return 1;
        }
    }
    json_t *doc = json_pack_ex(
        &je, 0, "{s:s, s:s, s:b, s:f, s:{s:i, s:i, s:i, s:i, s:i}, s:o}",
        "kgym_version", KG_VERSION, "dir", rt->dir, "gpu", rt->gpu, "wall_s",
        kg_now_ms() / 1e3 - rt->started, "counts", "ok", counts[KG_RT_OK],
        "miss", counts[KG_RT_MISS], "false_alarm", counts[KG_RT_FALSE_ALARM],
        "error", counts[KG_RT_ERROR], "skipped_need_gpu", rt->skipped_gpu,
        "rows", rows);
    char *s = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
    if (!s)
        kg_error("JSON report: %s", doc ? "could not serialise" : je.text);
    else
        printf("%s\n", s);
    int rc = s ? 0 : 1;
    free(s);
    json_decref(doc);
    return rc;
}

static void print_summary(const struct redteam *rt, const int counts[])
{
    printf("\n%d candidates in %.1f s: %d OK, %d MISS, %d FALSE_ALARM, %d "
           "ERROR",
           rt->done, kg_now_ms() / 1e3 - rt->started, counts[KG_RT_OK],
           counts[KG_RT_MISS], counts[KG_RT_FALSE_ALARM], counts[KG_RT_ERROR]);
    if (rt->skipped_gpu)
        printf(" (%d skipped: they need a GPU)", rt->skipped_gpu);
    printf("\n");
    for (int i = 0; i < rt->n; i++) {
        const struct cand *c = &rt->c[i];
        if (!c->result) {
            printf("ERROR %s: no result (the engine did not run it)\n",
                   c->name);
            continue;
        }
        if (c->status == KG_RT_OK)
            continue;
        char exp[512], got[512];
        kg_rt_expected_text(&c->h, exp, sizeof exp);
        kg_rt_got_text(c->result, got, sizeof got);
        printf("%s %s: expected %s, got %s", STATUS[c->status], c->name, exp,
               got);
        json_t *sp = json_object_get(c->result, "speedup");
        const char *msg = str(c->result, "error_message");
        if (json_is_number(sp))
            printf(" (speedup %.2fx)", json_number_value(sp));
        printf("%s%.300s\n", *msg ? ": " : "", msg);
    }
}

static int make_engine(kg_engine **e, const char *device,
                       const kg_engine_cfg *base, kg_err *err)
{
    kg_engine_cfg cfg = *base;
    cfg.device = device;
    /* the engine writes to its children's pipes: one that died must cost
       an EPIPE, not this process (as under kgym worker and kgym eval) */
    signal(SIGPIPE, SIG_IGN);
    return kg_engine_new(e, &cfg, err);
}

/* Runs every selected candidate; fills results. 0, or 1 when an engine
 * failed (the message logged). */
static int run_all(struct redteam *rt, const kg_engine_cfg *base)
{
    kg_engine *eng[N_ENG] = {NULL, NULL};
    const char *dev[N_ENG] = {"cpu", rt->gpu_device};
    kg_err err = {{0}};
    int busy[N_ENG] = {0, 0};
    struct runctx x = {.rt = rt};
    table_widths(rt, &x.w);
    for (int i = 0; i < rt->n; i++)
        busy[rt->c[i].engine]++;
    for (int k = 0; k < N_ENG; k++) {
        if (busy[k] && make_engine(&eng[k], dev[k], base, &err)) {
            kg_error("%s engine: %s", dev[k], err.msg);
            for (int j = 0; j < k; j++)
                kg_engine_free(eng[j]);
            return 1;
        }
    }
    rt->started = kg_now_ms() / 1e3;
    for (int i = 0; i < rt->n; i++) {
        struct cand *c = &rt->c[i];
        if (kg_engine_submit(eng[c->engine], c->task, (void *)(intptr_t)i,
                             &err)) {
            kg_error("%s: %s", c->name, err.msg);
            busy[c->engine]--;
        }
        json_decref(c->task);
        c->task = NULL;
    }
    if (!rt->json_out)
        print_header(&x.w);
    int rc = 0;
    while (busy[ENG_CPU] > 0 || busy[ENG_GPU] > 0) {
        int both = busy[ENG_CPU] > 0 && busy[ENG_GPU] > 0;
        for (int k = 0; k < N_ENG; k++) {
            if (busy[k] <= 0)
                continue;
            int left =
                kg_engine_step(eng[k], both ? 100 : 1000, on_done, &x, &err);
            if (left < 0) {
                kg_error("%s engine: %s", dev[k], err.msg);
                rc = 1;
                busy[k] = 0;
                continue;
            }
            busy[k] = left;
        }
    }
    for (int k = 0; k < N_ENG; k++)
        kg_engine_free(eng[k]);
    return rc;
}

/* Reads, filters and validates the corpus; 0 or 2 (message logged). */
static int prepare(struct redteam *rt)
{
    kg_err err = {{0}};
    struct stat st;
    if (stat(rt->dir, &st) < 0) {
        kg_error("--dir %s: %s", rt->dir, strerror(errno));
        return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
        kg_error("--dir %s: not a directory", rt->dir);
        return 2;
    }
    if (walk(rt, rt->dir, "", &err)) {
        kg_error("%s", err.msg);
        return 2;
    }
    if (rt->n == 0) {
        kg_error("no candidates (*.py) under %s%s%s", rt->dir,
                 rt->filter ? " matching " : "", rt->filter ? rt->filter : "");
        return 2;
    }
    qsort(rt->c, (size_t)rt->n, sizeof rt->c[0], cmp_cand);
    int keep = 0;
    for (int i = 0; i < rt->n; i++) {
        struct cand *c = &rt->c[i];
        if (load_cand(rt, c, &err)) {
            kg_error("%s: %s", c->path, err.msg);
            return 2;
        }
        int selected = (rt->backends & backend_bit(c->h.backend)) != 0;
        if (selected && c->h.needs_gpu && !rt->gpu) {
            rt->skipped_gpu++;
            selected = 0;
        }
        if (!selected) {
            free_cand(c);
            continue;
        }
        c->engine = strcmp(c->h.backend, "cpu") && rt->gpu ? ENG_GPU : ENG_CPU;
        if (keep != i) {
            rt->c[keep] = *c;
            memset(c, 0, sizeof *c);
        }
        keep++;
    }
    rt->n = keep;
    if (rt->n == 0) {
        kg_error("no candidate of the chosen backends can run here (%d need "
                 "a GPU)",
                 rt->skipped_gpu);
        return 2;
    }
    return 0;
}

static void free_all(struct redteam *rt)
{
    for (int i = 0; i < rt->n; i++) {
        struct cand *c = &rt->c[i];
        free_cand(c);
    }
}

/* The --FIELD VALUE defaults must make a valid request on their own: 0,
 * or 2 with the message logged. */
static int check_defaults(json_t *defaults)
{
    json_t *req = json_deep_copy(defaults);
    json_object_set_new(req, "reference_code", json_string("#"));
    json_object_set_new(req, "kernel_code", json_string("#"));
    int code;
    kg_err err;
    json_t *task = kg_request_normalize(req, &code, NULL, &err);
    json_decref(req);
    if (!task) {
        kg_error("%s", err.msg);
        return 2;
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(defaults, key, v)
    {
        if (!json_object_get(task, key)) {
            kg_error("--%s: unknown request field", key);
            rc = 2;
            break;
        }
    }
    json_decref(task);
    return rc;
}

/* What the options' callbacks write to. */
struct rt_parse {
    struct redteam *rt;
    const char *backend; /* --backend as given (NULL: the default) */
};

static int stray_arg(void *ctx, const char *name, const char *v, kg_err *err)
{
    (void)ctx, (void)name;
    return kg_errf(err, KG_ENOTFOUND, "%s: unexpected argument (kgym "
                   "redteam --help)", v);
}

/* --FIELD VALUE: a request field for every candidate. */
static int field_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct rt_parse *rp = ctx;
    kg_err ferr;
    if (!strcmp(name, "--reference-code") || !strcmp(name, "--kernel-code"))
        return kg_errf(err, KG_EINVAL, "%s: the code comes from the corpus "
                       "(problem= and the candidate file)", name);
    int rc = kg_request_flag(rp->rt->defaults, name, v, &ferr);
    return rc ? kg_errf(err, rc, "%s: %s", name, ferr.msg) : 0;
}

/* Reads the command line into rt and cfg: 0, -1 after --help, or 2 (the
 * message logged). */
static int parse_args(struct redteam *rt, kg_engine_cfg *cfg, int argc,
                      char **argv)
{
    struct rt_parse rp = {rt, NULL};
    const kg_opt table[] = {
        KG_OPT_F("--json", &rt->json_out),
        KG_OPT_FN0_ON("--verbose", kg_cli_verbose_opt, cfg),
        KG_OPT_S("--backend", &rp.backend),
        KG_OPT_S("--dir", &rt->dir),
        KG_OPT_S("--filter", &rt->filter),
        KG_OPT_S("--device", &rt->gpu_device),
        KG_OPT_S("--python", &cfg->python),
        KG_OPT_I("--jobs", &cfg->concurrency, 1, 64),
        KG_OPT_END,
    };
    kg_opts spec = {.opts = table, .ctx = &rp, .positional = stray_arg,
                    .other = field_opt};
    int rc = kg_opts_main(&spec, argc, argv, usage);
    if (rc >= 0)
        return rc ? rc : -1;
    const char *backend_arg = rp.backend;
    if (check_defaults(rt->defaults))
        return 2;
    if (strncmp(rt->gpu_device, "cuda:", 5) || !rt->gpu_device[5]) {
        kg_error("--device %s: must be cuda:N", rt->gpu_device);
        return 2;
    }
    if (!backend_arg) {
        rt->backends = rt->gpu ? 7 : 3;
        return 0;
    }
    rt->backends = parse_backends(backend_arg);
    if (rt->backends < 0) {
        kg_error("--backend %s: cpu, triton, cuda, all or a comma list of "
                 "them",
                 backend_arg);
        return 2;
    }
    if ((rt->backends & 4) && !rt->gpu) {
        kg_error("--backend %s: cuda candidates need a GPU and none was "
                 "found (/dev/nvidia0)",
                 backend_arg);
        return 2;
    }
    return 0;
}

int kg_cli_redteam(int argc, char **argv)
{
    static struct redteam rt;
    char dirbuf[PATH_MAX + 32];
    kg_engine_cfg cfg = {.concurrency = 1};
    memset(&rt, 0, sizeof rt);
    kg_log_init("kgym redteam", NULL, 0);
    kg_cli_root(rt.root, sizeof rt.root);
    rt.gpu = access("/dev/nvidia0", F_OK) == 0;
    rt.gpu_device = "cuda:0";
    rt.defaults = json_object();
    kg_cli_engine_knobs_env(&cfg); /* KGYM_CPU_THREADS... as before */
    int rc = parse_args(&rt, &cfg, argc, argv);
    if (rc) {
        json_decref(rt.defaults);
        return rc < 0 ? 0 : rc;
    }
    if (!rt.dir) {
        snprintf(dirbuf, sizeof dirbuf, "%s/tests/redteam/corpus", rt.root);
        rt.dir = dirbuf;
    }
    cfg.root = rt.root;
    rc = prepare(&rt);
    if (rc == 0) {
        rc = run_all(&rt, &cfg);
        int counts[KG_RT_ERROR + 1] = {0};
        for (int i = 0; i < rt.n; i++)
            counts[rt.c[i].result ? rt.c[i].status : KG_RT_ERROR]++;
        if (rt.json_out)
            rc |= print_json(&rt, counts);
        else
            print_summary(&rt, counts);
        if (counts[KG_RT_MISS] || counts[KG_RT_FALSE_ALARM] ||
            counts[KG_RT_ERROR])
            rc = 1;
    }
    free_all(&rt);
    json_decref(rt.defaults);
    return rc;
}
