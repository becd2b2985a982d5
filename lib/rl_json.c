/*
 * rl_json.c - the RL subcommands over JSON (rl_json.h): the one place where
 * their input is read and checked, for `kgym rl` (src/cli/cmd_rl.c) and the
 * Python bindings (python/kgym/rl.py) alike.
 *
 * A subcommand resolves its options (a flag's text, else an option value,
 * else the input's field, else the default), reads the input fields it
 * needs, checks every value where the field can still be named, calls the
 * numeric core (rl.c, rl_metrics.c: no allocation, no I/O) and builds its
 * output object. The core's own errors read "fn: arg...": kg_rlj_lib_error
 * maps the argument back to the input field it came from. Every message
 * starts with `field "NAME": `, `option --FLAG: `, `input: ` or `options: `.
 *
 * The option and field readers are in rl_json_opts.c, Fast@p's attempt
 * grouping in rl_json_fastp.c; rl_json_impl.h joins them.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kgym/rl.h"
#include "kgym/rl_json.h"
#include "rl_json_impl.h"

/* ---- per-turn reward --------------------------------------------------- */

/* "prefix.key", or "key" for an empty prefix. */
const char *kg_rlj_path(char *buf, size_t size, const char *prefix,
                        const char *key)
{
    snprintf(buf, size, "%s%s%s", prefix, *prefix ? "." : "", key);
    return buf;
}

static int read_pr(const json_t *t, const char *prefix, double *pr, kg_err *err)
{
    char name[160];
    int rc = kg_json_opt_number(
        t, "coverage", kg_rlj_path(name, sizeof name, prefix, "coverage"), pr,
        err);
    if (rc)
        return rc < 0 ? rc : 0;
    rc = kg_json_opt_number(
        t, "pr", kg_rlj_path(name, sizeof name, prefix, "pr"), pr, err);
    if (rc)
        return rc < 0 ? rc : 0;
    const json_t *prof = json_object_get(t, "profile");
    if (!prof || json_is_null(prof))
        return 0;
    if (!json_is_object(prof))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an object, got %s",
                       kg_rlj_path(name, sizeof name, prefix, "profile"),
                       kg_json_type_name(prof));
    rc = kg_json_opt_number(
        prof, "coverage",
        kg_rlj_path(name, sizeof name, prefix, "profile.coverage"), pr, err);
    return rc < 0 ? rc : 0;
}

/*
 * One turn (or attempt) from t, under the names of a kgym rl input or of a
 * kgym result object: correct|correctness, hacked|decoy_kernel|hack_reasons
 * (any of them makes it hacked), speedup, and, with want_pr,
 * coverage|pr|profile.coverage. A result whose verdict is problem_error
 * (the problem's reference failed, not the kernel) is excluded, its other
 * fields unread. prefix names t in messages ("" for the top level); noun
 * is "turn" or "attempt". Values the math will use are checked here, where
 * the field can be named.
 */
