/* cmd_client.c - the client commands of a kgym server (docs/api.md):
 * `kgym submit`, `status`, `result`, `wait`, `cancel`. Exit codes: 0 done,
 * 1 the server could not be reached / the task is not finished / timed
 * out, 2 bad usage or a request the server refused (4xx). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "cli/client_wait.h"
#include "cli/opts.h"
#include "common/clock.h"
#include "common/http_client.h"
#include "common/code_file.h"
#include "common/log.h"
#include "common/request.h"

#define REQ_TIMEOUT_MS 30000L
#define MAX_CANDS 1024

/* Options every client command takes. */
struct copts {
    const char *server, *token_file, *id;
    int json, wait;
    double timeout_s; /* wait: 0 = forever */
};

static const char COMMON_HELP[] =
    "  --server URL        default $KGYM_SERVER, else " KG_CLI_DEFAULT_SERVER
    "\n"
    "  --token-file F      client token (default $KGYM_TOKEN_FILE)\n";

static void print_json(const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    if (s) {
        printf("%s\n", s);
        free(s);
    }
    fflush(stdout);
}

static double num(const json_t *r, const char *k)
{
    json_t *v = json_object_get(r, k);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* A result for a person: one field per line. */
static void print_result(const json_t *r, int as_json)
{
    if (as_json) {
        print_json(r);
        return;
    }
    const char *s;
    printf("task_id:   %s\n", json_string_value(json_object_get(r, "task_id")));
    printf("status:    %s\n", json_string_value(json_object_get(r, "status")));
    if ((s = json_string_value(json_object_get(r, "verdict"))))
        printf("verdict:   %s\n", s);
    if ((s = json_string_value(json_object_get(r, "error_message"))) && *s)
        printf("error:     %s\n", s);
    if (num(r, "speedup") >= 0)
        printf("speedup:   %.3fx (kernel %.4f ms, reference %.4f ms)\n",
               num(r, "speedup"), num(r, "kernel_runtime"),
               num(r, "reference_runtime"));
    json_t *prof = json_object_get(r, "profile");
    if ((s = json_string_value(json_object_get(prof, "summary"))))
        printf("profile:   %s\n", s);
    json_t *hr = json_object_get(r, "hack_reasons");
    if (json_array_size(hr) > 0) {
        printf("hacks:    ");
        size_t i;
        json_t *v;
        json_array_foreach(hr, i, v) printf(" %s", json_string_value(v));
        printf("\n");
    }
    fflush(stdout);
}

/* Reports a reply that is not what the command wanted; returns the exit
 * code (2 for a 4xx, else 1). */
static int refused(const kg_client_resp *r)
{
    char e[400];
    kg_error("%s", kg_client_error_text(r, e, sizeof e));
    json_t *f = json_object_get(json_object_get(r->json, "error"), "field");
    if (json_is_string(f))
        kg_error("field: %s", json_string_value(f));
    return r->status >= 400 && r->status < 500 ? 2 : 1;
}

/*
 * Waits for task id's result (client_wait.c): prints it (0), or the
 * server's refusal (2), or says it timed out after timeout_s (1).
 */
static int wait_result(kg_client *c, const char *id, double timeout_s,
                       int as_json)
{
    const char *ids[1] = {id};
    json_t *res[1] = {NULL};
    char *errors[1] = {NULL};
    int code = kg_cli_wait_all(c, ids, res, errors, 1, timeout_s);
    if (res[0])
        print_result(res[0], as_json);
    else if (errors[0])
        kg_error("%s", errors[0]);
    code = res[0] ? 0 : errors[0] ? 2 : code ? 1 : 0;
    json_decref(res[0]);
    free(errors[0]);
    return code;
}

static int set_id(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct copts *o = ctx;
    (void)name;
    if (o->id)
        return kg_errf(err, KG_EINVAL, "%s: unexpected argument", v);
    o->id = v;
    return 0;
}

/*
 * Parses the options shared by status/result/wait/cancel: one task id,
 * --server, --token-file, --json, --timeout (wait). Returns 0, 1 after
 * printing the help, or -1 on bad usage (logged).
 */
static int parse_common(const char *cmd, int argc, char **argv, struct copts *o,
                        int allow_timeout)
{
    kg_opt table[] = {
        KG_OPT_F("--json", &o->json),
        KG_OPT_S("--server", &o->server),
        KG_OPT_S("--token-file", &o->token_file),
        KG_OPT_D("--timeout", &o->timeout_s, 0, HUGE_VAL),
        KG_OPT_END,
    };
    if (!allow_timeout)
        table[3] = (kg_opt)KG_OPT_END;
    kg_opts spec = {.opts = table, .ctx = o, .positional = set_id};
    kg_err err = {{0}};
    int rc = kg_opts_parse(&spec, argc, argv, &err);
    if (rc < 0) {
        kg_error("%s", err.msg);
        return -1;
    }
    if (rc == KG_OPTS_HELP || !o->id) {
        fprintf(rc ? stdout : stderr, "usage: kgym %s ID [--json]%s\n%s", cmd,
                allow_timeout ? " [--timeout S]" : "", COMMON_HELP);
        return rc ? 1 : -1;
    }
    if (!kg_task_id_valid(o->id)) {
        kg_error("%s: not a task id", o->id);
        return -1;
    }
    return 0;
}

static int connect_or_fail(const struct copts *o, kg_client **c)
{
    kg_err err = {{0}};
    if (kg_cli_connect(c, o->server, o->token_file, &err)) {
        kg_error("%s", err.msg);
        return -1;
    }
    return 0;
}

/* The log's name for a client command: "kgym status"... */
static void log_init(const char *cmd)
{
    char program[32];
    snprintf(program, sizeof program, "kgym %s", cmd);
    kg_log_init(program, NULL, 0);
}

/* One GET or DELETE whose 200 reply is printed. */
static int simple_call(const char *cmd, int argc, char **argv,
                       const char *method, const char *prefix)
{
    struct copts o = {0};
    kg_client *c;
    log_init(cmd);
    int p = parse_common(cmd, argc, argv, &o, 0);
    if (p || connect_or_fail(&o, &c))
        return p > 0 ? 0 : 2;
    char path[160];
    snprintf(path, sizeof path, "%s%s", prefix, o.id);
    kg_client_resp r;
    kg_err err = {{0}};
    int code;
    if (kg_client_request(c, method, path, NULL, REQ_TIMEOUT_MS, &r, &err)) {
        kg_error("%s", err.msg);
        code = 1;
    } else if (r.status == 200 && r.json) {
        if (!strcmp(cmd, "result"))
            print_result(r.json, o.json);
        else if (o.json || strcmp(cmd, "status"))
            print_json(r.json);
        else {
            const char *v =
                json_string_value(json_object_get(r.json, "verdict"));
            printf("%s %s%s%s\n", o.id,
                   json_string_value(json_object_get(r.json, "status")),
                   v ? " " : "", v ? v : "");
        }
        code = 0;
    } else if (r.status == 202) {
        kg_error("%s is %s (not finished)", o.id,
                 json_string_value(json_object_get(r.json, "status")));
        code = 1;
    } else {
        code = refused(&r);
    }
    kg_client_resp_free(&r);
    kg_client_free(c);
    return code;
}

int kg_cli_status(int argc, char **argv)
{
    return simple_call("status", argc, argv, "GET", "/status/");
}

int kg_cli_result(int argc, char **argv)
{
    return simple_call("result", argc, argv, "GET", "/results/");
}

int kg_cli_cancel(int argc, char **argv)
{
    return simple_call("cancel", argc, argv, "DELETE", "/tasks/");
}

int kg_cli_wait(int argc, char **argv)
{
    struct copts o = {0};
    kg_client *c;
    log_init("wait");
    int p = parse_common("wait", argc, argv, &o, 1);
    if (p || connect_or_fail(&o, &c))
        return p > 0 ? 0 : 2;
    int code = wait_result(c, o.id, o.timeout_s, o.json);
    kg_client_free(c);
    return code;
}

static void submit_usage(FILE *f)
{
    fprintf(f,
            "usage: kgym submit --ref R.py --cand C.py [--cand C2.py | --cand "
            "DIR ...] [options]\n"
            "\n"
            "Submits candidates to a kgym server and prints their task ids; "
            "with --wait,\n"
            "waits and prints the result (several candidates: a table, or "
            "one JSON line\n"
            "each with --json). A directory means every *.py in it.\n"
            "\n"
            "options:\n"
            "%s"
            "  --wait              wait for the result\n"
            "  --table             print results as a table also for one "
            "candidate\n"
            "  --wait-timeout S    give up waiting after S seconds "
            "(default: never)\n"
            "  --json              print the result (or the reply) as JSON\n"
            "  --FIELD VALUE       any request field, underscores as dashes:\n"
            "                      --backend triton --num-perf-trials 20 "
            "--timeout 60\n"
            "                      --task-id my-id --priority high "
            "--force-refresh true\n",
            COMMON_HELP);
}

/* One candidate of a submission and what became of it. */
struct cand {
    char *path;
    char id[KG_MAX_TASK_ID + 1]; /* "" until accepted */
    json_t *result;              /* the finished result, or NULL */
    char *error;                 /* why it was refused, or NULL */
};

/* Adds path, or every *.py in it (sorted) when it is a directory. */
static int add_cands(struct cand *cs, int *n, const char *path, kg_err *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return kg_errf(err, KG_ENOTFOUND, "--cand %s: %s", path,
                       strerror(errno));
    char *list[MAX_CANDS];
    int k = 0;
    if (!S_ISDIR(st.st_mode))
        list[k++] = strdup(path);
    else if ((k = kg_cli_py_files("--cand", path, list, MAX_CANDS, err)) < 0)
        return k;
    for (int i = 0; i < k; i++) {
        if (*n >= MAX_CANDS || !list[i]) {
            for (int j = i; j < k; j++)
                free(list[j]);
            return kg_errf(err, KG_EINVAL, "more than %d candidates",
                           MAX_CANDS);
        }
        cs[(*n)++].path = list[i];
    }
    return 0;
}

/* "level1/1_GELU" for .../level1/1_GELU.py, else the file name. */
static void problem_name(const char *path, char *out, size_t n)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dir = base;
    if (base != path) {
        dir = base - 1;
        while (dir > path && dir[-1] != '/')
            dir--;
        if (strncmp(dir, "level", 5))
            dir = base;
    }
    snprintf(out, n, "%s", dir);
    size_t l = strlen(out);
    if (l > 3 && !strcmp(out + l - 3, ".py"))
        out[l - 3] = 0;
}

