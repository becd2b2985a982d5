/*
 * http_client.h - a small HTTP client for kgym's own API (libcurl
 * underneath): JSON bodies in and out, a bearer token, per-request
 * timeouts, and one connection kept alive across requests.
 *
 * A client object is not thread-safe: one per thread. Every request
 * returns 0 when the server answered (whatever the status: read
 * resp->status), or a negative KG_E* code when it did not (KG_EUNAVAIL:
 * could not connect or the connection broke; KG_ETIMEOUT: no answer in
 * time; KG_ESTATE: aborted through the abort flag), with the reason in err.
 */
#ifndef KGYM_HTTP_CLIENT_H
#define KGYM_HTTP_CLIENT_H

#include <jansson.h>
#include <signal.h>

#include "kgym/kgym.h"

typedef struct kg_client kg_client;

typedef struct kg_client_resp {
    long status;  /* HTTP status, 0 when no answer came */
    json_t *json; /* parsed body, NULL when empty or not JSON (owned) */
    char *body;   /* raw body, NUL-terminated, never NULL after 0 (owned) */
    size_t len;
} kg_client_resp;

/*
 * Creates a client for base_url ("http://host:port", a trailing slash is
 * ignored). token may be NULL (no Authorization header); it is copied.
 * *out owned by the caller (kg_client_free).
 */
int kg_client_new(kg_client **out, const char *base_url, const char *token,
                  kg_err *err);
void kg_client_free(kg_client *c);

/* Connect timeout for every request (default 5000 ms). */
void kg_client_set_connect_timeout(kg_client *c, long ms);

/*
 * While *flag is non-zero, requests in progress are aborted (KG_ESTATE)
 * within about a second. NULL turns it off. Meant for a signal flag.
 */
void kg_client_set_abort(kg_client *c, volatile sig_atomic_t *flag);

/*
 * One request: method ("GET", "POST", "DELETE"), path ("/evaluate"), body
 * (NULL: none; otherwise sent as JSON), total timeout in ms (0: none).
 * Fills *resp (release with kg_client_resp_free, also after an error).
 */
int kg_client_request(kg_client *c, const char *method, const char *path,
                      const json_t *body, long timeout_ms, kg_client_resp *resp,
                      kg_err *err);
void kg_client_resp_free(kg_client_resp *resp);

/*
 * The server's error of a non-2xx reply as one line: "STATUS CODE:
 * MESSAGE" from {"error": {"code", "message", "field"}}, else the status
 * and the start of the body. Written into buf (size n); returns buf.
 */
const char *kg_client_error_text(const kg_client_resp *resp, char *buf,
                                 size_t n);

/*
 * The first token of a token file: the first line that is not blank and
 * does not start with '#', surrounding white space removed. Caller frees
 * *token.
 */
int kg_client_read_token(const char *path, char **token, kg_err *err);

#endif
