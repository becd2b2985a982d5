/*
 * rl_bench.c - time libkgym's advantages (and returns) over about 10^6
 * (sample, turn) entries on one core.
 *
 * Two layouts of the same entries:
 *  grouped: 20834 groups of K = 16 rollouts x T = 3 turns (1,000,032
 *           entries), one library call per group, as a trainer calls it;
 *  flat:    one K = 333334 x T = 3 array (1,000,002 entries), one call:
 *           the per-entry cost without per-call overhead.
 * Masks are prefix-shaped: about one rollout in four ends after turn 1 or 2.
 * Each measurement is one pass over all entries (inputs already in memory,
 * 8 MB in and 8 MB out, so larger than most L2 caches); it is repeated and
 * the min and median are printed. The library itself is built with the
 * project's CFLAGS (-O2); only this driver gets -O3 -march=native.
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kgym/rl.h"

enum { REPEATS = 31, WARMUP = 3, TURNS = 3, GROUP_K = 16, NGROUPS = 20834 };

struct bufs {
    double *R, *G, *A;
    uint8_t *valid;
    int K, T, ngroups; /* ngroups calls of K x T each */
};

typedef int (*bench_fn)(const struct bufs *b, double *sink);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_trloo(const struct bufs *b, double *sink)
{
    size_t n = (size_t)b->K * b->T;
    for (int g = 0; g < b->ngroups; g++) {
        size_t o = (size_t)g * n;
        int rc =
            kg_rl_trloo(b->A + o, b->G + o, b->valid + o, b->K, b->T, NULL);
        if (rc)
            return rc;
    }
    *sink += b->A[0];
    return 0;
}

static int run_grpo(const struct bufs *b, double *sink)
{
    size_t n = (size_t)b->K * b->T;
    for (int g = 0; g < b->ngroups; g++) {
        size_t o = (size_t)g * n;
        int rc = kg_rl_grpo(b->A + o, b->G + o, b->valid + o, b->K, b->T, 0,
                            0.0, NULL);
        if (rc)
            return rc;
    }
    *sink += b->A[0];
    return 0;
}

static int run_grpo_std(const struct bufs *b, double *sink)
{
    size_t n = (size_t)b->K * b->T;
    for (int g = 0; g < b->ngroups; g++) {
        size_t o = (size_t)g * n;
        int rc = kg_rl_grpo(b->A + o, b->G + o, b->valid + o, b->K, b->T, 1,
                            1e-6, NULL);
        if (rc)
            return rc;
    }
    *sink += b->A[0];
    return 0;
}

static int run_returns(const struct bufs *b, double *sink)
{
    size_t n = (size_t)b->K * b->T;
    for (int g = 0; g < b->ngroups; g++) {
        size_t o = (size_t)g * n;
        int rc = kg_rl_returns(b->A + o, b->R + o, b->valid + o, b->K, b->T,
                               0.9, NULL);
        if (rc)
            return rc;
    }
    *sink += b->A[0];
    return 0;
}

static int measure(const char *name, bench_fn fn, const struct bufs *b,
                   size_t entries)
{
    double t[REPEATS], sink = 0;
    for (int r = 0; r < WARMUP + REPEATS; r++) {
        double t0 = now_ms();
        int rc = fn(b, &sink);
        double dt = now_ms() - t0;
        if (rc) {
            fprintf(stderr, "%s: %s\n", name, kg_strerror(rc));
            return rc;
        }
        if (r >= WARMUP)
            t[r - WARMUP] = dt;
    }
    qsort(t, REPEATS, sizeof t[0], cmp_double);
    double med = t[REPEATS / 2];
    printf("  %-22s %9.3f %10.3f %12.1f   (checksum %.3g)\n", name, t[0], med,
           entries / (med * 1e-3) / 1e6, sink);
    return 0;
}

static uint64_t rng_state = 88172645463325252u;
static double unif(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static int bench_layout(const char *title, int K, int ngroups)
{
    struct bufs b = {0};
    b.K = K;
    b.T = TURNS;
    b.ngroups = ngroups;
    size_t entries = (size_t)K * TURNS * ngroups;
    b.R = malloc(entries * sizeof *b.R);
    b.G = malloc(entries * sizeof *b.G);
    b.A = malloc(entries * sizeof *b.A);
    b.valid = malloc(entries);
    if (!b.R || !b.G || !b.A || !b.valid) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    /* Rollouts of one to three turns; rewards in the paper's range. */
    for (size_t r = 0; r < entries / TURNS; r++) {
        double u = unif();
        int len = u < 0.125 ? 1 : u < 0.25 ? 2 : 3;
        for (int t = 0; t < TURNS; t++) {
            size_t x = r * TURNS + t;
            b.valid[x] = t < len;
            b.R[x] = unif() < 0.4 ? 0.0 : 1.0 + 3.0 * unif();
        }
    }
    size_t n = (size_t)K * TURNS;
    for (int g = 0; g < ngroups; g++)
        if (kg_rl_returns(b.G + g * n, b.R + g * n, b.valid + g * n, K, TURNS,
                          1.0, NULL))
            return 1;

    printf("\n%s: %d call(s) of K=%d x T=%d = %zu entries\n", title, ngroups, K,
           TURNS, entries);
    printf("  %-22s %9s %10s %12s\n", "function", "min ms", "median ms",
           "M entries/s");
    int rc = measure("trloo", run_trloo, &b, entries) ||
             measure("grpo (no std)", run_grpo, &b, entries) ||
             measure("grpo (std, eps 1e-6)", run_grpo_std, &b, entries) ||
             measure("returns (gamma 0.9)", run_returns, &b, entries);
    free(b.R);
    free(b.G);
    free(b.A);
    free(b.valid);
    return rc;
}

int main(void)
{
    /* One core: pin to the CPU we started on (best effort). */
    int cpu = sched_getcpu();
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            cpu = -1;
    }
    printf("kgym %s rl_bench: %d timed repeats after %d warm-up, one thread "
           "(pinned to cpu %d)\n",
           KG_VERSION, REPEATS, WARMUP, cpu);
    if (bench_layout("grouped", GROUP_K, NGROUPS))
        return 1;
    if (bench_layout("flat", 333334, 1))
        return 1;
    return 0;
}
