/*
 * test_rl.c - libkgym's RL mathematics against hand-computed values (the
 * paper's worked numbers among them) and against plain second
 * implementations written here from the definitions.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kgym/rl.h"

static void close_to(double got, double want, double tol, const char *what,
                     const char *file, int line)
{
    if (!(fabs(got - want) <= tol)) {
        print_error("%s: got %.17g, want %.17g (tol %g)\n", what, got, want,
                    tol);
        _fail(file, line);
    }
}
#define assert_close(got, want, tol)                                           \
    close_to((got), (want), (tol), #got, __FILE__, __LINE__)

/* The error code is rc and the message contains needle. */
#define assert_err(rc, code, e, needle)                                        \
    do {                                                                       \
        int rc_ = (rc);                                                        \
        if (rc_ != (code))                                                     \
            print_error("rc %s (%s)\n", kg_strerror(rc_), (e).msg);            \
        assert_int_equal(rc_, (code));                                         \
        if (!strstr((e).msg, (needle)))                                        \
            print_error("message \"%s\" lacks \"%s\"\n", (e).msg, (needle));   \
        assert_non_null(strstr((e).msg, (needle)));                            \
    } while (0)

/* A small PRNG of the test's own (xorshift64*), for random cases. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(2685821657736338717);
}
static double rng_unif(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}
static int rng_int(uint64_t *s, int n)
{
    return (int)(rng_next(s) % (uint64_t)n);
}

/* ---- reward ------------------------------------------------------------ */

static void test_defaults(void **state)
{
    (void)state;
    kg_reward_cfg rc;
    kg_reward_cfg_default(&rc);
    assert_close(rc.cap, 3.0, 0);
    assert_close(rc.w_pr, 0.0, 0);
    assert_close(rc.penalty, 0.0, 0);
    kg_mrs_cfg mc;
    kg_mrs_cfg_default(&mc);
    assert_close(mc.lo, 0.999, 0);
    assert_close(mc.hi, 1.001, 0);
    assert_close(mc.veto, 1e-4, 0);
    kg_reward_cfg_default(NULL); /* tolerated */
    kg_mrs_cfg_default(NULL);
}

/*
 * The paper's example: a lazy kernel (correct, speedup 1.01) and a fused
 * one (correct, 2.94): R = 1 + 1.01 = 2.01 and 1 + 2.94 = 3.94 (w_pr = 0).
 * Then: incorrect -> 0, hacked -> 0 even when "fast", capped at 3 -> 4.
 */
static void test_reward_paper(void **state)
{
    (void)state;
    kg_err e = {{0}};
    uint8_t correct[] = {1, 1, 0, 1, 1, 1};
    uint8_t hacked[] = {0, 0, 0, 1, 0, 0};
    double speedup[] = {1.01, 2.94, NAN, 9.0, 5.0, 0.0};
    double R[6];
    assert_int_equal(
        kg_rl_reward(R, correct, hacked, speedup, NULL, 6, NULL, &e), 0);
    assert_close(R[0], 2.01, 1e-15);
    assert_close(R[1], 3.94, 1e-15);
    assert_close(R[2], 0.0, 0);
    assert_close(R[3], 0.0, 0);
    assert_close(R[4], 4.0, 0); /* 1 + min(5, 3) */
    assert_close(R[5], 1.0, 0); /* correct but no faster than 0 */

    /* w_pr = 1 adds the profiling ratio; penalty replaces 0; no cap. */
    kg_reward_cfg cfg = {INFINITY, 1.0, -0.5};
    double pr[] = {0.25, 0.9, NAN, NAN, 1.0, 0.0};
    assert_int_equal(kg_rl_reward(R, correct, hacked, speedup, pr, 6, &cfg, &e),
                     0);
    assert_close(R[0], 1 + 1.01 + 0.25, 1e-15);
    assert_close(R[1], 1 + 2.94 + 0.9, 1e-15);
    assert_close(R[2], -0.5, 0);
    assert_close(R[3], -0.5, 0);
    assert_close(R[4], 1 + 5.0 + 1.0, 0);
    assert_close(R[5], 1.0, 0);

    /* Nothing to do: n = 0 accepts NULL arrays. */
    assert_int_equal(kg_rl_reward(NULL, NULL, NULL, NULL, NULL, 0, NULL, &e),
                     0);
}

