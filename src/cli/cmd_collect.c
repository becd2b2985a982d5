/* cmd_collect.c - `kgym collect`: cold-start data from a teacher. It runs
 * `kgym rollout` with the same flags (5 turns unless --turns says
 * otherwise) into --out (default SFT.rollout.jsonl, so a rerun resumes),
 * then keeps the trajectories that pass the filter and writes each as one
 * SFT chat line: the chat of the chosen turn and the teacher's reply to
 * it. docs/agent.md describes the filter and the lines. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/rollout.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "common/log.h"

#define MAX_ARGS 512

struct copts {
    const char *sft, *out;
    int best;        /* --filter best (else final) */
    double min_sp;   /* --min-speedup */
    int turns;       /* the rollout's --turns */
};

/* 1 when row's turn was correct, not hacked and fast enough. */
static int good(const json_t *row, double min_sp)
{
    json_t *res = json_object_get(row, "result");
    json_t *sp = json_object_get(res, "speedup");
    return json_is_true(json_object_get(row, "valid")) &&
           json_is_true(json_object_get(res, "correct")) &&
           !json_is_true(json_object_get(res, "hacked")) &&
           json_is_number(sp) && json_number_value(sp) >= min_sp &&
           json_is_string(json_object_get(row, "reply"));
}

/* The SFT line of a trajectory from the row of its chosen turn. */
static json_t *sft_line(const json_t *row, int turns)
{
    json_t *msgs = json_deep_copy(json_object_get(row, "messages"));
    json_t *a = json_pack("{s:s, s:O}", "role", "assistant", "content",
                          json_object_get(row, "reply"));
    json_array_append_new(msgs, a);
    json_t *res = json_object_get(row, "result");
    return json_pack("{s:o, s:O?, s:O?, s:O?, s:O?, s:i, s:{s:O?, s:O?, s:O?}}",
                     "messages", msgs, "trajectory_id",
                     json_object_get(row, "trajectory_id"), "problem",
                     json_object_get(row, "problem"), "sample",
                     json_object_get(row, "sample"), "turn",
                     json_object_get(row, "turn"), "turns", turns, "final",
                     "verdict", json_object_get(res, "verdict"), "speedup",
                     json_object_get(res, "speedup"), "coverage",
                     json_object_get(res, "coverage"));
}

/* Reads --out into trajectory_id -> [row per turn] (new reference). */
static json_t *read_rows(const char *path, int turns)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        kg_error("--out %s: %s", path, strerror(errno));
        return NULL;
    }
    json_t *by = json_object();
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) {
        json_t *row = json_loads(line, 0, NULL);
        const char *id =
            json_string_value(json_object_get(row, "trajectory_id"));
        json_int_t t = json_integer_value(json_object_get(row, "turn"));
        if (id && t >= 0 && t < turns) {
            json_t *a = json_object_get(by, id);
            if (!a) {
                a = json_array();
                for (int i = 0; i < turns; i++)
                    json_array_append_new(a, json_null());
                json_object_set_new(by, id, a);
            }
            json_array_set(a, (size_t)t, row);
        }
        json_decref(row);
    }
    free(line);
    fclose(f);
    return by;
}

/* Writes the SFT file (through a temp file and a rename). 0, or 1. */
static int export(const struct copts *c)
{
    json_t *by = read_rows(c->out, c->turns);
    if (!by)
        return 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", c->sft, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        kg_error("--sft %s: %s", c->sft, strerror(errno));
        json_decref(by);
        return 1;
    }
    long kept = 0, whole = 0;
    const char *id;
    json_t *a;
    json_object_foreach(by, id, a)
    {
        size_t i;
        json_t *row;
        int complete = 1;
        json_array_foreach(a, i, row)
        {
            complete = complete && !json_is_null(row);
        }
        if (!complete)
            continue;
        whole++;
        row = json_array_get(a, (size_t)c->turns - 1);
        json_t *bt = json_object_get(row, "best_turn");
        if (c->best)
            row = json_is_integer(bt)
                      ? json_array_get(a, (size_t)json_integer_value(bt))
                      : NULL;
        if (!row || !good(row, c->min_sp))
            continue;
        json_t *l = sft_line(row, c->turns);
        char *s = l ? json_dumps(l, JSON_COMPACT) : NULL;
        if (s) {
            fprintf(f, "%s\n", s);
            kept++;
        }
        free(s);
        json_decref(l);
    }
    json_decref(by);
    if (fclose(f) || rename(tmp, c->sft)) {
        kg_error("--sft %s: %s", c->sft, strerror(errno));
        unlink(tmp);
        return 1;
    }
    kg_info("%ld of %ld trajectories kept (%s turn correct, not hacked, "
            "speedup >= %g): %s",
            kept, whole, c->best ? "best" : "final", c->min_sp, c->sft);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kgym collect --sft FILE.jsonl [--filter final|best] "
            "[--min-speedup X]\n"
            "                    [kgym rollout's flags: --policy URL --model "
            "NAME --problems PATH ...]\n"
            "\n"
            "Rolls out a teacher (5 turns unless --turns is given) into "
            "--out (default\n"
            "FILE.jsonl.rollout.jsonl; a rerun resumes it), then writes one "
            "SFT chat line per\n"
            "trajectory whose final turn (--filter best: its best turn) is "
            "correct, not\n"
            "hacked and at least --min-speedup (default 0) fast.\n");
}

