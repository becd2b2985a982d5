/*
 * rl.c - per-turn reward, reward-to-go returns, GRPO and TRLOO advantages,
 * mismatch and profiling-based rejection sampling. The formulas, their
 * conventions and worked numbers are in docs/rl.md.
 *
 * Arguments are checked before outputs are written (the advantages check
 * per block of TURN_BLOCK turns), but callers must not rely on that: rl.h
 * calls outputs unspecified on error. Nothing here allocates or does I/O;
 * rl_json.c is the JSON layer on top (kg_rl_json, for `kgym rl` and the
 * Python bindings), where input is parsed and checked field by field.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kgym/rl.h"

/* Turns handled together by the advantage passes; the per-turn statistics
 * of one block live on the stack, so any T works without allocation. */
#define TURN_BLOCK 64

static int check_group(const char *fn, const void *out, const void *in,
                       const uint8_t *valid, int K, int T, kg_err *err)
{
    if (K <= 0 || T <= 0)
        return kg_errf(err, KG_EINVAL, "%s: K and T must be > 0 (K=%d, T=%d)",
                       fn, K, T);
    if (!out || !in || !valid)
        return kg_errf(err, KG_EINVAL, "%s: NULL array", fn);
    return 0;
}

/* ---- per-turn reward -------------------------------------------------- */

void kg_reward_cfg_default(kg_reward_cfg *cfg)
{
    if (!cfg)
        return;
    cfg->cap = 3.0;
    cfg->w_pr = 0.0;
    cfg->penalty = 0.0;
}

/*
 * cfg may be NULL (defaults). cap may be +inf (no cap); w_pr is any finite
 * weight >= 0 (the paper uses 0 or 1). R may alias speedup or pr.
 */
int kg_rl_reward(double *R, const uint8_t *correct, const uint8_t *hacked,
                 const double *speedup, const double *pr, size_t n,
                 const kg_reward_cfg *cfg, kg_err *err)
{
    kg_reward_cfg def;
    if (!cfg) {
        kg_reward_cfg_default(&def);
        cfg = &def;
    }
    if (isnan(cfg->cap) || cfg->cap < 0)
        return kg_errf(err, KG_EINVAL, "reward: cap must be >= 0 (got %g)",
                       cfg->cap);
    if (!isfinite(cfg->w_pr) || cfg->w_pr < 0)
        return kg_errf(err, KG_EINVAL,
                       "reward: w_pr must be finite and >= 0 (got %g)",
                       cfg->w_pr);
    if (!isfinite(cfg->penalty))
        return kg_errf(err, KG_EINVAL, "reward: penalty must be finite");
    if (n == 0)
        return 0;
    if (!R || !correct || !hacked || !speedup)
        return kg_errf(err, KG_EINVAL, "reward: NULL array");
    int use_pr = cfg->w_pr != 0;
    if (use_pr && !pr)
        return kg_errf(err, KG_EINVAL, "reward: pr is NULL but w_pr = %g",
                       cfg->w_pr);

    for (size_t i = 0; i < n; i++) {
        if (correct[i] > 1)
            return kg_errf(err, KG_EINVAL,
                           "reward: correct[%zu] is %u (must be 0 or 1)", i,
                           correct[i]);
        if (hacked[i] > 1)
            return kg_errf(err, KG_EINVAL,
                           "reward: hacked[%zu] is %u (must be 0 or 1)", i,
                           hacked[i]);
        if (!correct[i] || hacked[i])
            continue;
        if (!isfinite(speedup[i]))
            return kg_errf(err, KG_ENONFINITE,
                           "reward: speedup[%zu] is not finite", i);
        if (speedup[i] < 0)
            return kg_errf(err, KG_EINVAL,
                           "reward: speedup[%zu] is negative (%g)", i,
                           speedup[i]);
        if (!use_pr)
            continue;
        if (!isfinite(pr[i]))
            return kg_errf(err, KG_ENONFINITE, "reward: pr[%zu] is not finite",
                           i);
        if (pr[i] < 0 || pr[i] > 1)
            return kg_errf(err, KG_EINVAL,
                           "reward: pr[%zu] = %g is outside [0, 1]", i, pr[i]);
    }

    for (size_t i = 0; i < n; i++) {
        if (!correct[i] || hacked[i]) {
            R[i] = cfg->penalty;
            continue;
        }
        double r = 1.0 + fmin(speedup[i], cfg->cap);
        if (use_pr)
            r += cfg->w_pr * pr[i];
        R[i] = r;
    }
    return 0;
}