int kg_rlj_read_turn(const json_t *t, const char *prefix, const char *noun,
                     int want_pr, struct turn *tu, kg_err *err)
{
    char name[160];
    int b = 0, rc;

    tu->excluded = 0;
    const json_t *verdict = json_object_get(t, "verdict");
    if (verdict && !json_is_null(verdict) && !json_is_string(verdict))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected a string, got %s",
                       kg_rlj_path(name, sizeof name, prefix, "verdict"),
                       kg_json_type_name(verdict));
    if (verdict && json_is_string(verdict) &&
        !strcmp(json_string_value(verdict), "problem_error")) {
        tu->excluded = 1;
        tu->correct = tu->hacked = 0;
        tu->speedup = tu->pr = NAN;
        return 0;
    }

    rc = kg_json_opt_bool(t, "correct",
                          kg_rlj_path(name, sizeof name, prefix, "correct"), &b,
                          err);
    if (rc == 0)
        rc = kg_json_opt_bool(
            t, "correctness",
            kg_rlj_path(name, sizeof name, prefix, "correctness"), &b, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": missing (or \"correctness\")",
                       kg_rlj_path(name, sizeof name, prefix, "correct"));
    tu->correct = (uint8_t)b;

    tu->hacked = 0;
    static const char *const flags[] = {"hacked", "decoy_kernel"};
    for (size_t i = 0; i < 2; i++) {
        b = 0;
        rc = kg_json_opt_bool(t, flags[i],
                              kg_rlj_path(name, sizeof name, prefix, flags[i]),
                              &b, err);
        if (rc < 0)
            return rc;
        tu->hacked |= (uint8_t)b;
    }
    const json_t *reasons = json_object_get(t, "hack_reasons");
    if (reasons && !json_is_null(reasons)) {
        if (!json_is_array(reasons))
            return kg_errf(
                err, KG_EINVAL, "field \"%s\": expected an array, got %s",
                kg_rlj_path(name, sizeof name, prefix, "hack_reasons"),
                kg_json_type_name(reasons));
        tu->hacked |= json_array_size(reasons) > 0;
    }

    tu->speedup = NAN;
    kg_rlj_path(name, sizeof name, prefix, "speedup");
    rc = kg_json_opt_number(t, "speedup", name, &tu->speedup, err);
    if (rc < 0)
        return rc;
    tu->pr = NAN;
    if (want_pr && (rc = read_pr(t, prefix, &tu->pr, err)) < 0)
        return rc;

    if (!tu->correct || tu->hacked)
        return 0;
    if (isnan(tu->speedup))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": missing (a correct, unhacked %s needs "
                       "a speedup)",
                       name, noun);
    if (tu->speedup < 0) {
        char num[32];
        kg_json_format_real(num, sizeof num, tu->speedup);
        return kg_errf(err, KG_EINVAL, "field \"%s\": must be >= 0, got %s",
                       name, num);
    }
    if (want_pr && isnan(tu->pr))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": missing (a correct, unhacked %s needs a "
                       "coverage when w_pr != 0)",
                       kg_rlj_path(name, sizeof name, prefix, "coverage"),
                       noun);
    if (want_pr && !(tu->pr >= 0 && tu->pr <= 1)) {
        char num[32];
        kg_json_format_real(num, sizeof num, tu->pr);
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": must be in [0, 1], got %s",
                       kg_rlj_path(name, sizeof name, prefix, "coverage"), num);
    }
    return 0;
}

static int rl_reward(struct ctx *c)
{
    kg_reward_cfg cfg;
    kg_reward_cfg_default(&cfg);
    int rc;
    /* finite and bounded: an infinite cap would pass a forged speedup of
     * 1e308 straight into the reward */
    if ((rc = kg_rlj_get_in_range(c, "cap", 0, 0, KG_RLJ_MAX, &cfg.cap)) <
            0 ||
        (rc = kg_rlj_get_in_range(c, "w_pr", 0, 0, KG_RLJ_MAX, &cfg.w_pr)) <
            0 ||
        (rc = kg_rlj_get_in_range(c, "penalty", -KG_RLJ_MAX, 0, KG_RLJ_MAX,
                                  &cfg.penalty)) < 0)
        return rc;
    /* The library checks cfg first and has nothing else to check for n = 0:
     * so options are reported before the turns' fields. */
    static const struct argmap cfg_map[] = {
        {"cap", "cap"}, {"w_pr", "w_pr"}, {"penalty", "penalty"}, {0, 0}};
    int lrc = kg_rl_reward(NULL, NULL, NULL, NULL, NULL, 0, &cfg, &c->err);
    if (lrc)
        return kg_rlj_lib_error(c, lrc, cfg_map, "cap");
    int want_pr = cfg.w_pr != 0;

    const json_t *turns = json_object_get(c->in, "turns");
    int batch = turns && !json_is_null(turns);
    if (batch && !json_is_array(turns))
        return kg_errf(&c->err, KG_EINVAL,
                       "field \"turns\": expected an array, got %s",
                       kg_json_type_name(turns));
    size_t n = batch ? json_array_size(turns) : 1;

    rc = KG_EINVAL;
    uint8_t *correct = malloc(n + 1), *hacked = malloc(n + 1);
    uint8_t *scored = malloc(n + 1); /* 0: excluded (problem_error) */
    double *speedup = malloc((n + 1) * sizeof *speedup);
    double *pr = malloc((n + 1) * sizeof *pr);
    double *R = malloc((n + 1) * sizeof *R);
    if (!correct || !hacked || !scored || !speedup || !pr || !R) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = batch ? json_array_get(turns, i) : c->in;
        char prefix[48] = "";
        struct turn tu;
        if (batch) {
            snprintf(prefix, sizeof prefix, "turns[%zu]", i);
            if (!json_is_object(t)) {
                rc = kg_errf(&c->err, KG_EINVAL,
                             "field \"%s\": expected an object, got %s", prefix,
                             kg_json_type_name(t));
                goto done;
            }
        }
        if ((rc = kg_rlj_read_turn(t, prefix, "turn", want_pr, &tu, &c->err)) <
            0)
            goto done;
        correct[i] = tu.correct;
        hacked[i] = tu.hacked;
        scored[i] = !tu.excluded;
        speedup[i] = tu.speedup;
        pr[i] = tu.pr;
    }
    const struct argmap map[] = {{"cap", "cap"},
                                 {"w_pr", "w_pr"},
                                 {"penalty", "penalty"},
                                 {"speedup", batch ? "turns" : "speedup"},
                                 {"pr", batch ? "turns" : "coverage"},
                                 {NULL, NULL}};
    lrc = kg_rl_reward(R, correct, hacked, speedup, want_pr ? pr : NULL, n,
                       &cfg, &c->err);
    if (lrc) {
        rc = kg_rlj_lib_error(c, lrc, map, batch ? "turns" : "correct");
        goto done;
    }
    /* an excluded turn's reward is null: an invalid turn for returns and
     * advantages, never the penalty */
    if (batch) {
        json_t *arr;
        if ((rc = kg_json_real_array(&arr, R, scored, n, "rewards", &c->err)) <
            0)
            goto done;
        rc = kg_rlj_set_out(c, "rewards", arr);
    } else {
        rc = kg_rlj_set_out(c, "reward",
                            scored[0] ? json_real(R[0]) : json_null());
    }
