/* main.c - the kgym command: dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/log.h"
#include "kgym/kgym.h"

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct subcommand commands[] = {
    {"eval", kg_cli_eval,
     "evaluate candidates against a reference locally (sandboxed, warm "
     "zygote)"},
    {"selfcheck", kg_cli_selfcheck,
     "KernelBench's tree, each reference as its own candidate: JSONL + "
     "summary"},
    {"serve", kg_cli_serve, "the task API server (docs/api.md)"},
    {"worker", kg_cli_worker,
     "evaluate tasks leased from a kgym server on one device"},
    {"submit", kg_cli_submit, "submit a candidate to a kgym server"},
    {"status", kg_cli_status, "a task's status on a kgym server"},
    {"result", kg_cli_result, "a finished task's result"},
    {"wait", kg_cli_wait, "wait for a task to finish and print its result"},
    {"cancel", kg_cli_cancel, "cancel a pending or running task"},
    {"redteam", kg_cli_redteam,
     "run the red-team corpus (cheats and honest candidates) and check every "
     "verdict"},
    {"rollout", kg_cli_rollout,
     "multi-turn rollouts of an OpenAI-compatible policy, scored: JSONL "
     "rows"},
    {"collect", kg_cli_collect,
     "cold-start SFT chats from a teacher's rollouts (kgym rollout + a "
     "filter)"},
    {"policy", kg_cli_policy,
     "policy scripted DIR: an OpenAI-compatible server replying from a "
     "folder of kernels"},
    {"train", kg_cli_train,
     "policy-gradient steps on rollout rows, or SFT on collect chats "
     "(Python)"},
    {"report", kg_cli_report,
     "Fast@p by level and turn, hacking, cost: tables, report.json, "
     "report.html"},
    {"rl", kg_cli_rl,
     "RL math: reward|returns|advantages|mrs|prs|fastp|select (JSON stdin -> "
     "stdout)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: kgym <command> [args]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-10s %s\n", "version", "print the version");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("kgym %s\n", KG_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    kg_log_init("kgym", NULL, 0);
    kg_error("unknown command '%s' (kgym --help lists them)", argv[1]);
    return 2;
}
