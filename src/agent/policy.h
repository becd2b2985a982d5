/*
 * policy.h - the policy: any OpenAI-compatible chat endpoint
 * (POST {url}/v1/chat/completions), many requests in flight over libcurl's
 * multi interface, with a concurrency cap, a request-rate limit, retries
 * with exponential backoff on 429, 5xx, connection errors and attempt
 * timeouts, and a deadline per request: a reply that never comes fails
 * that request once its deadline passes, never hangs the run. A reply that
 * is not what the API promises (not JSON, no choices) fails its request
 * with a one-line reason; the others go on.
 *
 * Not thread-safe: one kg_policy per thread.
 */
#ifndef KGYM_AGENT_POLICY_H
#define KGYM_AGENT_POLICY_H

#include <jansson.h>
#include <signal.h>

#include "kgym/kgym.h"

typedef struct kg_policy_cfg {
    const char *url;    /* base URL ("http://host:8000", "/v1" optional) */
    const char *model;  /* the "model" field */
    const char *key;    /* API key (Bearer), NULL: none */
    double temperature; /* < 0: not sent */
    double top_p;       /* < 0: not sent */
    long max_tokens;    /* 0: not sent */
    json_t *stop;       /* NULL, or an array of strings (borrowed) */
    int logprobs;       /* ask for logprobs and return_token_ids */
    int concurrency;    /* requests in flight at most (default 64) */
    double rate;        /* requests started per second at most, 0: no limit */
    double deadline_s;  /* per request, retries included (default 600) */
    int max_retries;    /* default 6 */
    double backoff_s;   /* first pause before a retry (default 1), doubling */
    double backoff_max_s; /* pause cap (default 30) */
} kg_policy_cfg;

void kg_policy_cfg_default(kg_policy_cfg *cfg);

/* One completion of a reply. Strings and JSON owned by the request. */
typedef struct kg_policy_choice {
    char *content;       /* "" when the message had none; each U+0000 of
                            the reply as U+FFFD, so that it stays a string */
    char *nul_content;   /* NULL, or when the reply held U+0000: the content
                            with each as byte 0xFF (never in UTF-8), to
                            tell where the NULs were */
    char *finish_reason; /* NULL when absent */
    json_t *token_ids;   /* array of ints, or NULL (not asked / not given) */
    json_t *logprobs;    /* array of numbers, or NULL */
} kg_policy_choice;

/* One request and, after kg_policy_run, its outcome. */
typedef struct kg_policy_req {
    /* in (borrowed; the caller keeps them alive during the run) */
    json_t *messages;
    int n;                 /* completions wanted (>= 1) */
    int has_seed;
    long long seed;
    const char *tag;       /* sent as header X-Kgym-Tag when non-NULL */
    /* out */
    int ok;                /* 1: choices hold the reply */
    char error[300];       /* why not, one line */
    kg_policy_choice *choices;
    int nchoices;
    long prompt_tokens, completion_tokens; /* -1: not in usage */
    int attempts;
    double seconds;        /* from its first attempt to its end */
} kg_policy_req;

typedef struct kg_policy kg_policy;

/* *out owned by the caller (kg_policy_free). cfg's strings are copied. */
int kg_policy_new(kg_policy **out, const kg_policy_cfg *cfg, kg_err *err);
void kg_policy_free(kg_policy *p);

/*
 * Start-up check: GET {url}/v1/models within 10 s. An answer (any status
 * but 401/403) is 0; no answer is KG_EUNAVAIL, 401/403 KG_EINVAL (the key
 * was refused), with the reason in err.
 */
int kg_policy_health(kg_policy *p, kg_err *err);

/* Progress callback: requests in flight and finished so far. */
typedef void (*kg_policy_progress)(void *ctx, int in_flight, int done);

/*
 * Runs reqs[0..n) to their ends (each ok, or failed with its reason): at
 * most cfg.concurrency in flight, started no faster than cfg.rate. Every
 * request ends within its deadline (plus about a second). While *abort is
 * non-zero (NULL: never) the requests left fail ("interrupted") and the
 * call returns KG_ESTATE; else 0. progress may be NULL.
 */
int kg_policy_run(kg_policy *p, kg_policy_req *reqs, int n,
                  volatile sig_atomic_t *abort, kg_policy_progress progress,
                  void *ctx);

/*
 * The same one request at a time, for a caller with its own loop:
 * kg_policy_submit queues r (borrowed until it comes back done; 0 or
 * KG_ENOMEM); kg_policy_step starts what may start, moves transfers on,
 * waits at most max_wait_ms when nothing happened, and writes the requests
 * that ended (each ok or failed) into done[] (room for every pending one),
 * returning their count. While *abort is non-zero every pending request
 * ends ("interrupted") and comes back.
 */
int kg_policy_submit(kg_policy *p, kg_policy_req *r);
int kg_policy_step(kg_policy *p, long max_wait_ms,
                   volatile sig_atomic_t *abort, kg_policy_req **done);
int kg_policy_pending(const kg_policy *p);   /* queued or in flight */
int kg_policy_in_flight(const kg_policy *p); /* transfers running */

/* Frees a request's outcome (choices), keeping its inputs. */
void kg_policy_req_clear(kg_policy_req *r);

/* policy_msg.c: the request body of r (new reference), NULL when out of
 * memory. */
json_t *kg_policy_body(const kg_policy_cfg *cfg, const kg_policy_req *r);

/*
 * policy_msg.c: reads a 200 reply's body into r (choices, usage). 0, or
 * KG_EPARSE with a one-line reason in err ("policy reply is not JSON
 * (line 1, column 5: ...)", "policy reply has no choices").
 */
int kg_policy_parse(kg_policy_req *r, const char *body, size_t len,
                    kg_err *err);

#endif