static void test_reward_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    uint8_t c[] = {1, 1, 1, 1}, h[] = {0, 0, 0, 0};
    double sp[] = {1, 2, 3, NAN}, pr[] = {0.5, 0.5, 0.5, 0.5}, R[4];
    kg_reward_cfg cfg;
    kg_reward_cfg_default(&cfg);

    assert_err(kg_rl_reward(R, c, h, sp, NULL, 4, &cfg, &e), KG_ENONFINITE, e,
               "speedup[3] is not finite");
    sp[3] = INFINITY;
    assert_err(kg_rl_reward(R, c, h, sp, NULL, 4, &cfg, &e), KG_ENONFINITE, e,
               "speedup[3] is not finite");
    sp[3] = -1;
    assert_err(kg_rl_reward(R, c, h, sp, NULL, 4, &cfg, &e), KG_EINVAL, e,
               "speedup[3] is negative");
    sp[3] = 4;
    c[2] = 2;
    assert_err(kg_rl_reward(R, c, h, sp, NULL, 4, &cfg, &e), KG_EINVAL, e,
               "correct[2]");
    c[2] = 1;
    h[1] = 7;
    assert_err(kg_rl_reward(R, c, h, sp, NULL, 4, &cfg, &e), KG_EINVAL, e,
               "hacked[1]");
    h[1] = 0;

    cfg.w_pr = 1;
    assert_err(kg_rl_reward(R, c, h, sp, NULL, 4, &cfg, &e), KG_EINVAL, e,
               "pr is NULL");
    pr[0] = NAN;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &cfg, &e), KG_ENONFINITE, e,
               "pr[0] is not finite");
    pr[0] = 1.5;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &cfg, &e), KG_EINVAL, e,
               "pr[0]");
    pr[0] = 0.5;
    assert_int_equal(kg_rl_reward(R, c, h, sp, pr, 4, &cfg, &e), 0);

    kg_reward_cfg bad = cfg;
    bad.cap = -1;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &bad, &e), KG_EINVAL, e, "cap");
    bad.cap = NAN;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &bad, &e), KG_EINVAL, e, "cap");
    bad = cfg;
    bad.w_pr = -1;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &bad, &e), KG_EINVAL, e,
               "w_pr");
    bad.w_pr = INFINITY;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &bad, &e), KG_EINVAL, e,
               "w_pr");
    bad = cfg;
    bad.penalty = NAN;
    assert_err(kg_rl_reward(R, c, h, sp, pr, 4, &bad, &e), KG_EINVAL, e,
               "penalty");
    assert_err(kg_rl_reward(NULL, c, h, sp, pr, 4, &cfg, &e), KG_EINVAL, e,
               "NULL");
    assert_err(kg_rl_reward(R, c, NULL, sp, pr, 4, &cfg, &e), KG_EINVAL, e,
               "NULL");
    /* err may be NULL. */
    assert_int_equal(kg_rl_reward(R, c, h, sp, pr, 4, &bad, NULL), KG_EINVAL);
}

/* ---- returns ------------------------------------------------------------ */

/* Straight from the definition: G[t] = sum over valid t' >= t of
 * gamma^(t'-t) R[t'] (pow(0, 0) = 1). */
static void returns_ref(double *G, const double *R, const uint8_t *valid, int K,
                        int T, double gamma)
{
    for (int i = 0; i < K; i++)
        for (int t = 0; t < T; t++) {
            double g = 0;
            if (valid[i * T + t])
                for (int u = t; u < T; u++)
                    if (valid[i * T + u])
                        g += pow(gamma, u - t) * R[i * T + u];
            G[i * T + t] = g;
        }
}

static void test_returns_hand(void **state)
{
    (void)state;
    kg_err e = {{0}};
    /* Row 0: all valid. Row 1: a hole at turn 1 (R there is garbage).
     * Row 2: all invalid. */
    double R[] = {1, 2, 4, 1, NAN, 4, NAN, NAN, NAN};
    uint8_t v[] = {1, 1, 1, 1, 0, 1, 0, 0, 0};
    double G[9];

    /* gamma = 0.5: row 0: G2 = 4, G1 = 2 + 0.5*4 = 4,
     * G0 = 1 + 0.5*2 + 0.25*4 = 3. Row 1: G2 = 4, G1 = 0 (invalid),
     * G0 = 1 + 0.25*4 = 2 (the hole keeps its place in the discount). */
    assert_int_equal(kg_rl_returns(G, R, v, 3, 3, 0.5, &e), 0);
    double want05[] = {3, 4, 4, 2, 0, 4, 0, 0, 0};
    for (int x = 0; x < 9; x++)
        assert_close(G[x], want05[x], 0);

    /* gamma = 1: plain sums of what is left. */
    assert_int_equal(kg_rl_returns(G, R, v, 3, 3, 1.0, &e), 0);
    double want1[] = {7, 6, 4, 5, 0, 4, 0, 0, 0};
    for (int x = 0; x < 9; x++)
        assert_close(G[x], want1[x], 0);

    /* gamma = 0: G = R where valid. */
    assert_int_equal(kg_rl_returns(G, R, v, 3, 3, 0.0, &e), 0);
    double want0[] = {1, 2, 4, 1, 0, 4, 0, 0, 0};
    for (int x = 0; x < 9; x++)
        assert_close(G[x], want0[x], 0);

    /* In place (G aliases R). */
    double RG[] = {1, 2, 4};
    uint8_t v3[] = {1, 1, 1};
    assert_int_equal(kg_rl_returns(RG, RG, v3, 1, 3, 0.5, &e), 0);
    assert_close(RG[0], 3, 0);
    assert_close(RG[1], 4, 0);
    assert_close(RG[2], 4, 0);
}

static void test_returns_random(void **state)
{
    (void)state;
    kg_err e = {{0}};
    uint64_t s = 12345;
    double R[600], G[600], W[600];
    uint8_t v[600];
    const double gammas[] = {0, 0.3, 0.9, 1};
    for (int rep = 0; rep < 200; rep++) {
        int K = 1 + rng_int(&s, 8), T = 1 + rng_int(&s, 70);
        double gamma = gammas[rep % 4];
        for (int x = 0; x < K * T; x++) {
            v[x] = rng_unif(&s) < 0.7;
            R[x] = v[x] ? 4 * rng_unif(&s) - 1 : NAN;
        }
        assert_int_equal(kg_rl_returns(G, R, v, K, T, gamma, &e), 0);
        returns_ref(W, R, v, K, T, gamma);
        for (int x = 0; x < K * T; x++)
            assert_close(G[x], W[x], 1e-12 * (1 + fabs(W[x])));
    }
}

