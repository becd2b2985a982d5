/* policy_impl.h - the policy client's state, shared by policy.c (set-up,
 * health check) and policy_run.c (the multi loop). Not an API. */
#ifndef KGYM_AGENT_POLICY_IMPL_H
#define KGYM_AGENT_POLICY_IMPL_H

#include <curl/curl.h>

#include "agent/policy.h"
#include "kgym/dynbuf.h"

struct kg_policy {
    kg_policy_cfg cfg; /* its strings point at the copies below */
    char *url, *model, *key, *endpoint, *auth;
    CURLM *multi;
    double next_start_ms; /* the rate limit's next free slot */
    struct kg_policy_slot **q; /* requests not done, in order (owned) */
    int nq, capq, inflight;
};

/* One request's transfer state while kg_policy_run drives it. */
struct kg_policy_slot {
    kg_policy_req *r;
    CURL *easy;
    struct curl_slist *headers;
    char *body; /* the request's JSON text, kept across attempts */
    kg_dynbuf reply; /* the reply so far (at most MAX_REPLY, policy.c) */
    long retry_after_s;    /* from a Retry-After header, -1: none */
    double t0_ms, next_ms; /* first attempt; earliest next attempt */
    int state;             /* WAITING, IN_FLIGHT, DONE (policy_run.c) */
    char errbuf[CURL_ERROR_SIZE];
};

/* libcurl callbacks (policy.c); ud is a struct kg_policy_slot. */
size_t kg_policy_on_data(char *d, size_t sz, size_t nm, void *ud);
size_t kg_policy_on_header(char *d, size_t sz, size_t nm, void *ud);

#endif
