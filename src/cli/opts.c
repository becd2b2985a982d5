/* opts.c - the table-driven option parser of the kgym commands (opts.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/opts.h"
#include "common/log.h"

/* "from 0 to 32", "of at least 0", "": the range for a message. */
static void range_text(double lo, double hi, char *buf, size_t n)
{
    if (isfinite(lo) && isfinite(hi))
        snprintf(buf, n, " from %.10g to %.10g", lo, hi);
    else if (isfinite(lo))
        snprintf(buf, n, " of at least %.10g", lo);
    else if (isfinite(hi))
        snprintf(buf, n, " of at most %.10g", hi);
    else
        buf[0] = 0;
}

/* strtod over the whole of v: 0 and *x, or -1. */
static int whole_number(const char *v, double *x)
{
    char *end;
    errno = 0;
    *x = strtod(v, &end);
    return errno || end == v || *end || isnan(*x) ? -1 : 0;
}

int kg_opts_double(const char *name, const char *v, double lo, double hi,
                   double *out, kg_err *err)
{
    double x;
    if (whole_number(v, &x) || !(x >= lo && x <= hi)) {
        char r[96];
        range_text(lo, hi, r, sizeof r);
        return kg_errf(err, KG_EINVAL, "%s: expected a number%s, got '%s'",
                       name, r, v);
    }
    *out = x;
    return 0;
}

int kg_opts_int(const char *name, const char *v, double lo, double hi,
                long long *out, kg_err *err)
{
    double x;
    if (whole_number(v, &x) || !(x >= lo && x <= hi) || x != floor(x) ||
        fabs(x) >= 9007199254740992.0) {
        char r[96];
        range_text(lo, hi, r, sizeof r);
        return kg_errf(err, KG_EINVAL, "%s: expected an integer%s, got '%s'",
                       name, r, v);
    }
    *out = (long long)x;
    return 0;
}

static const kg_opt *find(const kg_opt *t, const char *a, size_t len)
{
    for (; t && t->name; t++)
        if (strlen(t->name) == len && !strncmp(t->name, a, len))
            return t;
    return NULL;
}

/* Applies option o to its value v (NULL for a switch). */
static int apply(const kg_opts *s, const kg_opt *o, const char *v, kg_err *err)
{
    long long n;
    switch (o->kind) {
    case KG_OPT_FLAG:
        *(int *)o->target = 1;
        return 0;
    case KG_OPT_STR:
        *(const char **)o->target = v;
        return 0;
    case KG_OPT_INT:
        if (kg_opts_int(o->name, v, o->lo, o->hi, &n, err))
            return KG_EINVAL;
        *(int *)o->target = (int)n;
        return 0;
    case KG_OPT_DOUBLE:
        return kg_opts_double(o->name, v, o->lo, o->hi, (double *)o->target,
                              err);
    case KG_OPT_CALL:
    case KG_OPT_CALL0:
        return o->fn(o->target ? o->target : s->ctx, o->name, v, err);
    }
    return kg_errf(err, KG_EINVAL, "%s: bad option table", o->name);
}

/* A --name not in the table (a is the whole argument, its name the first
 * len bytes, eq its "=VALUE" or NULL). Sets *i past a value it takes. */
static int unknown(const kg_opts *s, int argc, char **argv, int *i,
                   size_t len, const char *eq, kg_err *err)
{
    const char *a = argv[*i];
    char name[128];
    if (s->other && s->pass)
        return s->other(s->ctx, a, *i + 1 < argc ? argv[*i + 1] : NULL, err);
    if (!s->other || strncmp(a, "--", 2) || len >= sizeof name)
        return kg_errf(err, KG_ENOTFOUND, "unknown flag %.*s%s", (int)len, a,
                       s->hint ? s->hint : "");
    snprintf(name, sizeof name, "%.*s", (int)len, a);
    if (!eq && *i + 1 >= argc)
        return kg_errf(err, KG_EINVAL, "%s: needs a value", name);
    return s->other(s->ctx, name, eq ? eq + 1 : argv[++*i], err);
}

int kg_opts_parse(const kg_opts *s, int argc, char **argv, kg_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return KG_OPTS_HELP;
        if (a[0] != '-' || !a[1]) {
            rc = s->positional
                     ? s->positional(s->ctx, NULL, a, err)
                     : kg_errf(err, KG_ENOTFOUND, "%s: unexpected argument", a);
            if (rc)
                return rc;
            continue;
        }
        const char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const kg_opt *o = find(s->opts, a, len);
        const char *v = NULL;
        if (!o) {
            rc = unknown(s, argc, argv, &i, len, eq, err);
        } else if (o->kind == KG_OPT_FLAG || o->kind == KG_OPT_CALL0) {
            rc = eq ? kg_errf(err, KG_EINVAL, "%s: takes no value", o->name)
                    : apply(s, o, NULL, err);
        } else if (!eq && i + 1 >= argc) {
            rc = kg_errf(err, KG_EINVAL, "%s: needs a value", o->name);
        } else {
            v = eq ? eq + 1 : argv[++i];
            rc = apply(s, o, v, err);
        }
        if (rc)
            return rc;
    }
    return 0;
}

int kg_opts_main(const kg_opts *spec, int argc, char **argv,
                 void (*help)(FILE *))
{
    kg_err err = {{0}};
    int rc = kg_opts_parse(spec, argc, argv, &err);
    if (rc == KG_OPTS_HELP) {
        help(stdout);
        return 0;
    }
    if (rc) {
        kg_error("%s", err.msg);
        return 2;
    }
    return -1;
}
