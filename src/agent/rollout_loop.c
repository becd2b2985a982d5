/* rollout_loop.c - the rollout's loop (rollout.h). Up to --chunk problems
 * are open at once; each trajectory moves on by itself: its chat request
 * goes out when its previous turn is done, its code to the server when
 * the reply comes, its next request when the result comes. So the policy
 * and the server work at the same time, and a problem's K trajectories
 * are scored and written as soon as all of them have their T turns, when
 * the next problem is opened. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/rollout.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/results_poll.h"

/* Between rounds of POST /results/batch while the policy has work (no
 * wait at the server then); the longest wait at the server while it has
 * none (a finished task ends the wait at once). */
#define POLL_MS 250
#define POLL_WAIT_S 10.0

/* A problem being rolled out: its K trajectories. */
typedef struct ro_group {
    int p;
    ro_traj *tj; /* NULL: a free slot */
    int left;    /* trajectories not done */
} ro_group;

/* A chat request in flight; q first, so done[] gives the request back. */
typedef struct ro_req {
    kg_policy_req q;
    ro_traj **ts; /* its trajectories, one per choice */
    int k, t;
    char *tag;
} ro_req;

typedef struct ro_loop {
    ro_run *r;
    ro_group *g;
    int ng, next;
    kg_policy_req **done;
    double last_poll, last_line, away_since;
    int quick_empty; /* the last poll came back at once with nothing */
    kg_err err;
} ro_loop;

/* Opens problems into free slots. 0, or the exit code. */
static int admit(ro_loop *L)
{
    ro_run *r = L->r;
    int K = r->o->samples;
    for (int i = 0; i < L->ng && L->next < r->ps.n; i++) {
        ro_group *g = &L->g[i];
        if (g->tj)
            continue;
        int p = L->next++, left = 0;
        uint64_t all = r->o->turns >= 64 ? ~0ull : (1ull << r->o->turns) - 1;
        ro_traj *tj = calloc((size_t)K, sizeof *tj);
        if (!tj)
            return 1;
        g->p = p;
        g->tj = tj;
        for (int s = 0; s < K; s++) {
            tj[s].problem = p;
            tj[s].sample = s;
            tj[s].done_before =
                r->prior[(size_t)p * (size_t)K + (size_t)s].turns_seen == all;
            tj[s].state = tj[s].done_before ? RO_DONE : RO_NEED_POLICY;
            left += !tj[s].done_before;
            if (!tj[s].done_before && ro_first_messages(r, &tj[s], &L->err))
                return 1;
        }
        g->left = left;
        if (!left) { /* all written before: scored already */
            free(tj);
            g->tj = NULL;
            i--;
        }
    }
    return 0;
}

/* Turn t of tr is over (scored or not): on to the next, or done. */
static void turn_done(ro_loop *L, ro_group *g, ro_traj *tr)
{
    ro_run *r = L->r;
    ro_turn *u = &tr->turns[tr->t];
    kg_err e = {{0}};
    if (ro_score_turn(r, u, &e))
        kg_warn("%s", e.msg);
    ro_next_message(r, tr, tr->t);
    if (++tr->t >= r->o->turns) {
        tr->state = RO_DONE;
        g->left--;
    } else {
        tr->state = RO_NEED_POLICY;
    }
}

static ro_group *group_of(ro_loop *L, const ro_traj *tr)
{
    for (int i = 0; i < L->ng; i++)
        if (L->g[i].tj && tr >= L->g[i].tj &&
            tr < L->g[i].tj + L->r->o->samples)
            return &L->g[i];
    return NULL;
}

/* Sends one request for ts[0..k) at turn t (they share the chat). */
static void ask(ro_loop *L, ro_traj **ts, int k, int t)
{
    ro_run *r = L->r;
    ro_req *q = calloc(1, sizeof *q);
    if (q)
        q->ts = malloc((size_t)k * sizeof *q->ts);
    for (int i = 0; i < k; i++) {
        ro_context_turn(r, ts[i], t);
        json_decref(ts[i]->turns[t].messages); /* asked again: solo */
        ts[i]->turns[t].messages = json_deep_copy(ts[i]->history);
        ts[i]->state = RO_AT_POLICY;
    }
    if (q && q->ts) {
        memcpy(q->ts, ts, (size_t)k * sizeof *ts);
        q->k = k;
        q->t = t;
        q->q.messages = ts[0]->turns[t].messages;
        q->q.n = k;
        q->q.has_seed = r->o->has_seed;
        q->q.seed = (long long)((r->o->seed + 1000003ull * ts[0]->problem +
                                 1009ull * ts[0]->sample + (uint64_t)t) &
                                0x7fffffffffffull);
        q->q.tag = q->tag = ro_make_tag(r, ts, k, t);
        if (kg_policy_submit(r->policy, &q->q) == 0)
            return;
    }
    kg_warn("out of memory: turn %d of %d trajectories not asked", t, k);
    for (int i = 0; i < k; i++) {
        ts[i]->turns[t].error = strdup("out of memory");
        turn_done(L, group_of(L, ts[i]), ts[i]);
    }
    if (q)
        free(q->ts), free(q->tag);
    free(q);
}

