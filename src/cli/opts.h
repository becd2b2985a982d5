/* opts.h - one table-driven parser for the kgym commands' options.
 *
 * A command lists its options in a table of kg_opt ended by an entry with
 * a NULL name, and kg_opts_parse walks argv once: "--name VALUE" and
 * "--name=VALUE" for an option with a value, "--name" for a switch, -h or
 * --help, and any other argument (one not starting with '-', or "-" alone)
 * as a positional one. Every refusal is one line in the caller's kg_err
 * that names the option; the commands print it and exit 2. */
#ifndef KGYM_CLI_OPTS_H
#define KGYM_CLI_OPTS_H

#include <stdio.h>

#include "kgym/kgym.h"

typedef enum {
    KG_OPT_FLAG,   /* a switch: *(int *)target = 1 */
    KG_OPT_STR,    /* *(const char **)target = the value (borrowed argv) */
    KG_OPT_INT,    /* *(int *)target = an integer in [lo, hi] */
    KG_OPT_DOUBLE, /* *(double *)target = a number in [lo, hi], not NaN */
    KG_OPT_CALL,   /* fn(ctx, name, value, err): an option with a value */
    KG_OPT_CALL0,  /* fn(ctx, name, NULL, err): a switch with an action */
} kg_opt_kind;

/* An option's action, or a command's positional or fallback handler:
 * 0 when taken, else a negative KG_E* code with the reason in err. */
typedef int (*kg_opt_fn)(void *ctx, const char *name, const char *value,
                         kg_err *err);

typedef struct {
    const char *name; /* "--ref"; NULL ends the table */
    kg_opt_kind kind;
    void *target;     /* FLAG, STR, INT, DOUBLE; CALL, CALL0: the ctx
                         its fn gets when set (else the spec's ctx) */
    double lo, hi;    /* INT, DOUBLE: the accepted range */
    kg_opt_fn fn;     /* CALL, CALL0 */
} kg_opt;

typedef struct {
    const kg_opt *opts;
    void *ctx; /* handed to every fn */
    /* An argument that is not an option: fn(ctx, NULL, arg, err). NULL:
     * none is accepted ("ARG: unexpected argument"). */
    kg_opt_fn positional;
    /* A --name not in the table: fn(ctx, name, value, err) with its value
     * (the command's request fields). NULL: "unknown flag --name". */
    kg_opt_fn other;
    /* Set: `other` gets a --name not in the table as it is, with a peek at
     * the next argument (NULL at the end), which stays to be parsed (a
     * command that hands the options it does not know to another). */
    int pass;
    /* Appended to "unknown flag --name", e.g. " (kgym report --help)". */
    const char *hint;
} kg_opts;

/* Table entries, one per kind. */
#define KG_OPT_F(n, p) {n, KG_OPT_FLAG, p, 0, 0, NULL}
#define KG_OPT_S(n, p) {n, KG_OPT_STR, p, 0, 0, NULL}
#define KG_OPT_I(n, p, lo, hi) {n, KG_OPT_INT, p, lo, hi, NULL}
#define KG_OPT_D(n, p, lo, hi) {n, KG_OPT_DOUBLE, p, lo, hi, NULL}
#define KG_OPT_FN(n, f) {n, KG_OPT_CALL, NULL, 0, 0, f}
#define KG_OPT_FN0(n, f) {n, KG_OPT_CALL0, NULL, 0, 0, f}
/* A callback on a ctx of its own: entries that several commands share. */
#define KG_OPT_FN_ON(n, f, c) {n, KG_OPT_CALL, c, 0, 0, f}
#define KG_OPT_FN0_ON(n, f, c) {n, KG_OPT_CALL0, c, 0, 0, f}
#define KG_OPT_END {NULL, 0, NULL, 0, 0, NULL}

#define KG_OPTS_HELP 1

/*
 * Parses argv[1..argc) by spec, in order; a later option overrides an
 * earlier one of a STR, INT or DOUBLE kind, a CALL sees each. Returns 0,
 * KG_OPTS_HELP at -h or --help (nothing after it is read), or a negative
 * KG_E* code with one line in err: KG_ENOTFOUND for an unknown option or
 * an unexpected argument (the command may print its usage), KG_EINVAL for
 * a missing or bad value, or the code a fn returned.
 */
int kg_opts_parse(const kg_opts *spec, int argc, char **argv, kg_err *err);

/* kg_opts_parse for a command: -1 to go on, else its exit code: 0 after
 * help(stdout) at -h or --help, 2 after logging the refusal (kg_error). */
int kg_opts_main(const kg_opts *spec, int argc, char **argv,
                 void (*help)(FILE *));

/* The value v of option name as an integer in [lo, hi] (written the
 * way strtod reads it, with no fraction): 0 and *out, or KG_EINVAL with
 * "NAME: expected an integer from LO to HI, got 'V'" in err. */
int kg_opts_int(const char *name, const char *v, double lo, double hi,
                long long *out, kg_err *err);

/* The same for a number in [lo, hi] (NaN refused; an infinite bound is
 * left out of the message). */
int kg_opts_double(const char *name, const char *v, double lo, double hi,
                   double *out, kg_err *err);

#endif