/* The table of several results: one line per candidate. */
static void print_table(const char *ref, struct cand *cs, int n)
{
    char prob[128];
    problem_name(ref, prob, sizeof prob);
    printf("%-32s %-32s %-7s %-13s %9s %9s  %s\n", "problem", "candidate",
           "backend", "verdict", "speedup", "coverage",
           "hack_reasons / error");
    for (int i = 0; i < n; i++) {
        const json_t *r = cs[i].result;
        const char *nm = strrchr(cs[i].path, '/');
        nm = nm ? nm + 1 : cs[i].path;
        char sp[32] = "-", cov[32] = "-", why[256] = "";
        const char *verdict = cs[i].error ? "refused" : "-", *backend = "-";
        if (r) {
            verdict = json_string_value(json_object_get(r, "verdict"));
            if (!verdict)
                verdict = json_string_value(json_object_get(r, "status"));
            backend = json_string_value(
                json_object_get(json_object_get(r, "device"), "backend"));
            if (num(r, "speedup") >= 0)
                snprintf(sp, sizeof sp, "%.3fx", num(r, "speedup"));
            json_t *c =
                json_object_get(json_object_get(r, "profile"), "coverage");
            if (json_is_number(c))
                snprintf(cov, sizeof cov, "%.1f%%",
                         100 * json_number_value(c));
            size_t k;
            json_t *v;
            json_array_foreach(json_object_get(r, "hack_reasons"), k, v)
            {
                const char *h = json_string_value(v);
                if (h && strlen(why) + strlen(h) + 2 < sizeof why) {
                    if (k)
                        strcat(why, ",");
                    strcat(why, h);
                }
            }
            const char *code =
                json_string_value(json_object_get(r, "error_code"));
            if (!why[0] && code)
                snprintf(why, sizeof why, "%s", code);
        } else if (cs[i].error) {
            snprintf(why, sizeof why, "%s", cs[i].error);
        }
        printf("%-32.32s %-32.32s %-7s %-13s %9s %9s  %s\n", prob, nm,
               backend ? backend : "-", verdict ? verdict : "?", sp, cov,
               why);
    }
    fflush(stdout);
}

