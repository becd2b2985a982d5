/* cmd_client.c - the client commands of a kgym server (docs/api.md):
 * `kgym submit`, `status`, `result`, `wait`, `cancel`. Exit codes: 0 done,
 * 1 the server could not be reached / the task is not finished / timed
 * out, 2 bad usage or a request the server refused (4xx). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "common/http_client.h"
#include "common/request.h"

#define REQ_TIMEOUT_MS 30000L

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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

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
static int refused(const char *cmd, const kg_client_resp *r)
{
    char e[400];
    fprintf(stderr, "kgym %s: %s\n", cmd, kg_client_error_text(r, e, sizeof e));
    json_t *f = json_object_get(json_object_get(r->json, "error"), "field");
    if (json_is_string(f))
        fprintf(stderr, "kgym %s: field: %s\n", cmd, json_string_value(f));
    return r->status >= 400 && r->status < 500 ? 2 : 1;
}

/*
 * Polls GET /results/ID until it is 200 (prints it, 0), refused (2), or
 * timeout_s passes (1). Network errors are retried until the timeout.
 */
static int wait_result(kg_client *c, const char *cmd, const char *id,
                       double timeout_s, int as_json)
{
    char path[160];
    snprintf(path, sizeof path, "/results/%s", id);
    double t0 = now_s(), pause = 0.1;
    for (;;) {
        kg_client_resp r;
        kg_err err = {{0}};
        int rc =
            kg_client_request(c, "GET", path, NULL, REQ_TIMEOUT_MS, &r, &err);
        if (rc == 0 && r.status == 200 && json_is_object(r.json)) {
            print_result(r.json, as_json);
            kg_client_resp_free(&r);
            return 0;
        }
        if (rc == 0 && r.status != 202 && r.status < 500) {
            int code = refused(cmd, &r);
            kg_client_resp_free(&r);
            return code;
        }
        if (rc)
            fprintf(stderr, "kgym %s: %s (retrying)\n", cmd, err.msg);
        kg_client_resp_free(&r);
        if (timeout_s > 0 && now_s() - t0 + pause > timeout_s) {
            fprintf(stderr, "kgym %s: %s not finished after %.0f s\n", cmd, id,
                    timeout_s);
            return 1;
        }
        sleep_s(pause);
        pause = pause * 1.5 > 2 ? 2 : pause * 1.5;
    }
}

/*
 * Parses the options shared by status/result/wait/cancel: one task id,
 * --server, --token-file, --json, --timeout. Returns -1 on bad usage.
 */
static int parse_common(const char *cmd, int argc, char **argv, struct copts *o,
                        int allow_timeout)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--server") && v) {
            o->server = argv[++i];
        } else if (!strcmp(a, "--token-file") && v) {
            o->token_file = argv[++i];
        } else if (allow_timeout && !strcmp(a, "--timeout") && v) {
            char *end;
            o->timeout_s = strtod(argv[++i], &end);
            if (*end || o->timeout_s < 0) {
                fprintf(stderr, "kgym %s: --timeout: expected seconds\n", cmd);
                return -1;
            }
        } else if (a[0] != '-' && !o->id) {
            o->id = a;
        } else {
            fprintf(stderr, "kgym %s: %s: unexpected argument\n", cmd, a);
            return -1;
        }
    }
    if (!o->id) {
        fprintf(stderr, "usage: kgym %s ID [--json]%s\n%s", cmd,
                allow_timeout ? " [--timeout S]" : "", COMMON_HELP);
        return -1;
    }
    if (!kg_task_id_valid(o->id)) {
        fprintf(stderr, "kgym %s: %s: not a task id\n", cmd, o->id);
        return -1;
    }
    return 0;
}

static int connect_or_fail(const char *cmd, const struct copts *o,
                           kg_client **c)
{
    kg_err err = {{0}};
    if (kg_cli_connect(c, o->server, o->token_file, &err)) {
        fprintf(stderr, "kgym %s: %s\n", cmd, err.msg);
        return -1;
    }
    return 0;
}

