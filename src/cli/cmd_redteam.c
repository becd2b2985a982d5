/* cmd_redteam.c - `kgym redteam`: runs the red-team corpus (cheating and
 * honest candidates, tests/redteam/corpus) through the worker engine, the
 * same path `kgym eval` and `kgym worker` use, and compares every verdict
 * with the one its header expects. Format and table: docs/redteam.md. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "common/request.h"
#include "worker/engine.h"

#define MAX_CANDS 1024
#define HEADER_TAG "# redteam:"

enum { ENG_CPU, ENG_GPU, N_ENG };
enum { ST_PENDING, ST_OK, ST_MISS, ST_FALSE_ALARM, ST_ERROR };
static const char *const STATUS[] = {"-", "OK", "MISS", "FALSE_ALARM", "ERROR"};

/* Verdicts a header may expect (infra_error is kgym's failure, never a
 * candidate's expected outcome). */
static const char *const VERDICTS[] = {
    "pass", "mismatch", "compile_error", "runtime_error", "timeout", "hacked"};

/* One candidate: its header, where it runs and what came back. */
struct cand {
    char *path;    /* file, as found under the corpus dir */
    char *name;    /* path relative to the corpus dir, without .py */
    char *family;  /* "honest" or a THREATS.md family */
    char *problem; /* as written in the header */
    char *backend; /* cpu | triton | cuda */
    char *expect;  /* verdicts, '|'-separated */
    char *reasons; /* codes, ','-separated; alternatives '|'-separated */
    char *code;    /* error codes, '|'-separated, or NULL */
    char *warn;    /* a warning that must be present, or NULL */
    int needs_gpu;
    json_t *fields; /* request fields of the header (owned) */
    json_t *task;   /* normalized request (owned until submitted) */
    json_t *result; /* owned */
    int engine;
    int status;
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

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

/* The kgym tree: $KGYM_ROOT, else two levels above this executable. */
static void find_root(char *buf, size_t n)
{
    const char *env = getenv("KGYM_ROOT");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k <= 0) {
        snprintf(buf, n, ".");
        return;
    }
    buf[k] = 0;
    for (int up = 0; up < 2; up++) { /* <root>/build/kgym */
        char *s = strrchr(buf, '/');
        if (s)
            *s = 0;
    }
}

/* 1 when word is one of the '|'-separated items of list. */
static int in_list(const char *list, const char *word)
{
    size_t w = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == w && !strncmp(p, word, l))
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static int is_verdict(const char *s, size_t l)
{
    for (size_t i = 0; i < sizeof VERDICTS / sizeof VERDICTS[0]; i++)
        if (strlen(VERDICTS[i]) == l && !strncmp(VERDICTS[i], s, l))
            return 1;
    return 0;
}

/* 1 when s is a non-empty list of [a-z0-9_] words joined by seps. */
static int words_ok(const char *s, const char *seps)
{
    int need_word = 1;
    for (; *s; s++) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
            (*s >= 'A' && *s <= 'Z'))
            need_word = 0;
        else if (strchr(seps, *s) && !need_word)
            need_word = 1;
        else
            return 0;
    }
    return !need_word;
}

/* "name:value,name:value" -> request fields; values as kgym eval's flags. */
static int parse_fields(struct cand *c, const char *v, kg_err *err)
{
    char *copy = strdup(v), *save = NULL;
    if (!copy)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    for (char *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon || colon == tok || !colon[1]) {
            free(copy);
            return kg_errf(err, KG_EINVAL, "fields: '%s' is not name:value",
                           tok);
        }
        *colon = 0;
        if (!strcmp(tok, "kernel_code") || !strcmp(tok, "reference_code") ||
            !strcmp(tok, "backend")) {
            kg_errf(err, KG_EINVAL,
                    "fields: %s comes from the file and the header", tok);
            free(copy);
            return KG_EINVAL;
        }
        json_object_set_new(c->fields, tok, kg_cli_flag_value(colon + 1));
    }
    free(copy);
    return 0;
}