/*
 * Waits for every accepted candidate without a result until all have one
 * (0), or timeout_s passes (1). A task the server refuses to show (4xx,
 * unknown) is recorded as an error.
 */
static int wait_all(kg_client *c, struct cand *cs, int n, double timeout_s)
{
    const char *ids[MAX_CANDS];
    json_t *res[MAX_CANDS];
    char *errors[MAX_CANDS];
    int at[MAX_CANDS], m = 0;
    for (int i = 0; i < n; i++)
        if (cs[i].id[0] && !cs[i].result && !cs[i].error) {
            ids[m] = cs[i].id;
            res[m] = NULL;
            errors[m] = NULL;
            at[m++] = i;
        }
    int code = m ? kg_cli_wait_all(c, ids, res, errors, m, timeout_s) : 0;
    for (int j = 0; j < m; j++) {
        cs[at[j]].result = res[j];
        cs[at[j]].error = errors[j];
    }
    return code;
}

/*
 * Submits one request (fields, with kernel_code set) for candidate cd.
 * Returns 0 when accepted (cd->id set; cd->result too when the server
 * answered with a finished result), 1 when the server could not be
 * reached, 2 when it refused (cd->error set).
 */
static int submit_one(kg_client *c, const json_t *fields, struct cand *cd,
                      json_t **reply)
{
    kg_client_resp r;
    kg_err err = {{0}};
    *reply = NULL;
    if (kg_client_request(c, "POST", "/evaluate", fields, REQ_TIMEOUT_MS, &r,
                          &err)) {
        kg_error("%s", err.msg);
        return 1;
    }
    int code = 0;
    const char *id = json_string_value(json_object_get(r.json, "task_id"));
    json_t *res = json_object_get(r.json, "result");
    if ((r.status != 200 && r.status != 202) || !id) {
        char e[400];
        code = refused(&r);
        cd->error = strdup(kg_client_error_text(&r, e, sizeof e));
    } else {
        snprintf(cd->id, sizeof cd->id, "%s", id);
        if (json_is_object(res)) {
            if (!json_object_get(res, "task_id"))
                json_object_set_new(res, "task_id", json_string(id));
            cd->result = json_incref(res);
        }
        *reply = json_incref(r.json);
    }
    kg_client_resp_free(&r);
    return code;
}