/* ---- masks ------------------------------------------------------------ */

/*
 * x where the mask m is all ones, +0.0 where it is 0, without a branch, so
 * that a NaN under an invalid entry never reaches a sum (0 * NaN would).
 */
static inline double keep_bits(double x, uint64_t m)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    b &= m;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* All ones for v == 1, 0 for v == 0 (v > 1 is caught by the callers). */
static inline uint64_t ones_if(uint8_t v)
{
    return -(uint64_t)v;
}

/* ---- returns ---------------------------------------------------------- */

/*
 * Backward recursion acc_t = [valid_t] R_t + gamma * acc_{t+1}: an invalid
 * turn adds nothing but still counts in the discount distance, so a hole in
 * the mask does not shorten it. Validity is taken as given (holes are
 * allowed). G may alias R. Bad input is found before anything is written;
 * an overflow of the sums is found while writing.
 */
int kg_rl_returns(double *G, const double *R, const uint8_t *valid, int K,
                  int T, double gamma, kg_err *err)
{
    int rc = check_group("returns", G, R, valid, K, T, err);
    if (rc)
        return rc;
    if (!(gamma >= 0 && gamma <= 1))
        return kg_errf(err, KG_EINVAL,
                       "returns: gamma must be in [0, 1] (got %g)", gamma);

    size_t n = (size_t)K * (size_t)T;
    unsigned vor = 0, bad = 0;
    for (size_t x = 0; x < n; x++) {
        vor |= valid[x];
        bad |= !isfinite(keep_bits(R[x], ones_if(valid[x])));
    }
    if (vor > 1 || bad) {
        for (size_t x = 0; x < n; x++) {
            if (valid[x] > 1)
                return kg_errf(err, KG_EINVAL,
                               "returns: valid[%zu] is %u (must be 0 or 1)", x,
                               valid[x]);
            if (valid[x] && !isfinite(R[x]))
                return kg_errf(err, KG_ENONFINITE,
                               "returns: R[%zu] (rollout %zu, turn %zu) is "
                               "not finite",
                               x, x / (size_t)T, x % (size_t)T);
        }
    }

    for (int i = 0; i < K; i++) {
        const double *r = R + (size_t)i * T;
        const uint8_t *v = valid + (size_t)i * T;
        double *g = G + (size_t)i * T;
        double acc = 0.0;
        for (int t = T - 1; t >= 0; t--) {
            uint64_t m = ones_if(v[t]);
            acc = keep_bits(r[t], m) + gamma * acc;
            g[t] = keep_bits(acc, m);
        }
        /* Finite rewards sum to a finite return unless they overflow. */
        if (!isfinite(acc))
            return kg_errf(err, KG_ENONFINITE,
                           "returns: the return of rollout %d overflows", i);
    }
    return 0;
}

/* ---- advantages ------------------------------------------------------- */

enum adv_kind { ADV_GRPO, ADV_GRPO_STD, ADV_TRLOO };

/*
 * Finds the first offending entry of turn block [t0, t0+B) once the fast
 * pass has seen something wrong: a mask value > 1, a non-finite valid G,
 * or else a sum that overflowed.
 */
static int adv_error(const char *fn, const double *G, const uint8_t *valid,
                     int K, int T, int t0, int B, kg_err *err)
{
    for (int i = 0; i < K; i++) {
        for (int j = 0; j < B; j++) {
            size_t x = (size_t)i * T + t0 + j;
            if (valid[x] > 1)
                return kg_errf(err, KG_EINVAL,
                               "%s: valid[%zu] is %u (must be 0 or 1)", fn, x,
                               valid[x]);
            if (valid[x] && !isfinite(G[x]))
                return kg_errf(err, KG_ENONFINITE,
                               "%s: G[%zu] (rollout %d, turn %d) is not "
                               "finite",
                               fn, x, i, t0 + j);
        }
    }
    return kg_errf(err, KG_ENONFINITE,
                   "%s: the returns of a turn in [%d, %d) overflow", fn, t0,
                   t0 + B);
}