/* Stores one key=value of the header; the strings are owned by c. */
static int header_kv(struct cand *c, const char *key, const char *val,
                     kg_err *err)
{
    char **slot = NULL;
    if (!strcmp(key, "family"))
        slot = &c->family;
    else if (!strcmp(key, "problem"))
        slot = &c->problem;
    else if (!strcmp(key, "backend"))
        slot = &c->backend;
    else if (!strcmp(key, "expect"))
        slot = &c->expect;
    else if (!strcmp(key, "reasons"))
        slot = &c->reasons;
    else if (!strcmp(key, "code"))
        slot = &c->code;
    else if (!strcmp(key, "warn"))
        slot = &c->warn;
    else if (!strcmp(key, "needs")) {
        if (strcmp(val, "gpu"))
            return kg_errf(err, KG_EINVAL, "needs=%s: only needs=gpu exists",
                           val);
        c->needs_gpu = 1;
        return 0;
    } else if (!strcmp(key, "fields"))
        return parse_fields(c, val, err);
    else
        return kg_errf(err, KG_EINVAL,
                       "unknown key '%s' (family, problem, backend, expect, "
                       "reasons, code, warn, needs, fields)",
                       key);
    if (*slot)
        return kg_errf(err, KG_EINVAL, "%s= given twice", key);
    *slot = strdup(val);
    return *slot ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
}

/* Checks what the header says against itself (not yet the problem file). */
static int header_check(struct cand *c, kg_err *err)
{
    static const char *const need[] = {"family", "problem", "backend",
                                       "expect"};
    char *const have[] = {c->family, c->problem, c->backend, c->expect};
    for (int i = 0; i < 4; i++)
        if (!have[i] || !*have[i])
            return kg_errf(err, KG_EINVAL, "header lacks %s=", need[i]);
    if (!words_ok(c->family, ""))
        return kg_errf(err, KG_EINVAL, "family=%s: one word of [a-z0-9_]",
                       c->family);
    if (strcmp(c->backend, "cpu") && strcmp(c->backend, "triton") &&
        strcmp(c->backend, "cuda"))
        return kg_errf(err, KG_EINVAL,
                       "backend=%s: must be cpu, triton or cuda", c->backend);
    for (const char *p = c->expect; p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (!is_verdict(p, l))
            return kg_errf(err, KG_EINVAL,
                           "expect=%s: '%.*s' is not a verdict (pass, "
                           "mismatch, compile_error, runtime_error, timeout, "
                           "hacked)",
                           c->expect, (int)l, p);
        p = e ? e + 1 : NULL;
    }
    if (!strcmp(c->family, "honest") && strcmp(c->expect, "pass"))
        return kg_errf(err, KG_EINVAL, "family=honest must expect=pass, not %s",
                       c->expect);
    if (c->reasons && !words_ok(c->reasons, ",|"))
        return kg_errf(err, KG_EINVAL, "reasons=%s: codes joined by , or |",
                       c->reasons);
    if (c->reasons && !in_list(c->expect, "hacked"))
        return kg_errf(err, KG_EINVAL,
                       "reasons= needs expect= to include hacked");
    if (c->code && !words_ok(c->code, "|"))
        return kg_errf(err, KG_EINVAL, "code=%s: codes joined by |", c->code);
    if (c->warn && !words_ok(c->warn, ""))
        return kg_errf(err, KG_EINVAL, "warn=%s: one word", c->warn);
    if (!strcmp(c->backend, "cuda"))
        c->needs_gpu = 1;
    return 0;
}

/* Parses the first line of code ("# redteam: key=value ..."). */
static int parse_header(struct cand *c, const char *code, kg_err *err)
{
    size_t tag = strlen(HEADER_TAG);
    if (strncmp(code, HEADER_TAG, tag))
        return kg_errf(err, KG_EINVAL,
                       "no header: the first line must start with '%s' "
                       "(docs/redteam.md)",
                       HEADER_TAG);
    const char *eol = strchr(code, '\n');
    size_t len = eol ? (size_t)(eol - code) : strlen(code);
    char *line = strndup(code + tag, len - tag);
    if (!line)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(line, " \t\r", &save); tok && !rc;
         tok = strtok_r(NULL, " \t\r", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            rc = kg_errf(err, KG_EINVAL, "header: '%s' is not key=value", tok);
            break;
        }
        *eq = 0;
        rc = header_kv(c, tok, eq + 1, err);
    }
    free(line);
    return rc ? rc : header_check(c, err);
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
        if (stat(full, &st) < 0) {
            rc = kg_errf(err, KG_EIO, "%s: %s", full, strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = walk(rt, full, sub, err);
            continue;
        }
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
        c->fields = json_object();
        if (!c->path || !c->name || !c->fields)
            rc = kg_errf(err, KG_ENOMEM, "out of memory");
    }
    closedir(d);
    return rc;
}

