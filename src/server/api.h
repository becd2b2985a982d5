/*
 * api.h - the endpoint handlers of kgym serve (docs/api.md).
 *
 * http.c routes a request, checks its token and reads its body, then calls
 * kg_api_dispatch, which turns it into store and scheduler calls and a
 * JSON reply. Status codes, consistently:
 *   400  the body is not JSON, not UTF-8, a field has the wrong type, a
 *        required field is missing, an enum value (backend, priority...)
 *        is unknown, or an id is malformed;
 *   422  every field has the right type but a value is out of its range
 *        (num_perf_trials 0, atol -1, wait_s 1000...);
 *   413  the body is over 1 MiB, or a code field over its limit;
 *   404  unknown task or worker; 409 a state conflict; 503 store down.
 * Every error names the field when one is to blame.
 */
#ifndef KGYM_SERVER_API_H
#define KGYM_SERVER_API_H

#include <jansson.h>
#include <stdint.h>

#include "kgym/kgym.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/sched.h"
#include "server/store.h"

#define KG_API_MAX_WAIT_S 120 /* longest long poll a worker may ask for */
#define KG_API_MAX_BATCH 10000
#define KG_API_MAX_POLL_IDS 1000 /* task ids per POST /results/batch */

typedef struct kg_api kg_api;

/*
 * A new API over store s and scheduler sc (both borrowed; they must
 * outlive it). opts are the store's lease and worker TTL (told to
 * workers at registration). metrics may be NULL. Returns NULL if out of
 * memory. Free with kg_api_free.
 */
kg_api *kg_api_new(kg_store *s, kg_sched *sc, const kg_store_opts *opts,
                   kg_metrics *metrics);
void kg_api_free(kg_api *api);

/* Where to wake parked long polls when work arrives (may stay unset). */
void kg_api_set_http(kg_api *api, kg_http *h);

struct kg_super;
/* The supervisor of local workers, shown by /health and /metrics (NULL:
 * none). Set before serving requests, or cleared after the last. */
void kg_api_set_supervisor(kg_api *api, struct kg_super *sup);

/* 1 when the store can defer a write's durability (kg_store_defers): a
 * request that writes may then run on an HTTP thread. */
int kg_api_defers(kg_api *api);

/* Answers one routed, authenticated request (see http.h). */
void kg_api_dispatch(kg_api *api, const kg_http_req *req, kg_http_reply *rep);

/* The API as the transport's handler (kg_http_start): dispatch and
 * defers_writes over api. */
kg_http_handler kg_api_handler(kg_api *api);

/* The parts of POST /evaluate that do not touch the store. */
typedef struct kg_api_error {
    int status;        /* 400, 413, 422 */
    const char *code;  /* "invalid_json", "invalid_field"... (static) */
    const char *field; /* static, or NULL */
    char message[KG_ERR_MAX];
} kg_api_error;

/*
 * Parses a JSON body (at most KG_HTTP_MAX_BODY bytes) into *out (caller
 * owns it). Returns 0, or -1 with e filled (400 for anything not a JSON
 * object in valid UTF-8).
 */
int kg_api_parse_body(const char *body, size_t len, json_t **out,
                      kg_api_error *e);

/*
 * Validates one task request (docs/design.md's table) and returns its
 * normalized form in *norm (caller owns it), or -1 with e filled: 413 for
 * a code field over its size limit, else 400 or 422 as above, naming the
 * field. Pure: also the fuzz harness's entry point.
 */
int kg_api_check_task(const json_t *in, json_t **norm, kg_api_error *e);

/*
 * Checks POST /results/batch's "task_ids": an array of
 * 1..KG_API_MAX_POLL_IDS distinct task ids (400 not an array or an entry
 * not a string, 413 too many, 422 empty, a malformed id or one listed
 * twice). Returns the array (borrowed from in), or NULL with e filled.
 * Pure: also a fuzz harness entry point.
 */
const json_t *kg_api_check_poll_ids(const json_t *in, kg_api_error *e);

#endif
