/*
 * rollout.h - `kgym rollout`'s parts (not an API): the run's options and
 * state, and the modules that work on them:
 *   cmd_rollout.c   the command line, set-up, the summary
 *   cmd_collect.c   `kgym collect`: a rollout, then the SFT export
 *   rollout_context.c what each turn's chat holds (--context)
 *   rollout_loop.c  the loop: problems admitted --chunk at a time, each
 *                   trajectory moved on as its reply or result arrives
 *   rollout_turn.c  a trajectory's turn on the policy's side: prompts,
 *                   the code of a reply
 *   rollout_env.c   the environment: codes to `kgym serve` in batches,
 *                   results polled
 *   rollout_score.c rewards, returns, advantages, PRS keep, loss mask
 *   rollout_out.c   the --out JSONL: checked, resumed, appended
 * docs/agent.md describes the command and the rows.
 */
#ifndef KGYM_AGENT_ROLLOUT_H
#define KGYM_AGENT_ROLLOUT_H

#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "agent/policy.h"
#include "agent/problems.h"
#include "common/http_client.h"
#include "kgym/rl.h"

#define RO_SCHEMA "kgym.rollout/1"
#define RO_MAX_TURNS 64
#define RO_MAX_SAMPLES 1024
#define RO_AWAY_S 120 /* the server unreachable this long ends the run */

/* Where a trajectory is (rollout_loop.c). */
enum ro_state { RO_NEED_POLICY, RO_AT_POLICY, RO_NEED_EVAL, RO_AT_EVAL,
                RO_DONE };

typedef struct ro_opts {
    const char *policy, *model, *key_file, *server, *token_file;
    const char *problems, *out, *write_prompts;
    const char *prompt_system, *prompt_first, *prompt_refine;
    int samples, turns, chunk, group_n, no_system, dataset_prompt;
    int ctx_window;      /* --context window:T,R[,last|best]; 0: full */
    int ctx_T, ctx_R, ctx_best;
    double gamma, prs_tau, prs_s, eval_timeout_s;
    int has_seed;
    uint64_t seed;
    kg_reward_cfg reward;
    kg_policy_cfg pcfg;
    json_t *fields; /* request fields given as flags (owned) */
} ro_opts;

/* One turn of one trajectory. Everything owned here. */
typedef struct ro_turn {
    json_t *messages; /* the prompt of this turn (a copy) */
    char *reply;      /* NULL: no reply (the policy failed) */
    char *finish_reason;
    char *code;       /* NULL: none found, or no reply */
    char *error;      /* why there is no reply, code or result; NULL */
    json_t *token_ids, *logprobs;
    long prompt_tokens, completion_tokens;
    int choices;      /* completions of the reply's request */
    char task_id[64]; /* "" when nothing was submitted */
    json_t *result;   /* the server's result, or NULL */
    json_t *context;  /* earlier turns whose replies are in messages */
    int best_turn;    /* best valid turn so far (<= this one), -1: none */
    char *feedback;   /* what the next turn was told, or NULL */
    int valid, correct, hacked;
    double speedup, coverage; /* -1: none */
    double reward, ret, adv_trloo, adv_grpo, keep_prob;
    int keep, loss_mask;
} ro_turn;

typedef struct ro_traj {
    int problem, sample;
    int done_before; /* written by an earlier run: not rolled out */
    int t, state;    /* its current turn and enum ro_state */
    int solo;        /* asked alone at turn 0 (its group's reply fell short) */
    double eval_t0;  /* when its current code was submitted (ms) */
    json_t *history; /* the chat so far (system, user, assistant, ...) */
    json_t *base;    /* the first turn's messages (for --context window) */
    int ctx[RO_MAX_TURNS], nctx; /* turns whose replies are in history */
    ro_turn turns[RO_MAX_TURNS];
} ro_traj;