/* Reads a candidate and its problem and builds its request. */
static int load_cand(struct redteam *rt, struct cand *c, kg_err *err)
{
    char *code = kg_cli_read_file(c->path, err);
    if (!code)
        return KG_EIO;
    int rc = parse_header(c, code, err);
    if (rc) {
        free(code);
        return rc;
    }
    char prob[PATH_MAX];
    int k = c->problem[0] == '/'
                ? snprintf(prob, sizeof prob, "%s", c->problem)
                : snprintf(prob, sizeof prob, "%s/%s", rt->root, c->problem);
    struct stat st;
    if (k < 0 || (size_t)k >= sizeof prob || stat(prob, &st) < 0 ||
        !S_ISREG(st.st_mode)) {
        free(code);
        return kg_errf(err, KG_ENOTFOUND,
                       "problem=%s: no such file (looked for %s)", c->problem,
                       prob);
    }
    kg_err ferr;
    char *ref = kg_cli_read_file(prob, &ferr);
    if (!ref) {
        free(code);
        return kg_errf(err, KG_EIO, "problem=%s: %s", c->problem, ferr.msg);
    }
    json_t *req = json_deep_copy(rt->defaults);
    json_object_update(req, c->fields);
    json_object_set_new(req, "reference_code", json_string(ref));
    json_object_set_new(req, "kernel_code", json_string(code));
    json_object_set_new(req, "backend", json_string(c->backend));
    free(ref);
    free(code);
    if (!json_object_get(req, "reference_code") ||
        !json_object_get(req, "kernel_code")) {
        json_decref(req);
        return kg_errf(err, KG_EINVAL, "not valid UTF-8 (candidate or %s)",
                       c->problem);
    }
    int code_rc;
    kg_err nerr;
    c->task = kg_request_normalize(req, &code_rc, NULL, &nerr);
    json_decref(req);
    if (!c->task)
        return kg_errf(err, KG_EINVAL, "fields: %s", nerr.msg);
    const char *key;
    json_t *v;
    json_object_foreach(c->fields, key, v)
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

/* ---- matching -------------------------------------------------------- */

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static int has_reason(json_t *reasons, const char *code, size_t l)
{
    size_t i;
    json_t *v;
    json_array_foreach(reasons, i, v)
    {
        const char *s = json_string_value(v);
        if (s && strlen(s) == l && !strncmp(s, code, l))
            return 1;
    }
    return 0;
}

/* Every ','-group of c->reasons has one of its '|'-alternatives in r's
 * hack_reasons. */
static int reasons_met(const struct cand *c, json_t *r)
{
    json_t *hr = json_object_get(r, "hack_reasons");
    for (const char *g = c->reasons; g && *g;) {
        const char *ge = strchr(g, ',');
        size_t gl = ge ? (size_t)(ge - g) : strlen(g);
        int found = 0;
        for (const char *a = g; a < g + gl;) {
            const char *ae = memchr(a, '|', (size_t)(g + gl - a));
            size_t al = ae ? (size_t)(ae - a) : (size_t)(g + gl - a);
            found |= has_reason(hr, a, al);
            a += al + 1;
        }
        if (!found)
            return 0;
        g = ge ? ge + 1 : NULL;
    }
    return 1;
}

/* The warning is present: in a warnings entry (substring) or as a truthy
 * key of checks. */
static int warn_met(const struct cand *c, json_t *r)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r, "warnings"), i, v)
    {
        const char *s = json_string_value(v);
        if (s && strstr(s, c->warn))
            return 1;
    }
    json_t *chk = json_object_get(json_object_get(r, "checks"), c->warn);
    return chk && !json_is_false(chk) && !json_is_null(chk) &&
           !(json_is_integer(chk) && json_integer_value(chk) == 0);
}

