/*
 * rl_json.c - the RL subcommands over JSON (rl_json.h): the one place where
 * their input is read and checked, for `kgym rl` (src/cli/cmd_rl.c) and the
 * Python bindings (python/kgym/rl.py) alike.
 *
 * A subcommand resolves its options (a flag's text, else an option value,
 * else the input's field, else the default), reads the input fields it
 * needs, checks every value where the field can still be named, calls the
 * numeric core (rl.c, rl_metrics.c: no allocation, no I/O) and builds its
 * output object. The core's own errors read "fn: arg...": lib_error maps
 * the argument back to the input field it came from. Every message starts
 * with `field "NAME": `, `option --FLAG: `, `input: ` or `options: `.
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

#define MAX_OPTS 4

struct optdef {
    const char *field; /* "w_pr": the option as an input field */
    const char *flag;  /* "--w-pr": the option on the command line */
};

struct ctx;

struct sub {
    const char *name;
    int (*run)(struct ctx *c);
    struct optdef opts[MAX_OPTS + 1]; /* ended by a NULL field */
};

struct ctx {
    const struct sub *sub;
    const json_t *in;   /* the input object */
    const json_t *opts; /* the options object, or NULL */
    json_t *out;        /* owned, set by a successful run */
    kg_err err;
};

/* ---- options ---------------------------------------------------------- */

static const struct optdef *opt_def(const struct ctx *c, const char *field)
{
    for (const struct optdef *o = c->sub->opts; o->field; o++)
        if (!strcmp(o->field, field))
            return o;
    abort(); /* a subcommand asked for an option it does not declare */
}

/* The non-null member key of obj (NULL obj: none). */
static const json_t *member(const json_t *obj, const char *key)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !json_is_null(v) ? v : NULL;
}

/* Where option field is read from when no flag gives it: the options
 * object if it holds the field, else the input. */
static const json_t *source(const struct ctx *c, const char *field)
{
    return member(c->opts, field) ? c->opts : c->in;
}

/*
 * The text of the option's flag in the options object ("--gamma": "0.5")
 * into *text, left alone when the flag is not given. A switch's member is
 * a boolean, anything else's a string.
 */
static int flag_text(struct ctx *c, const char *field, const char **text)
{
    const struct optdef *o = opt_def(c, field);
    const json_t *v = member(c->opts, o->flag);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return kg_errf(&c->err, KG_EINVAL,
                       "options: \"%s\": expected the flag's text (a "
                       "string), got %s",
                       o->flag, kg_json_type_name(v));
    *text = json_string_value(v);
    return 1;
}

/*
 * A number on the command line: anything strtod reads whole but NaN. An
 * infinity ("inf", "1e999") passes, for the library to judge (an infinite
 * cap means no cap).
 */
static int parse_number(const char *s, const char *flag, double *out,
                        kg_err *err)
{
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end || isnan(x))
        return kg_errf(err, KG_EINVAL,
                       "option %s: expected a number, got \"%.64s\"", flag, s);
    *out = x;
    return 0;
}

/*
 * Options resolve the same way: the flag if given, else the option or
 * input field, else the caller's default stays in *out. They return < 0
 * on error.
 */
static int get_number(struct ctx *c, const char *field, double *out)
{
    const char *text = NULL;
    int rc = flag_text(c, field, &text);
    if (rc)
        return rc < 0
                   ? rc
                   : parse_number(text, opt_def(c, field)->flag, out, &c->err);
    return kg_json_opt_number(source(c, field), field, NULL, out, &c->err);
}

static int get_int(struct ctx *c, const char *field, long long lo, long long hi,
                   long long *out)
{
    const char *s = NULL, *flag = opt_def(c, field)->flag;
    int rc = flag_text(c, field, &s);
    if (rc < 0)
        return rc;
    if (!s)
        return kg_json_opt_int(source(c, field), field, NULL, lo, hi, out,
                               &c->err);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end)
        return kg_errf(&c->err, KG_EINVAL,
                       "option %s: expected an integer, got \"%.64s\"", flag,
                       s);
    if (errno == ERANGE || x < lo || x > hi)
        return kg_errf(&c->err, KG_EINVAL,
                       "option %s: %.64s is out of range [%lld, %lld]", flag, s,
                       lo, hi);
    *out = x;
    return 0;
}