/* What kgym submit was asked: the candidates are in cs, not here. */
struct submit_opts {
    struct copts o;
    const char *ref;
    int table;
    json_t *fields; /* the request's fields, owned */
};

/* Where parse_submit_args puts what it reads. */
struct submit_parse {
    struct submit_opts *so;
    struct cand *cs;
    int *n;
};

static int cand_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct submit_parse *sp = ctx;
    (void)name;
    return add_cands(sp->cs, sp->n, v, err);
}

/* Any other --FIELD VALUE: a request field. */
static int field_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct submit_parse *sp = ctx;
    return kg_request_flag(sp->so->fields, name, v, err);
}

/* Reads argv into so and the candidates into cs[0..*n). Returns -1 to go
 * on, else the exit code (0: --help). */
static int parse_submit_args(int argc, char **argv, struct submit_opts *so,
                             struct cand *cs, int *n)
{
    const kg_opt table[] = {
        KG_OPT_F("--wait", &so->o.wait),
        KG_OPT_F("--json", &so->o.json),
        KG_OPT_F("--table", &so->table),
        KG_OPT_S("--ref", &so->ref),
        KG_OPT_FN("--cand", cand_opt),
        KG_OPT_S("--server", &so->o.server),
        KG_OPT_S("--token-file", &so->o.token_file),
        KG_OPT_D("--wait-timeout", &so->o.timeout_s, 0, HUGE_VAL),
        KG_OPT_END,
    };
    struct submit_parse sp = {so, cs, n};
    kg_opts spec = {.opts = table, .ctx = &sp, .other = field_opt};
    int rc = kg_opts_main(&spec, argc, argv, submit_usage);
    if (rc >= 0)
        return rc;
    if (!so->ref || *n == 0) {
        submit_usage(stderr);
        return 2;
    }
    return -1;
}

/*
 * One request per candidate into reqs[0..n) (the caller's to decref), the
 * reference read into so->fields first. Every candidate is read and
 * checked before anything is sent: the server validates too, but checking
 * here names the flag or file early. Returns 0, or -1 with the message
 * logged and nothing left in reqs.
 */