static void test_returns_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double R[] = {1, 2, NAN, 4}, G[4];
    uint8_t v[] = {1, 1, 1, 1};
    assert_err(kg_rl_returns(G, R, v, 2, 2, 1, &e), KG_ENONFINITE, e,
               "R[2] (rollout 1, turn 0) is not finite");
    R[2] = -INFINITY;
    assert_err(kg_rl_returns(G, R, v, 2, 2, 1, &e), KG_ENONFINITE, e, "R[2]");
    v[2] = 0; /* unused now */
    assert_int_equal(kg_rl_returns(G, R, v, 2, 2, 1, &e), 0);
    v[2] = 3;
    assert_err(kg_rl_returns(G, R, v, 2, 2, 1, &e), KG_EINVAL, e, "valid[2]");
    v[2] = 0;
    assert_err(kg_rl_returns(G, R, v, 2, 2, -0.1, &e), KG_EINVAL, e, "gamma");
    assert_err(kg_rl_returns(G, R, v, 2, 2, 1.01, &e), KG_EINVAL, e, "gamma");
    assert_err(kg_rl_returns(G, R, v, 2, 2, NAN, &e), KG_EINVAL, e, "gamma");
    assert_err(kg_rl_returns(G, R, v, 0, 2, 1, &e), KG_EINVAL, e, "K");
    assert_err(kg_rl_returns(G, R, v, 2, -1, 1, &e), KG_EINVAL, e, "T");
    assert_err(kg_rl_returns(G, NULL, v, 2, 2, 1, &e), KG_EINVAL, e, "NULL");
    assert_err(kg_rl_returns(G, R, NULL, 2, 2, 1, &e), KG_EINVAL, e, "NULL");
    double big[] = {1e308, 1e308};
    uint8_t v2[] = {1, 1};
    assert_err(kg_rl_returns(G, big, v2, 1, 2, 1, &e), KG_ENONFINITE, e,
               "overflows");
}

/* ---- advantages -------------------------------------------------------- */

/* GRPO from the definition (two loops per turn, std as a population std). */
static void grpo_ref(double *A, const double *G, const uint8_t *v, int K, int T,
                     int norm_std, double eps)
{
    for (int t = 0; t < T; t++) {
        int n = 0;
        double sum = 0, sq = 0;
        for (int i = 0; i < K; i++)
            if (v[i * T + t]) {
                n++;
                sum += G[i * T + t];
            }
        double mean = n ? sum / n : 0;
        for (int i = 0; i < K; i++)
            if (v[i * T + t])
                sq += (G[i * T + t] - mean) * (G[i * T + t] - mean);
        double sd = n ? sqrt(sq / n) : 0;
        for (int i = 0; i < K; i++) {
            double a = 0;
            if (v[i * T + t] && n > 1) {
                a = G[i * T + t] - mean;
                if (norm_std)
                    a = sd + eps > 0 ? a / (sd + eps) : 0;
            }
            A[i * T + t] = a;
        }
    }
}

/* TRLOO by an explicit leave-one-out mean (not the N/(N-1) identity). */
static void trloo_ref(double *A, const double *G, const uint8_t *v, int K,
                      int T)
{
    for (int t = 0; t < T; t++)
        for (int i = 0; i < K; i++) {
            int n = 0;
            double others = 0;
            for (int j = 0; j < K; j++)
                if (j != i && v[j * T + t]) {
                    n++;
                    others += G[j * T + t];
                }
            A[i * T + t] =
                v[i * T + t] && n > 0 ? G[i * T + t] - others / n : 0;
        }
}

/*
 * The paper's example: a group of 15 with one return of 3 and fourteen of
 * 1. mean = 17/15. GRPO: best 3 - 17/15 = 28/15, others 1 - 17/15 = -2/15.
 * TRLOO: best 3 - 14/14 = 2 (= 15/14 * 28/15), others 1 - 16/14 = -1/7
 * (= 15/14 * -2/15). GRPO with std: population variance 56/225, so
 * best 28/sqrt(56) = sqrt(14), others -2/sqrt(56) = -1/sqrt(14).
 */
static void test_adv_paper(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double G[15], A[15];
    uint8_t v[15];
    for (int i = 0; i < 15; i++) {
        G[i] = i == 0 ? 3 : 1;
        v[i] = 1;
    }
    assert_int_equal(kg_rl_grpo(A, G, v, 15, 1, 0, 0, &e), 0);
    assert_close(A[0], 28.0 / 15, 1e-14);
    for (int i = 1; i < 15; i++)
        assert_close(A[i], -2.0 / 15, 1e-14);

    assert_int_equal(kg_rl_trloo(A, G, v, 15, 1, &e), 0);
    assert_close(A[0], 2.0, 1e-14);
    for (int i = 1; i < 15; i++)
        assert_close(A[i], -1.0 / 7, 1e-14);

    assert_int_equal(kg_rl_grpo(A, G, v, 15, 1, 1, 0, &e), 0);
    assert_close(A[0], sqrt(14.0), 1e-13);
    for (int i = 1; i < 15; i++)
        assert_close(A[i], -1 / sqrt(14.0), 1e-14);
    /* verl's eps: A = (G - mean) / (std + 1e-6). */
    assert_int_equal(kg_rl_grpo(A, G, v, 15, 1, 1, 1e-6, &e), 0);
    assert_close(A[0], (28.0 / 15) / (sqrt(56.0) / 15 + 1e-6), 1e-13);
}