static int get_switch(struct ctx *c, const char *field, int *out)
{
    const struct optdef *o = opt_def(c, field);
    const json_t *v = member(c->opts, o->flag);
    if (v && !json_is_boolean(v))
        return kg_errf(&c->err, KG_EINVAL,
                       "options: \"%s\": expected true or false, got %s",
                       o->flag, kg_json_type_name(v));
    if (v) {
        *out = json_is_true(v);
        return 0;
    }
    return kg_json_opt_bool(source(c, field), field, NULL, out, &c->err);
}

/* *from_flag: whether the word came from the flag (for messages). */
static int get_word(struct ctx *c, const char *field, const char **out,
                    int *from_flag)
{
    int rc = flag_text(c, field, out);
    *from_flag = rc > 0;
    if (rc)
        return rc < 0 ? rc : 0;
    return kg_json_opt_string(source(c, field), field, NULL, out, &c->err);
}

/*
 * The seed: an integer in [0, 2^64). A JSON integer stops at 2^63 - 1
 * (jansson's), so a string of decimal digits is read too, the form of
 * protobuf's JSON mapping for 64-bit integers; the Python bindings send
 * every seed so. The flag takes the digits.
 */
static int get_seed(struct ctx *c, uint64_t *out)
{
    const char *text = NULL;
    int rc = flag_text(c, "seed", &text);
    if (rc < 0)
        return rc;
    if (text) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(text, &end, 10);
        if (*text < '0' || *text > '9' || *end || errno == ERANGE)
            return kg_errf(&c->err, KG_EINVAL,
                           "option --seed: expected an integer in [0, 2^64), "
                           "got \"%.64s\"",
                           text);
        *out = x;
        return 0;
    }
    const json_t *v = member(source(c, "seed"), "seed");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v), *d = s + (*s == '-');
        size_t nd = strspn(d, "0123456789");
        if (nd == 0 || d[nd])
            return kg_errf(&c->err, KG_EINVAL,
                           "field \"seed\": expected an integer, got \"%.64s\"",
                           s);
        errno = 0;
        unsigned long long x = strtoull(d, NULL, 10);
        if (errno == ERANGE || (d != s && x != 0))
            return kg_errf(&c->err, KG_EINVAL,
                           "field \"seed\": %.64s is out of range [0, %" PRIu64
                           "]",
                           s, UINT64_MAX);
        *out = x;
        return 0;
    }
    if (json_is_integer(v) && json_integer_value(v) < 0)
        return kg_errf(&c->err, KG_EINVAL,
                       "field \"seed\": %" JSON_INTEGER_FORMAT
                       " is out of range [0, %" PRIu64 "]",
                       json_integer_value(v), UINT64_MAX);
    long long x;
    if ((rc = kg_json_as_int(v, "seed", 0, LLONG_MAX, &x, &c->err)) < 0)
        return rc;
    *out = (uint64_t)x;
    return 0;
}

/* ---- input fields ------------------------------------------------------ */

/* The input's field key, which must be present and not null. */
static const json_t *need(struct ctx *c, const char *key)
{
    const json_t *v = json_object_get(c->in, key);
    if (!v || json_is_null(v))
        kg_errf(&c->err, KG_EINVAL, "field \"%s\": missing", key);
    return v && !json_is_null(v) ? v : NULL;
}

/*
 * Library errors read "fn: what...". The word after "fn: " names the
 * argument at fault; map it to the input field it came from (or dflt) and
 * prefix the message with that field.
 */
struct argmap {
    const char *arg, *field;
};

