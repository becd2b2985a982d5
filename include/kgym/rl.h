/*
 * rl.h - the RL mathematics of the Dr. Kernel paper, as plain functions.
 *
 * Conventions (all functions):
 *  - Arrays are caller-owned, row-major, with explicit sizes. A K x T array
 *    holds K rollouts (samples of one prompt/group) by T turns: x[i*T + t].
 *  - valid masks are uint8_t (0 or 1). An invalid entry (a turn after early
 *    termination) takes no part in any sum or mean and its output is 0.
 *  - Nothing allocates; nothing keeps state; all are thread-safe.
 *  - Return 0 or a negative KG_E* code; NaN/Inf inputs where a number is
 *    used give KG_ENONFINITE. On error, outputs are unspecified.
 *
 * rl_json.h is the JSON layer on top (lib/rl_json.c): the `kgym rl`
 * subcommands as one call, which reads and checks JSON input, calls these
 * functions and writes JSON output; the command line and the Python
 * bindings use it.
 */
#ifndef KGYM_RL_H
#define KGYM_RL_H

#include <stddef.h>
#include <stdint.h>

#include "kgym.h"

/* ---- per-turn reward -------------------------------------------------- */

typedef struct kg_reward_cfg {
    double cap;     /* speedup cap, default 3 */
    double w_pr;    /* weight of the profiling ratio term: 0 or 1, default 0 */
    double penalty; /* reward of an incorrect or hacked turn, default 0 */
} kg_reward_cfg;

void kg_reward_cfg_default(kg_reward_cfg *cfg);

/*
 * R[i] = C + C*min(speedup[i], cap) + w_pr*C*pr[i], with C = correct[i] &&
 * !hacked[i]; an incorrect or hacked turn gets cfg->penalty. speedup and pr
 * are read only where C = 1 (they may be NaN elsewhere); there they must be
 * finite, speedup >= 0 and pr in [0, 1]. pr may be NULL when w_pr == 0.
 */
int kg_rl_reward(double *R, const uint8_t *correct, const uint8_t *hacked,
                 const double *speedup, const double *pr, size_t n,
                 const kg_reward_cfg *cfg, kg_err *err);

/* ---- returns and advantages ------------------------------------------ */

/*
 * Reward-to-go: G[i][t] = sum_{t' >= t, valid} gamma^(t'-t) R[i][t'].
 * gamma in [0, 1]. Invalid entries of G are 0.
 */
int kg_rl_returns(double *G, const double *R, const uint8_t *valid, int K,
                  int T, double gamma, kg_err *err);

/*
 * GRPO per turn over the valid group of that turn (N_t = its size):
 * A = G - mean_t, divided by (std_t + eps) when norm_std (population std,
 * as verl). N_t <= 1 gives A = 0.
 */
int kg_rl_grpo(double *A, const double *G, const uint8_t *valid, int K, int T,
               int norm_std, double eps, kg_err *err);

/*
 * TRLOO (leave-one-out) per turn: A = G - mean of the other valid returns
 * of that turn = N_t/(N_t-1) * (G - mean_t). N_t <= 1 gives A = 0.
 */
int kg_rl_trloo(double *A, const double *G, const uint8_t *valid, int K,
                int T, kg_err *err);

/* ---- rejection sampling ---------------------------------------------- */

typedef struct kg_mrs_cfg {
    double lo;   /* default 0.999 */
    double hi;   /* default 1.001 */
    double veto; /* default 1e-4: any token ratio below it rejects */
} kg_mrs_cfg;

void kg_mrs_cfg_default(kg_mrs_cfg *cfg);

/*
 * Mismatch rejection sampling over nseq sequences whose tokens are
 * lp_train[off[s] .. off[s+1]) (off has nseq+1 entries, non-decreasing).
 * ratio[s] = exp(mean(lp_train - lp_rollout)); keep[s] = lo <= ratio <= hi
 * and no token's exp(lp_train - lp_rollout) < veto. An empty sequence has
 * ratio 1 and is kept.
 */
int kg_rl_mrs(double *ratio, uint8_t *keep, const double *lp_train,
              const double *lp_rollout, const size_t *off, size_t nseq,
              const kg_mrs_cfg *cfg, kg_err *err);

/*
 * Profiling-based rejection sampling: p[i] = clip((pr[i] - tau) / s, 0, 1);
 * s == 0 is a hard threshold (p = pr >= tau). keep[i] = u_i < p[i] with
 * u_i a uniform draw that depends only on (seed, i), so a result is
 * reproducible for a given seed. keep may be NULL.
 */
int kg_rl_prs(double *p, uint8_t *keep, const double *pr, size_t n,
              double tau, double s, uint64_t seed, kg_err *err);

/* Uniform [0,1) draw for index i under seed (the one kg_rl_prs uses). */
double kg_rl_uniform(uint64_t seed, uint64_t i);

/* ---- metrics ---------------------------------------------------------- */

/*
 * Fast@p over S trajectories by T turns (S x T arrays, one level's worth):
 * an attempt is fast at p when valid, correct, not hacked, and speedup >= p.
 *  last[j*T + t] = fraction of trajectories whose attempt at turn t (or, if
 *                  the trajectory ended earlier, its last valid attempt) is
 *                  fast at ps[j];
 *  best[j*T + t] = fraction with a fast attempt at any turn <= t
 *                  (best-of-history).
 *  hack[t]       = hacked attempts / valid attempts at turn t (0 if none).
 * Any output may be NULL. speedup is read only where correct && !hacked.
 */
int kg_rl_fastp(double *last, double *best, double *hack,
                const uint8_t *correct, const uint8_t *hacked,
                const double *speedup, const uint8_t *valid, int S, int T,
                const double *ps, int P, kg_err *err);

/* ---- test-time scaling context ---------------------------------------- */

/*
 * Top-w turns of a history of T turns by reward (ties: the later turn
 * first). Writes min(w, T) turn indices to idx in chronological order and
 * their count to *nout.
 */
int kg_rl_select_topw(int *idx, int *nout, const double *reward, int T, int w,
                      kg_err *err);

#endif
