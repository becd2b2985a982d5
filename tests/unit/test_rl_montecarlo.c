/*
 * test_rl_montecarlo.c - the bias of GRPO and the unbiasedness of TRLOO,
 * measured on a softmax bandit.
 *
 * Policy pi = softmax(theta) over M arms; arm a pays r_a plus zero-mean
 * noise. J = sum_a pi_a r_a and its exact gradient is
 *     dJ/dtheta_k = pi_k (r_k - J),
 * while grad log pi(a) = e_a - pi. One group draws N arms a_1..a_N with
 * rewards R_i and forms the policy-gradient estimate
 *     g = (1/N) sum_i A_i (e_{a_i} - pi)
 * with A from libkgym (T = 1, every entry valid):
 *   GRPO (norm_std = 0): A_i = R_i - mean(R)     -> E[g] = (1 - 1/N) dJ
 *   TRLOO:               A_i = R_i - mean_{j!=i} R_j  -> E[g] = dJ.
 * (GRPO's baseline contains R_i itself with weight 1/N, which cancels that
 * fraction of the signal; the other samples are independent of a_i, and
 * E[grad log pi] = 0 removes them.)
 *
 * Criterion: with n groups, ghat is the mean of the per-group g. The test
 * requires a relative error of at most 3% both in norm,
 * ||ghat - c dJ||_2 <= 0.03 ||c dJ||_2 (c = 1 - 1/N or 1), and in every
 * component, |ghat_k - c dJ_k| <= 0.03 |c dJ_k| (the bandit is chosen with
 * no component of dJ near 0, where a relative criterion is ill-posed). For
 * that to mean something, the Monte Carlo standard error (of each component,
 * and sqrt of their summed variances for the norm) must be at most a fifth
 * of the tolerance: the pass is not luck of the seed, and a correct
 * estimator could fail only at > 5 sigma. For power, GRPO must also
 * fail the unbiased criterion ||ghat - dJ|| <= 0.03 ||dJ|| (its bias is
 * 25% at N = 4, 6.25% at N = 16). With T = 1 and every sample valid the
 * two advantages are exactly proportional (TRLOO = N/(N-1) GRPO), so on the
 * same draws both relative errors coincide; what the test establishes is
 * which multiple of dJ each one estimates. The PRNG is the test's own
 * (xoshiro256**, seeded by SplitMix64), with a fixed seed, so the run is
 * deterministic.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "kgym/rl.h"

enum { M = 4, NMAX = 16 };

static const double theta[M] = {0.4, -0.2, 0.1, -0.6};
static const double arm_reward[M] = {1.0, 3.0, 0.0, 2.0};
static const double noise = 0.5; /* reward = arm_reward + U(-0.5, 0.5) */

struct rng {
    uint64_t s[4];
};

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