static int lib_error(struct ctx *c, int rc, const struct argmap *map,
                     const char *dflt)
{
    char msg[KG_ERR_MAX];
    memcpy(msg, c->err.msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    const char *w = strstr(msg, ": ");
    w = w ? w + 2 : msg;
    size_t n = 0;
    while ((w[n] >= 'a' && w[n] <= 'z') || (w[n] >= 'A' && w[n] <= 'Z') ||
           w[n] == '_')
        n++;
    const char *field = dflt;
    for (; map && map->arg; map++)
        if (strlen(map->arg) == n && !strncmp(map->arg, w, n))
            field = map->field;
    kg_errf(&c->err, rc, "field \"%s\": %s", field, msg);
    return rc;
}

static int out_of_memory(struct ctx *c)
{
    return kg_errf(&c->err, KG_ENOMEM, "out of memory");
}

/* Sets c->out = {key: value}, taking value (NULL: out of memory). */
static int set_out(struct ctx *c, const char *key, json_t *value)
{
    c->out = json_object();
    if (!c->out || !value || json_object_set_new(c->out, key, value)) {
        json_decref(value);
        return out_of_memory(c);
    }
    return 0;
}

/* ---- per-turn reward --------------------------------------------------- */

struct turn {
    uint8_t correct, hacked;
    uint8_t excluded;   /* verdict problem_error: not the policy's to score */
    double speedup, pr; /* NaN when not given */
};

/* "prefix.key", or "key" for an empty prefix. */
static const char *path(char *buf, size_t size, const char *prefix,
                        const char *key)
{
    snprintf(buf, size, "%s%s%s", prefix, *prefix ? "." : "", key);
    return buf;
}

static int read_pr(const json_t *t, const char *prefix, double *pr, kg_err *err)
{
    char name[160];
    int rc = kg_json_opt_number(
        t, "coverage", path(name, sizeof name, prefix, "coverage"), pr, err);
    if (rc)
        return rc < 0 ? rc : 0;
    rc = kg_json_opt_number(t, "pr", path(name, sizeof name, prefix, "pr"), pr,
                            err);
    if (rc)
        return rc < 0 ? rc : 0;
    const json_t *prof = json_object_get(t, "profile");
    if (!prof || json_is_null(prof))
        return 0;
    if (!json_is_object(prof))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an object, got %s",
                       path(name, sizeof name, prefix, "profile"),
                       kg_json_type_name(prof));
    rc = kg_json_opt_number(prof, "coverage",
                            path(name, sizeof name, prefix, "profile.coverage"),
                            pr, err);
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
static int read_turn(const json_t *t, const char *prefix, const char *noun,
                     int want_pr, struct turn *tu, kg_err *err)
{
    char name[160];
    int b = 0, rc;

    tu->excluded = 0;
    const json_t *verdict = json_object_get(t, "verdict");
    if (verdict && !json_is_null(verdict) && !json_is_string(verdict))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected a string, got %s",
                       path(name, sizeof name, prefix, "verdict"),
                       kg_json_type_name(verdict));
    if (verdict && json_is_string(verdict) &&
        !strcmp(json_string_value(verdict), "problem_error")) {
        tu->excluded = 1;
        tu->correct = tu->hacked = 0;
        tu->speedup = tu->pr = NAN;
        return 0;
    }

    rc = kg_json_opt_bool(t, "correct",
                          path(name, sizeof name, prefix, "correct"), &b, err);
    if (rc == 0)
        rc = kg_json_opt_bool(t, "correctness",
                              path(name, sizeof name, prefix, "correctness"),
                              &b, err);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": missing (or \"correctness\")",
                       path(name, sizeof name, prefix, "correct"));
    tu->correct = (uint8_t)b;

    tu->hacked = 0;
    static const char *const flags[] = {"hacked", "decoy_kernel"};
    for (size_t i = 0; i < 2; i++) {
        b = 0;
        rc = kg_json_opt_bool(
            t, flags[i], path(name, sizeof name, prefix, flags[i]), &b, err);
        if (rc < 0)
            return rc;
        tu->hacked |= (uint8_t)b;
    }
    const json_t *reasons = json_object_get(t, "hack_reasons");
    if (reasons && !json_is_null(reasons)) {
        if (!json_is_array(reasons))
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": expected an array, got %s",
                           path(name, sizeof name, prefix, "hack_reasons"),
                           kg_json_type_name(reasons));
        tu->hacked |= json_array_size(reasons) > 0;
    }

    tu->speedup = NAN;
    path(name, sizeof name, prefix, "speedup");
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
                       path(name, sizeof name, prefix, "coverage"), noun);
    if (want_pr && !(tu->pr >= 0 && tu->pr <= 1)) {
        char num[32];
        kg_json_format_real(num, sizeof num, tu->pr);
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": must be in [0, 1], got %s",
                       path(name, sizeof name, prefix, "coverage"), num);
    }
    return 0;
}

