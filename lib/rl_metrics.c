/*
 * rl_metrics.c - benchmark metrics (Fast@p, best-of-history, hacking ratio)
 * and the top-w history selection of sequential test-time scaling. See
 * docs/rl.md. Nothing here allocates.
 */
#include <math.h>
#include <stdint.h>

#include "kgym/rl.h"

/* ---- Fast@p ------------------------------------------------------------ */

/*
 * Only valid[] is read at an invalid entry; correct and hacked are read at
 * valid entries, speedup only where valid && correct && !hacked (it must be
 * finite and >= 0 there). A trajectory with no valid attempt up to turn t
 * counts as not fast at t. The denominators are S (Fast@p) and the number of
 * valid attempts of the turn (hacking ratio).
 */
int kg_rl_fastp(double *last, double *best, double *hack,
                const uint8_t *correct, const uint8_t *hacked,
                const double *speedup, const uint8_t *valid, int S, int T,
                const double *ps, int P, kg_err *err)
{
    if (S <= 0 || T <= 0)
        return kg_errf(err, KG_EINVAL,
                       "fastp: S and T must be > 0 (S=%d, T=%d)", S, T);
    if (P < 0)
        return kg_errf(err, KG_EINVAL, "fastp: P must be >= 0 (got %d)", P);
    if (!correct || !hacked || !speedup || !valid)
        return kg_errf(err, KG_EINVAL, "fastp: NULL array");
    if (P > 0 && !ps)
        return kg_errf(err, KG_EINVAL, "fastp: ps is NULL but P = %d", P);
    for (int j = 0; j < P; j++)
        if (!isfinite(ps[j]))
            return kg_errf(err, KG_ENONFINITE, "fastp: ps[%d] is not finite",
                           j);

    size_t n = (size_t)S * (size_t)T;
    for (size_t x = 0; x < n; x++) {
        if (valid[x] > 1)
            return kg_errf(err, KG_EINVAL,
                           "fastp: valid[%zu] is %u (must be 0 or 1)", x,
                           valid[x]);
        if (!valid[x])
            continue;
        if (correct[x] > 1)
            return kg_errf(err, KG_EINVAL,
                           "fastp: correct[%zu] is %u (must be 0 or 1)", x,
                           correct[x]);
        if (hacked[x] > 1)
            return kg_errf(err, KG_EINVAL,
                           "fastp: hacked[%zu] is %u (must be 0 or 1)", x,
                           hacked[x]);
        if (!correct[x] || hacked[x])
            continue;
        if (!isfinite(speedup[x]))
            return kg_errf(err, KG_ENONFINITE,
                           "fastp: speedup[%zu] is not finite", x);
        if (speedup[x] < 0)
            return kg_errf(err, KG_EINVAL,
                           "fastp: speedup[%zu] is negative (%g)", x,
                           speedup[x]);
    }

    if (hack) {
        for (int t = 0; t < T; t++) {
            int nv = 0, nh = 0;
            for (int s = 0; s < S; s++) {
                size_t x = (size_t)s * T + t;
                nv += valid[x];
                nh += valid[x] && hacked[x];
            }
            hack[t] = nv > 0 ? (double)nh / nv : 0.0;
        }
    }
    if (!last && !best)
        return 0;

    for (int j = 0; j < P; j++) {
        double p = ps[j];
        double *lj = last ? last + (size_t)j * T : NULL;
        double *bj = best ? best + (size_t)j * T : NULL;
        for (int t = 0; t < T; t++) {
            if (lj)
                lj[t] = 0.0;
            if (bj)
                bj[t] = 0.0;
        }
        /* Counts first (exact in a double), then one division per cell. */
        for (int s = 0; s < S; s++) {
            int fast = 0, any = 0;
            for (int t = 0; t < T; t++) {
                size_t x = (size_t)s * T + t;
                if (valid[x]) {
                    fast = correct[x] && !hacked[x] && speedup[x] >= p;
                    any |= fast;
                }
                if (lj)
                    lj[t] += fast;
                if (bj)
                    bj[t] += any;
            }
        }
        for (int t = 0; t < T; t++) {
            if (lj)
                lj[t] /= S;
            if (bj)
                bj[t] /= S;
        }
    }
    return 0;
}

/* ---- top-w selection --------------------------------------------------- */

/* The ranking order: a higher reward first; on a tie, the later turn. */
static int ranks_above(const double *r, int a, int b)
{
    return r[a] > r[b] || (r[a] == r[b] && a > b);
}

/* Restores the heap below node i: every node ranks above its parent, so
 * the root is the lowest-ranked turn kept so far. */
static void sift_down(int *h, int n, int i, const double *r)
{
    for (;;) {
        int low = i, c = 2 * i + 1;
        if (c < n && ranks_above(r, h[low], h[c]))
            low = c;
        if (c + 1 < n && ranks_above(r, h[low], h[c + 1]))
            low = c + 1;
        if (low == i)
            return;
        int tmp = h[i];
        h[i] = h[low];
        h[low] = tmp;
        i = low;
    }
}

static void sift_up(int *h, int i, const double *r)
{
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!ranks_above(r, h[parent], h[i]))
            return;
        int tmp = h[i];
        h[i] = h[parent];
        h[parent] = tmp;
        i = parent;
    }
}

/*
 * The ranking is a strict total order (turn indices are distinct), so the
 * top m = min(w, T) turns are exactly the m-th ranked turn and every turn
 * ranked above it. A heap of m turns in idx finds the m-th (O(T log m));
 * one chronological scan then writes the answer over the heap. T == 0 (an
 * empty history) gives *nout = 0; reward and idx may then be NULL.
 */
int kg_rl_select_topw(int *idx, int *nout, const double *reward, int T, int w,
                      kg_err *err)
{
    if (!nout)
        return kg_errf(err, KG_EINVAL, "select: nout is NULL");
    if (w <= 0)
        return kg_errf(err, KG_EINVAL, "select: w must be > 0 (got %d)", w);
    if (T < 0)
        return kg_errf(err, KG_EINVAL, "select: T must be >= 0 (got %d)", T);
    if (T == 0) {
        *nout = 0;
        return 0;
    }
    if (!idx || !reward)
        return kg_errf(err, KG_EINVAL, "select: NULL array");
    for (int t = 0; t < T; t++)
        if (!isfinite(reward[t]))
            return kg_errf(err, KG_ENONFINITE,
                           "select: reward[%d] is not finite", t);

    int m = w < T ? w : T;
    int k = 0;
    for (int t = 0; t < T; t++) {
        if (k < m) {
            idx[k] = t;
            sift_up(idx, k++, reward);
        } else if (ranks_above(reward, t, idx[0])) {
            idx[0] = t;
            sift_down(idx, m, 0, reward);
        }
    }
    int cut = idx[0];
    int n = 0;
    for (int t = 0; t < T; t++)
        if (t == cut || ranks_above(reward, t, cut))
            idx[n++] = t;
    *nout = n;
    return 0;
}