/* Small groups: N_t = 0, 1, 2 per turn, holes, NaN under invalid entries. */
static void test_adv_small_groups(void **state)
{
    (void)state;
    kg_err e = {{0}};
    /* K = 3 rollouts, T = 4 turns. Turn 0: 3 valid {1, 2, 6};
     * turn 1: 2 valid {5, 1}; turn 2: 1 valid {7}; turn 3: none. */
    double G[] = {1, 5, NAN, NAN, 2, NAN, 7, NAN, 6, 1, NAN, NAN};
    uint8_t v[] = {1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 0};
    double A[12];

    /* GRPO: turn 0 mean 3 -> {-2, -1, 3}; turn 1 mean 3 -> {2, -2}. */
    assert_int_equal(kg_rl_grpo(A, G, v, 3, 4, 0, 0, &e), 0);
    double wg[] = {-2, 2, 0, 0, -1, 0, 0, 0, 3, -2, 0, 0};
    for (int x = 0; x < 12; x++)
        assert_close(A[x], wg[x], 1e-15);

    /* TRLOO: turn 0: 1 - 4, 2 - 3.5, 6 - 1.5; turn 1: N = 2 is the plain
     * difference, 5 - 1 and 1 - 5; N = 1 and N = 0 give 0. */
    assert_int_equal(kg_rl_trloo(A, G, v, 3, 4, &e), 0);
    double wt[] = {-3, 4, 0, 0, -1.5, 0, 0, 0, 4.5, -4, 0, 0};
    for (int x = 0; x < 12; x++)
        assert_close(A[x], wt[x], 1e-15);

    /* GRPO-std: turn 0 variance (4+1+9)/3, turn 1 std 2 -> {1, -1}. */
    assert_int_equal(kg_rl_grpo(A, G, v, 3, 4, 1, 0, &e), 0);
    double sd0 = sqrt(14.0 / 3);
    double ws[] = {-2 / sd0, 1, 0, 0, -1 / sd0, 0, 0, 0, 3 / sd0, -1, 0, 0};
    for (int x = 0; x < 12; x++)
        assert_close(A[x], ws[x], 1e-15);

    /* A constant group: std 0; with eps = 0 the advantage is 0, not NaN. */
    double C[] = {2, 2, 2};
    uint8_t vc[] = {1, 1, 1};
    assert_int_equal(kg_rl_grpo(A, C, vc, 3, 1, 1, 0, &e), 0);
    for (int x = 0; x < 3; x++)
        assert_close(A[x], 0, 0);
    assert_int_equal(kg_rl_trloo(A, C, vc, 3, 1, &e), 0);
    for (int x = 0; x < 3; x++)
        assert_close(A[x], 0, 0);

    /* K = 1: a group of one has no baseline: 0. */
    double one[] = {5, 6};
    uint8_t v1[] = {1, 1};
    assert_int_equal(kg_rl_trloo(A, one, v1, 1, 2, &e), 0);
    assert_close(A[0], 0, 0);
    assert_close(A[1], 0, 0);
    assert_int_equal(kg_rl_grpo(A, one, v1, 1, 2, 1, 1e-6, &e), 0);
    assert_close(A[0], 0, 0);

    /* All invalid: all 0 (G is never read). */
    double nan4[] = {NAN, NAN, NAN, NAN};
    uint8_t v0[] = {0, 0, 0, 0};
    assert_int_equal(kg_rl_trloo(A, nan4, v0, 2, 2, &e), 0);
    assert_int_equal(kg_rl_grpo(A, nan4, v0, 2, 2, 1, 0, &e), 0);
    for (int x = 0; x < 4; x++)
        assert_close(A[x], 0, 0);
}

/* Random groups, T up to 150 (several turn blocks), against the refs. */
static void test_adv_random(void **state)
{
    (void)state;
    kg_err e = {{0}};
    enum { MAXN = 20 * 150 };
    static double G[MAXN], A[MAXN], W[MAXN];
    static uint8_t v[MAXN];
    uint64_t s = 987654321;
    for (int rep = 0; rep < 300; rep++) {
        int K = 1 + rng_int(&s, 20), T = 1 + rng_int(&s, 150);
        double pvalid = rng_unif(&s);
        for (int x = 0; x < K * T; x++) {
            v[x] = rng_unif(&s) < pvalid;
            G[x] = v[x] ? 10 * rng_unif(&s) - 3 : NAN;
        }
        assert_int_equal(kg_rl_trloo(A, G, v, K, T, &e), 0);
        trloo_ref(W, G, v, K, T);
        for (int x = 0; x < K * T; x++)
            assert_close(A[x], W[x], 1e-12);
        for (int norm = 0; norm < 2; norm++) {
            double eps = norm ? 1e-6 : 0;
            assert_int_equal(kg_rl_grpo(A, G, v, K, T, norm, eps, &e), 0);
            grpo_ref(W, G, v, K, T, norm, eps);
            for (int x = 0; x < K * T; x++)
                assert_close(A[x], W[x], 1e-10 * (1 + fabs(W[x])));
        }
    }
}