static int rl_reward(struct ctx *c)
{
    kg_reward_cfg cfg;
    kg_reward_cfg_default(&cfg);
    int rc;
    if ((rc = get_number(c, "cap", &cfg.cap)) < 0 ||
        (rc = get_number(c, "w_pr", &cfg.w_pr)) < 0 ||
        (rc = get_number(c, "penalty", &cfg.penalty)) < 0)
        return rc;
    /* The library checks cfg first and has nothing else to check for n = 0:
     * so options are reported before the turns' fields. */
    static const struct argmap cfg_map[] = {
        {"cap", "cap"}, {"w_pr", "w_pr"}, {"penalty", "penalty"}, {0, 0}};
    int lrc = kg_rl_reward(NULL, NULL, NULL, NULL, NULL, 0, &cfg, &c->err);
    if (lrc)
        return lib_error(c, lrc, cfg_map, "cap");
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
        rc = out_of_memory(c);
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
        if ((rc = read_turn(t, prefix, "turn", want_pr, &tu, &c->err)) < 0)
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
        rc = lib_error(c, lrc, map, batch ? "turns" : "correct");
        goto done;
    }
    /* an excluded turn's reward is null: an invalid turn for returns and
     * advantages, never the penalty */
    if (batch) {
        json_t *arr;
        if ((rc = kg_json_real_array(&arr, R, scored, n, "rewards", &c->err)) <
            0)
            goto done;
        rc = set_out(c, "rewards", arr);
    } else {
        rc = set_out(c, "reward", scored[0] ? json_real(R[0]) : json_null());
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
            return out_of_memory(c);
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
    return rc ? rc : set_out(c, key, arr);
}

static int rl_returns(struct ctx *c)
{
    double gamma = 1.0;
    int rc = get_number(c, "gamma", &gamma);
    if (rc < 0)
        return rc;
    const json_t *v = need(c, "rewards");
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
        rc = out_of_memory(c);
        goto done;
    }
    /* An empty group has nothing to compute (the library wants K, T > 0). */
    if (R.rows && R.cols) {
        static const struct argmap map[] = {
            {"gamma", "gamma"}, {"R", "rewards"}, {"valid", "valid"}, {0, 0}};
        rc = kg_rl_returns(G, R.x, valid, (int)R.rows, (int)R.cols, gamma,
                           &c->err);
        if (rc) {
            lib_error(c, rc, map, "rewards");
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
    int rc = get_word(c, "estimator", &estimator, &from_flag);
    if (rc < 0)
        return rc;
    if (strcmp(estimator, "grpo") && strcmp(estimator, "trloo"))
        return kg_errf(&c->err, KG_EINVAL,
                       "%s: expected \"grpo\" or \"trloo\", got \"%.64s\"",
                       from_flag ? "option --estimator" : "field \"estimator\"",
                       estimator);
    if ((rc = get_switch(c, "norm_std", &norm_std)) < 0 ||
        (rc = get_number(c, "eps", &eps)) < 0)
        return rc;
    const json_t *v = need(c, "returns");
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
        rc = out_of_memory(c);
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
            lib_error(c, rc, map, "returns");
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
    if ((rc = get_number(c, "lo", &cfg.lo)) < 0 ||
        (rc = get_number(c, "hi", &cfg.hi)) < 0 ||
        (rc = get_number(c, "veto", &cfg.veto)) < 0)
        return rc;
    const json_t *vt = need(c, "train_logprobs");
    if (!vt)
        return KG_EINVAL;
    const json_t *vr = need(c, "rollout_logprobs");
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
        rc = out_of_memory(c);
        goto done;
    }
    static const struct argmap map[] = {{"need", "lo"},
                                        {"veto", "veto"},
                                        {"lp_train", "train_logprobs"},
                                        {"lp_rollout", "rollout_logprobs"},
                                        {0, 0}};
    rc = kg_rl_mrs(ratio, keep, xt, xr, ot, nt, &cfg, &c->err);
    if (rc) {
        lib_error(c, rc, map, "train_logprobs");
        goto done;
    }
    json_t *r;
    if ((rc = kg_json_real_array(&r, ratio, NULL, nt, "ratio", &c->err)))
        goto done;
    if ((rc = set_out(c, "ratio", r)))
        goto done;
    json_t *k = kg_json_bool_array(keep, nt);
    if (!k || json_object_set_new(c->out, "keep", k))
        rc = out_of_memory(c);
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
    if ((rc = get_number(c, "tau", &tau)) < 0 ||
        (rc = get_number(c, "s", &s)) < 0 || (rc = get_seed(c, &seed)) < 0)
        return rc;
    const json_t *v = need(c, "coverage");
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
        rc = out_of_memory(c);
        goto done;
    }
    /* Null coverage: a 0 keeps the index of every draw; masked below. */
    static const struct argmap map[] = {
        {"tau", "tau"}, {"s", "s"}, {"pr", "coverage"}, {0, 0}};
    rc = kg_rl_prs(p, keep, pr, n, tau, s, seed, &c->err);
    if (rc) {
        lib_error(c, rc, map, "coverage");
        goto done;
    }
    for (size_t j = 0; j < n; j++)
        keep[j] &= present[j];
    json_t *kp;
    if ((rc = kg_json_real_array(&kp, p, present, n, "keep_prob", &c->err)) ||
        (rc = set_out(c, "keep_prob", kp)))
        goto done;
    json_t *k = kg_json_bool_array(keep, n);
    if (!k || json_object_set_new(c->out, "keep", k))
        rc = out_of_memory(c);
