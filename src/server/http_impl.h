/*
 * http_impl.h - what the HTTP layer's files share (private to
 * src/server/http*.c): its limits, the per-request and per-connection
 * state, the server object, and the steps each file does for the others.
 */
#ifndef KGYM_SERVER_HTTP_IMPL_H
#define KGYM_SERVER_HTTP_IMPL_H

#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "kgym/dynbuf.h"
#include "server/auth.h"
#include "server/http.h"
#include "server/metrics.h"

#define DEFAULT_CONN_LIMIT 4096
#define DEFAULT_PER_IP_LIMIT 512
#define DEFAULT_IDLE_TIMEOUT_S 30
#define DEFAULT_REQUEST_TIMEOUT_S 30
#define FD_RESERVE 128 /* descriptors kept for the store, workers, logs */
#define CONN_MEMORY_LIMIT (64 * 1024) /* request line + headers */
/* parked lease polls re-ask the store this often; parked result polls,
   which results through this server wake at once, this often */
#define PARK_RECHECK_S 0.2
#define RESULTS_RECHECK_S 1.0
#define WAKE_RING 64 /* the last wakes of result polls, for kg_http_park */
#define DEFAULT_STORE_THREADS 64 /* store jobs (writes) in flight at once */
#define MAX_RAW_PATH 2048 /* routes are short; a longer path cannot match */

/* One request's state, from its first byte to its reply being sent. */
struct conn {
    struct MHD_Connection *mc;
    struct kg_http *h;
    double t0;
    int route, role, status;
    int answered;       /* a reply was queued before the body was read */
    int too_big;        /* the body went over the limit; being discarded */
    int resumed;        /* times resumed after a park */
    int job_done;       /* a store thread answered it, or its deferred
                           writes are durable: rep is the answer */
    const char *method; /* MHD's, valid until the request completes */
    kg_http_reply rep;  /* a store thread's answer, until sent */
    const char *param;
    kg_dynbuf body; /* the request's body (calloc'd: empty, no cap; the
                       KG_HTTP_MAX_BODY check is on_request's) */
    double slot; /* kg_http_req.slot */
    char peer[INET6_ADDRSTRLEN];
    double park_until;
    double park_check; /* a parked result poll: when it next re-asks */
    int park_kind;     /* enum kg_park_kind, while parked */
    uint64_t park_keys[KG_HTTP_KEY_WORDS]; /* the tasks it waits for */
    unsigned long long wake_seen; /* h->wake_seq before its handler ran */
    struct conn *prev, *next;     /* in its parked list while parked */
    struct conn *job_next;        /* in the store job queue */
    void (*undo)(void *, json_t *);
    json_t *undo_arg;
    int started; /* on_request has seen it (else MHD answered it) */
    struct sockaddr_storage sa; /* the client's address */
    const char *uri_at;  /* MHD's request line: where the URI began and */
    const char *uri_end; /* where its text ended (pointers, not read) */
    size_t raw_len;      /* the raw path (no query), at most MAX_RAW_PATH */
    int raw_long;        /* it was longer */
    char *raw;           /* the raw path as sent, inside this allocation */
    char path[];         /* the path routed on (clean_path), param points
                            into it; then the raw path */
};

/* One connection (socket), from accept to close: its request deadline. */
struct sconn {
    int fd;
    long long deadline_ms; /* monotonic ms the request must be in by; 0:
                              none (a handler has it, or it is past) */
    struct sconn *prev, *next;
};

struct kg_http {
    struct MHD_Daemon *d;
    kg_http_handler handler; /* the application (api.c for kgym serve) */
    struct kg_auth *auth;
    struct kg_metrics *metrics;
    int port;
    char address[96];

    pthread_mutex_t lock; /* guards the parked lists and stopping */
    pthread_cond_t cond;
    struct park_list {
        struct conn *head, *tail; /* oldest first */
        int n;
    } parked[KG_PARK_KINDS]; /* by enum kg_park_kind */
    /* the wakes of result polls (kg_http_wake_keys), numbered; the last
       WAKE_RING masks kept, so that a poll about to park sees a wake that
       came while its handler read the store (wake_seq read atomically) */
    unsigned long long wake_seq;
    uint64_t wake_ring[WAKE_RING][KG_HTTP_KEY_WORDS];
    int stopping;
    pthread_t ticker;
    int ticker_started;

