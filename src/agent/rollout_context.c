/* rollout_context.c - what each turn's chat holds (rollout.h), the
 * paper's sequential test-time scaling: `--context full` keeps the whole
 * history; `--context window:T,R[,last|best]` runs T turns as usual, then
 * restarts the chat from the first prompt plus R earlier turns (each its
 * reply and the feedback on it), the R best by reward (kg_rl_select_topw;
 * ties to the later turn) or the R last, and so on until --turns is spent.
 * A turn without a reply (the policy failed) is never chosen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/rollout.h"
#include "common/log.h"

int ro_context_parse(ro_opts *o, const char *spec, kg_err *err)
{
    if (!strcmp(spec, "full")) {
        o->ctx_window = 0;
        return 0;
    }
    int T = 0, R = 0, used = 0;
    char sel[8] = "best";
    if (strncmp(spec, "window:", 7) ||
        sscanf(spec + 7, "%d,%d%n", &T, &R, &used) != 2)
        return kg_errf(err, KG_EINVAL,
                       "--context: full or window:T,R[,last|best], not '%s'",
                       spec);
    const char *rest = spec + 7 + used;
    if (*rest && (rest[0] != ',' || strlen(rest + 1) >= sizeof sel ||
                  sscanf(rest + 1, "%7s", sel) != 1 ||
                  (strcmp(sel, "last") && strcmp(sel, "best"))))
        return kg_errf(err, KG_EINVAL,
                       "--context %s: the selection is last or best", spec);
    if (T < 1 || R < 1 || T > RO_MAX_TURNS || R > RO_MAX_TURNS)
        return kg_errf(err, KG_EINVAL,
                       "--context %s: T and R from 1 to %d", spec,
                       RO_MAX_TURNS);
    o->ctx_window = 1;
    o->ctx_T = T;
    o->ctx_R = R;
    o->ctx_best = !strcmp(sel, "best");
    return 0;
}

/* The turns before t chosen for a restarted chat, in order, into pick;
 * returns their count. */
static int choose(const ro_run *r, const ro_traj *tr, int t, int *pick)
{
    int cand[RO_MAX_TURNS], m = 0, R = r->o->ctx_R;
    double score[RO_MAX_TURNS];
    for (int s = 0; s < t; s++)
        if (tr->turns[s].reply) {
            double rw = tr->turns[s].reward;
            score[m] = isfinite(rw) ? rw : -1e300; /* unscored: last */
            cand[m++] = s;
        }
    int idx[RO_MAX_TURNS], n = 0;
    if (!r->o->ctx_best) {
        for (int i = m > R ? m - R : 0; i < m; i++)
            idx[n++] = i;
    } else if (m > 0 && kg_rl_select_topw(idx, &n, score, m, R, NULL)) {
        n = 0;
    }
    for (int i = 0; i < n; i++)
        pick[i] = cand[idx[i]];
    return n;
}

/* Restarts tr's chat at turn t from its first prompt and chosen turns. */
static void restart(ro_run *r, ro_traj *tr, int t)
{
    int pick[RO_MAX_TURNS], n = choose(r, tr, t, pick);
    json_t *h = json_deep_copy(tr->base);
    if (!h)
        return;
    tr->nctx = 0;
    for (int i = 0; i < n; i++) {
        const ro_turn *u = &tr->turns[pick[i]];
        json_array_append_new(h, ro_message("assistant", u->reply));
        json_t *fb = ro_feedback_message(r, u, pick[i]);
        if (fb)
            json_array_append_new(h, fb);
        tr->ctx[tr->nctx++] = pick[i];
    }
    json_decref(tr->history);
    tr->history = h;
}

void ro_context_turn(ro_run *r, ro_traj *tr, int t)
{
    if (r->o->ctx_window && t > 0 && t % r->o->ctx_T == 0)
        restart(r, tr, t);
    json_t *c = json_array();
    for (int i = 0; c && i < tr->nctx; i++)
        json_array_append_new(c, json_integer(tr->ctx[i]));
    json_decref(tr->turns[t].context);
    tr->turns[t].context = c;
}
