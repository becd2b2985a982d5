/* cli.h - the kgym command's subcommands. Each returns the process exit
 * code: 0 success, 1 failure of the work, 2 bad usage or bad input. */
#ifndef KGYM_CLI_H
#define KGYM_CLI_H

int kg_cli_rl(int argc, char **argv);
int kg_cli_eval(int argc, char **argv);
/* cmd_selfcheck.c: KernelBench's tree (kgym selfcheck; kgym eval
 * --kernelbench, which kg_cli_eval hands over) */
int kg_cli_selfcheck(int argc, char **argv);
int kg_cli_eval_kernelbench(int argc, char **argv);
int kg_cli_serve(int argc, char **argv);
int kg_cli_worker(int argc, char **argv);
int kg_cli_submit(int argc, char **argv);
int kg_cli_status(int argc, char **argv);
int kg_cli_result(int argc, char **argv);
int kg_cli_wait(int argc, char **argv);
int kg_cli_cancel(int argc, char **argv);
int kg_cli_redteam(int argc, char **argv);
/* src/cli/cmd_rollout.c: multi-turn rollouts of a policy (docs/agent.md) */
int kg_cli_rollout(int argc, char **argv);
/* src/cli/cmd_collect.c: a rollout, then its SFT export */
int kg_cli_collect(int argc, char **argv);
/* src/cli/cmd_policy.c: a scripted OpenAI-compatible policy */
int kg_cli_policy(int argc, char **argv);
/* src/cli/cmd_report.c: Fast@p tables, report.json and report.html */
int kg_cli_report(int argc, char **argv);
/* cmd_train.c: execs python/kgym/train.py (docs/training.md) */
int kg_cli_train(int argc, char **argv);

#endif