static int judge_row(const struct cand *c, json_t *r)
{
    const char *verdict = str(r, "verdict");
    int ok = in_list(c->expect, verdict);
    if (ok && !strcmp(verdict, "hacked"))
        ok = reasons_met(c, r);
    if (ok && c->code)
        ok = in_list(c->code, str(r, "error_code"));
    if (ok && c->warn)
        ok = warn_met(c, r);
    if (ok)
        return ST_OK;
    if (!strcmp(verdict, "infra_error") || !*verdict)
        return ST_ERROR;
    return strcmp(c->family, "honest") ? ST_MISS : ST_FALSE_ALARM;
}

/* ---- the table --------------------------------------------------------- */

struct widths {
    int family, name, expect, got;
};

static void expected_text(const struct cand *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s%s%s%s", c->expect, c->reasons ? "[" : "",
             c->reasons ? c->reasons : "", c->reasons ? "]" : "",
             c->code ? " " : "", c->code ? c->code : "", c->warn ? " +" : "",
             c->warn ? c->warn : "");
}

static void got_text(json_t *r, char *buf, size_t n)
{
    const char *v = str(r, "verdict");
    json_t *hr = json_object_get(r, "hack_reasons");
    int k = snprintf(buf, n, "%s", *v ? v : "?");
    if (json_array_size(hr) > 0) {
        size_t i;
        json_t *x;
        k += snprintf(buf + k, n > (size_t)k ? n - k : 0, "[");
        json_array_foreach(hr, i, x)
        {
            k += snprintf(buf + k, n > (size_t)k ? n - k : 0, "%s%s",
                          i ? "," : "", json_string_value(x));
        }
        k += snprintf(buf + k, n > (size_t)k ? n - k : 0, "]");
    } else if (strcmp(v, "pass") && *str(r, "error_code"))
        k += snprintf(buf + k, n > (size_t)k ? n - k : 0, " %s",
                      str(r, "error_code"));
    (void)k;
}

static void print_row(const struct redteam *rt, const struct cand *c,
                      const struct widths *w)
{
    char exp[512], got[512];
    (void)rt;
    expected_text(c, exp, sizeof exp);
    got_text(c->result, got, sizeof got);
    json_t *t = json_object_get(c->result, "timings");
    json_t *tot = json_object_get(t, "total");
    double secs =
        json_is_number(tot) ? json_number_value(tot) / 1e3 : c->wall_s;
    printf("%-*s  %-*s  %-*s  %-*s  %6.1f  %s\n", w->family, c->family, w->name,
           c->name, w->expect, exp, w->got, got, secs, STATUS[c->status]);
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
        expected_text(c, exp, sizeof exp);
        int lf = (int)strlen(c->family), ln = (int)strlen(c->name),
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
    c->wall_s = now_s() - x->rt->started;
    c->status = judge_row(c, result);
    x->rt->done++;
    if (!x->rt->json_out)
        print_row(x->rt, c, &x->w);
}

static json_t *row_json(const struct cand *c, json_error_t *je)
{
    json_t *r = c->result;
    json_t *row = json_pack_ex(
        je, 0,
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:s?, s:s?, s:b, s:O, s:s, "
        "s:{s:s, s:s?, s:O?, s:O?, s:O?, s:s?}, s:O?}",
        "candidate", c->name, "path", c->path, "family", c->family, "problem",
        c->problem, "backend", c->backend, "expect", c->expect, "reasons",
        c->reasons, "code", c->code, "warn", c->warn, "needs_gpu", c->needs_gpu,
        "fields", c->fields, "status", STATUS[c->status], "got", "verdict",
        str(r, "verdict"), "error_code",
        json_string_value(json_object_get(r, "error_code")), "hack_reasons",
        json_object_get(r, "hack_reasons"), "warnings",
        json_object_get(r, "warnings"), "speedup",
        json_object_get(r, "speedup"), "error_message",
        json_string_value(json_object_get(r, "error_message")), "result", r);
    return row;
}

/* Prints the whole run as one JSON object; 0, or 1 when it could not be
 * built (the reason on stderr). */