done:
    free(correct);
    free(hacked);
    free(scored);
    free(speedup);
    free(pr);
    free(R);
    return rc;
}

/* ---- returns and advantages -------------------------------------------- */

/*
 * The mask of a K x T field m: the input's "valid" (default all true) and
 * m's own non-null entries. Caller frees *valid.
 */
static int read_valid(struct ctx *c, const kg_json_matrix *m, const char *of,
                      uint8_t **valid)
{
    const json_t *v = json_object_get(c->in, "valid");
    *valid = NULL;
    if (!v || json_is_null(v)) {
        *valid = malloc(m->rows * m->cols + 1);
        if (!*valid)
            return kg_rlj_out_of_memory(c);
        memcpy(*valid, m->present, m->rows * m->cols);
        return 0;
    }
    size_t rows, cols;
    int rc = kg_json_as_bool_matrix(v, "valid", valid, &rows, &cols, &c->err);
    if (rc)
        return rc;
    if (rows != m->rows || cols != m->cols) {
        free(*valid);
        *valid = NULL;
        return kg_errf(&c->err, KG_EINVAL,
                       "field \"valid\": shape %zux%zu does not match \"%s\" "
                       "(%zux%zu)",
                       rows, cols, of, m->rows, m->cols);
    }
    for (size_t i = 0; i < rows * cols; i++)
        (*valid)[i] &= m->present[i];
    return 0;
}

/* {key: K x T result} with null where !valid. */
static int matrix_out(struct ctx *c, const char *key, const double *x,
                      const uint8_t *valid, const kg_json_matrix *shape)
{
    json_t *arr;
    int rc = kg_json_real_matrix(&arr, x, valid, shape->rows, shape->cols, key,
                                 &c->err);
    return rc ? rc : kg_rlj_set_out(c, key, arr);
}

static int rl_returns(struct ctx *c)
{
    double gamma = 1.0;
    int rc = kg_rlj_get_number(c, "gamma", &gamma);
    if (rc < 0)
        return rc;
    const json_t *v = kg_rlj_need(c, "rewards");
    if (!v)
        return KG_EINVAL;
    kg_json_matrix R;
    uint8_t *valid = NULL;
    double *G = NULL;
    rc = kg_json_as_matrix(v, "rewards", 1, &R, &c->err);
    if (rc || (rc = read_valid(c, &R, "rewards", &valid)))
        goto done;
    G = calloc(R.rows * R.cols + 1, sizeof *G);
    if (!G) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    /* An empty group has nothing to compute (the library wants K, T > 0). */
    if (R.rows && R.cols) {
        static const struct argmap map[] = {
            {"gamma", "gamma"}, {"R", "rewards"}, {"valid", "valid"}, {0, 0}};
        rc = kg_rl_returns(G, R.x, valid, (int)R.rows, (int)R.cols, gamma,
                           &c->err);
        if (rc) {
            kg_rlj_lib_error(c, rc, map, "rewards");
            goto done;
        }
    }
    rc = matrix_out(c, "returns", G, valid, &R);
done:
    kg_json_matrix_free(&R);
    free(valid);
    free(G);
    return rc;
}