static void test_adv_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double G[] = {1, 2, 3, NAN}, A[4];
    uint8_t v[] = {1, 1, 1, 1};
    assert_err(kg_rl_trloo(A, G, v, 2, 2, &e), KG_ENONFINITE, e,
               "G[3] (rollout 1, turn 1) is not finite");
    assert_err(kg_rl_grpo(A, G, v, 2, 2, 0, 0, &e), KG_ENONFINITE, e, "G[3]");
    assert_err(kg_rl_grpo(A, G, v, 2, 2, 1, 0, &e), KG_ENONFINITE, e, "G[3]");
    G[3] = INFINITY;
    assert_err(kg_rl_trloo(A, G, v, 2, 2, &e), KG_ENONFINITE, e, "G[3]");
    v[3] = 0;
    assert_int_equal(kg_rl_trloo(A, G, v, 2, 2, &e), 0);
    v[1] = 2;
    assert_err(kg_rl_trloo(A, G, v, 2, 2, &e), KG_EINVAL, e, "valid[1]");
    assert_err(kg_rl_grpo(A, G, v, 2, 2, 0, 0, &e), KG_EINVAL, e, "valid[1]");
    v[1] = 1;
    assert_err(kg_rl_grpo(A, G, v, 2, 2, 1, -1e-6, &e), KG_EINVAL, e, "eps");
    assert_err(kg_rl_grpo(A, G, v, 2, 2, 1, NAN, &e), KG_EINVAL, e, "eps");
    assert_err(kg_rl_grpo(A, G, v, 2, 2, 1, INFINITY, &e), KG_EINVAL, e, "eps");
    assert_err(kg_rl_trloo(A, G, v, 0, 2, &e), KG_EINVAL, e, "K");
    assert_err(kg_rl_trloo(A, G, v, 2, 0, &e), KG_EINVAL, e, "T");
    assert_err(kg_rl_grpo(A, G, v, -3, 2, 0, 0, &e), KG_EINVAL, e, "K");
    assert_err(kg_rl_trloo(NULL, G, v, 2, 2, &e), KG_EINVAL, e, "NULL");
    assert_err(kg_rl_grpo(A, G, NULL, 2, 2, 0, 0, &e), KG_EINVAL, e, "NULL");
    double big[] = {1e308, 1e308};
    uint8_t v2[] = {1, 1};
    assert_err(kg_rl_trloo(A, big, v2, 2, 1, &e), KG_ENONFINITE, e, "overflow");
}

/* ---- MRS ----------------------------------------------------------------- */

/*
 * Sequences (tokens start at off[0] = 1; token 0 is garbage and not read):
 *  s0: d = {0, 0}               ratio 1, kept
 *  s1: d = {0.001, 0.001}       ratio e^0.001 = 1.0010005 > 1.001, dropped
 *  s2: d = {0.0005, -0.0005, 0.0009}   ratio e^0.0003, kept
 *  s3: empty                    ratio 1, kept
 *  s4: d = {10, -10}            ratio 1 but e^-10 = 4.5e-5 < 1e-4: vetoed
 *  s5: d = {9, -9}              ratio 1, e^-9 = 1.2e-4 >= 1e-4: kept
 */
static void test_mrs_hand(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double rollout[] = {NAN,  -1,   -2,  -1, -1,  -0.5,
                        -0.5, -0.5, -12, -1, -11, -1};
    double d[] = {NAN,     0,      0,  0.001, 0.001, 0.0005,
                  -0.0005, 0.0009, 10, -10,   9,     -9};
    double train[12];
    for (int k = 0; k < 12; k++)
        train[k] = rollout[k] + d[k];
    size_t off[] = {1, 3, 5, 8, 8, 10, 12};
    double ratio[6];
    uint8_t keep[6];
    assert_int_equal(kg_rl_mrs(ratio, keep, train, rollout, off, 6, NULL, &e),
                     0);
    assert_close(ratio[0], 1, 0);
    assert_close(ratio[1], exp(0.001), 1e-12);
    assert_close(ratio[2], exp(0.0003), 1e-12);
    assert_close(ratio[3], 1, 0);
    assert_close(ratio[4], 1, 1e-12);
    assert_close(ratio[5], 1, 1e-12);
    uint8_t want[] = {1, 0, 1, 1, 0, 1};
    for (int s = 0; s < 6; s++)
        assert_int_equal(keep[s], want[s]);

    /* veto 0 never fires; wider bounds keep s1. */
    kg_mrs_cfg cfg = {0.99, 1.01, 0};
    assert_int_equal(kg_rl_mrs(ratio, keep, train, rollout, off, 6, &cfg, &e),
                     0);
    for (int s = 0; s < 6; s++)
        assert_int_equal(keep[s], 1);
    assert_int_equal(kg_rl_mrs(NULL, NULL, NULL, NULL, NULL, 0, &cfg, &e), 0);
}