/* One GET or DELETE whose 200 reply is printed. */
static int simple_call(const char *cmd, int argc, char **argv,
                       const char *method, const char *prefix)
{
    struct copts o = {0};
    kg_client *c;
    if (parse_common(cmd, argc, argv, &o, 0) || connect_or_fail(cmd, &o, &c))
        return 2;
    char path[160];
    snprintf(path, sizeof path, "%s%s", prefix, o.id);
    kg_client_resp r;
    kg_err err = {{0}};
    int code;
    if (kg_client_request(c, method, path, NULL, REQ_TIMEOUT_MS, &r, &err)) {
        fprintf(stderr, "kgym %s: %s\n", cmd, err.msg);
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
        fprintf(stderr, "kgym %s: %s is %s (not finished)\n", cmd, o.id,
                json_string_value(json_object_get(r.json, "status")));
        code = 1;
    } else {
        code = refused(cmd, &r);
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
    if (parse_common("wait", argc, argv, &o, 1) ||
        connect_or_fail("wait", &o, &c))
        return 2;
    int code = wait_result(c, "wait", o.id, o.timeout_s, o.json);
    kg_client_free(c);
    return code;
}

static void submit_usage(FILE *f)
{
    fprintf(f,
            "usage: kgym submit --ref R.py --cand C.py [options]\n"
            "\n"
            "Submits one candidate to a kgym server and prints its task id; "
            "with --wait,\n"
            "waits and prints the result.\n"
            "\n"
            "options:\n"
            "%s"
            "  --wait              wait for the result\n"
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

int kg_cli_submit(int argc, char **argv)
{
    struct copts o = {0};
    const char *ref = NULL, *cand = NULL;
    json_t *fields = json_object();
    kg_err err = {{0}};
    kg_client *c = NULL;
    int code = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            submit_usage(stdout);
            code = 0;
            goto out;
        } else if (!strcmp(a, "--wait")) {
            o.wait = 1;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (strncmp(a, "--", 2) || !v) {
            fprintf(stderr, "kgym submit: %s: %s\n", a,
                    strncmp(a, "--", 2) ? "unexpected argument"
                                        : "needs a value");
            goto out;
        } else {
            i++;
            if (!strcmp(a, "--ref"))
                ref = v;
            else if (!strcmp(a, "--cand"))
                cand = v;
            else if (!strcmp(a, "--server"))
                o.server = v;
            else if (!strcmp(a, "--token-file"))
                o.token_file = v;
            else if (!strcmp(a, "--wait-timeout"))
                o.timeout_s = atof(v);
            else if (kg_cli_request_flag(fields, a, v, &err)) {
                fprintf(stderr, "kgym submit: %s\n", err.msg);
                goto out;
            }
        }
    }
    if (!ref || !cand) {
        submit_usage(stderr);
        goto out;
    }
    const char *paths[2] = {ref, cand};
    const char *keys[2] = {"reference_code", "kernel_code"};
    for (int k = 0; k < 2; k++) {
        char *code_text = kg_cli_read_file(paths[k], &err);
        if (!code_text) {
            fprintf(stderr, "kgym submit: %s\n", err.msg);
            goto out;
        }
        json_object_set_new(fields, keys[k], json_string(code_text));
        free(code_text);
        if (!json_object_get(fields, keys[k])) {
            fprintf(stderr, "kgym submit: %s: not valid UTF-8\n", paths[k]);
            goto out;
        }
    }
    /* the server validates too; checking here names the flag early */
    int vcode;
    json_t *norm = kg_request_normalize(fields, &vcode, NULL, &err);
    if (!norm) {
        fprintf(stderr, "kgym submit: %s\n", err.msg);
        goto out;
    }
    json_decref(norm);
    if (connect_or_fail("submit", &o, &c))
        goto out;
    kg_client_resp r;
    if (kg_client_request(c, "POST", "/evaluate", fields, REQ_TIMEOUT_MS, &r,
                          &err)) {
        fprintf(stderr, "kgym submit: %s\n", err.msg);
        code = 1;
        goto out;
    }
    const char *id = json_string_value(json_object_get(r.json, "task_id"));
    json_t *res = json_object_get(r.json, "result");
    if ((r.status != 200 && r.status != 202) || !id) {
        code = refused("submit", &r);
    } else if (res && json_is_object(res)) {
        if (!json_object_get(res, "task_id"))
            json_object_set_new(res, "task_id", json_string(id));
        if (!o.wait && !o.json)
            printf("%s\n", id);
        else
            print_result(res, o.json);
        code = 0;
    } else if (o.wait) {
        fprintf(stderr, "kgym submit: %s queued; waiting\n", id);
        code = wait_result(c, "submit", id, o.timeout_s, o.json);
    } else {
        if (o.json)
            print_json(r.json);
        else
            printf("%s\n", id);
        code = 0;
    }
    kg_client_resp_free(&r);
out:
    kg_client_free(c);
    json_decref(fields);
    return code;
}
