/*
 * rl_json_impl.h - private to the JSON layer of kgym rl (rl_json.c,
 * rl_json_opts.c, rl_json_fastp.c): the context a subcommand runs in, the
 * option and field readers every subcommand shares, and the per-turn
 * reader Fast@p shares with reward. Not installed; not part of the API.
 */
#ifndef KG_RL_JSON_IMPL_H
#define KG_RL_JSON_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "json_util.h"

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

/* Library argument name -> input field, for kg_rlj_lib_error; ended by
 * a NULL arg. */
struct argmap {
    const char *arg, *field;
};

struct turn {
    uint8_t correct, hacked;
    uint8_t excluded;   /* verdict problem_error: not the policy's to score */
    double speedup, pr; /* NaN when not given */
};

/* ---- options and input fields (rl_json_opts.c) ------------------------ */

const json_t *kg_rlj_source(const struct ctx *c, const char *field);
int kg_rlj_flag_text(struct ctx *c, const char *field, const char **text);
int kg_rlj_parse_number(const char *s, const char *flag, double *out,
                        kg_err *err);
int kg_rlj_get_number(struct ctx *c, const char *field, double *out);
int kg_rlj_get_in_range(struct ctx *c, const char *field, double lo,
                        int lo_open, double hi, double *out);
/* The widest a scale-like option may be: 1e6 (a speedup cap or a Fast@p
 * threshold beyond it is no threshold; the request's speedup_recheck_bound
 * stops there too). */
#define KG_RLJ_MAX 1e6
int kg_rlj_get_int(struct ctx *c, const char *field, long long lo, long long hi,
                   long long *out);
int kg_rlj_get_switch(struct ctx *c, const char *field, int *out);
int kg_rlj_get_word(struct ctx *c, const char *field, const char **out,
                    int *from_flag);
int kg_rlj_get_seed(struct ctx *c, uint64_t *out);
const json_t *kg_rlj_need(struct ctx *c, const char *key);
int kg_rlj_lib_error(struct ctx *c, int rc, const struct argmap *map,
                     const char *dflt);
int kg_rlj_out_of_memory(struct ctx *c);
int kg_rlj_set_out(struct ctx *c, const char *key, json_t *value);

/* ---- per-turn reading (rl_json.c) -------------------------------------- */

const char *kg_rlj_path(char *buf, size_t size, const char *prefix,
                        const char *key);
int kg_rlj_read_turn(const json_t *t, const char *prefix, const char *noun,
                     int want_pr, struct turn *tu, kg_err *err);

/* ---- subcommands in their own files ------------------------------------ */

int kg_rlj_fastp(struct ctx *c); /* rl_json_fastp.c */

#endif