static void test_mrs_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double tr[] = {-1, -2, -3}, ro[] = {-1, -2, -3}, ratio[2];
    uint8_t keep[2];
    size_t off[] = {0, 2, 3};
    ro[2] = -INFINITY;
    assert_err(kg_rl_mrs(ratio, keep, tr, ro, off, 2, NULL, &e), KG_ENONFINITE,
               e, "lp_rollout[2] is not finite");
    ro[2] = -3;
    tr[1] = NAN;
    assert_err(kg_rl_mrs(ratio, keep, tr, ro, off, 2, NULL, &e), KG_ENONFINITE,
               e, "lp_train[1] is not finite");
    tr[1] = -2;
    size_t bad_off[] = {0, 2, 1};
    assert_err(kg_rl_mrs(ratio, keep, tr, ro, bad_off, 2, NULL, &e), KG_EINVAL,
               e, "off[2]");
    kg_mrs_cfg cfg = {1.1, 1.0, 1e-4};
    assert_err(kg_rl_mrs(ratio, keep, tr, ro, off, 2, &cfg, &e), KG_EINVAL, e,
               "lo <= hi");
    cfg = (kg_mrs_cfg){NAN, 1.0, 1e-4};
    assert_err(kg_rl_mrs(ratio, keep, tr, ro, off, 2, &cfg, &e), KG_EINVAL, e,
               "lo");
    cfg = (kg_mrs_cfg){0.9, 1.1, -1};
    assert_err(kg_rl_mrs(ratio, keep, tr, ro, off, 2, &cfg, &e), KG_EINVAL, e,
               "veto");
    assert_err(kg_rl_mrs(NULL, keep, tr, ro, off, 2, NULL, &e), KG_EINVAL, e,
               "NULL");
    assert_err(kg_rl_mrs(ratio, keep, NULL, ro, off, 2, NULL, &e), KG_EINVAL, e,
               "NULL");
    assert_int_equal(kg_rl_mrs(ratio, keep, tr, ro, off, 2, NULL, &e), 0);
}

/* ---- PRS ------------------------------------------------------------------
 */

/* SplitMix64 written out again here; its first outputs from state 0 are the
 * published 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void test_uniform(void **state)
{
    (void)state;
    const uint64_t vec[] = {UINT64_C(0xe220a8397b1dcdaf),
                            UINT64_C(0x6e789e6aa1b965f4),
                            UINT64_C(0x06c45d188009454f)};
    for (uint64_t i = 0; i < 3; i++)
        assert_close(kg_rl_uniform(0, i), (double)(vec[i] >> 11) * 0x1p-53, 0);
    uint64_t st = 42;
    double sum = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        double u = kg_rl_uniform(42, i);
        assert_close(u, (double)(splitmix64(&st) >> 11) * 0x1p-53, 0);
        assert_true(u >= 0 && u < 1);
        sum += u;
    }
    /* mean of 1e5 uniforms: sd 0.29/sqrt(1e5) = 9e-4; 5 sd. */
    assert_close(sum / 100000, 0.5, 0.0046);
}

/* The paper's numbers: tau 0.3, s 0.1: coverage 0.35 -> 0.5, 0.15 -> 0,
 * 0.45 -> 1. */
static void test_prs_paper(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double pr[] = {0.35, 0.15, 0.45, 0.3, 0.4, 1.0, 0.0};
    double p[7];
    uint8_t keep[7];
    assert_int_equal(kg_rl_prs(p, keep, pr, 7, 0.3, 0.1, 7, &e), 0);
    double want[] = {0.5, 0, 1, 0, 1, 1, 0};
    for (int i = 0; i < 7; i++)
        assert_close(p[i], want[i], 1e-12);
    for (uint64_t seed = 0; seed < 100; seed++) {
        assert_int_equal(kg_rl_prs(p, keep, pr, 7, 0.3, 0.1, seed, &e), 0);
        assert_int_equal(keep[1], 0); /* p = 0 never keeps */
        assert_int_equal(keep[2], 1); /* p = 1 always keeps */
        assert_int_equal(keep[3], 0);
        assert_int_equal(keep[0], kg_rl_uniform(seed, 0) < p[0]);
    }
    /* s = 0: a hard threshold at tau, tau itself kept. */
    assert_int_equal(kg_rl_prs(p, NULL, pr, 7, 0.3, 0, 7, &e), 0);
    double hard[] = {1, 0, 1, 1, 1, 1, 0};
    for (int i = 0; i < 7; i++)
        assert_close(p[i], hard[i], 0);
}

/* Reproducible per seed; keep frequency matches p. */
static void test_prs_stats(void **state)
{
    (void)state;
    kg_err e = {{0}};
    enum { N = 200000 };
    static double pr[N], p[N];
    static uint8_t k1[N], k2[N];
    for (int i = 0; i < N; i++)
        pr[i] = 0.33; /* p = 0.3 with tau 0.3, s 0.1 */
    assert_int_equal(kg_rl_prs(p, k1, pr, N, 0.3, 0.1, 2026, &e), 0);
    assert_int_equal(kg_rl_prs(p, k2, pr, N, 0.3, 0.1, 2026, &e), 0);
    assert_memory_equal(k1, k2, N);
    long kept = 0, diff = 0;
    for (int i = 0; i < N; i++)
        kept += k1[i];
    /* sd of the frequency: sqrt(0.3 * 0.7 / 2e5) = 0.00102; allow 5 sd. */
    assert_close((double)kept / N, p[0], 0.0052);
    assert_close(p[0], 0.3, 1e-12);
    assert_int_equal(kg_rl_prs(p, k2, pr, N, 0.3, 0.1, 2027, &e), 0);
    for (int i = 0; i < N; i++)
        diff += k1[i] != k2[i];
    assert_true(diff > N / 10); /* another seed, other draws */
}