done:
    free(pr);
    free(present);
    free(p);
    free(keep);
    return rc;
}

/* ---- Fast@p ------------------------------------------------------------ */

struct attempt {
    long long level, sample, turn;
    int pint;         /* problem is an integer (else a string) */
    long long pnum;   /* problem, if an integer */
    const char *pstr; /* problem, if a string (borrowed from the input) */
    size_t plen, idx; /* idx: position in "attempts" */
    struct turn tu;
};

static int cmp_ll(long long a, long long b)
{
    return (a > b) - (a < b);
}

/* Orders by trajectory (level, problem, sample), then turn, then input
 * position; levels come out contiguous and in order. */
static int cmp_attempt(const void *pa, const void *pb)
{
    const struct attempt *a = pa, *b = pb;
    int r = cmp_ll(a->level, b->level);
    if (r)
        return r;
    if (a->pint != b->pint)
        return a->pint ? -1 : 1;
    if (a->pint) {
        r = cmp_ll(a->pnum, b->pnum);
    } else {
        size_t m = a->plen < b->plen ? a->plen : b->plen;
        r = memcmp(a->pstr, b->pstr, m);
        if (!r)
            r = cmp_ll((long long)a->plen, (long long)b->plen);
    }
    if (r || (r = cmp_ll(a->sample, b->sample)) ||
        (r = cmp_ll(a->turn, b->turn)))
        return r;
    return cmp_ll((long long)a->idx, (long long)b->idx);
}

static int same_trajectory(const struct attempt *a, const struct attempt *b)
{
    return a->level == b->level && a->pint == b->pint &&
           a->sample == b->sample &&
           (a->pint ? a->pnum == b->pnum
                    : a->plen == b->plen && !memcmp(a->pstr, b->pstr, a->plen));
}

static int cmp_long_long(const void *pa, const void *pb)
{
    return cmp_ll(*(const long long *)pa, *(const long long *)pb);
}