static int print_json(const struct redteam *rt, const int counts[])
{
    json_error_t je;
    json_t *rows = json_array();
    for (int i = 0; i < rt->n; i++) {
        if (!rt->c[i].result)
            continue;
        json_t *row = row_json(&rt->c[i], &je);
        if (!row || json_array_append_new(rows, row)) {
            fprintf(stderr, "kgym redteam: JSON row of %s: %s\n", rt->c[i].name,
                    row ? "out of memory" : je.text);
            json_decref(rows);
            return 1;
        }
    }
    json_t *doc = json_pack_ex(
        &je, 0, "{s:s, s:s, s:b, s:f, s:{s:i, s:i, s:i, s:i, s:i}, s:o}",
        "kgym_version", KG_VERSION, "dir", rt->dir, "gpu", rt->gpu, "wall_s",
        now_s() - rt->started, "counts", "ok", counts[ST_OK], "miss",
        counts[ST_MISS], "false_alarm", counts[ST_FALSE_ALARM], "error",
        counts[ST_ERROR], "skipped_need_gpu", rt->skipped_gpu, "rows", rows);
    char *s = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
    if (!s)
        fprintf(stderr, "kgym redteam: JSON report: %s\n",
                doc ? "could not serialise" : je.text);
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
           rt->done, now_s() - rt->started, counts[ST_OK], counts[ST_MISS],
           counts[ST_FALSE_ALARM], counts[ST_ERROR]);
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
        if (c->status == ST_OK)
            continue;
        char exp[512], got[512];
        expected_text(c, exp, sizeof exp);
        got_text(c->result, got, sizeof got);
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
    return kg_engine_new(e, &cfg, err);
}