static int rl_advantages(struct ctx *c)
{
    const char *estimator = "trloo";
    int norm_std = 0;
    double eps = 1e-6;
    int from_flag = 0;
    int rc = kg_rlj_get_word(c, "estimator", &estimator, &from_flag);
    if (rc < 0)
        return rc;
    if (strcmp(estimator, "grpo") && strcmp(estimator, "trloo"))
        return kg_errf(&c->err, KG_EINVAL,
                       "%s: expected \"grpo\" or \"trloo\", got \"%.64s\"",
                       from_flag ? "option --estimator" : "field \"estimator\"",
                       estimator);
    if ((rc = kg_rlj_get_switch(c, "norm_std", &norm_std)) < 0 ||
        (rc = kg_rlj_get_in_range(c, "eps", 0, 0, 1, &eps)) < 0)
        return rc;
    const json_t *v = kg_rlj_need(c, "returns");
    if (!v)
        return KG_EINVAL;

    kg_json_matrix G;
    uint8_t *valid = NULL;
    double *A = NULL;
    rc = kg_json_as_matrix(v, "returns", 1, &G, &c->err);
    if (rc || (rc = read_valid(c, &G, "returns", &valid)))
        goto done;
    A = calloc(G.rows * G.cols + 1, sizeof *A);
    if (!A) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    if (G.rows && G.cols) {
        static const struct argmap map[] = {
            {"eps", "eps"}, {"G", "returns"}, {"valid", "valid"}, {0, 0}};
        int K = (int)G.rows, T = (int)G.cols;
        if (!strcmp(estimator, "grpo"))
            rc = kg_rl_grpo(A, G.x, valid, K, T, norm_std, eps, &c->err);
        else
            rc = kg_rl_trloo(A, G.x, valid, K, T, &c->err);
        if (rc) {
            kg_rlj_lib_error(c, rc, map, "returns");
            goto done;
        }
    }
    rc = matrix_out(c, "advantages", A, valid, &G);
done:
    kg_json_matrix_free(&G);
    free(valid);
    free(A);
    return rc;
}

/* ---- rejection sampling ------------------------------------------------ */

static int rl_mrs(struct ctx *c)
{
    kg_mrs_cfg cfg;
    kg_mrs_cfg_default(&cfg);
    int rc;
    /* ratios are positive; a veto is a token ratio, at most 1 */
    if ((rc = kg_rlj_get_in_range(c, "lo", 0, 0, KG_RLJ_MAX, &cfg.lo)) < 0 ||
        (rc = kg_rlj_get_in_range(c, "hi", 0, 0, KG_RLJ_MAX, &cfg.hi)) < 0 ||
        (rc = kg_rlj_get_in_range(c, "veto", 0, 0, 1, &cfg.veto)) < 0)
        return rc;
    const json_t *vt = kg_rlj_need(c, "train_logprobs");
    if (!vt)
        return KG_EINVAL;
    const json_t *vr = kg_rlj_need(c, "rollout_logprobs");
    if (!vr)
        return KG_EINVAL;

    double *xt = NULL, *xr = NULL, *ratio = NULL;
    size_t *ot = NULL, *orr = NULL, nt = 0, nr = 0;
    uint8_t *keep = NULL;
    rc = kg_json_as_rows(vt, "train_logprobs", &xt, &ot, &nt, &c->err);
    if (rc ||
        (rc = kg_json_as_rows(vr, "rollout_logprobs", &xr, &orr, &nr, &c->err)))
        goto done;
    if (nr != nt) {
        rc = kg_errf(&c->err, KG_EINVAL,
                     "field \"rollout_logprobs\": %zu rows, expected %zu (as "
                     "\"train_logprobs\")",
                     nr, nt);
        goto done;
    }
    for (size_t s = 0; s < nt; s++) {
        if (orr[s + 1] - orr[s] != ot[s + 1] - ot[s]) {
            rc = kg_errf(&c->err, KG_EINVAL,
                         "field \"rollout_logprobs\": row %zu has %zu entries, "
                         "expected %zu (as \"train_logprobs\")",
                         s, orr[s + 1] - orr[s], ot[s + 1] - ot[s]);
            goto done;
        }
    }
    ratio = calloc(nt + 1, sizeof *ratio);
    keep = calloc(nt + 1, 1);
    if (!ratio || !keep) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    static const struct argmap map[] = {{"need", "lo"},
                                        {"veto", "veto"},
                                        {"lp_train", "train_logprobs"},
                                        {"lp_rollout", "rollout_logprobs"},
                                        {0, 0}};
    rc = kg_rl_mrs(ratio, keep, xt, xr, ot, nt, &cfg, &c->err);
    if (rc) {
        kg_rlj_lib_error(c, rc, map, "train_logprobs");
        goto done;
    }
    json_t *r;
    if ((rc = kg_json_real_array(&r, ratio, NULL, nt, "ratio", &c->err)))
        goto done;
    if ((rc = kg_rlj_set_out(c, "ratio", r)))
        goto done;
    json_t *k = kg_json_bool_array(keep, nt);
    if (!k || json_object_set_new(c->out, "keep", k))
        rc = kg_rlj_out_of_memory(c);
done:
    free(xt);
    free(xr);
    free(ot);
    free(orr);
    free(ratio);
    free(keep);
    return rc;
}

