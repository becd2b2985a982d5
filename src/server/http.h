/*
 * http.h - kgym serve's HTTP layer: the libmicrohttpd daemon, routing,
 * request limits, authentication, JSON errors and long polls.
 *
 * A request reaches an endpoint handler (api.h) only after its route is
 * known, its token checked, and its whole body (at most KG_HTTP_MAX_BODY
 * bytes) read. A handler fills a kg_http_reply; one with status 0 asks to
 * be parked (a long poll): the connection is suspended, costing no thread,
 * and the handler is called again after kg_http_wake or at its deadline.
 * A request that writes is also parked while a store thread runs its
 * handler, so that waiting for an fsync holds no HTTP thread.
 */
#ifndef KGYM_SERVER_HTTP_H
#define KGYM_SERVER_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kgym/kgym.h"

#define KG_HTTP_MAX_BODY (1024 * 1024)
#define KG_HTTP_DEFAULT_PORT 10907

/* What a parked request waits for: work to lease, or tasks to finish. */
enum kg_park_kind { KG_PARK_LEASE = 0, KG_PARK_RESULTS = 1 };
#define KG_PARK_KINDS 2

/*
 * A set of task ids as a 512-bit Bloom mask (one bit per id): a parked
 * result poll names the tasks it waits for, a reply the tasks it
 * finished, and a poll is woken when the two share a bit. A false match
 * only costs the poll one look at the store.
 */
#define KG_HTTP_KEY_WORDS 8
void kg_http_key_add(uint64_t mask[KG_HTTP_KEY_WORDS], const char *task_id);

struct kg_auth;
struct kg_metrics;
typedef struct kg_http kg_http;

/* One request as a handler sees it. Everything is borrowed. */
typedef struct kg_http_req {
    const char *method;
    const char *path;  /* without the query string */
    const char *param; /* the {id} of /status/{id} and the like, or NULL */
    const char *body;  /* NUL-terminated; "" when there is none */
    size_t body_len;
    const char *peer; /* the client's address ("127.0.0.1") */
    int route;        /* enum kg_route */
    int resumed;      /* 0 the first call, then 1, 2... after each park */
    double now;       /* monotonic seconds at this call */
    double *slot;     /* a double the handler may keep across parks (0 first) */
} kg_http_req;

/*
 * What a handler answers: a status and either a JSON body (owned, given to
 * the HTTP layer) or a text body (malloc'd, owned likewise). status 0 with
 * park_until > now: park until then or until woken. undo, when set, is
 * called (from a server thread) if the reply could not be delivered, so
 * a lease handed to a worker that hung up can be given back.
 *
 * A handler that parks may also set json: what is sent (200) when the
 * request cannot park (its wait is over, or the server is stopping);
 * without it that answer is a bare 204. park_kind and park_keys say what
 * the park waits for (KG_PARK_RESULTS: the tasks in park_keys to finish).
 * done_keys names the tasks this request finished: parked result polls
 * waiting for one of them are woken once the request's writes are
 * durable.
 */
typedef struct kg_http_reply {
    int status;
    json_t *json;
    char *text;
    size_t text_len;
    const char *content_type; /* for text; default text/plain */
    double park_until;
    int park_kind; /* enum kg_park_kind */
    uint64_t park_keys[KG_HTTP_KEY_WORDS];
    uint64_t done_keys[KG_HTTP_KEY_WORDS];
    void (*undo)(void *ctx, json_t *arg); /* ctx: the handler's */
    json_t *undo_arg; /* owned */
} kg_http_reply;

/* Fills rep with the error object {"error": {code, message, field?}}. */
void kg_http_error(kg_http_reply *rep, int status, const char *code,
                   const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Monotonic seconds (kg_now_ms / 1000). */
double kg_http_now(void);

/*
 * Resolves method and path to a route (enum kg_route) and the auth role it
 * needs (enum kg_auth_role). *param points into path for routes with an
 * {id} (NULL otherwise). Returns 0, or 404 for an unknown path, or 405 when
 * the path exists for another method. Pure; used by the fuzz harness.
 */
int kg_http_route(const char *method, const char *path, int *route, int *role,
                  const char **param);

/*
 * The path a request is routed on, from the raw one (n bytes, no query
 * string): percent-encoded bytes are decoded only when they are RFC 3986
 * unreserved characters (letters, digits, - . _ ~) or ':' (task ids may
 * hold it); the path may hold nothing but those and '/'. So an encoded
 * '/' (%2F), a NUL (%00), a space, a bare '%' or any other byte is
 * refused (-1; the request is answered 404) rather than decoded into
 * another path. Writes at most size bytes to out (NUL-terminated).
 * Returns 0 or -1. Pure.
 */
int kg_http_clean_path(const char *raw, size_t n, char *out, size_t size);

/*
 * The application behind the transport. The HTTP layer knows no endpoint:
 * it routes, authenticates and reads a request, then hands it to dispatch
 * with ctx. defers_writes (may be NULL: 0) says whether the application
 * can defer a write's durability, so that writing requests may run on the
 * HTTP threads rather than the store threads.
 */
typedef struct kg_http_handler {
    void *ctx;
    void (*dispatch)(void *ctx, const kg_http_req *req, kg_http_reply *rep);
    int (*defers_writes)(void *ctx);
} kg_http_handler;

typedef struct kg_http_config {
    const char *listen; /* "HOST:PORT", "[V6]:PORT"; default 127.0.0.1:10907 */
    int threads;        /* thread pool size; 0 = 4 per online CPU */
    int store_threads;  /* threads running writes; 0 = 64 (see http.c) */
    int conn_limit;     /* simultaneous connections, refused beyond; 0 =
                           4096 (lowered to fit the descriptor limit) */
    int per_ip_limit;   /* of them from one client address; 0 = 512 */
    int idle_timeout_s; /* idle connection timeout; 0 = default */
    int request_timeout_s; /* a request's head and body must be in whole
                              within this of the connection's start or the
                              previous request's end; 0 = 30 */
    int allow_remote;   /* 0: refuse an address that is not loopback */
} kg_http_config;

/*
 * Starts the daemon. auth may be NULL (no tokens). Returns 0 and the
 * server in *out (stop with kg_http_stop), or a negative KG_E* code.
 */
int kg_http_start(const kg_http_config *cfg, const kg_http_handler *handler,
                  struct kg_auth *auth, struct kg_metrics *metrics,
                  kg_http **out, kg_err *err);

/* The bound port (useful with port 0) and address text "HOST:PORT". */
int kg_http_port(kg_http *h);
const char *kg_http_address(kg_http *h);

/* Wakes up to n parked lease polls (n < 0: all), oldest first.
 * Thread-safe. */
void kg_http_wake(kg_http *h, int n);

/* Wakes the parked result polls that wait for a task of keys (a mask of
 * kg_http_key_add). Thread-safe. */
void kg_http_wake_keys(kg_http *h, const uint64_t keys[KG_HTTP_KEY_WORDS]);

/* Long polls of one kind (enum kg_park_kind) parked now. */
int kg_http_parked(kg_http *h, int kind);

/* Resumes every parked connection, stops the daemon and frees h. */
void kg_http_stop(kg_http *h);

/* 1 when the address text names a loopback address (127/8, ::1,
 * localhost). */
int kg_http_is_loopback(const char *listen);

#endif