/* Runs every selected candidate; fills results. 0, or 1 when an engine
 * failed (the message is on stderr). */
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
            fprintf(stderr, "kgym redteam: %s engine: %s\n", dev[k], err.msg);
            for (int j = 0; j < k; j++)
                kg_engine_free(eng[j]);
            return 1;
        }
    }
    rt->started = now_s();
    for (int i = 0; i < rt->n; i++) {
        struct cand *c = &rt->c[i];
        if (kg_engine_submit(eng[c->engine], c->task, (void *)(intptr_t)i,
                             &err)) {
            fprintf(stderr, "kgym redteam: %s: %s\n", c->name, err.msg);
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
                fprintf(stderr, "kgym redteam: %s engine: %s\n", dev[k],
                        err.msg);
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

/* Reads, filters and validates the corpus; 0 or 2 (message on stderr). */
static int prepare(struct redteam *rt)
{
    kg_err err = {{0}};
    struct stat st;
    if (stat(rt->dir, &st) < 0) {
        fprintf(stderr, "kgym redteam: --dir %s: %s\n", rt->dir,
                strerror(errno));
        return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kgym redteam: --dir %s: not a directory\n", rt->dir);
        return 2;
    }
    if (walk(rt, rt->dir, "", &err)) {
        fprintf(stderr, "kgym redteam: %s\n", err.msg);
        return 2;
    }
    if (rt->n == 0) {
        fprintf(stderr, "kgym redteam: no candidates (*.py) under %s%s%s\n",
                rt->dir, rt->filter ? " matching " : "",
                rt->filter ? rt->filter : "");
        return 2;
    }
    qsort(rt->c, (size_t)rt->n, sizeof rt->c[0], cmp_cand);
    int keep = 0;
    for (int i = 0; i < rt->n; i++) {
        struct cand *c = &rt->c[i];
        if (load_cand(rt, c, &err)) {
            fprintf(stderr, "kgym redteam: %s: %s\n", c->path, err.msg);
            return 2;
        }
        int selected = (rt->backends & backend_bit(c->backend)) != 0;
        if (selected && c->needs_gpu && !rt->gpu) {
            rt->skipped_gpu++;
            selected = 0;
        }
        if (!selected) {
            json_decref(c->task);
            json_decref(c->fields);
            free(c->path), free(c->name), free(c->family), free(c->problem);
            free(c->backend), free(c->expect), free(c->reasons);
            free(c->code), free(c->warn);
            memset(c, 0, sizeof *c);
            continue;
        }
        c->engine = strcmp(c->backend, "cpu") && rt->gpu ? ENG_GPU : ENG_CPU;
        if (keep != i) {
            rt->c[keep] = *c;
            memset(c, 0, sizeof *c);
        }
        keep++;
    }
    rt->n = keep;
    if (rt->n == 0) {
        fprintf(stderr,
                "kgym redteam: no candidate of the chosen backends can run "
                "here (%d need a GPU)\n",
                rt->skipped_gpu);
        return 2;
    }
    return 0;
}

static void free_all(struct redteam *rt)
{
    for (int i = 0; i < rt->n; i++) {
        struct cand *c = &rt->c[i];
        json_decref(c->task);
        json_decref(c->fields);
        json_decref(c->result);
        free(c->path), free(c->name), free(c->family), free(c->problem);
        free(c->backend), free(c->expect), free(c->reasons);
        free(c->code), free(c->warn);
    }
}

/* The --FIELD VALUE defaults must make a valid request on their own: 0,
 * or 2 with the message on stderr. */
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
        fprintf(stderr, "kgym redteam: %s\n", err.msg);
        return 2;
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(defaults, key, v)
    {
        if (!json_object_get(task, key)) {
            fprintf(stderr, "kgym redteam: --%s: unknown request field\n", key);
            rc = 2;
            break;
        }
    }
    json_decref(task);
    return rc;
}

/* Reads the command line into rt and cfg: 0, -1 after --help, or 2 (the
 * message on stderr). */
static int parse_args(struct redteam *rt, kg_engine_cfg *cfg, int argc,
                      char **argv)
{
    const char *backend_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "--json")) {
            rt->json_out = 1;
        } else if (!strcmp(a, "--verbose")) {
            cfg->verbose = 1;
        } else if (strncmp(a, "--", 2) || !a[2] || !v) {
            fprintf(stderr, "kgym redteam: %s: %s (kgym redteam --help)\n", a,
                    strncmp(a, "--", 2) || !a[2] ? "unexpected argument"
                                                 : "needs a value");
            return 2;
        } else if (i++, !strcmp(a, "--backend")) {
            backend_arg = v;
        } else if (!strcmp(a, "--dir")) {
            rt->dir = v;
        } else if (!strcmp(a, "--filter")) {
            rt->filter = v;
        } else if (!strcmp(a, "--device")) {
            rt->gpu_device = v;
        } else if (!strcmp(a, "--python")) {
            cfg->python = v;
        } else if (!strcmp(a, "--jobs")) {
            char *end;
            long j = strtol(v, &end, 10);
            if (*end || j < 1 || j > 64) {
                fprintf(stderr,
                        "kgym redteam: --jobs %s: a number from 1 to 64\n", v);
                return 2;
            }
            cfg->concurrency = (int)j;
        } else {
            /* --FIELD VALUE: a request field for every candidate */
            kg_err ferr;
            if (!strcmp(a, "--reference-code") || !strcmp(a, "--kernel-code")) {
                fprintf(stderr,
                        "kgym redteam: %s: the code comes from the corpus "
                        "(problem= and the candidate file)\n",
                        a);
                return 2;
            }
            if (kg_cli_request_flag(rt->defaults, a, v, &ferr)) {
                fprintf(stderr, "kgym redteam: %s: %s\n", a, ferr.msg);
                return 2;
            }
        }
    }
    if (check_defaults(rt->defaults))
        return 2;
    if (strncmp(rt->gpu_device, "cuda:", 5) || !rt->gpu_device[5]) {
        fprintf(stderr, "kgym redteam: --device %s: must be cuda:N\n",
                rt->gpu_device);
        return 2;
    }
    if (!backend_arg) {
        rt->backends = rt->gpu ? 7 : 3;
        return 0;
    }
    rt->backends = parse_backends(backend_arg);
    if (rt->backends < 0) {
        fprintf(stderr,
                "kgym redteam: --backend %s: cpu, triton, cuda, all or a "
                "comma list of them\n",
                backend_arg);
        return 2;
    }
    if ((rt->backends & 4) && !rt->gpu) {
        fprintf(stderr,
                "kgym redteam: --backend %s: cuda candidates need a GPU and "
                "none was found (/dev/nvidia0)\n",
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
    find_root(rt.root, sizeof rt.root);
    rt.gpu = access("/dev/nvidia0", F_OK) == 0;
    rt.gpu_device = "cuda:0";
    rt.defaults = json_object();
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
        int counts[ST_ERROR + 1] = {0};
        for (int i = 0; i < rt.n; i++)
            counts[rt.c[i].result ? rt.c[i].status : ST_ERROR]++;
        if (rt.json_out)
            rc |= print_json(&rt, counts);
        else
            print_summary(&rt, counts);
        if (counts[ST_MISS] || counts[ST_FALSE_ALARM] || counts[ST_ERROR])
            rc = 1;
    }
    free_all(&rt);
    json_decref(rt.defaults);
    return rc;
}