/* Asks for every trajectory waiting for the policy: at turn 0 with
 * group_n, a problem's samples in one request of n = K. */
static void issue(ro_loop *L)
{
    int K = L->r->o->samples;
    ro_traj *ts[RO_MAX_SAMPLES];
    for (int i = 0; i < L->ng; i++) {
        ro_group *g = &L->g[i];
        int k = 0;
        for (int s = 0; g->tj && s < K; s++) {
            ro_traj *tr = &g->tj[s];
            if (tr->state != RO_NEED_POLICY)
                continue;
            if (tr->t == 0 && L->r->o->group_n && !tr->solo)
                ts[k++] = tr;
            else
                ask(L, &tr, 1, tr->t);
        }
        if (k)
            ask(L, ts, k, 0);
    }
}

/* A request came back: its replies into its trajectories. */
static void on_reply(ro_loop *L, ro_req *q)
{
    ro_run *r = L->r;
    if (!q->q.ok && !(r->stop && *r->stop)) {
        r->st.policy_failed += q->k;
        ro_progress_end(r);
        kg_warn("policy: %s: %s", q->tag ? q->tag : "?", q->q.error);
    }
    /* A server that ignores n (transformers serve) gives fewer choices
     * than asked: the samples left out are asked again one by one. */
    if (q->q.ok && q->q.nchoices < q->k)
        kg_info("policy: %s: %d of %d choices; asking for the other %d one "
                "by one", q->tag ? q->tag : "?", q->q.nchoices, q->k,
                q->k - q->q.nchoices);
    for (int i = 0; i < q->k; i++) {
        ro_traj *tr = q->ts[i];
        ro_turn *u = &tr->turns[q->t];
        if (q->q.ok && i >= q->q.nchoices) {
            tr->solo = 1;
            tr->state = RO_NEED_POLICY;
            continue;
        }
        ro_take_reply(tr, q->t, &q->q, i);
        r->st.no_code += u->reply && !u->code;
        if (u->code)
            tr->state = RO_NEED_EVAL;
        else
            turn_done(L, group_of(L, tr), tr);
    }
    kg_policy_req_clear(&q->q);
    free(q->ts);
    free(q->tag);
    free(q);
}

/* Sends every code waiting for the server. 0, or the exit code. */
static int submit(ro_loop *L)
{
    ro_run *r = L->r;
    int K = r->o->samples, m = 0;
    ro_traj **ts = malloc((size_t)L->ng * (size_t)K * sizeof *ts + 1);
    if (!ts)
        return 1;
    for (int i = 0; i < L->ng; i++)
        for (int s = 0; L->g[i].tj && s < K; s++)
            if (L->g[i].tj[s].state == RO_NEED_EVAL)
                ts[m++] = &L->g[i].tj[s];
    int rc = m ? ro_env_submit(r, ts, m, &L->err) : 0;
    double now = kg_now_ms();
    for (int i = 0; rc == 0 && i < m; i++) {
        ro_turn *u = &ts[i]->turns[ts[i]->t];
        ts[i]->eval_t0 = now;
        ts[i]->state = RO_AT_EVAL;
        if (u->result || u->error)
            turn_done(L, group_of(L, ts[i]), ts[i]);
    }
    free(ts);
    return rc ? 1 : 0;
}

/* The trajectories whose code is at the server, into ts (ng * K), with
 * their turns into us. Returns how many. */
static int at_eval(ro_loop *L, ro_traj **ts, ro_turn **us)
{
    int n = 0;
    for (int i = 0; i < L->ng; i++)
        for (int s = 0; L->g[i].tj && s < L->r->o->samples; s++) {
            ro_traj *tr = &L->g[i].tj[s];
            if (tr->state != RO_AT_EVAL)
                continue;
            ts[n] = tr;
            us[n++] = &tr->turns[tr->t];
        }
    return n;
}

/*
 * One round of POST /results/batch for the codes at the server. While
 * the policy has requests in flight, a round every POLL_MS that does not
 * wait at the server; while it has none (every trajectory waits for its
 * result), a long poll of up to POLL_WAIT_S, answered as soon as one
 * result is in. 0, or the exit code when the server has not answered
 * for RO_AWAY_S.
 */