static void rng_seed(struct rng *r, uint64_t seed)
{
    for (int k = 0; k < 4; k++) {
        uint64_t z = (seed += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        r->s[k] = z ^ (z >> 31);
    }
}

static double rng_unif(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

struct result {
    double ghat[2][M]; /* [0] GRPO, [1] TRLOO */
    double se[2][M];   /* standard error of each component */
    double se_norm[2]; /* sqrt of the summed variances */
};

/* n groups of N samples; accumulates both estimators on the same draws. */
static void simulate(struct result *res, int N, long n, uint64_t seed)
{
    double pi[M], cdf[M], z = 0;
    for (int k = 0; k < M; k++)
        z += exp(theta[k]);
    for (int k = 0; k < M; k++) {
        pi[k] = exp(theta[k]) / z;
        cdf[k] = (k ? cdf[k - 1] : 0) + pi[k];
    }

    struct rng rng;
    rng_seed(&rng, seed);
    double sum[2][M] = {{0}}, sq[2][M] = {{0}};
    double R[NMAX], A[NMAX];
    int arm[NMAX];
    uint8_t valid[NMAX];
    for (int i = 0; i < N; i++)
        valid[i] = 1;

    for (long it = 0; it < n; it++) {
        for (int i = 0; i < N; i++) {
            double u = rng_unif(&rng);
            int a = 0;
            while (a < M - 1 && u >= cdf[a])
                a++;
            arm[i] = a;
            R[i] = arm_reward[a] + noise * (2 * rng_unif(&rng) - 1);
        }
        for (int est = 0; est < 2; est++) {
            int rc = est == 0 ? kg_rl_grpo(A, R, valid, N, 1, 0, 0, NULL)
                              : kg_rl_trloo(A, R, valid, N, 1, NULL);
            assert_int_equal(rc, 0);
            /* g_k = (1/N) sum_i A_i ([a_i == k] - pi_k) */
            double asum = 0, g[M] = {0};
            for (int i = 0; i < N; i++) {
                asum += A[i];
                g[arm[i]] += A[i];
            }
            for (int k = 0; k < M; k++) {
                double gk = (g[k] - asum * pi[k]) / N;
                sum[est][k] += gk;
                sq[est][k] += gk * gk;
            }
        }
    }
    for (int est = 0; est < 2; est++) {
        double var = 0;
        for (int k = 0; k < M; k++) {
            double mean = sum[est][k] / n;
            double vk = (sq[est][k] / n - mean * mean) / (n - 1);
            res->ghat[est][k] = mean;
            res->se[est][k] = sqrt(vk);
            var += vk;
        }
        res->se_norm[est] = sqrt(var);
    }
}

static double rel_err(const double *ghat, const double *dJ, double c)
{
    double num = 0, den = 0;
    for (int k = 0; k < M; k++) {
        num += (ghat[k] - c * dJ[k]) * (ghat[k] - c * dJ[k]);
        den += c * dJ[k] * c * dJ[k];
    }
    return sqrt(num / den);
}

static void check_bias(int N, long n, uint64_t seed)
{
    double pi[M], z = 0, J = 0, dJ[M], norm = 0;
    for (int k = 0; k < M; k++)
        z += exp(theta[k]);
    for (int k = 0; k < M; k++) {
        pi[k] = exp(theta[k]) / z;
        J += pi[k] * arm_reward[k];
    }
    for (int k = 0; k < M; k++) {
        dJ[k] = pi[k] * (arm_reward[k] - J);
        norm += dJ[k] * dJ[k];
    }
    norm = sqrt(norm);

    struct result res;
    simulate(&res, N, n, seed);
    const double tol = 0.03, c_grpo = 1.0 - 1.0 / N;
    double e_grpo = rel_err(res.ghat[0], dJ, c_grpo);
    double e_trloo = rel_err(res.ghat[1], dJ, 1.0);
    double e_grpo_unbiased = rel_err(res.ghat[0], dJ, 1.0);
    /* the fraction of dJ that each estimator recovers, <ghat, dJ>/|dJ|^2 */
    double proj[2] = {0, 0};
    for (int est = 0; est < 2; est++)
        for (int k = 0; k < M; k++)
            proj[est] += res.ghat[est][k] * dJ[k] / (norm * norm);

    printf("N=%2d groups=%ld |dJ|=%.5f  GRPO: %.4f of dJ (1-1/N=%.4f), "
           "rel.err %.4f, se %.2e  TRLOO: %.4f of dJ, rel.err %.4f, "
           "se %.2e\n",
           N, n, norm, proj[0], c_grpo, e_grpo, res.se_norm[0], proj[1],
           e_trloo, res.se_norm[1]);
    for (int k = 0; k < M; k++)
        printf("   k=%d dJ=% .5f  GRPO % .5f (want % .5f, se %.1e)  "
               "TRLOO % .5f (se %.1e)\n",
               k, dJ[k], res.ghat[0][k], c_grpo * dJ[k], res.se[0][k],
               res.ghat[1][k], res.se[1][k]);
    fflush(stdout);

    /* The tolerance is at least 5 standard errors ... */
    assert_true(res.se_norm[0] * 5 <= tol * c_grpo * norm);
    assert_true(res.se_norm[1] * 5 <= tol * norm);
    for (int k = 0; k < M; k++) {
        assert_true(res.se[0][k] * 5 <= tol * c_grpo * fabs(dJ[k]));
        assert_true(res.se[1][k] * 5 <= tol * fabs(dJ[k]));
    }
    /* ... GRPO estimates (1 - 1/N) dJ, TRLOO estimates dJ ... */
    assert_true(e_grpo <= tol);
    assert_true(e_trloo <= tol);
    for (int k = 0; k < M; k++) {
        double cg = c_grpo * dJ[k];
        assert_true(fabs(res.ghat[0][k] - cg) <= tol * fabs(cg));
        assert_true(fabs(res.ghat[1][k] - dJ[k]) <= tol * fabs(dJ[k]));
    }
    /* ... and GRPO is not an unbiased estimate of dJ. */
    assert_true(e_grpo_unbiased > tol);
}

static void test_bias_n4(void **state)
{
    (void)state;
    check_bias(4, 800000, 20261129);
}

static void test_bias_n16(void **state)
{
    (void)state;
    check_bias(16, 400000, 1129);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bias_n4),
        cmocka_unit_test(test_bias_n16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