static int make_requests(struct submit_opts *so, const struct cand *cs, int n,
                         json_t **reqs)
{
    kg_err err = {{0}};
    size_t len;
    char *ref_text = kg_read_code_file(so->ref, "reference_code", &len, &err);
    if (!ref_text) {
        kg_error("--ref %s", err.msg);
        return -1;
    }
    json_object_set_new(so->fields, "reference_code",
                        json_stringn(ref_text, len));
    free(ref_text);
    if (!json_object_get(so->fields, "reference_code")) {
        kg_error("out of memory");
        return -1;
    }
    int nreq = 0;
    for (int i = 0; i < n; i++) {
        char *text = kg_read_code_file(cs[i].path, "kernel_code", &len, &err);
        json_t *req = json_copy(so->fields);
        if (text)
            json_object_set_new(req, "kernel_code", json_stringn(text, len));
        free(text);
        int vcode;
        json_t *norm = NULL;
        if (!text)
            kg_error("--cand %s", err.msg);
        else if (!json_object_get(req, "kernel_code"))
            kg_error("out of memory");
        else if (!(norm = kg_request_normalize(req, &vcode, NULL, &err)))
            kg_error("%s", err.msg);
        json_decref(norm);
        if (!norm) {
            json_decref(req);
            for (int j = 0; j < nreq; j++)
                json_decref(reqs[j]);
            return -1;
        }
        reqs[nreq++] = req;
    }
    return 0;
}

/*
 * Sends reqs[0..n) (taken: decref'd here) and prints what each reply says.
 * Returns the worst of submit_one's codes; *away is set when the server
 * could not be reached, the rest then unsent.
 */
static int submit_all(kg_client *c, const struct copts *o, json_t **reqs,
                      struct cand *cs, int n, int several, int *away)
{
    int code = 0;
    *away = 0;
    for (int i = 0; i < n; i++) {
        json_t *reply;
        int rc = submit_one(c, reqs[i], &cs[i], &reply);
        json_decref(reqs[i]);
        if (rc > code)
            code = rc;
        if (rc == 1) {
            for (int j = i + 1; j < n; j++)
                json_decref(reqs[j]);
            *away = 1; /* the server is away: the rest would fail too */
            return code;
        }
        if (reply && !several) {
            if (cs[i].result && (o->wait || o->json))
                print_result(cs[i].result, o->json);
            else if (cs[i].result || !o->wait)
                o->json ? print_json(reply) : (void)printf("%s\n", cs[i].id);
        } else if (reply && !o->wait) {
            if (o->json)
                print_json(reply);
            else
                printf("%s\t%s\n", cs[i].id, cs[i].path);
        }
        json_decref(reply);
    }
    fflush(stdout);
    return code;
}

/* --wait with several candidates: waits for them all and prints them.
 * Returns the exit code, from code (submit_all's). */
static int wait_several(kg_client *c, const struct submit_opts *so,
                        struct cand *cs, int n, int code)
{
    int wrc = wait_all(c, cs, n, so->o.timeout_s);
    if (so->o.json) {
        for (int i = 0; i < n; i++)
            if (cs[i].result)
                print_json(cs[i].result);
    } else {
        print_table(so->ref, cs, n);
    }
    for (int i = 0; i < n; i++)
        if (cs[i].error && code < 2)
            code = 2;
    if (wrc && code == 0)
        code = 1;
    return code;
}

int kg_cli_submit(int argc, char **argv)
{
    struct submit_opts so = {.fields = json_object()};
    static struct cand cs[MAX_CANDS];
    json_t *reqs[MAX_CANDS];
    int n = 0, code, away;
    kg_client *c = NULL;
    memset(cs, 0, sizeof cs);
    log_init("submit");
    code = parse_submit_args(argc, argv, &so, cs, &n);
    if (code >= 0)
        goto out;
    code = 2;
    int several = n > 1 || so.table;
    if (several && json_object_get(so.fields, "task_id")) {
        kg_error("--task-id names one task; give one --cand with it");
        goto out;
    }
    if (make_requests(&so, cs, n, reqs))
        goto out;
    if (connect_or_fail(&so.o, &c)) {
        for (int j = 0; j < n; j++)
            json_decref(reqs[j]);
        goto out;
    }
    code = submit_all(c, &so.o, reqs, cs, n, several, &away);
    if (away || !so.o.wait)
        goto out;
    if (!several) {
        if (cs[0].id[0] && !cs[0].result) {
            kg_info("%s queued; waiting", cs[0].id);
            code = wait_result(c, cs[0].id, so.o.timeout_s, so.o.json);
        }
        goto out;
    }
    code = wait_several(c, &so, cs, n, code);
out:
    for (int i = 0; i < n; i++) {
        free(cs[i].path);
        free(cs[i].error);
        json_decref(cs[i].result);
    }
    kg_client_free(c);
    json_decref(so.fields);
    return code;
}