static int poll(ro_loop *L)
{
    ro_run *r = L->r;
    double now = kg_now_ms();
    size_t cap = (size_t)L->ng * (size_t)r->o->samples + 1;
    ro_traj **ts = malloc(cap * sizeof *ts);
    ro_turn **us = malloc(cap * sizeof *us);
    if (!ts || !us) {
        free(ts);
        free(us);
        return 0; /* asked again next round */
    }
    int n = at_eval(L, ts, us);
    /* a wait at the server paces the rounds itself; any other round
       (also a long poll answered at once with nothing) waits POLL_MS */
    int wait = !L->away_since && !r->poll_one_by_one && n <= KG_RESULTS_MAX_IDS &&
               kg_policy_pending(r->policy) == 0;
    if (!n || ((!wait || L->quick_empty) && now - L->last_poll < POLL_MS)) {
        r->st.evals_in_flight = n;
        free(ts);
        free(us);
        return 0;
    }
    L->last_poll = now;
    int d = L->away_since ? -1 : ro_env_poll(r, us, n, wait ? POLL_WAIT_S : 0);
    L->quick_empty = d <= 0 && kg_now_ms() - now < POLL_MS;
    now = kg_now_ms();
    if (d < 0)
        L->away_since = L->away_since ? L->away_since : now;
    long at = 0;
    for (int i = 0; i < n; i++) {
        ro_turn *u = us[i];
        if (d >= 0 && !u->result && !u->error &&
            now - ts[i]->eval_t0 > r->o->eval_timeout_s * 1000)
            u->error = strdup("no result within --eval-timeout");
        if (u->result || u->error)
            turn_done(L, group_of(L, ts[i]), ts[i]);
        else
            at++;
    }
    free(ts);
    free(us);
    r->st.evals_in_flight = at;
    if (L->away_since && now - L->away_since > RO_AWAY_S * 1000.0) {
        kg_errf(&L->err, KG_EUNAVAIL, "the server did not answer for %d s",
                RO_AWAY_S);
        return 1;
    }
    if (L->away_since) /* ask again next round */
        L->away_since = ro_env_health(r, NULL) ? L->away_since : 0;
    return 0;
}

/* Scores and writes every problem whose trajectories are all done. */
static int finish(ro_loop *L)
{
    ro_run *r = L->r;
    int K = r->o->samples;
    for (int i = 0; i < L->ng; i++) {
        ro_group *g = &L->g[i];
        if (!g->tj || g->left > 0)
            continue;
        int rc = ro_score_problem(r, g->tj, K, g->p, &L->err);
        for (int s = 0; rc == 0 && s < K; s++)
            if (!g->tj[s].done_before)
                rc = ro_out_write(r, &g->tj[s], &L->err);
        for (int s = 0; s < K; s++)
            ro_traj_clear(&g->tj[s], r->o->turns);
        free(g->tj);
        g->tj = NULL;
        if (rc)
            return 1;
    }
    return 0;
}

static int open_groups(const ro_loop *L)
{
    int n = 0;
    for (int i = 0; i < L->ng; i++)
        n += L->g[i].tj != NULL;
    return n;
}

static void free_reqs(kg_policy_req **done, int nd)
{
    for (int i = 0; i < nd; i++) {
        ro_req *q = (ro_req *)done[i];
        kg_policy_req_clear(&q->q);
        free(q->ts);
        free(q->tag);
        free(q);
    }
}

/* Ends what is in flight (after a stop or an error) and frees it all. */
static void drain(ro_loop *L)
{
    volatile sig_atomic_t all = 1;
    while (kg_policy_pending(L->r->policy) > 0) {
        free_reqs(L->done, kg_policy_step(L->r->policy, 0, &all, L->done));
    }
    for (int i = 0; i < L->ng; i++) {
        for (int s = 0; L->g[i].tj && s < L->r->o->samples; s++)
            ro_traj_clear(&L->g[i].tj[s], L->r->o->turns);
        free(L->g[i].tj);
    }
}

int ro_run_all(ro_run *r)
{
    ro_loop L = {.r = r,
                 .ng = r->o->chunk < r->ps.n ? r->o->chunk : r->ps.n};
    L.g = calloc((size_t)L.ng, sizeof *L.g);
    L.done = calloc((size_t)L.ng * (size_t)r->o->samples + 1, sizeof *L.done);
    int rc = L.g && L.done ? 0 : 1;
    while (rc == 0 && (rc = admit(&L)) == 0 && open_groups(&L) > 0) {
        issue(&L);
        long wait = r->st.evals_in_flight ? 50 : 200;
        double t0 = kg_now_ms();
        int nd = kg_policy_step(r->policy, wait, r->stop, L.done);
        r->st.policy_ms += kg_now_ms() - t0;
        if (*r->stop) { /* interrupted requests: nothing to keep */
            free_reqs(L.done, nd);
            break;
        }
        for (int i = 0; i < nd; i++)
            on_reply(&L, (ro_req *)L.done[i]);
        t0 = kg_now_ms();
        rc = submit(&L);
        if (rc == 0)
            rc = poll(&L);
        r->st.env_ms += kg_now_ms() - t0;
        if (rc == 0)
            rc = finish(&L);
        r->st.policy_in_flight = kg_policy_pending(r->policy);
        int line = kg_now_ms() - L.last_line > 10000;
        ro_progress(r, "running", !r->st.tty && line);
        if (line)
            L.last_line = kg_now_ms();
    }
    if (*r->stop)
        rc = 128 + *r->stop;
    else if (rc && L.err.msg[0])
        kg_error("%s", L.err.msg);
    drain(&L);
    free(L.g);
    free(L.done);
    return rc;
}