static int read_attempt(const json_t *a, size_t i, struct attempt *at,
                        kg_err *err)
{
    char prefix[48], name[96];
    snprintf(prefix, sizeof prefix, "attempts[%zu]", i);
    if (!json_is_object(a))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an object, got %s", prefix,
                       kg_json_type_name(a));
    at->idx = i;
    at->sample = 0;
    static const char *const ints[] = {"level", "problem", "sample", "turn"};
    for (size_t k = 0; k < 4; k++) {
        const json_t *v = json_object_get(a, ints[k]);
        path(name, sizeof name, prefix, ints[k]);
        if (!v || json_is_null(v)) {
            if (k == 2)
                continue; /* sample defaults to 0 */
            return kg_errf(err, KG_EINVAL, "field \"%s\": missing", name);
        }
        if (k == 1 && json_is_string(v)) {
            at->pint = 0;
            at->pstr = json_string_value(v);
            at->plen = json_string_length(v);
            continue;
        }
        if (k == 1 && !json_is_integer(v)) {
            char got[32];
            if (!json_is_real(v) ||
                kg_json_format_real(got, sizeof got, json_real_value(v)) < 0)
                snprintf(got, sizeof got, "%s", kg_json_type_name(v));
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": expected a string or an integer, "
                           "got %s",
                           name, got);
        }
        long long *dst[] = {&at->level, &at->pnum, &at->sample, &at->turn};
        int rc = kg_json_as_int(v, name, LLONG_MIN, LLONG_MAX, dst[k], err);
        if (rc < 0)
            return rc;
        if (k == 1)
            at->pint = 1;
    }
    return read_turn(a, prefix, "attempt", 0, &at->tu, err);
}

/* "1.2" for 1.2, "2" for 2.0: the key of a p in the output. */
static void p_key(char *buf, size_t size, double p)
{
    int n = kg_json_format_real(buf, size, p);
    if (n >= 2 && !strcmp(buf + n - 2, ".0"))
        buf[n - 2] = '\0';
}

/*
 * The metrics of S trajectories (rows of the S x T arrays) as
 * {"last": {p: [T]}, "best": {p: [T]}, "hacking_ratio": [T], "n": S}.
 * S == 0 gives empty lists without calling the library. Caller owns *res.
 */
static int fastp_group(struct ctx *c, json_t **res, const uint8_t *correct,
                       const uint8_t *hacked, const double *speedup,
                       const uint8_t *valid, int S, int T, const double *ps,
                       int P)
{
    static const struct argmap map[] = {{"ps", "p"}, {0, 0}};
    int rc = 0;
    size_t nl = (size_t)P * (size_t)T;
    double *last = calloc(nl + 1, sizeof *last);
    double *best = calloc(nl + 1, sizeof *best);
    double *hack = calloc((size_t)T + 1, sizeof *hack);
    json_t *g = json_object(), *jl = json_object(), *jb = json_object();
    *res = NULL;
    if (!last || !best || !hack || !g || !jl || !jb) {
        rc = out_of_memory(c);
        goto done;
    }
    if (S > 0 && T > 0) {
        rc = kg_rl_fastp(last, best, hack, correct, hacked, speedup, valid, S,
                         T, ps, P, &c->err);
        if (rc) {
            lib_error(c, rc, map, "attempts");
            goto done;
        }
    }
    if (json_object_set(g, "last", jl) || json_object_set(g, "best", jb)) {
        rc = out_of_memory(c);
        goto done;
    }
    for (int j = 0; j < P; j++) {
        char key[48];
        json_t *a, *b;
        p_key(key, sizeof key, ps[j]);
        if ((rc = kg_json_real_array(&a, last + (size_t)j * T, NULL, (size_t)T,
                                     "last", &c->err)))
            goto done;
        if (json_object_set_new(jl, key, a)) {
            rc = out_of_memory(c);
            goto done;
        }
        if ((rc = kg_json_real_array(&b, best + (size_t)j * T, NULL, (size_t)T,
                                     "best", &c->err)))
            goto done;
        if (json_object_set_new(jb, key, b)) {
            rc = out_of_memory(c);
            goto done;
        }
    }
    json_t *h;
    if ((rc = kg_json_real_array(&h, hack, NULL, (size_t)T, "hacking_ratio",
                                 &c->err)))
        goto done;
    if (json_object_set_new(g, "hacking_ratio", h) ||
        json_object_set_new(g, "n", json_integer(S))) {
        rc = out_of_memory(c);
        goto done;
    }
    *res = g;
    g = NULL;
done:
    free(last);
    free(best);
    free(hack);
    json_decref(g);
    json_decref(jl);
    json_decref(jb);
    return rc;
}

