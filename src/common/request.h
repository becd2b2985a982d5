/*
 * request.h - the task request of docs/design.md: validation and defaults.
 *
 * Shared by the server (POST /evaluate), the worker and `kgym eval`, so a
 * request means the same thing wherever it enters.
 */
#ifndef KGYM_REQUEST_H
#define KGYM_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kgym/kgym.h"
#include "kgym/schema.h" /* the fields and KG_MAX_* limits */

/*
 * Validates a request object and returns a new object (caller owns the
 * reference) with every field of docs/design.md's table present: defaults
 * filled, unknown fields dropped, "seed" drawn when absent. On error
 * returns NULL, sets *code (KG_EINVAL) and writes a message that names the
 * field into err; *field (if non-NULL) receives the field's name (static).
 */
json_t *kg_request_normalize(const json_t *in, int *code, const char **field,
                             kg_err *err);

/* The fields the worker engine reads, typed, from a normalized request:
 * the schema's default where a field is absent or not of its type. The
 * strings are borrowed from req. */
typedef struct {
    const char *task_id; /* NULL when absent */
    const char *backend;
    double timeout_s;
    int enable_profiling;
} kg_request_view;
void kg_request_view_of(const json_t *req, kg_request_view *v);

/* Request fields given as command-line flags (request_flag.c). */
/* A flag's value: a JSON literal when it parses as a number, boolean or
 * null, else a string. New reference. */
json_t *kg_request_flag_value(const char *v);

/*
 * A request field given as a flag: "--num-perf-trials" -> "num_perf_trials"
 * set to kg_request_flag_value(v) in fields. Refuses the code fields
 * (they come from files). Returns 0 or KG_EINVAL.
 */
int kg_request_flag(json_t *fields, const char *flag, const char *v,
                    kg_err *err);

/*
 * Gives req a new secret "seed" (53 bits, from getrandom), replacing the
 * client's: a task run again (a retry, a rerun alone) must not draw the
 * inputs its earlier run's candidate saw, which it could have kept the
 * outputs of where the next run reads them. 0, or -1 (req unchanged).
 */
int kg_request_reseed(json_t *req);

/* A task id is 1..100 of [A-Za-z0-9._:-]. */
int kg_task_id_valid(const char *id);

/*
 * Hex SHA-256 of everything that changes an evaluation's outcome (codes,
 * backend, entry point, trials, warm-up, tolerances, strict, reference
 * backend, profiling, hack checks, seed when the client gave one, speedup
 * recheck bound): the result cache key of a normalized request. Not
 * covered: task_id, timeout, priority, force_refresh. Hashes the fields
 * in a fixed order straight into SHA-256 (no JSON text). out must hold 65
 * bytes.
 */
int kg_request_cache_key(const json_t *req, char out[65], kg_err *err);

#endif