    /* store jobs: requests that write, run by a pool of threads while
       their connections are suspended (see kg_http_submit_job) */
    pthread_mutex_t jlock; /* the job queue and jstop */
    pthread_cond_t jcond;
    struct conn *jobs_head, *jobs_tail; /* FIFO */
    int jstop;
    pthread_t *jthreads;
    int njthreads;

    int inline_writes; /* the store defers durability (kg_http_durable_done) */
    int ndeferred;     /* connections waiting for their writes (lock) */

    int check_nul;           /* libmicrohttpd 0.9.x: see header_nul */
    long long trusted_total; /* requests let in by a trusted range only */

    /* connections (see on_connection): the list, under clock */
    pthread_mutex_t clock;
    struct sconn *sconns;
    int nconns;           /* open now (atomic reads) */
    int conn_cap;         /* refused beyond (on_accept) */
    long long request_ms; /* a request must be in whole within this */
    long long refused_total, cut_total; /* atomic */
};

/* ---- http_route.c: the request line, the path and the head ------------- */

/* The methods path allows, for a 405's Allow header ("GET, POST"). */
void kg_http_allowed_methods(const char *path, char *out, size_t size);
/* libmicrohttpd's URI log callback: makes the request's struct conn with
 * a copy of the raw path (NULL when out of memory). */
void *kg_http_on_uri(void *cls, const char *uri, struct MHD_Connection *mc);
/* 1 when a NUL byte cut the request line. */
int kg_http_line_has_nul(const struct conn *c, const char *method,
                         const char *version);
/* Checks the header fields; NULL when fine, else why they are refused.
 * *authz is the Authorization value (NULL: none sent). */
const char *kg_http_check_head(kg_http *h, struct MHD_Connection *mc,
                               const char **authz);

/* ---- http_reply.c: replies and long polls ------------------------------ */

/* Queues rep on the connection; takes ownership of rep's bodies. */
enum MHD_Result kg_http_send_reply(struct conn *c, kg_http_reply *rep,
                                   const char *allow);
enum MHD_Result kg_http_send_error_field(struct conn *c, int status,
                                         const char *code, const char *field,
                                         const char *msg, const char *allow);
enum MHD_Result kg_http_send_error(struct conn *c, int status, const char *code,
                                   const char *msg, const char *allow);
/* Takes c off its parked list (h->lock held). */
void kg_http_park_unlink(kg_http *h, struct conn *c);
/* Suspends c until woken, on the list of rep's park_kind. Returns 0, or
 * -1 when the server is stopping. */
int kg_http_park(kg_http *h, struct conn *c, const kg_http_reply *rep);
/* Resumes the parked polls of every kind that are due (all: every one). */
void kg_http_resume_due(kg_http *h, int all);
/* Wakes the result polls waiting for what rep finished (its done_keys). */
void kg_http_wake_done(kg_http *h, const kg_http_reply *rep);
/* libmicrohttpd's completion callback: delivers or undoes what is left. */
void kg_http_on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                          enum MHD_RequestTerminationCode toe);

/* ---- http_jobs.c: requests that write ---------------------------------- */

/* 1 when the route's handler writes to the store. */
int kg_http_writes(int route);
/* The store's callback once a request's deferred writes are durable. */
void kg_http_durable_done(void *arg, int rc, const char *msg);
/* Counts a request about to run with deferred writes; 0 once stopping. */
int kg_http_defer_start(kg_http *h);
/* Calls the API's handler for c's request. */
void kg_http_run_handler(kg_http *h, struct conn *c, kg_http_reply *rep);
/* Suspends c and queues it for a store thread; -1: run it inline. */
int kg_http_submit_job(kg_http *h, struct conn *c);
void kg_http_start_jobs(kg_http *h, int n);
void kg_http_stop_jobs(kg_http *h);

/* ---- http.c ------------------------------------------------------------ */

/* Sets the connection's deadline: now + the request timeout, or none. */
void kg_http_request_deadline(kg_http *h, struct MHD_Connection *mc, int on);

#endif