/* The p list: --p "1,1.2" or a "p" array; no duplicates. */
static int read_ps(struct ctx *c, double **ps, size_t *np)
{
    static const double def[] = {1.0, 1.2, 1.5, 2.0};
    const char *arg = NULL;
    int rc = flag_text(c, "p", &arg);
    if (rc < 0)
        return rc;
    const json_t *v = json_object_get(source(c, "p"), "p");
    *ps = NULL;
    *np = 0;
    if (arg) {
        size_t n = 1;
        for (const char *s = arg; *s; s++)
            n += *s == ',';
        *ps = calloc(n, sizeof **ps);
        if (!*ps)
            return out_of_memory(c);
        char *copy = strdup(arg);
        if (!copy)
            return out_of_memory(c);
        char *save = NULL;
        size_t k = 0;
        for (char *tok = strtok_r(copy, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            if ((rc = parse_number(tok, "--p", &(*ps)[k++], &c->err)) < 0) {
                free(copy);
                return rc;
            }
        }
        free(copy);
        *np = k;
    } else if (v && !json_is_null(v)) {
        if ((rc = kg_json_as_vector(v, "p", 0, ps, NULL, np, &c->err)) < 0)
            return rc;
    } else {
        *ps = malloc(sizeof def);
        if (!*ps)
            return out_of_memory(c);
        memcpy(*ps, def, sizeof def);
        *np = 4;
    }
    if (*np > INT_MAX)
        return kg_errf(&c->err, KG_EINVAL, "field \"p\": too many values");
    for (size_t a = 0; a < *np; a++) {
        for (size_t b = 0; b < a; b++) {
            if ((*ps)[a] == (*ps)[b]) {
                char num[32];
                kg_json_format_real(num, sizeof num, (*ps)[a]);
                return kg_errf(&c->err, KG_EINVAL, "%s: duplicate value %s",
                               arg ? "option --p" : "field \"p\"", num);
            }
        }
    }
    return 0;
}

static int rl_fastp(struct ctx *c)
{
    double *ps = NULL, *speedup = NULL;
    size_t np = 0, n = 0;
    struct attempt *at = NULL;
    long long *turns = NULL;
    uint8_t *correct = NULL, *hacked = NULL, *valid = NULL;
    json_t *overall = NULL, *by_level = NULL;
    int rc;

    if ((rc = read_ps(c, &ps, &np)) < 0)
        goto done;
    const json_t *va = need(c, "attempts");
    if (!va) {
        rc = KG_EINVAL;
        goto done;
    }
    if (!json_is_array(va)) {
        rc = kg_errf(&c->err, KG_EINVAL,
                     "field \"attempts\": expected an array, got %s",
                     kg_json_type_name(va));
        goto done;
    }
    n = json_array_size(va);
    at = calloc(n + 1, sizeof *at);
    turns = calloc(n + 1, sizeof *turns);
    if (!at || !turns) {
        rc = out_of_memory(c);
        goto done;
    }
    /* an excluded attempt (problem_error) is left out, as if not given */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        rc = read_attempt(json_array_get(va, i), i, &at[kept], &c->err);
        if (rc < 0)
            goto done;
        if (!at[kept].tu.excluded)
            turns[kept] = at[kept].turn, kept++;
    }
    n = kept;

    /* Turns: the sorted distinct values. Trajectories: runs of the sort. */
    qsort(turns, n, sizeof *turns, cmp_long_long);
    size_t T = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || turns[i] != turns[T - 1])
            turns[T++] = turns[i];
    qsort(at, n, sizeof *at, cmp_attempt);
    size_t S = 0, dup = SIZE_MAX, dup_at = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || !same_trajectory(&at[i - 1], &at[i]))
            S++;
        else if (at[i - 1].turn == at[i].turn && at[i].idx < dup) {
            dup = at[i].idx; /* the first attempt that repeats an earlier */
            dup_at = i;
        }
    }
    if (dup != SIZE_MAX) {
        const struct attempt *d = &at[dup_at];
        char prob[96];
        if (d->pint)
            snprintf(prob, sizeof prob, "%lld", d->pnum);
        else
            snprintf(prob, sizeof prob, "\"%.*s\"",
                     d->plen > 64 ? 64 : (int)d->plen, d->pstr);
        rc = kg_errf(&c->err, KG_EINVAL,
                     "field \"attempts[%zu]\": duplicate attempt (level "
                     "%lld, problem %s, sample %lld, turn %lld)",
                     dup, d->level, prob, d->sample, d->turn);
        goto done;
    }
    if (S > INT_MAX || T > INT_MAX || (T && S > SIZE_MAX / T)) {
        rc = kg_errf(&c->err, KG_EINVAL, "field \"attempts\": too many");
        goto done;
    }

    correct = calloc(S * T + 1, 1);
    hacked = calloc(S * T + 1, 1);
    valid = calloc(S * T + 1, 1);
    speedup = calloc(S * T + 1, sizeof *speedup);
    by_level = json_object();
    if (!correct || !hacked || !valid || !speedup || !by_level) {
        rc = out_of_memory(c);
        goto done;
    }
    size_t s = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || !same_trajectory(&at[i - 1], &at[i]))
            s++;
        const long long *tp =
            bsearch(&at[i].turn, turns, T, sizeof *turns, cmp_long_long);
        size_t x = s * T + (size_t)(tp - turns);
        correct[x] = at[i].tu.correct;
        hacked[x] = at[i].tu.hacked;
        speedup[x] =
            at[i].tu.correct && !at[i].tu.hacked ? at[i].tu.speedup : 0.0;
        valid[x] = 1;
    }

    rc = fastp_group(c, &overall, correct, hacked, speedup, valid, (int)S,
                     (int)T, ps, (int)np);
    if (rc)
        goto done;
    /* Levels are contiguous blocks of rows, in order. */
    size_t row = 0, s0 = 0;
    for (size_t i = 0; i <= n; i++) {
        int new_traj =
            i < n && (i == 0 || !same_trajectory(&at[i - 1], &at[i]));
        int new_level = i == n || (i > 0 && at[i].level != at[i - 1].level);
        if (i > 0 && new_level) {
            size_t o = s0 * T;
            json_t *g;
            rc = fastp_group(c, &g, correct + o, hacked + o, speedup + o,
                             valid + o, (int)(row - s0), (int)T, ps, (int)np);
            if (rc)
                goto done;
            char key[32];
            snprintf(key, sizeof key, "%lld", at[i - 1].level);
            if (json_object_set_new(by_level, key, g)) {
                rc = out_of_memory(c);
                goto done;
            }
            s0 = row;
        }
        row += (size_t)new_traj;
    }

    json_t *jp, *jt;
    if ((rc = kg_json_real_array(&jp, ps, NULL, np, "p", &c->err)) ||
        (rc = set_out(c, "p", jp)))
        goto done;
    jt = json_array();
    for (size_t t = 0; jt && t < T; t++)
        if (json_array_append_new(jt, json_integer(turns[t])))
            break;
    if (jt && json_array_size(jt) != T) {
        json_decref(jt);
        jt = NULL;
    }
    if (!jt || json_object_set_new(c->out, "turns", jt)) {
        rc = out_of_memory(c);
        goto done;
    }
    if (json_object_set(c->out, "overall", overall) ||
        json_object_set(c->out, "by_level", by_level)) {
        rc = out_of_memory(c);
        goto done;
    }
    rc = 0;
done:
    free(ps);
    free(at);
    free(turns);
    free(correct);
    free(hacked);
    free(valid);
    free(speedup);
    json_decref(overall);
    json_decref(by_level);
    return rc;
}

/* ---- test-time scaling selection --------------------------------------- */

static int rl_select(struct ctx *c)
{
    long long w = 4;
    int rc = get_int(c, "w", INT_MIN, INT_MAX, &w);
    if (rc < 0)
        return rc;
    const json_t *v = need(c, "rewards");
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
        rc = out_of_memory(c);
        goto done;
    }
    static const struct argmap map[] = {
        {"w", "w"}, {"reward", "rewards"}, {0, 0}};
    rc = kg_rl_select_topw(idx, &nout, r, (int)T, (int)w, &c->err);
    if (rc) {
        lib_error(c, rc, map, "rewards");
        goto done;
    }
    rc = set_out(c, "selected", kg_json_int_array(idx, (size_t)nout));
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
    {"fastp", rl_fastp, {{"p", "--p"}}},
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