/*
 * Per-turn sums over rows [i0, i1) of the turn block at t0: cnt[j] += N and
 * sum[j] += the sum of the valid G. Turn by turn down a column, with two
 * accumulators so that consecutive additions do not wait on each other.
 * Returns the OR of the mask values (> 1: a bad mask).
 */
static unsigned column_sums(double *sum, int *cnt, const double *G,
                            const uint8_t *valid, int T, int t0, int B, int i0,
                            int i1)
{
    unsigned vor = 0;
    for (int j = 0; j < B; j++) {
        const double *g = G + t0 + j;
        const uint8_t *v = valid + t0 + j;
        double s0 = 0.0, s1 = 0.0;
        int n = 0, i = i0;
        for (; i + 1 < i1; i += 2) {
            size_t x = (size_t)i * T, y = x + T;
            s0 += keep_bits(g[x], ones_if(v[x]));
            s1 += keep_bits(g[y], ones_if(v[y]));
            n += v[x] + v[y];
            vor |= v[x] | v[y];
        }
        if (i < i1) {
            size_t x = (size_t)i * T;
            s0 += keep_bits(g[x], ones_if(v[x]));
            n += v[x];
            vor |= v[x];
        }
        sum[j] += s0 + s1;
        cnt[j] += n;
    }
    return vor;
}

/* As column_sums, for sq[j] += the sum of valid (G - mean[j])^2. */
static void column_sqdev(double *sq, const double *mean, const double *G,
                         const uint8_t *valid, int T, int t0, int B, int i0,
                         int i1)
{
    for (int j = 0; j < B; j++) {
        const double *g = G + t0 + j;
        const uint8_t *v = valid + t0 + j;
        double m = mean[j], s0 = 0.0, s1 = 0.0;
        int i = i0;
        for (; i + 1 < i1; i += 2) {
            size_t x = (size_t)i * T, y = x + T;
            double dx = g[x] - m, dy = g[y] - m;
            s0 += keep_bits(dx * dx, ones_if(v[x]));
            s1 += keep_bits(dy * dy, ones_if(v[y]));
        }
        if (i < i1) {
            size_t x = (size_t)i * T;
            double dx = g[x] - m;
            s0 += keep_bits(dx * dx, ones_if(v[x]));
        }
        sq[j] += s0 + s1;
    }
}

/*
 * One implementation for the three advantages, block of turns by block of
 * turns. Per turn t of the block: pass 1 gives N_t and the sum S_t (and
 * catches bad input); for the std variant, pass 2 gives the population
 * variance around mean_t = S_t/N_t; the last pass writes
 *   A = (G - mean_t) * scale_t   where valid and N_t >= 2, else 0,
 * with scale_t = 1 (GRPO), 1/(std_t + eps) (GRPO-std; 0 if that is 0/0),
 * N_t/(N_t - 1) (TRLOO: G minus the mean of the other N_t - 1 returns).
 *
 * The sums go down the columns in chunks of rows small enough (~16 KB of
 * G) to stay in L1 while each turn of the block is summed, so memory is
 * read about once per pass; the last pass goes along the rows. No division
 * and no branch in the inner loops. A may alias G (each entry is read
 * before it is written).
 */