static int rl_prs(struct ctx *c)
{
    double tau = 0.3, s = 0.1;
    uint64_t seed = 0;
    int rc;
    /* tau is a coverage threshold; s divides, so it is > 0 */
    if ((rc = kg_rlj_get_in_range(c, "tau", 0, 0, 1, &tau)) < 0 ||
        (rc = kg_rlj_get_in_range(c, "s", 0, 1, KG_RLJ_MAX, &s)) < 0 ||
        (rc = kg_rlj_get_seed(c, &seed)) < 0)
        return rc;
    const json_t *v = kg_rlj_need(c, "coverage");
    if (!v)
        return KG_EINVAL;

    double *pr = NULL, *p = NULL;
    uint8_t *present = NULL, *keep = NULL;
    size_t n = 0;
    rc = kg_json_as_vector(v, "coverage", 1, &pr, &present, &n, &c->err);
    if (rc)
        goto done;
    p = calloc(n + 1, sizeof *p);
    keep = calloc(n + 1, 1);
    if (!p || !keep) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    /* Null coverage: a 0 keeps the index of every draw; masked below. */
    static const struct argmap map[] = {
        {"tau", "tau"}, {"s", "s"}, {"pr", "coverage"}, {0, 0}};
    rc = kg_rl_prs(p, keep, pr, n, tau, s, seed, &c->err);
    if (rc) {
        kg_rlj_lib_error(c, rc, map, "coverage");
        goto done;
    }
    for (size_t j = 0; j < n; j++)
        keep[j] &= present[j];
    json_t *kp;
    if ((rc = kg_json_real_array(&kp, p, present, n, "keep_prob", &c->err)) ||
        (rc = kg_rlj_set_out(c, "keep_prob", kp)))
        goto done;
    json_t *k = kg_json_bool_array(keep, n);
    if (!k || json_object_set_new(c->out, "keep", k))
        rc = kg_rlj_out_of_memory(c);
done:
    free(pr);
    free(present);
    free(p);
    free(keep);
    return rc;
}

/* ---- test-time scaling selection --------------------------------------- */

static int rl_select(struct ctx *c)
{
    long long w = 4;
    int rc = kg_rlj_get_int(c, "w", INT_MIN, INT_MAX, &w);
    if (rc < 0)
        return rc;
    const json_t *v = kg_rlj_need(c, "rewards");
    if (!v)
        return KG_EINVAL;
    double *r = NULL;
    size_t T = 0;
    int *idx = NULL, nout = 0;
    rc = kg_json_as_vector(v, "rewards", 0, &r, NULL, &T, &c->err);
    if (rc)
        goto done;
    if (T > INT_MAX) {
        rc = kg_errf(&c->err, KG_EINVAL, "field \"rewards\": too many turns");
        goto done;
    }
    idx = calloc(T + 1, sizeof *idx);
    if (!idx) {
        rc = kg_rlj_out_of_memory(c);
        goto done;
    }
    static const struct argmap map[] = {
        {"w", "w"}, {"reward", "rewards"}, {0, 0}};
    rc = kg_rl_select_topw(idx, &nout, r, (int)T, (int)w, &c->err);
    if (rc) {
        kg_rlj_lib_error(c, rc, map, "rewards");
        goto done;
    }
    rc = kg_rlj_set_out(c, "selected", kg_json_int_array(idx, (size_t)nout));
done:
    free(r);
    free(idx);
    return rc;
}