static void test_prs_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double pr[] = {0.2, NAN}, p[2];
    assert_err(kg_rl_prs(p, NULL, pr, 2, 0.3, 0.1, 1, &e), KG_ENONFINITE, e,
               "pr[1] is not finite");
    pr[1] = 1.2;
    assert_err(kg_rl_prs(p, NULL, pr, 2, 0.3, 0.1, 1, &e), KG_EINVAL, e,
               "pr[1]");
    pr[1] = 0.5;
    assert_err(kg_rl_prs(p, NULL, pr, 2, NAN, 0.1, 1, &e), KG_EINVAL, e, "tau");
    assert_err(kg_rl_prs(p, NULL, pr, 2, 0.3, -0.1, 1, &e), KG_EINVAL, e, "s");
    assert_err(kg_rl_prs(p, NULL, pr, 2, 0.3, INFINITY, 1, &e), KG_EINVAL, e,
               "s");
    assert_err(kg_rl_prs(NULL, NULL, pr, 2, 0.3, 0.1, 1, &e), KG_EINVAL, e,
               "NULL");
    assert_int_equal(kg_rl_prs(NULL, NULL, NULL, 0, 0.3, 0.1, 1, &e), 0);
}

/* ---- Fast@p -------------------------------------------------------------- */

/*
 * S = 3 trajectories, T = 3 turns, ps = {1.0, 1.5}:
 *  traj 0: all valid: incorrect; correct 1.2; correct 1.6
 *  traj 1: valid, valid, ended: correct 2.0; hacked (claims 10); garbage
 *  traj 2: valid, ended, ended: correct 0.9
 * p = 1.0: last = {1/3 (traj 1), 1/3 (traj 0), 1/3 (traj 0; traj 1's last
 *          attempt is the hacked one)}, best = {1/3, 2/3, 2/3}.
 * p = 1.5: last = {1/3, 0, 1/3}, best = {1/3, 1/3, 2/3}.
 * hack = {0/3, 1/2, 0/1}.
 */
static void test_fastp_hand(void **state)
{
    (void)state;
    kg_err e = {{0}};
    uint8_t correct[] = {0, 1, 1, 1, 1, 9, 1, 9, 9};
    uint8_t hacked[] = {0, 0, 0, 0, 1, 9, 0, 9, 9};
    double sp[] = {NAN, 1.2, 1.6, 2.0, 10, NAN, 0.9, NAN, NAN};
    uint8_t valid[] = {1, 1, 1, 1, 1, 0, 1, 0, 0};
    double ps[] = {1.0, 1.5};
    double last[6], best[6], hack[3];
    assert_int_equal(kg_rl_fastp(last, best, hack, correct, hacked, sp, valid,
                                 3, 3, ps, 2, &e),
                     0);
    double wl[] = {1. / 3, 1. / 3, 1. / 3, 1. / 3, 0, 1. / 3};
    double wb[] = {1. / 3, 2. / 3, 2. / 3, 1. / 3, 1. / 3, 2. / 3};
    double wh[] = {0, 0.5, 0};
    for (int x = 0; x < 6; x++) {
        assert_close(last[x], wl[x], 1e-15);
        assert_close(best[x], wb[x], 1e-15);
    }
    for (int t = 0; t < 3; t++)
        assert_close(hack[t], wh[t], 0);

    /* Any output may be NULL; speedup == p counts as fast. */
    double p12[] = {1.2};
    assert_int_equal(kg_rl_fastp(last, NULL, NULL, correct, hacked, sp, valid,
                                 3, 3, p12, 1, &e),
                     0);
    assert_close(last[1], 1. / 3, 1e-15);
    assert_int_equal(kg_rl_fastp(NULL, NULL, hack, correct, hacked, sp, valid,
                                 3, 3, NULL, 0, &e),
                     0);

    /* A first turn that is invalid (hole): not fast until a valid one. */
    uint8_t c2[] = {9, 1}, h2[] = {9, 0}, v2[] = {0, 1};
    double s2[] = {NAN, 3};
    assert_int_equal(
        kg_rl_fastp(last, best, hack, c2, h2, s2, v2, 1, 2, ps, 1, &e), 0);
    assert_close(last[0], 0, 0);
    assert_close(last[1], 1, 0);
    assert_close(best[0], 0, 0);
    assert_close(hack[0], 0, 0); /* no valid attempt: 0 */
}

