/*
 * cmd_rl.c - `kgym rl <subcommand>`: libkgym's RL math over JSON.
 *
 * Each subcommand reads one JSON object on stdin and writes one on stdout
 * (one line). Options come as flags or as fields of the input object; a
 * flag wins. Reading and checking the input and the flags' values is
 * libkgym's (kg_rl_json in lib/rl_json.c, which the Python bindings call
 * too): this file parses the command line, hands the flags over as the
 * options object ({"--gamma": "0.5", "--norm-std": true}) and does the
 * I/O. Bad usage or input exits 2 with one line on stderr that names the
 * field or the flag.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "common/json_util.h"
#include "common/log.h"
#include "kgym/rl_json.h"

#define MAX_OPTS 4

/* An option into kg_rl_json's options object (ctx): its text under its
 * name, true for a switch; the last of a repeated option wins. */
static int put(void *ctx, const char *name, const char *v, kg_err *err)
{
    /* not checked as UTF-8: kg_json_dumps writes a bad byte as U+FFFD */
    json_t *j = v ? json_stringn_nocheck(v, strlen(v)) : json_true();
    if (!j || json_object_set_new(ctx, name, j))
        return kg_errf(err, KG_ENOMEM, "out of memory");
    return 0;
}

#define VAL(n) KG_OPT_FN(n, put)
#define SWITCH(n) KG_OPT_FN0(n, put)

struct cmd {
    const char *name;
    kg_opt opts[MAX_OPTS + 1]; /* ended by KG_OPT_END */
    const char *synopsis;             /* after "kgym rl NAME" */
    const char *help;
};

static const struct cmd cmds[] = {
    {"reward",
     {VAL("--cap"), VAL("--w-pr"), VAL("--penalty"), KG_OPT_END},
     "[--cap C] [--w-pr W] [--penalty P]",
     "Per-turn reward R = C*(1 + min(speedup, cap) + w_pr*coverage), with\n"
     "C = correct and not hacked; an incorrect or hacked turn gets the "
     "penalty.\n"
     "input:  {\"correct\": bool, \"hacked\": bool, \"speedup\": x|null,\n"
     "         \"coverage\" (or \"pr\"): x|null}  -> {\"reward\": x}\n"
     "        {\"turns\": [such objects]}           -> {\"rewards\": [...]}\n"
     "A kgym result object works too: correctness, decoy_kernel,\n"
     "hack_reasons (non-empty = hacked), profile.coverage. Verdict\n"
     "problem_error (the problem's reference failed, not the kernel): reward\n"
     "null, the turn not scored (invalid for returns and advantages).\n"
     "defaults: cap 3, w_pr 0, penalty 0.\n"},
    {"returns",
     {VAL("--gamma"), KG_OPT_END},
     "[--gamma G]",
     "Reward-to-go returns G[i][t] = sum over valid t' >= t of "
     "gamma^(t'-t) R[i][t'].\n"
     "input:  {\"rewards\": KxT (null = invalid), \"valid\": KxT bools "
     "(optional)}\n"
     "output: {\"returns\": KxT, null where invalid}. gamma default 1.\n"},
    {"advantages",
     {VAL("--estimator"), SWITCH("--norm-std"), VAL("--eps"), KG_OPT_END},
     "[--estimator grpo|trloo] [--norm-std] [--eps E]",
     "Per-turn group advantages over the valid rollouts of each turn:\n"
     "trloo (default) A = G - mean of the others; grpo A = G - mean,\n"
     "divided by (std + eps) with --norm-std (eps default 1e-6).\n"
     "input:  {\"returns\": KxT (null = invalid), \"valid\": KxT bools "
     "(optional)}\n"
     "output: {\"advantages\": KxT, null where invalid}\n"},
    {"mrs",
     {VAL("--lo"), VAL("--hi"), VAL("--veto"), KG_OPT_END},
     "[--lo 0.999] [--hi 1.001] [--veto 1e-4]",
     "Mismatch rejection sampling: ratio = exp(mean(train - rollout)) per\n"
     "sequence; keep when lo <= ratio <= hi and no token ratio < veto.\n"
     "input:  {\"train_logprobs\": [[...], ...], \"rollout_logprobs\": same "
     "shape}\n"
     "output: {\"ratio\": [...], \"keep\": [...]}\n"},
    {"prs",
     {VAL("--tau"), VAL("--s"), VAL("--seed"), KG_OPT_END},
     "[--tau 0.3] [--s 0.1] [--seed N]",
     "Profiling-based rejection sampling: keep_prob = clip((coverage - "
     "tau)/s, 0, 1),\n"
     "keep drawn with a reproducible uniform per (seed, index).\n"
     "input:  {\"coverage\": [x|null, ...]}\n"
     "output: {\"keep_prob\": [...], \"keep\": [...]} (null coverage: null, "
     "false)\n"},
    {"fastp",
     {VAL("--p"), KG_OPT_END},
     "[--p 1,1.2,1.5,2]",
     "Fast@p by turn (last attempt and best of history) and hacking ratio,\n"
     "overall and by level. Attempts group into trajectories by (level,\n"
     "problem, sample); turns are the sorted distinct turn values. An\n"
     "attempt with verdict problem_error is left out, as if not given.\n"
     "input:  {\"attempts\": [{\"level\": L, \"problem\": id, \"sample\": s "
     "(0),\n"
     "         \"turn\": t, \"correct\": bool, \"hacked\": bool, \"speedup\": "
     "x|null}]}\n"
     "output: {\"p\", \"turns\", \"overall\": {\"last\": {p: [...]}, "
     "\"best\": {...},\n"
     "         \"hacking_ratio\": [...], \"n\": trajectories}, \"by_level\": "
     "{L: same}}\n"},
    {"select",
     {VAL("--w"), KG_OPT_END},
     "[--w 4]",
     "Top-w turns of a history by reward (ties: the later turn), in order.\n"
     "input:  {\"rewards\": [per turn]}  output: {\"selected\": [turn "
     "indices]}\n"},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: kgym rl <subcommand> [options] < input.json\n\n"
               "Reads one JSON object on stdin, writes one on stdout. "
               "Options may also be\n"
               "fields of the input (--w-pr as \"w_pr\"); flags win.\n\n");
    for (size_t i = 0; i < NCMDS; i++)
        fprintf(f, "  %-11s %s\n", cmds[i].name, cmds[i].synopsis);
    fprintf(f, "\n`kgym rl <subcommand> --help` describes one. Exit status: "
               "0 done, 2 bad usage\nor input (one line on stderr).\n");
}