/* ---- entry point ------------------------------------------------------- */

static const struct sub subs[] = {
    {"reward",
     rl_reward,
     {{"cap", "--cap"}, {"w_pr", "--w-pr"}, {"penalty", "--penalty"}}},
    {"returns", rl_returns, {{"gamma", "--gamma"}}},
    {"advantages",
     rl_advantages,
     {{"estimator", "--estimator"},
      {"norm_std", "--norm-std"},
      {"eps", "--eps"}}},
    {"mrs", rl_mrs, {{"lo", "--lo"}, {"hi", "--hi"}, {"veto", "--veto"}}},
    {"prs", rl_prs, {{"tau", "--tau"}, {"s", "--s"}, {"seed", "--seed"}}},
    {"fastp", kg_rlj_fastp, {{"p", "--p"}}},
    {"select", rl_select, {{"w", "--w"}}},
};
#define NSUBS (sizeof subs / sizeof subs[0])

/* Parses options_json into *opts: an object whose members are the
 * subcommand's options, by field or by flag. */
static int read_options(struct ctx *c, const char *text, json_t **opts)
{
    int rc = kg_json_parse_value(text, strlen(text), opts, &c->err);
    if (rc) {
        char msg[KG_ERR_MAX];
        memcpy(msg, c->err.msg, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        return kg_errf(&c->err, rc, "options: %s", msg);
    }
    if (!json_is_object(*opts))
        return kg_errf(&c->err, KG_EINVAL,
                       "options: expected a JSON object, got %s",
                       kg_json_type_name(*opts));
    const char *key;
    json_t *v;
    json_object_foreach(*opts, key, v)
    {
        const struct optdef *o = c->sub->opts;
        while (o->field && strcmp(key, o->field) && strcmp(key, o->flag))
            o++;
        if (!o->field)
            return kg_errf(&c->err, KG_EINVAL,
                           "options: \"%.64s\" is no option of %s", key,
                           c->sub->name);
    }
    return 0;
}

int kg_rl_json(const char *subcommand, const char *input_json, size_t len,
               const char *options_json, char **output_json, kg_err *err)
{
    struct ctx c;
    json_t *in = NULL, *opts = NULL;
    char *text = NULL;
    int rc;

    memset(&c, 0, sizeof c);
    if (output_json)
        *output_json = NULL;
    if (!subcommand || !input_json || !output_json)
        return kg_errf(err, KG_EINVAL, "kg_rl_json: NULL argument");
    for (size_t i = 0; i < NSUBS; i++)
        if (!strcmp(subcommand, subs[i].name))
            c.sub = &subs[i];
    if (!c.sub)
        return kg_errf(err, KG_EINVAL, "unknown subcommand \"%.64s\"",
                       subcommand);

    if (options_json && (rc = read_options(&c, options_json, &opts)) < 0)
        goto done;
    c.opts = opts;
    if ((rc = kg_json_parse_value(input_json, len, &in, &c.err)) < 0)
        goto done;
    if (!json_is_object(in)) {
        rc = kg_errf(&c.err, KG_EINVAL, "input: expected a JSON object, got %s",
                     kg_json_type_name(in));
        goto done;
    }
    c.in = in;
    if ((rc = c.sub->run(&c)) < 0)
        goto done;
    text = kg_json_dumps(c.out);
    if (!text)
        rc = kg_errf(&c.err, KG_ENOMEM, "out of memory");
done:
    json_decref(c.out);
    json_decref(in);
    json_decref(opts);
    if (rc < 0) {
        kg_errf(err, rc, "%s", c.err.msg);
        return rc;
    }
    *output_json = text;
    return 0;
}

void kg_rl_json_free(char *output_json)
{
    free(output_json);
}