/* What an earlier run wrote of one trajectory (rollout_out.c). */
typedef struct ro_prior {
    uint64_t turns_seen;           /* bit t: a row for turn t */
    double reward[RO_MAX_TURNS];   /* NaN: invalid */
} ro_prior;

/* Counters for the progress line. */
typedef struct ro_stats {
    long traj_total, traj_done, evals_done, evals_in_flight, pass, hacked;
    long no_code, policy_failed, policy_in_flight;
    double t0_ms;
    double policy_ms, env_ms; /* time spent waiting on each */
    int tty, line_open; /* stderr is a terminal; a progress line is on it */
} ro_stats;

typedef struct ro_run {
    ro_opts *o;
    kg_problems ps;
    kg_policy *policy;
    kg_client *server;
    char *system, *first, *refine; /* templates */
    ro_prior *prior;               /* ps.n * samples entries */
    FILE *out;
    char run_id[40];
    long task_seq;
    ro_stats st;
    volatile sig_atomic_t *stop;
    const char *program; /* "kgym rollout" or "kgym collect" */
    int poll_one_by_one; /* the server has no POST /results/batch */
} ro_run;

/* cmd_rollout.c: the whole rollout command, logging as `program`
 * ("kgym rollout", "kgym collect"). Returns the exit code. */
int ro_main(int argc, char **argv, const char *program);

/* rollout_loop.c: every problem's trajectories, from the first turn to
 * their rows, with the policy and the server kept busy at once. Returns
 * the exit code. */
int ro_run_all(ro_run *r);

/* rollout_turn.c */
int ro_first_messages(ro_run *r, ro_traj *tr, kg_err *err);
char *ro_make_tag(const ro_run *r, ro_traj **grp, int k, int t);
void ro_take_reply(ro_traj *tr, int t, const kg_policy_req *q, int c);
void ro_next_message(ro_run *r, ro_traj *tr, int t);
void ro_traj_clear(ro_traj *tr, int turns);
json_t *ro_message(const char *role, const char *content);
json_t *ro_feedback_message(ro_run *r, const ro_turn *u, int t);

/* rollout_context.c: --context. ro_context_parse reads the flag's value
 * into o (0, or KG_EINVAL with err); ro_context_turn sets the chat of
 * turn t of tr (a window restarts it from the first prompt and the chosen
 * turns) and records which earlier turns it holds. */
int ro_context_parse(ro_opts *o, const char *spec, kg_err *err);
void ro_context_turn(ro_run *r, ro_traj *tr, int t);

/* rollout_env.c: ro_env_submit sends the current turn's code of
 * ts[0..m) (task ids set; a result or a refusal that comes with the reply
 * is taken): 0, or KG_EUNAVAIL / KG_EINVAL with err. ro_env_poll asks
 * for the results of us[0..n) in POST /results/batch requests of at most
 * KG_RESULTS_MAX_IDS ids, and when they fit in one, waits up to wait_s on
 * the server for one to finish: each finished turn gets its result or
 * error set. Returns how many finished, or -1 when the server did not
 * answer. */
int ro_env_submit(ro_run *r, ro_traj **ts, int m, kg_err *err);
int ro_env_poll(ro_run *r, ro_turn **us, int n, double wait_s);
int ro_env_health(ro_run *r, kg_err *err);

/* rollout_score.c: scores the trajectories of one problem (tj[0..n), all
 * of problem p) together with what earlier runs wrote of it. */
int ro_score_problem(ro_run *r, ro_traj *tj, int n, int p, kg_err *err);
/* Classifies turn u's outcome and sets its reward (NaN: not scored). */
int ro_score_turn(ro_run *r, ro_turn *u, kg_err *err);

/* rollout_out.c */
int ro_out_open(ro_run *r, kg_err *err);
int ro_out_write(ro_run *r, const ro_traj *tr, kg_err *err);
void ro_progress(ro_run *r, const char *phase, int force);
/* Ends the progress line on a terminal, so a log line starts afresh. */
void ro_progress_end(ro_run *r);

#endif