static void cmd_usage(FILE *f, const struct cmd *cmd)
{
    fprintf(f, "usage: kgym rl %s %s < input.json\n\n%s", cmd->name,
            cmd->synopsis, cmd->help);
}

/* One line: control characters of the message become spaces. */
static void print_error(const char *msg)
{
    char line[KG_ERR_MAX];
    size_t i;
    for (i = 0; msg[i] && i + 1 < sizeof line; i++)
        line[i] = (unsigned char)msg[i] < 0x20 ? ' ' : msg[i];
    line[i] = '\0';
    kg_error("%s", line);
}

/*
 * Puts the flags of argv into opts, kg_rl_json's options object (put).
 * Prints the error and returns 2 on bad usage, 0 for --help (after
 * printing it), -1 when out of memory, 1 to go on.
 */
static int parse_args(const struct cmd *cmd, int argc, char **argv,
                      json_t *opts)
{
    kg_opts spec = {.opts = cmd->opts, .ctx = opts};
    kg_err err = {{0}};
    int rc = kg_opts_parse(&spec, argc - 1, argv + 1, &err);
    if (rc == KG_OPTS_HELP) {
        cmd_usage(stdout, cmd);
        return 0;
    }
    if (rc == 0)
        return 1;
    kg_error("%s", err.msg);
    if (rc == KG_ENOTFOUND) /* an unknown option or a stray argument */
        cmd_usage(stderr, cmd);
    return rc == KG_ENOMEM ? -1 : 2;
}

int kg_cli_rl(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    const struct cmd *cmd = NULL;
    for (size_t i = 0; i < NCMDS; i++)
        if (!strcmp(argv[1], cmds[i].name))
            cmd = &cmds[i];
    /* "kgym rl SUB: ..." */
    kg_log_init("kgym rl", cmd ? cmd->name : NULL, 0);
    if (!cmd) {
        kg_error("unknown subcommand '%s'", argv[1]);
        usage(stderr);
        return 2;
    }
    json_t *opts = json_object();
    if (!opts) {
        kg_error("out of memory");
        return 1;
    }
    int rc = parse_args(cmd, argc, argv, opts);
    char *options = rc == 1 ? kg_json_dumps(opts) : NULL;
    json_decref(opts);
    if (rc != 1)
        return rc < 0 ? 1 : rc;
    if (!options) {
        kg_error("out of memory");
        return 1;
    }

    char *buf, *text;
    size_t len;
    kg_err err;
    rc = kg_json_read_all(stdin, &buf, &len, &err);
    if (rc == 0) {
        rc = kg_rl_json(cmd->name, buf, len, options, &text, &err);
        free(buf);
    }
    free(options);
    if (rc < 0) {
        print_error(err.msg);
        return rc == KG_ENOMEM ? 1 : 2;
    }
    int bad = fputs(text, stdout) < 0 || fputc('\n', stdout) < 0;
    kg_rl_json_free(text);
    if (fflush(stdout) != 0 || bad) {
        kg_error("writing stdout: %s", strerror(errno));
        return 1;
    }
    return 0;
}
