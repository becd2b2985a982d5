/* rollout_score.c - the numbers of each turn (rollout.h), all through
 * libkgym (kgym/rl.h): the reward, reward-to-go returns, TRLOO and GRPO
 * advantages over the group of a problem's K samples at each turn, the
 * PRS keep flag and the later-turn loss mask. docs/agent.md gives the
 * rules; a trajectory written by an earlier run takes part in its group
 * through the rewards it wrote. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent/rollout.h"
#include "common/log.h"

static int has_reasons(const json_t *res)
{
    return json_array_size(json_object_get(res, "hack_reasons")) > 0;
}

/* Reads turn u's result into its flags: valid, correct, hacked, speedup,
 * coverage. */
static void classify(ro_turn *u)
{
    u->valid = u->correct = u->hacked = 0;
    u->speedup = u->coverage = -1;
    if (!u->result) {
        /* a reply without code is the policy's answer: it scores the
         * penalty; no reply, a refused task or no result is not scored */
        u->valid = u->reply && !u->code;
        return;
    }
    const json_t *res = u->result;
    const char *st = json_string_value(json_object_get(res, "status"));
    const char *v = json_string_value(json_object_get(res, "verdict"));
    if ((st && strcmp(st, "completed")) || !v ||
        !strcmp(v, "infra_error") || !strcmp(v, "problem_error"))
        return;
    u->valid = 1;
    u->hacked = !strcmp(v, "hacked") ||
                json_is_true(json_object_get(res, "decoy_kernel")) ||
                has_reasons(res);
    json_t *sp = json_object_get(res, "speedup");
    u->correct = !strcmp(v, "pass") &&
                 json_is_true(json_object_get(res, "correctness")) &&
                 json_is_number(sp) && json_number_value(sp) >= 0;
    if (u->correct)
        u->speedup = json_number_value(sp);
    json_t *cov = json_object_get(json_object_get(res, "profile"), "coverage");
    if (!json_is_number(cov))
        cov = json_object_get(res, "time_coverage");
    if (json_is_number(cov)) {
        double c = json_number_value(cov);
        u->coverage = c < 0 ? 0 : c > 1 ? 1 : c;
    }
}

/* PRS keep, the loss mask and the best turn so far of the turns of tr
 * (rewards already set). */
static void keep_and_mask(ro_run *r, ro_traj *tr, int K, int T)
{
    double best = -INFINITY;
    int had_success = 0, best_turn = -1;
    for (int t = 0; t < T; t++) {
        ro_turn *u = &tr->turns[t];
        if (u->valid && (best_turn < 0 || u->reward >= tr->turns[best_turn].reward))
            best_turn = t;
        u->best_turn = best_turn;
        u->keep_prob = u->valid ? 1 : 0;
        if (u->valid && u->correct) {
            double pr = u->coverage < 0 ? 0 : u->coverage, p = 0;
            kg_rl_prs(&p, NULL, &pr, 1, r->o->prs_tau, r->o->prs_s,
                      r->o->seed, NULL);
            uint64_t idx = ((uint64_t)tr->problem * (uint64_t)K +
                            (uint64_t)tr->sample) * (uint64_t)T + (uint64_t)t;
            u->keep_prob = p;
            u->keep = kg_rl_uniform(r->o->seed, idx) < p;
        } else {
            u->keep = u->valid;
        }
        u->loss_mask = u->valid && !(had_success && u->reward < best);
        if (u->valid && u->correct)
            had_success = 1;
        if (u->valid && u->reward > best)
            best = u->reward;
    }
}

/* Fills the K x T arrays of problem p: from tj where rolled out now, from
 * the prior rows otherwise. */
static void gather(ro_run *r, ro_traj *tj, int n, int p, double *R,
                   uint8_t *valid, int K, int T)
{
    for (int s = 0; s < K; s++) {
        const ro_prior *pr = &r->prior[(size_t)p * (size_t)K + (size_t)s];
        for (int t = 0; t < T; t++) {
            R[s * T + t] = pr->reward[t];
            valid[s * T + t] = (pr->turns_seen >> t & 1u) &&
                               !isnan(pr->reward[t]);
        }
    }
    for (int i = 0; i < n; i++) {
        if (tj[i].done_before)
            continue;
        int s = tj[i].sample;
        for (int t = 0; t < T; t++) {
            R[s * T + t] = tj[i].turns[t].reward;
            valid[s * T + t] = (uint8_t)tj[i].turns[t].valid;
        }
    }
}

int ro_score_turn(ro_run *r, ro_turn *u, kg_err *err)
{
    classify(u);
    uint8_t c = (uint8_t)u->correct, h = (uint8_t)u->hacked;
    double sp = u->speedup, pr = u->coverage < 0 ? 0 : u->coverage;
    int rc = kg_rl_reward(&u->reward, &c, &h, &sp, &pr, 1, &r->o->reward, err);
    if (!u->valid)
        u->reward = NAN;
    return rc;
}

int ro_score_problem(ro_run *r, ro_traj *tj, int n, int p, kg_err *err)
{
    int K = r->o->samples, T = r->o->turns, rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        for (int t = 0; t < T && rc == 0 && !tj[i].done_before; t++)
            rc = ro_score_turn(r, &tj[i].turns[t], err);
    size_t kt = (size_t)K * (size_t)T;
    double *R = malloc(kt * sizeof *R), *G = malloc(kt * sizeof *G);
    double *A1 = malloc(kt * sizeof *A1), *A2 = malloc(kt * sizeof *A2);
    uint8_t *valid = malloc(kt);
    if (!R || !G || !A1 || !A2 || !valid)
        rc = kg_errf(err, KG_ENOMEM, "out of memory");
    if (rc == 0) {
        gather(r, tj, n, p, R, valid, K, T);
        rc = kg_rl_returns(G, R, valid, K, T, r->o->gamma, err);
    }
    if (rc == 0)
        rc = kg_rl_trloo(A1, G, valid, K, T, err);
    if (rc == 0)
        rc = kg_rl_grpo(A2, G, valid, K, T, 0, 0, err);
    for (int i = 0; i < n && rc == 0; i++) {
        if (tj[i].done_before)
            continue;
        for (int t = 0; t < T; t++) {
            ro_turn *u = &tj[i].turns[t];
            size_t at = (size_t)tj[i].sample * (size_t)T + (size_t)t;
            u->ret = u->valid ? G[at] : NAN;
            u->adv_trloo = u->valid ? A1[at] : NAN;
            u->adv_grpo = u->valid ? A2[at] : NAN;
        }
        keep_and_mask(r, &tj[i], K, T);
    }
    free(R), free(G), free(A1), free(A2), free(valid);
    return rc;
}
