/*
 * rl_json.h - the RL mathematics of rl.h over JSON: one call per `kgym rl`
 * subcommand, input and output as JSON text. The command line
 * (src/cli/cmd_rl.c) and the Python bindings (python/kgym/rl.py) both call
 * it, so they read, check and answer the same way; docs/rl.md describes
 * the inputs and outputs.
 *
 * Unlike rl.h this layer allocates (the output) and links jansson.
 */
#ifndef KGYM_RL_JSON_H
#define KGYM_RL_JSON_H

#include <stddef.h>

#include "kgym.h"

/*
 * Runs subcommand ("reward", "returns", "advantages", "mrs", "prs",
 * "fastp" or "select") on input_json[0..len), which must hold one JSON
 * object.
 *
 * options_json is NULL or a NUL-terminated JSON object of options that
 * take precedence over the input's fields of the same names: a member
 * named as the option's field ("gamma": 0.5) holds a JSON value, read as
 * that field would be; a member named as its command-line flag
 * ("--gamma": "0.5") holds the flag's text, parsed as `kgym rl` parses it
 * (a switch such as "--norm-std": true), and wins over both. A null member
 * counts as absent. Messages about a flag name the flag (`option --gamma:
 * ...`); all others name the input field (`field "turns[2].speedup": ...`).
 *
 * On success *output_json is the output object as one line (no newline),
 * malloc'd: free it with kg_rl_json_free or free(). On error it is NULL and
 * the return is KG_EINVAL or KG_ENONFINITE for bad input or options,
 * KG_EPARSE for text that is not JSON, KG_ENOMEM when out of memory, with
 * the message in err (which may be NULL).
 */
int kg_rl_json(const char *subcommand, const char *input_json, size_t len,
               const char *options_json, char **output_json, kg_err *err);

/* Frees an output of kg_rl_json (NULL is fine). */
void kg_rl_json_free(char *output_json);

#endif