/* The arguments for kgym rollout, as split_args gathers them. */
struct split {
    struct copts *c;
    char **av;
    int n, turns;
};

static int filter_opt(void *ctx, const char *name, const char *v, kg_err *err)
{
    struct split *sp = ctx;
    if (strcmp(v, "final") && strcmp(v, "best"))
        return kg_errf(err, KG_EINVAL, "%s: final or best, not '%s'", name, v);
    sp->c->best = !strcmp(v, "best");
    return 0;
}

/* Any other argument goes to kgym rollout as it is; collect reads the
 * values of --turns and --out (next: the argument after a) on the way. */
static int forward(void *ctx, const char *a, const char *next, kg_err *err)
{
    struct split *sp = ctx;
    if (sp->n >= MAX_ARGS - 6)
        return kg_errf(err, KG_EINVAL, "more than %d arguments", MAX_ARGS - 6);
    sp->av[sp->n++] = (char *)a;
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const char *v = eq ? eq + 1 : next;
    if (v && len == 7 && !strncmp(a, "--turns", len))
        sp->turns = atoi(v);
    if (v && len == 5 && !strncmp(a, "--out", len))
        sp->c->out = v;
    return 0;
}

static int positional(void *ctx, const char *name, const char *v, kg_err *err)
{
    (void)name;
    return forward(ctx, v, NULL, err);
}

/* Takes collect's own flags out of argv into c and the rest into av
 * (with --turns 5 and --out added when absent). Returns the new argc, or
 * -1 / -2 (--help) after logging. */
static int split_args(int argc, char **argv, struct copts *c, char **av,
                      char *outbuf, size_t outlen)
{
    const kg_opt table[] = {
        KG_OPT_S("--sft", &c->sft),
        KG_OPT_FN("--filter", filter_opt),
        KG_OPT_D("--min-speedup", &c->min_sp, -HUGE_VAL, HUGE_VAL),
        KG_OPT_END,
    };
    struct split sp = {c, av, 0, 0};
    av[sp.n++] = argv[0];
    kg_opts spec = {.opts = table,
                    .ctx = &sp,
                    .positional = positional,
                    .other = forward,
                    .pass = 1};
    kg_err err = {{0}};
    int rc = kg_opts_parse(&spec, argc, argv, &err);
    if (rc == KG_OPTS_HELP)
        return -2;
    if (rc) {
        kg_error("%s", err.msg);
        return -1;
    }
    int n = sp.n, turns = sp.turns;
    if (!c->sft) {
        kg_error("--sft FILE.jsonl is needed (kgym collect --help)");
        return -1;
    }
    c->turns = turns > 0 ? turns : 5;
    if (!turns)
        av[n++] = "--turns", av[n++] = "5";
    if (!c->out) {
        snprintf(outbuf, outlen, "%s.rollout.jsonl", c->sft);
        c->out = outbuf;
        av[n++] = "--out", av[n++] = outbuf;
    }
    av[n] = NULL;
    return n;
}

int kg_cli_collect(int argc, char **argv)
{
    struct copts c = {0};
    char *av[MAX_ARGS + 1], outbuf[4096];
    kg_log_init("kgym collect", NULL, 0);
    int n = split_args(argc, argv, &c, av, outbuf, sizeof outbuf);
    if (n == -2) {
        usage(stdout);
        return 0;
    }
    if (n < 0)
        return 2;
    int code = ro_main(n, av, "kgym collect");
    return code ? code : export(&c);
}