static void test_fastp_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    uint8_t c[] = {1, 1}, h[] = {0, 0}, v[] = {1, 1};
    double sp[] = {1, NAN}, ps[] = {1}, out[2];
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, ps, 1, &e),
               KG_ENONFINITE, e, "speedup[1] is not finite");
    sp[1] = -2;
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, ps, 1, &e),
               KG_EINVAL, e, "speedup[1] is negative");
    sp[1] = 2;
    ps[0] = NAN;
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, ps, 1, &e),
               KG_ENONFINITE, e, "ps[0] is not finite");
    ps[0] = 1;
    v[0] = 5;
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, ps, 1, &e),
               KG_EINVAL, e, "valid[0]");
    v[0] = 1;
    c[1] = 5;
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, ps, 1, &e),
               KG_EINVAL, e, "correct[1]");
    c[1] = 1;
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 0, 2, ps, 1, &e),
               KG_EINVAL, e, "S and T");
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 0, ps, 1, &e),
               KG_EINVAL, e, "S and T");
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, ps, -1, &e),
               KG_EINVAL, e, "P");
    assert_err(kg_rl_fastp(out, NULL, NULL, c, h, sp, v, 1, 2, NULL, 1, &e),
               KG_EINVAL, e, "ps is NULL");
    assert_err(kg_rl_fastp(out, NULL, NULL, c, NULL, sp, v, 1, 2, ps, 1, &e),
               KG_EINVAL, e, "NULL");
}

/* ---- top-w selection ----------------------------------------------------- */

/* Reference: turn t is chosen iff fewer than w turns rank above it. */
static int select_ref(int *idx, const double *r, int T, int w)
{
    int n = 0;
    for (int t = 0; t < T; t++) {
        int above = 0;
        for (int u = 0; u < T; u++)
            above += r[u] > r[t] || (r[u] == r[t] && u > t);
        if (above < w)
            idx[n++] = t;
    }
    return n;
}

static void test_select_hand(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double r[] = {1, 3, 2, 3, 0};
    int idx[5], n = -1;
    assert_int_equal(kg_rl_select_topw(idx, &n, r, 5, 2, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 3);
    assert_int_equal(kg_rl_select_topw(idx, &n, r, 5, 1, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(idx[0], 3); /* the tie goes to the later turn */
    assert_int_equal(kg_rl_select_topw(idx, &n, r, 5, 3, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 2);
    assert_int_equal(idx[2], 3);
    assert_int_equal(kg_rl_select_topw(idx, &n, r, 5, 99, &e), 0);
    assert_int_equal(n, 5);
    for (int t = 0; t < 5; t++)
        assert_int_equal(idx[t], t);

    double flat[] = {2, 2, 2, 2};
    assert_int_equal(kg_rl_select_topw(idx, &n, flat, 4, 2, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 3);

    assert_int_equal(kg_rl_select_topw(NULL, &n, NULL, 0, 4, &e), 0);
    assert_int_equal(n, 0);
}

static void test_select_random(void **state)
{
    (void)state;
    kg_err e = {{0}};
    uint64_t s = 777;
    double r[200];
    int got[200], want[200], n;
    for (int rep = 0; rep < 500; rep++) {
        int T = 1 + rng_int(&s, 200), w = 1 + rng_int(&s, 12);
        int levels = 1 + rng_int(&s, 6); /* few levels: many ties */
        for (int t = 0; t < T; t++)
            r[t] = rng_int(&s, levels) * 0.5 - 1;
        assert_int_equal(kg_rl_select_topw(got, &n, r, T, w, &e), 0);
        int nw = select_ref(want, r, T, w);
        assert_int_equal(n, nw);
        assert_int_equal(n, w < T ? w : T);
        assert_memory_equal(got, want, (size_t)n * sizeof(int));
    }
}

static void test_select_errors(void **state)
{
    (void)state;
    kg_err e = {{0}};
    double r[] = {1, NAN, 2};
    int idx[3], n;
    assert_err(kg_rl_select_topw(idx, &n, r, 3, 2, &e), KG_ENONFINITE, e,
               "reward[1] is not finite");
    r[1] = -INFINITY;
    assert_err(kg_rl_select_topw(idx, &n, r, 3, 2, &e), KG_ENONFINITE, e,
               "reward[1]");
    r[1] = 0;
    assert_err(kg_rl_select_topw(idx, &n, r, 3, 0, &e), KG_EINVAL, e, "w");
    assert_err(kg_rl_select_topw(idx, &n, r, 3, -2, &e), KG_EINVAL, e, "w");
    assert_err(kg_rl_select_topw(idx, &n, r, -1, 2, &e), KG_EINVAL, e, "T");
    assert_err(kg_rl_select_topw(idx, NULL, r, 3, 2, &e), KG_EINVAL, e, "nout");
    assert_err(kg_rl_select_topw(NULL, &n, r, 3, 2, &e), KG_EINVAL, e, "NULL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_reward_paper),
        cmocka_unit_test(test_reward_errors),
        cmocka_unit_test(test_returns_hand),
        cmocka_unit_test(test_returns_random),
        cmocka_unit_test(test_returns_errors),
        cmocka_unit_test(test_adv_paper),
        cmocka_unit_test(test_adv_small_groups),
        cmocka_unit_test(test_adv_random),
        cmocka_unit_test(test_adv_errors),
        cmocka_unit_test(test_mrs_hand),
        cmocka_unit_test(test_mrs_errors),
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_prs_paper),
        cmocka_unit_test(test_prs_stats),
        cmocka_unit_test(test_prs_errors),
        cmocka_unit_test(test_fastp_hand),
        cmocka_unit_test(test_fastp_errors),
        cmocka_unit_test(test_select_hand),
        cmocka_unit_test(test_select_random),
        cmocka_unit_test(test_select_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
