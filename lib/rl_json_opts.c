/*
 * rl_json_opts.c - how a kgym rl subcommand (rl_json.c) reads its options
 * and input fields: a flag's text, else an option value, else the input's
 * field, else the default; and how it reports the numeric core's errors
 * under the input field they came from.
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
const json_t *kg_rlj_source(const struct ctx *c, const char *field)
{
    return member(c->opts, field) ? c->opts : c->in;
}

/*
 * The text of the option's flag in the options object ("--gamma": "0.5")
 * into *text, left alone when the flag is not given. A switch's member is
 * a boolean, anything else's a string.
 */
int kg_rlj_flag_text(struct ctx *c, const char *field, const char **text)
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
int kg_rlj_parse_number(const char *s, const char *flag, double *out,
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
int kg_rlj_get_number(struct ctx *c, const char *field, double *out)
{
    const char *text = NULL;
    int rc = kg_rlj_flag_text(c, field, &text);
    if (rc)
        return rc < 0 ? rc
                      : kg_rlj_parse_number(text, opt_def(c, field)->flag, out,
                                            &c->err);
    return kg_json_opt_number(kg_rlj_source(c, field), field, NULL, out,
                              &c->err);
}

/*
 * kg_rlj_get_number, then the value must be finite and in [lo, hi] (lo
 * excluded when lo_open). As with the library's checks, the error names
 * the field, whether a flag or a field gave it; a default is checked too.
 */
int kg_rlj_get_in_range(struct ctx *c, const char *field, double lo,
                        int lo_open, double hi, double *out)
{
    int rc = kg_rlj_get_number(c, field, out);
    if (rc < 0)
        return rc;
    double x = *out;
    if (isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi)
        return 0;
    return kg_errf(&c->err, KG_EINVAL,
                   "field \"%s\": must be a finite number in %s%g, %g], got "
                   "%g",
                   field, lo_open ? "(" : "[", lo, hi, x);
}

int kg_rlj_get_int(struct ctx *c, const char *field, long long lo, long long hi,
                   long long *out)
{
    const char *s = NULL, *flag = opt_def(c, field)->flag;
    int rc = kg_rlj_flag_text(c, field, &s);
    if (rc < 0)
        return rc;
    if (!s)
        return kg_json_opt_int(kg_rlj_source(c, field), field, NULL, lo, hi,
                               out, &c->err);
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

int kg_rlj_get_switch(struct ctx *c, const char *field, int *out)
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
    return kg_json_opt_bool(kg_rlj_source(c, field), field, NULL, out, &c->err);
}

/* *from_flag: whether the word came from the flag (for messages). */
int kg_rlj_get_word(struct ctx *c, const char *field, const char **out,
                    int *from_flag)
{
    int rc = kg_rlj_flag_text(c, field, out);
    *from_flag = rc > 0;
    if (rc)
        return rc < 0 ? rc : 0;
    return kg_json_opt_string(kg_rlj_source(c, field), field, NULL, out,
                              &c->err);
}

/*
 * The seed: an integer in [0, 2^64). A JSON integer stops at 2^63 - 1
 * (jansson's), so a string of decimal digits is read too, the form of
 * protobuf's JSON mapping for 64-bit integers; the Python bindings send
 * every seed so. The flag takes the digits.
 */
int kg_rlj_get_seed(struct ctx *c, uint64_t *out)
{
    const char *text = NULL;
    int rc = kg_rlj_flag_text(c, "seed", &text);
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
    const json_t *v = member(kg_rlj_source(c, "seed"), "seed");
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
const json_t *kg_rlj_need(struct ctx *c, const char *key)
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
int kg_rlj_lib_error(struct ctx *c, int rc, const struct argmap *map,
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

int kg_rlj_out_of_memory(struct ctx *c)
{
    return kg_errf(&c->err, KG_ENOMEM, "out of memory");
}

/* Sets c->out = {key: value}, taking value (NULL: out of memory). */
int kg_rlj_set_out(struct ctx *c, const char *key, json_t *value)
{
    c->out = json_object();
    if (!c->out || !value || json_object_set_new(c->out, key, value)) {
        json_decref(value);
        return kg_rlj_out_of_memory(c);
    }
    return 0;
}