static int advantage(double *A, const double *G, const uint8_t *valid, int K,
                     int T, enum adv_kind kind, double eps, const char *fn,
                     kg_err *err)
{
    double sum[TURN_BLOCK], mean[TURN_BLOCK], scale[TURN_BLOCK];
    uint64_t on[TURN_BLOCK];
    int cnt[TURN_BLOCK];

    for (int t0 = 0; t0 < T; t0 += TURN_BLOCK) {
        int B = T - t0 < TURN_BLOCK ? T - t0 : TURN_BLOCK;
        int rows = 2048 / B;
        for (int j = 0; j < B; j++) {
            sum[j] = 0.0;
            cnt[j] = 0;
        }
        unsigned vor = 0;
        for (int i0 = 0; i0 < K; i0 += rows)
            vor |= column_sums(sum, cnt, G, valid, T, t0, B, i0,
                               K - i0 < rows ? K : i0 + rows);
        /* A NaN or an infinity among the valid entries makes its turn's sum
         * non-finite; so does an overflow, which adv_error tells apart. */
        int bad = vor > 1;
        for (int j = 0; j < B; j++)
            bad |= !isfinite(sum[j]);
        if (bad)
            return adv_error(fn, G, valid, K, T, t0, B, err);

        for (int j = 0; j < B; j++) {
            mean[j] = cnt[j] > 0 ? sum[j] / cnt[j] : 0.0;
            scale[j] = 0.0;
            if (cnt[j] < 2)
                continue;
            if (kind == ADV_GRPO)
                scale[j] = 1.0;
            else if (kind == ADV_TRLOO)
                scale[j] = (double)cnt[j] / (cnt[j] - 1);
        }

        if (kind == ADV_GRPO_STD) {
            double sq[TURN_BLOCK];
            for (int j = 0; j < B; j++)
                sq[j] = 0.0;
            for (int i0 = 0; i0 < K; i0 += rows)
                column_sqdev(sq, mean, G, valid, T, t0, B, i0,
                             K - i0 < rows ? K : i0 + rows);
            for (int j = 0; j < B; j++) {
                if (cnt[j] < 2)
                    continue;
                double den = sqrt(sq[j] / cnt[j]) + eps;
                if (!isfinite(den))
                    return adv_error(fn, G, valid, K, T, t0, B, err);
                /* den == 0: all returns equal the mean and eps == 0. */
                scale[j] = den > 0 ? 1.0 / den : 0.0;
            }
        }
        for (int j = 0; j < B; j++)
            on[j] = scale[j] != 0.0 ? ~UINT64_C(0) : 0;

        for (int i = 0; i < K; i++) {
            const double *g = G + (size_t)i * T + t0;
            const uint8_t *v = valid + (size_t)i * T + t0;
            double *a = A + (size_t)i * T + t0;
            for (int j = 0; j < B; j++)
                a[j] = keep_bits((g[j] - mean[j]) * scale[j],
                                 on[j] & ones_if(v[j]));
        }
    }
    return 0;
}

int kg_rl_grpo(double *A, const double *G, const uint8_t *valid, int K, int T,
               int norm_std, double eps, kg_err *err)
{
    int rc = check_group("grpo", A, G, valid, K, T, err);
    if (rc)
        return rc;
    if (!isfinite(eps) || eps < 0)
        return kg_errf(err, KG_EINVAL,
                       "grpo: eps must be finite and >= 0 (got %g)", eps);
    return advantage(A, G, valid, K, T, norm_std ? ADV_GRPO_STD : ADV_GRPO, eps,
                     "grpo", err);
}

int kg_rl_trloo(double *A, const double *G, const uint8_t *valid, int K, int T,
                kg_err *err)
{
    int rc = check_group("trloo", A, G, valid, K, T, err);
    if (rc)
        return rc;
    return advantage(A, G, valid, K, T, ADV_TRLOO, 0.0, "trloo", err);
}

/* ---- mismatch rejection sampling -------------------------------------- */

void kg_mrs_cfg_default(kg_mrs_cfg *cfg)
{
    if (!cfg)
        return;
    cfg->lo = 0.999;
    cfg->hi = 1.001;
    cfg->veto = 1e-4;
}

/*
 * cfg may be NULL (defaults). Only tokens off[0] .. off[nseq] are read; the
 * token veto uses exp(min_k d_k) = min_k exp(d_k) (exp is monotone), so one
 * exp per sequence. A veto of 0 never fires.
 */
int kg_rl_mrs(double *ratio, uint8_t *keep, const double *lp_train,
              const double *lp_rollout, const size_t *off, size_t nseq,
              const kg_mrs_cfg *cfg, kg_err *err)
{
    kg_mrs_cfg def;
    if (!cfg) {
        kg_mrs_cfg_default(&def);
        cfg = &def;
    }
    if (!isfinite(cfg->lo) || !isfinite(cfg->hi) || cfg->lo > cfg->hi)
        return kg_errf(err, KG_EINVAL,
                       "mrs: need finite lo <= hi (got lo=%g, hi=%g)", cfg->lo,
                       cfg->hi);
    if (!isfinite(cfg->veto) || cfg->veto < 0)
        return kg_errf(err, KG_EINVAL,
                       "mrs: veto must be finite and >= 0 (got %g)", cfg->veto);
    if (nseq == 0)
        return 0;
    if (!ratio || !keep || !off)
        return kg_errf(err, KG_EINVAL, "mrs: NULL array");
    for (size_t s = 0; s < nseq; s++)
        if (off[s + 1] < off[s])
            return kg_errf(err, KG_EINVAL,
                           "mrs: off[%zu] = %zu < off[%zu] = %zu", s + 1,
                           off[s + 1], s, off[s]);
    if (off[nseq] > off[0] && (!lp_train || !lp_rollout))
        return kg_errf(err, KG_EINVAL, "mrs: NULL logprob array");
    for (size_t k = off[0]; k < off[nseq]; k++) {
        if (!isfinite(lp_train[k]))
            return kg_errf(err, KG_ENONFINITE,
                           "mrs: lp_train[%zu] is not finite", k);
        if (!isfinite(lp_rollout[k]))
            return kg_errf(err, KG_ENONFINITE,
                           "mrs: lp_rollout[%zu] is not finite", k);
    }

    for (size_t s = 0; s < nseq; s++) {
        size_t b = off[s], e = off[s + 1];
        if (b == e) {
            ratio[s] = 1.0;
            keep[s] = 1;
            continue;
        }
        double sum = 0.0, dmin = INFINITY;
        for (size_t k = b; k < e; k++) {
            double d = lp_train[k] - lp_rollout[k];
            sum += d;
            dmin = d < dmin ? d : dmin;
        }
        double r = exp(sum / (double)(e - b));
        ratio[s] = r;
        keep[s] = r >= cfg->lo && r <= cfg->hi && !(exp(dmin) < cfg->veto);
    }
    return 0;
}

/* ---- profiling-based rejection sampling ------------------------------- */

/*
 * SplitMix64 (Steele, Lea, Flood 2014): the (i+1)-th output of the
 * generator started at state seed, so draws for different i are independent
 * of call order. The top 53 bits give a double in [0, 1).
 */
double kg_rl_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + UINT64_C(0x9e3779b97f4a7c15) * (i + 1);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* pr must be in [0, 1] (it is a coverage). keep[i] = u_i < p[i], so p = 0
 * never keeps and p = 1 always keeps. */
int kg_rl_prs(double *p, uint8_t *keep, const double *pr, size_t n, double tau,
              double s, uint64_t seed, kg_err *err)
{
    if (!isfinite(tau))
        return kg_errf(err, KG_EINVAL, "prs: tau must be finite");
    if (!isfinite(s) || s < 0)
        return kg_errf(err, KG_EINVAL,
                       "prs: s must be finite and >= 0 (got %g)", s);
    if (n == 0)
        return 0;
    if (!p || !pr)
        return kg_errf(err, KG_EINVAL, "prs: NULL array");
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(pr[i]))
            return kg_errf(err, KG_ENONFINITE, "prs: pr[%zu] is not finite", i);
        if (pr[i] < 0 || pr[i] > 1)
            return kg_errf(err, KG_EINVAL,
                           "prs: pr[%zu] = %g is outside [0, 1]", i, pr[i]);
    }
    for (size_t i = 0; i < n; i++) {
        double q;
        if (s > 0)
            q = fmin(fmax((pr[i] - tau) / s, 0.0), 1.0);
        else
            q = pr[i] >= tau ? 1.0 : 0.0;
        p[i] = q;
        if (keep)
            keep[i] = kg_rl_uniform(seed, i) < q;
    }
    return 0;
}
