/* http.c - the libmicrohttpd daemon: routing, limits, auth, long polls. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/log.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/http.h"
#include "server/metrics.h"

#define DEFAULT_CONN_LIMIT 4096
#define DEFAULT_PER_IP_LIMIT 512
#define DEFAULT_IDLE_TIMEOUT_S 30
#define DEFAULT_REQUEST_TIMEOUT_S 30
#define FD_RESERVE 128 /* descriptors kept for the store, workers, logs */
#define CONN_MEMORY_LIMIT (64 * 1024) /* request line + headers */
#define PARK_RECHECK_S 0.2       /* parked polls re-ask the store this often */
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
    char *body;
    size_t len, cap;
    double slot; /* kg_http_req.slot */
    char peer[INET6_ADDRSTRLEN];
    double park_until;
    struct conn *prev, *next; /* in the parked list while parked */
    struct conn *job_next;    /* in the store job queue */
    void (*undo)(struct kg_api *, json_t *);
    json_t *undo_arg;
    int started;         /* on_request has seen it (else MHD answered it) */
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
    struct kg_api *api;
    struct kg_auth *auth;
    struct kg_metrics *metrics;
    int port;
    char address[96];

    pthread_mutex_t lock; /* guards the parked list and stopping */
    pthread_cond_t cond;
    struct conn *parked_head, *parked_tail; /* oldest first */
    int nparked;
    int stopping;
    pthread_t ticker;
    int ticker_started;

    /* store jobs: requests that write, run by a pool of threads while
       their connections are suspended (see submit_job) */
    pthread_mutex_t jlock; /* the job queue and jstop */
    pthread_cond_t jcond;
    struct conn *jobs_head, *jobs_tail; /* FIFO */
    int jstop;
    pthread_t *jthreads;
    int njthreads;

    int inline_writes; /* the store defers durability (durable_done) */
    int ndeferred;     /* connections waiting for their writes (lock) */

    int check_nul;            /* libmicrohttpd 0.9.x: see header_nul */
    long long trusted_total;  /* requests let in by a trusted range only */

    /* connections (see on_connection): the list, under clock */
    pthread_mutex_t clock;
    struct sconn *sconns;
    int nconns;          /* open now (atomic reads) */
    int conn_cap;        /* refused beyond (on_accept) */
    long long request_ms; /* a request must be in whole within this */
    long long refused_total, cut_total; /* atomic */
};

double kg_http_now(void)
{
    return kg_now_ms() / 1e3;
}

void kg_http_error(kg_http_reply *rep, int status, const char *code,
                   const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(code));
    json_object_set_new(e, "message", json_string(msg));
    if (field)
        json_object_set_new(e, "field", json_string(field));
    json_decref(rep->json);
    rep->json = json_object();
    json_object_set_new(rep->json, "error", e);
    rep->status = status;
}

/* ---- routing ---------------------------------------------------------- */

struct route_def {
    const char *method;
    const char *path; /* ends with '/' when an {id} follows */
    int route, role;
};

static const struct route_def ROUTES[] = {
    {"POST", "/evaluate", KG_ROUTE_EVALUATE, KG_AUTH_CLIENT},
    {"POST", "/evaluate/batch", KG_ROUTE_EVALUATE_BATCH, KG_AUTH_CLIENT},
    {"GET", "/status/", KG_ROUTE_STATUS, KG_AUTH_CLIENT},
    {"GET", "/results/", KG_ROUTE_RESULTS, KG_AUTH_CLIENT},
    {"DELETE", "/tasks/", KG_ROUTE_CANCEL, KG_AUTH_CLIENT},
    {"GET", "/health", KG_ROUTE_HEALTH, KG_AUTH_NONE},
    {"GET", "/metrics", KG_ROUTE_METRICS, KG_AUTH_ANY},
    {"GET", "/queue/status", KG_ROUTE_QUEUE, KG_AUTH_ANY},
    {"GET", "/workers/status", KG_ROUTE_WORKERS, KG_AUTH_ANY},
    {"POST", "/worker/register", KG_ROUTE_W_REGISTER, KG_AUTH_WORKER},
    {"POST", "/worker/unregister", KG_ROUTE_W_UNREGISTER, KG_AUTH_WORKER},
    {"POST", "/worker/heartbeat", KG_ROUTE_W_HEARTBEAT, KG_AUTH_WORKER},
    {"POST", "/worker/lease", KG_ROUTE_W_LEASE, KG_AUTH_WORKER},
    {"POST", "/worker/result", KG_ROUTE_W_RESULT, KG_AUTH_WORKER},
};
#define NROUTES (sizeof ROUTES / sizeof ROUTES[0])

int kg_http_route(const char *method, const char *path, int *route, int *role,
                  const char **param)
{
    int path_known = 0;
    *route = KG_ROUTE_OTHER;
    *role = KG_AUTH_ANY;
    *param = NULL;
    if (!strcmp(method, "HEAD"))
        method = "GET"; /* MHD sends no body for HEAD */
    for (size_t i = 0; i < NROUTES; i++) {
        const struct route_def *r = &ROUTES[i];
        size_t n = strlen(r->path);
        const char *p = NULL;
        if (r->path[n - 1] == '/') {
            /* one non-empty segment after the prefix */
            if (strncmp(path, r->path, n) || !path[n] || strchr(path + n, '/'))
                continue;
            p = path + n;
        } else if (strcmp(path, r->path)) {
            continue;
        }
        path_known = 1;
        if (strcmp(method, r->method))
            continue;
        *route = r->route;
        *role = r->role;
        *param = p;
        return 0;
    }
    return path_known ? 405 : 404;
}

/* The methods a known path takes, for the Allow header of a 405. */
static void allowed_methods(const char *path, char *out, size_t size)
{
    out[0] = 0;
    for (size_t i = 0; i < NROUTES; i++) {
        size_t n = strlen(ROUTES[i].path);
        int match = ROUTES[i].path[n - 1] == '/'
                        ? !strncmp(path, ROUTES[i].path, n) && path[n] &&
                              !strchr(path + n, '/')
                        : !strcmp(path, ROUTES[i].path);
        if (match && !strstr(out, ROUTES[i].method)) {
            if (out[0])
                strncat(out, ", ", size - strlen(out) - 1);
            strncat(out, ROUTES[i].method, size - strlen(out) - 1);
        }
    }
}

/* A path byte that may stand for itself: RFC 3986's unreserved characters
 * and ':' (task ids may hold it), which are all a route or an id holds. */
static int path_char(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
           (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
           ch == '~' || ch == ':';
}

static int hexval(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int kg_http_clean_path(const char *raw, size_t n, char *out, size_t size)
{
    size_t j = 0;
    if (!size)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)raw[i];
        if (ch == '%') {
            int a = i + 1 < n ? hexval((unsigned char)raw[i + 1]) : -1;
            int b = i + 2 < n ? hexval((unsigned char)raw[i + 2]) : -1;
            if (a < 0 || b < 0)
                return -1;
            ch = (unsigned char)(a * 16 + b);
            if (!path_char(ch))
                return -1; /* an encoded '/', NUL, space, '?'... */
            i += 2;
        } else if (ch != '/' && !path_char(ch)) {
            return -1;
        }
        if (j + 1 >= size)
            return -1;
        out[j++] = (char)ch;
    }
    out[j] = 0;
    return 0;
}

/* ---- replies ---------------------------------------------------------- */

/* Queues rep on the connection; takes ownership of rep's bodies. */
static enum MHD_Result send_reply(struct conn *c, kg_http_reply *rep,
                                  const char *allow)
{
    char *buf = NULL;
    size_t len = 0;
    const char *ctype = "application/json";
    if (rep->json) {
        buf = kg_json_dumps(rep->json);
        json_decref(rep->json);
        rep->json = NULL;
        if (buf) {
            len = strlen(buf);
            buf[len] = 0;
        }
    } else if (rep->text) {
        buf = rep->text;
        len = rep->text_len;
        rep->text = NULL;
        ctype = rep->content_type ? rep->content_type : "text/plain";
    }
    if (!buf && rep->status != 204) {
        static const char oom[] =
            "{\"error\": {\"code\": \"internal\", \"message\": \"out of "
            "memory\"}}";
        buf = strdup(oom);
        len = buf ? strlen(buf) : 0;
        rep->status = 500;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, buf ? buf : (char *)"",
        buf ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    if (len)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (rep->status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"kgym\"");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    c->status = rep->status;
    c->undo = rep->undo;
    c->undo_arg = rep->undo_arg;
    rep->undo = NULL;
    rep->undo_arg = NULL;
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)rep->status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error_field(struct conn *c, int status,
                                        const char *code, const char *field,
                                        const char *msg, const char *allow)
{
    kg_http_reply rep = {0};
    kg_http_error(&rep, status, code, field, "%s", msg);
    c->answered = 1;
    return send_reply(c, &rep, allow);
}

static enum MHD_Result send_error(struct conn *c, int status, const char *code,
                                  const char *msg, const char *allow)
{
    return send_error_field(c, status, code, NULL, msg, allow);
}

/* ---- long polls ------------------------------------------------------- */

static void park_unlink(kg_http *h, struct conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        h->parked_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        h->parked_tail = c->prev;
    c->prev = c->next = NULL;
    h->nparked--;
}

void kg_http_wake(kg_http *h, int n)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    while (h->parked_head && n != 0) {
        struct conn *c = h->parked_head;
        park_unlink(h, c);
        MHD_resume_connection(c->mc);
        if (n > 0)
            n--;
    }
    pthread_mutex_unlock(&h->lock);
}

/* ---- connections: caps and request deadlines ------------------------- */

/*
 * libmicrohttpd's idle timeout restarts on every byte, so a client that
 * sends one byte every 10 s holds its connection for ever; and at its
 * connection limit it stops accepting, so connections beyond it wait in
 * the listen queue instead of being refused. So the server keeps its own
 * books: every connection is listed (on_connection) with the monotonic
 * time its request must be in by, whole (head and body), counted from
 * the connection's start or the end of its previous request; the ticker
 * shuts down the socket of one past it (libmicrohttpd then reads the end
 * and closes it). While a handler has the request (it is in whole) there
 * is no deadline. Beyond conn_cap connections, on_accept refuses (closes)
 * new ones at once; libmicrohttpd's own per-address limit refuses those
 * beyond --max-connections-per-client.
 */
static struct sconn *sconn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Sets the connection's deadline: now + the request timeout, or none. */
static void request_deadline(kg_http *h, struct MHD_Connection *mc, int on)
{
    struct sconn *sc = sconn_of(mc);
    if (sc)
        __atomic_store_n(&sc->deadline_ms,
                         on ? (long long)kg_now_ms() + h->request_ms : 0,
                         __ATOMIC_RELAXED);
}

static void on_connection(void *cls, struct MHD_Connection *mc,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    kg_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct sconn *sc = calloc(1, sizeof *sc);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = sc;
        if (!sc)
            return;
        sc->fd = ci ? ci->connect_fd : -1;
        sc->deadline_ms = (long long)kg_now_ms() + h->request_ms;
        pthread_mutex_lock(&h->clock);
        sc->next = h->sconns;
        if (h->sconns)
            h->sconns->prev = sc;
        h->sconns = sc;
        int n = __atomic_add_fetch(&h->nconns, 1, __ATOMIC_RELAXED);
        if (n > h->conn_cap && sc->fd >= 0) {
            /* threads accepting at once passed on_accept together: the
               one over the cap is shut at once (libmicrohttpd then reads
               its end and closes it) */
            shutdown(sc->fd, SHUT_RDWR);
            sc->deadline_ms = 0;
            __atomic_add_fetch(&h->refused_total, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&h->clock);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        /* before libmicrohttpd closes the descriptor: the sweep, under the
           same lock, never shuts down a number reused by another socket */
        struct sconn *sc = *socket_context;
        *socket_context = NULL;
        if (!sc)
            return;
        pthread_mutex_lock(&h->clock);
        if (sc->prev)
            sc->prev->next = sc->next;
        else
            h->sconns = sc->next;
        if (sc->next)
            sc->next->prev = sc->prev;
        __atomic_sub_fetch(&h->nconns, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&h->clock);
        free(sc);
    }
}

/* libmicrohttpd's accept policy: refuse beyond the connection cap. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr,
                                 socklen_t addrlen)
{
    kg_http *h = cls;
    (void)addr;
    (void)addrlen;
    if (__atomic_load_n(&h->nconns, __ATOMIC_RELAXED) < h->conn_cap)
        return MHD_YES;
    __atomic_add_fetch(&h->refused_total, 1, __ATOMIC_RELAXED);
    return MHD_NO;
}

/* Shuts down the sockets whose request is past its deadline. */
static void sweep_deadlines(kg_http *h)
{
    long long now = (long long)kg_now_ms();
    pthread_mutex_lock(&h->clock);
    for (struct sconn *sc = h->sconns; sc; sc = sc->next) {
        long long d = __atomic_load_n(&sc->deadline_ms, __ATOMIC_RELAXED);
        if (d && now > d && sc->fd >= 0) {
            __atomic_store_n(&sc->deadline_ms, 0, __ATOMIC_RELAXED);
            shutdown(sc->fd, SHUT_RDWR);
            __atomic_add_fetch(&h->cut_total, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&h->clock);
}

/* Re-runs parked polls every PARK_RECHECK_S (a task may have come through
 * another server on a shared store, or been requeued by the scheduler) and
 * at their deadlines; cuts off requests past theirs. */
static void *ticker_main(void *arg)
{
    kg_http *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(PARK_RECHECK_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->cond, &h->lock, &ts);
        while (h->parked_head) {
            struct conn *c = h->parked_head;
            park_unlink(h, c);
            MHD_resume_connection(c->mc);
        }
        pthread_mutex_unlock(&h->lock);
        sweep_deadlines(h);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* Suspends c until woken. Returns 0, or -1 when the server is stopping
 * (then the caller answers at once). */
static int park(kg_http *h, struct conn *c)
{
    pthread_mutex_lock(&h->lock);
    if (h->stopping) {
        pthread_mutex_unlock(&h->lock);
        return -1;
    }
    MHD_suspend_connection(c->mc);
    c->next = NULL;
    c->prev = h->parked_tail;
    if (h->parked_tail)
        h->parked_tail->next = c;
    else
        h->parked_head = c;
    h->parked_tail = c;
    h->nparked++;
    pthread_mutex_unlock(&h->lock);
    return 0;
}

/* ---- store jobs ------------------------------------------------------- */

/*
 * A request that writes (a submission, a lease, a result...) is answered
 * only once its write is on disk, which takes an fsync (SQLite's group
 * commit, Redis's appendfsync always). Run on the thread that reads the
 * connection, it would hold that thread, and every other connection
 * libmicrohttpd put on it, for the fsync; few writes would then be in the
 * store at once to share one. So such a request is a job instead: its
 * connection is suspended (it costs no thread), the job waits in a FIFO
 * queue for one of a pool of store threads, which runs the handler
 * (blocking as long as the store needs) and resumes the connection with
 * the answer. With 64 store threads, up to 64 writes share each fsync,
 * and a read (status, results) never waits behind a write.
 */
static int writes(int route)
{
    switch (route) {
    case KG_ROUTE_EVALUATE:
    case KG_ROUTE_EVALUATE_BATCH:
    case KG_ROUTE_CANCEL:
    case KG_ROUTE_W_REGISTER:
    case KG_ROUTE_W_UNREGISTER:
    case KG_ROUTE_W_HEARTBEAT:
    case KG_ROUTE_W_LEASE:
    case KG_ROUTE_W_RESULT:
        return 1;
    default:
        return 0;
    }
}

/*
 * With a store that defers durability (SQLite's group commit), a write
 * costs no thread while its fsync runs, so it needs no store job: the
 * HTTP thread runs the handler, whose writes return before their fsync,
 * keeps the reply in c->rep and suspends the connection; the store's
 * syncer calls durable_done once every write of the request is on disk,
 * which resumes the connection to send the reply (dispatch, job_done).
 * That saves the two thread hand-offs of a store job per write.
 */
static void durable_done(void *arg, int rc, const char *msg)
{
    struct conn *c = arg;
    kg_http *h = c->h;
    if (rc < 0) {
        /* the writes are lost: the prepared answer must not be sent
           (nor undone: what it handed out was never stored) */
        json_decref(c->rep.undo_arg);
        free(c->rep.text);
        kg_http_reply rep = {0};
        if (rc == KG_EUNAVAIL || rc == KG_EIO)
            kg_http_error(&rep, 503, "store_unavailable", NULL,
                          "task store unavailable: %s", msg ? msg : "");
        else
            kg_http_error(&rep, 500, "internal", NULL, "%s: %s",
                          kg_strerror(rc), msg ? msg : "");
        json_decref(c->rep.json);
        c->rep = rep;
    }
    c->job_done = 1;
    MHD_resume_connection(c->mc); /* c may be gone after this */
    pthread_mutex_lock(&h->lock);
    h->ndeferred--;
    pthread_mutex_unlock(&h->lock);
}

/* Counts a request about to run with deferred writes (kg_http_stop waits
 * for them); 0 once stopping: the request then runs as a store job, or
 * inline (kg_http_stop must never find a suspended connection). */
static int defer_start(kg_http *h)
{
    pthread_mutex_lock(&h->lock);
    int ok = !h->stopping;
    if (ok)
        h->ndeferred++;
    pthread_mutex_unlock(&h->lock);
    return ok;
}

/* /metrics also shows the HTTP layer's own books (connections, refusals,
 * requests cut off at their deadline, and with --trust-clients-from the
 * requests let in by a range alone): appended to the registry's text,
 * which knows nothing of them. */
static void add_http_metrics(kg_http *h, kg_http_reply *rep)
{
    char buf[1536];
    int n = snprintf(
        buf, sizeof buf,
        "# HELP kgym_http_connections Open client connections.\n"
        "# TYPE kgym_http_connections gauge\n"
        "kgym_http_connections %d\n"
        "# HELP kgym_http_connections_refused_total Connections refused at "
        "once: the server was at --max-connections.\n"
        "# TYPE kgym_http_connections_refused_total counter\n"
        "kgym_http_connections_refused_total %lld\n"
        "# HELP kgym_http_requests_cut_total Connections closed because a "
        "request was not in whole within --request-timeout-s.\n"
        "# TYPE kgym_http_requests_cut_total counter\n"
        "kgym_http_requests_cut_total %lld\n",
        __atomic_load_n(&h->nconns, __ATOMIC_RELAXED),
        __atomic_load_n(&h->refused_total, __ATOMIC_RELAXED),
        __atomic_load_n(&h->cut_total, __ATOMIC_RELAXED));
    if (kg_auth_trusted(h->auth, NULL) > 0)
        n += snprintf(
            buf + n, sizeof buf - (size_t)n,
            "# HELP kgym_http_trusted_requests_total Requests let in without "
            "a token from a --trust-clients-from range.\n"
            "# TYPE kgym_http_trusted_requests_total counter\n"
            "kgym_http_trusted_requests_total %lld\n",
            __atomic_load_n(&h->trusted_total, __ATOMIC_RELAXED));
    char *t = realloc(rep->text, rep->text_len + (size_t)n + 1);
    if (!t)
        return;
    memcpy(t + rep->text_len, buf, (size_t)n + 1);
    rep->text = t;
    rep->text_len += (size_t)n;
}

static void run_handler(kg_http *h, struct conn *c, kg_http_reply *rep)
{
    kg_http_req req = {
        .method = c->method,
        .path = c->path,
        .param = c->param,
        .body = c->body ? c->body : "",
        .body_len = c->len,
        .peer = c->peer,
        .route = c->route,
        .resumed = c->resumed,
        .now = kg_http_now(),
        .slot = &c->slot,
    };
    kg_api_dispatch(h->api, &req, rep);
    if (c->route == KG_ROUTE_METRICS && rep->status == 200 && rep->text)
        add_http_metrics(h, rep);
}

static void *job_main(void *arg)
{
    kg_http *h = arg;
    pthread_mutex_lock(&h->jlock);
    for (;;) {
        while (!h->jobs_head && !h->jstop)
            pthread_cond_wait(&h->jcond, &h->jlock);
        struct conn *c = h->jobs_head;
        if (!c)
            break; /* stopping, and the queue is empty */
        h->jobs_head = c->job_next;
        if (!h->jobs_head)
            h->jobs_tail = NULL;
        pthread_mutex_unlock(&h->jlock);
        memset(&c->rep, 0, sizeof c->rep);
        run_handler(h, c, &c->rep);
        c->job_done = 1;
        MHD_resume_connection(c->mc); /* on_request sends c->rep */
        pthread_mutex_lock(&h->jlock);
    }
    pthread_mutex_unlock(&h->jlock);
    return NULL;
}

/* Suspends c and queues it for a store thread. Returns 0, or -1 when
 * there is no pool or it is stopping (then the caller runs it inline). */
static int submit_job(kg_http *h, struct conn *c)
{
    pthread_mutex_lock(&h->jlock);
    if (!h->njthreads || h->jstop) {
        pthread_mutex_unlock(&h->jlock);
        return -1;
    }
    MHD_suspend_connection(c->mc);
    c->job_next = NULL;
    if (h->jobs_tail)
        h->jobs_tail->job_next = c;
    else
        h->jobs_head = c;
    h->jobs_tail = c;
    pthread_cond_signal(&h->jcond);
    pthread_mutex_unlock(&h->jlock);
    return 0;
}

/* Starts n store threads (fewer if the system refuses more). */
static void start_jobs(kg_http *h, int n)
{
    pthread_mutex_init(&h->jlock, NULL);
    pthread_cond_init(&h->jcond, NULL);
    h->jthreads = calloc((size_t)n, sizeof *h->jthreads);
    if (!h->jthreads)
        return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&h->jthreads[i], &attr, job_main, h) != 0)
            break;
        h->njthreads++;
    }
    pthread_attr_destroy(&attr);
}

/* Lets the store threads finish every queued job, then joins them. */
static void stop_jobs(kg_http *h)
{
    pthread_mutex_lock(&h->jlock);
    h->jstop = 1;
    pthread_cond_broadcast(&h->jcond);
    pthread_mutex_unlock(&h->jlock);
    for (int i = 0; i < h->njthreads; i++)
        pthread_join(h->jthreads[i], NULL);
    free(h->jthreads);
    pthread_mutex_destroy(&h->jlock);
    pthread_cond_destroy(&h->jcond);
}

/* ---- the access handler ----------------------------------------------- */

/*
 * 1 when the client of a resumed long poll has hung up (EOF pending on its
 * socket): the poll is dropped instead of leasing a task nobody would
 * receive. libmicrohttpd does not watch suspended connections itself.
 */
static int peer_gone(struct conn *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 ||
           (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static enum MHD_Result dispatch(kg_http *h, struct conn *c, const char *method)
{
    if (!c->resumed && !c->job_done)
        request_deadline(h, c->mc, 0); /* in whole: the handler has it */
    if (c->too_big)
        return send_error(c, 413, "payload_too_large",
                          "request body over 1 MiB", NULL);
    kg_http_reply rep = {0};
    if (c->job_done) {
        rep = c->rep; /* a store thread ran the handler */
        memset(&c->rep, 0, sizeof c->rep);
        c->job_done = 0;
    } else {
        c->method = method;
        int w = writes(c->route);
        if (w && !h->inline_writes && submit_job(h, c) == 0)
            return MHD_YES;
        if (w && h->inline_writes && defer_start(h)) {
            kg_store_defer_begin();
            run_handler(h, c, &rep);
            if (kg_store_defer_pending()) {
                /* answered once its writes are durable (durable_done) */
                MHD_suspend_connection(c->mc);
                c->rep = rep;
                kg_store_defer_end(durable_done, c);
                return MHD_YES;
            }
            int blocked = kg_store_defer_blocked();
            pthread_mutex_lock(&h->lock);
            h->ndeferred--;
            pthread_mutex_unlock(&h->lock);
            kg_store_defer_end(NULL, NULL);
            if (blocked) {
                /* another process holds the database's lock: nothing was
                   written; a store thread waits for it instead */
                json_decref(rep.json);
                free(rep.text);
                json_decref(rep.undo_arg);
                memset(&rep, 0, sizeof rep);
                if (submit_job(h, c) == 0)
                    return MHD_YES;
                run_handler(h, c, &rep);
            }
        } else {
            run_handler(h, c, &rep);
        }
    }
    if (rep.status == 0) {
        if (rep.park_until > kg_http_now() && park(h, c) == 0) {
            c->park_until = rep.park_until;
            c->resumed++;
            json_decref(rep.json);
            return MHD_YES;
        }
        json_decref(rep.json);
        rep.json = NULL;
        rep.status = 204;
    }
    c->answered = 1;
    return send_reply(c, &rep, NULL);
}

/* ---- the request head -------------------------------------------------- */

/*
 * libmicrohttpd's URI log callback: called once per request with the
 * request target exactly as sent, before libmicrohttpd decodes it (it
 * would turn %2F into '/' and %00 into the end of the string). Makes the
 * request's struct conn (our con_cls from here on) with a copy of the raw
 * path; on_request routes on that, never on libmicrohttpd's decoded URL.
 */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc)
{
    kg_http *h = cls;
    if (!uri)
        uri = "";
    size_t n = strcspn(uri, "?");
    int too_long = n > MAX_RAW_PATH;
    if (too_long)
        n = MAX_RAW_PATH;
    struct conn *c = calloc(1, sizeof *c + 2 * (n + 1));
    if (!c)
        return NULL;
    c->raw = c->path + n + 1;
    memcpy(c->raw, uri, n);
    c->raw_len = n;
    c->raw_long = too_long;
    c->uri_at = uri;
    c->uri_end = uri + strlen(uri);
    c->mc = mc;
    c->h = h;
    c->t0 = kg_http_now();
    c->status = 500;
    c->route = KG_ROUTE_OTHER;
    return c;
}

/*
 * 1 when the request line held a NUL byte that cut what libmicrohttpd
 * hands on as C strings ("GET /status/x\0junk HTTP/1.1" reads as
 * /status/x). libmicrohttpd 0.9.x keeps the line in its read buffer with
 * the separators overwritten by NULs, so the method, the URI and the
 * version follow each other there; a NUL inside one of them shows as a
 * gap. Only pointers within one short span are compared, so another
 * layout (a later libmicrohttpd) just skips the check.
 */
static int line_has_nul(const struct conn *c, const char *method,
                        const char *version)
{
    const char *m_end = method + strlen(method);
    if (method < c->uri_at && c->uri_at - method < 64) {
        if (m_end == c->uri_at)
            return 1;
        for (const char *p = m_end + 1; p < c->uri_at; p++)
            if (*p != ' ')
                return 1; /* junk after a NUL in the method */
    }
    if (version > c->uri_end && version - c->uri_end < 4096 &&
        version != c->uri_end + 1)
        return 1; /* a NUL inside the URI */
    return 0;
}

/* What scan_header found in the request's header fields. */
struct head_scan {
    kg_http *h;
    int n_cl, n_te, n_authz, chunked;
    const char *authz; /* the first Authorization value */
    const char *prev_end; /* the end of the previous header's value */
    const char *bad;      /* why the head is refused, or NULL */
};

/*
 * libmicrohttpd 0.9.x measures a header value with strlen, so a value
 * with a NUL in it ("Bearer TOKEN\0junk") reaches us cut at the NUL, with
 * a size that agrees. Its header lines stay in the read buffer in order,
 * their line ends overwritten by NULs: the byte after a value's end is a
 * NUL (the LF of a CRLF, or the empty line after the last header) or the
 * first byte of the next header's name (a bare LF). Anything else is text
 * that followed a NUL inside the value. (h->check_nul is set for 0.9.x
 * only; later versions refuse such lines themselves.)
 */
static int header_nul(const char *end, const char *next_key)
{
    return end[1] != 0 && end + 1 != next_key;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind,
                                   const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    struct head_scan *hs = cls;
    (void)kind;
    if (hs->bad)
        return MHD_NO;
    if (hs->h->check_nul && hs->prev_end && header_nul(hs->prev_end, key)) {
        hs->bad = "a NUL byte in a header value";
        return MHD_NO;
    }
    hs->prev_end = value ? value + value_size : NULL;
    for (size_t i = 0; i < key_size; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch <= ' ' || ch >= 0x7f) {
            hs->bad = "a control character or space in a header name";
            return MHD_NO;
        }
    }
    for (size_t i = 0; value && i < value_size; i++) {
        unsigned char ch = (unsigned char)value[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            hs->bad = "a control character in a header value";
            return MHD_NO;
        }
    }
    if (value && strlen(value) != value_size) {
        hs->bad = "a NUL byte in a header value";
        return MHD_NO;
    }
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        hs->n_cl++;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        hs->n_te++;
        hs->chunked = value && !strcasecmp(value, "chunked");
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION)) {
        if (!hs->n_authz++)
            hs->authz = value;
    }
    return MHD_YES;
}

/* Checks the header fields; NULL when fine, else why they are refused.
 * *authz is the Authorization value (NULL: none sent). */
static const char *check_head(kg_http *h, struct MHD_Connection *mc,
                              const char **authz)
{
    struct head_scan hs = {.h = h};
    MHD_get_connection_values_n(mc, MHD_HEADER_KIND, scan_header, &hs);
    if (!hs.bad && h->check_nul && hs.prev_end && header_nul(hs.prev_end, NULL))
        hs.bad = "a NUL byte in a header value";
    *authz = hs.authz;
    if (hs.bad)
        return hs.bad;
    if (hs.n_cl > 1)
        return "more than one Content-Length header";
    if (hs.n_te > 1 || (hs.n_te && !hs.chunked))
        return "Transfer-Encoding other than one 'chunked'";
    if (hs.n_te && hs.n_cl)
        return "both Content-Length and Transfer-Encoding";
    if (hs.n_authz > 1)
        return "more than one Authorization header";
    return NULL;
}

/* The first call for a request: its head is in. Routes it, checks its
 * head and its token. Returns MHD_YES to go on (or with an error queued). */
static enum MHD_Result start_request(kg_http *h, struct conn *c,
                                     struct MHD_Connection *mc,
                                     const char *method, const char *version)
{
    c->started = 1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) {
            memcpy(&c->sa, sa, sizeof(struct sockaddr_in));
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
                      c->peer, sizeof c->peer);
        } else if (sa->sa_family == AF_INET6) {
            memcpy(&c->sa, sa, sizeof(struct sockaddr_in6));
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr,
                      c->peer, sizeof c->peer);
        }
    }
    if (line_has_nul(c, method, version))
        return send_error(c, 400, "bad_request",
                          "a NUL byte in the request line", NULL);

    /* route on the raw path: only unreserved characters (and ':') may be
       percent-encoded; an encoded '/', NUL or other byte is refused */
    if (c->raw_long ||
        kg_http_clean_path(c->raw, c->raw_len, c->path, c->raw_len + 1)) {
        static const char *const with_id[] = {"/status/", "/results/",
                                              "/tasks/"};
        for (size_t i = 0; i < sizeof with_id / sizeof with_id[0]; i++)
            if (!strncmp(c->raw, with_id[i], strlen(with_id[i])))
                return send_error_field(
                    c, 404, "not_found", "task_id",
                    "task_id in the path: malformed (only letters, digits "
                    "and . _ : - may be sent, percent-encoded or not), so "
                    "no such task",
                    NULL);
        return send_error(c, 404, "not_found",
                          "no such endpoint (a path may percent-encode "
                          "only letters, digits and - . _ ~ :)",
                          NULL);
    }
    int rc = kg_http_route(method, c->path, &c->route, &c->role, &c->param);
    if (rc == 404)
        return send_error(c, 404, "not_found", "no such endpoint", NULL);
    if (rc == 405) {
        char allow[64];
        allowed_methods(c->path, allow, sizeof allow);
        return send_error(c, 405, "method_not_allowed",
                          "method not allowed on this path", allow);
    }
    const char *authz = NULL;
    const char *bad = check_head(h, mc, &authz);
    if (bad)
        return send_error(c, 400, "bad_request", bad, NULL);
    if (!kg_auth_check(h->auth, authz, c->role)) {
        /* a client from a --trust-clients-from range needs no token; one
           it sends must be right. Worker endpoints always need theirs. */
        if (authz || !(c->role == KG_AUTH_CLIENT || c->role == KG_AUTH_ANY) ||
            !kg_auth_peer_trusted(h->auth, (const struct sockaddr *)&c->sa))
            return send_error(c, 401, "unauthorized",
                              authz ? "bad token" : "missing bearer token",
                              NULL);
        __atomic_add_fetch(&h->trusted_total, 1, __ATOMIC_RELAXED);
    }
    const char *cl = MHD_lookup_connection_value(
        mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end == cl || n > KG_HTTP_MAX_BODY)
            return send_error(c, 413, "payload_too_large",
                              "request body over 1 MiB", NULL);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)url; /* decoded by libmicrohttpd: on_uri kept the raw one */
    kg_http *h = cls;
    struct conn *c = *con_cls;

    if (!c)
        return MHD_NO; /* on_uri ran out of memory */
    if (!c->started)
        return start_request(h, c, mc, method, version);

    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->answered || c->too_big)
            return MHD_YES;
        if (n > KG_HTTP_MAX_BODY - c->len) {
            c->too_big = 1;
            free(c->body);
            c->body = NULL;
            c->len = c->cap = 0;
            return MHD_YES;
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            while (cap < c->len + n + 1)
                cap *= 2;
            char *b = realloc(c->body, cap);
            if (!b)
                return MHD_NO;
            c->body = b;
            c->cap = cap;
        }
        memcpy(c->body + c->len, upload, n);
        c->len += n;
        c->body[c->len] = 0;
        return MHD_YES;
    }
    if (c->answered)
        return MHD_YES;
    if (c->resumed && !c->job_done && peer_gone(c)) {
        c->status = 499; /* client closed; nothing is sent */
        return MHD_NO;
    }
    return dispatch(h, c, method);
}

/*
 * Writes a reply straight to the connection's socket, for a request whose
 * connection libmicrohttpd is closing before it sent the reply (see
 * on_completed). Waits at most DIRECT_REPLY_S for the client to take it.
 * Returns 1 when every byte went out.
 */
#define DIRECT_REPLY_S 2.0

static int send_direct(struct conn *c, kg_http_reply *rep)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    char *body = NULL;
    size_t blen = 0;
    const char *ctype = "application/json";
    if (rep->json) {
        body = kg_json_dumps(rep->json);
        blen = body ? strlen(body) : 0;
        if (!body)
            return 0;
    } else if (rep->text) {
        body = rep->text;
        blen = rep->text_len;
        rep->text = NULL;
        ctype = rep->content_type ? rep->content_type : "text/plain";
    }
    const char *reason = MHD_get_reason_phrase_for((unsigned)rep->status);
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nConnection: close\r\n"
                      "Cache-Control: no-store\r\n%s%s%sContent-Length: %zu\r\n"
                      "\r\n",
                      rep->status, reason && *reason ? reason : "Unknown",
                      blen ? "Content-Type: " : "", blen ? ctype : "",
                      blen ? "\r\n" : "", blen);
    int ok = hn > 0 && (size_t)hn < sizeof head;
    const char *part[2] = {head, body};
    size_t left[2] = {ok ? (size_t)hn : 0, blen};
    double deadline = kg_http_now() + DIRECT_REPLY_S;
    for (int i = 0; ok && i < 2; i++) {
        const char *p = part[i];
        while (left[i] > 0) {
            ssize_t n = send(ci->connect_fd, p, left[i], MSG_NOSIGNAL);
            if (n > 0) {
                p += n;
                left[i] -= (size_t)n;
                continue;
            }
            double wait = deadline - kg_http_now();
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) ||
                wait <= 0) {
                ok = 0;
                break;
            }
            struct pollfd pf = {.fd = ci->connect_fd, .events = POLLOUT};
            poll(&pf, 1, (int)(wait * 1000) + 1);
        }
    }
    free(body);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    kg_http *h = cls;
    struct conn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    if (!c->started) {
        free(c); /* libmicrohttpd refused the head itself (431, 400...) */
        return;
    }
    if (c->job_done) {
        /*
         * Answered (by a store thread, or its deferred writes are durable)
         * while the connection was suspended, and closed before the answer
         * was sent: libmicrohttpd marks a resumed connection readable and
         * takes a read of 0 bytes for the end of the connection, so a
         * client that shut down its sending side after its request (a
         * half-close) lost the reply of a write that was done. Its
         * receiving side is still open: the reply is written to the socket
         * here, before libmicrohttpd shuts it down.
         */
        if (toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN &&
            send_direct(c, &c->rep)) {
            c->status = c->rep.status;
        } else {
            c->status = 499;
            if (c->rep.undo)
                c->rep.undo(h->api, c->rep.undo_arg);
        }
        json_decref(c->rep.undo_arg);
        json_decref(c->rep.json);
        free(c->rep.text);
    }
    kg_metrics_observe(h->metrics, c->route, c->status, kg_http_now() - c->t0);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        request_deadline(h, mc, 1); /* the next request on the connection */
    if (c->undo && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        c->undo(h->api, c->undo_arg);
    json_decref(c->undo_arg);
    free(c->body);
    free(c);
}

/* ---- addresses -------------------------------------------------------- */

/* Splits "HOST:PORT" / "[V6]:PORT" / "HOST" into host and port. */
static int split_listen(const char *listen, char *host, size_t hsize, int *port)
{
    const char *colon;
    *port = KG_HTTP_DEFAULT_PORT;
    if (listen[0] == '[') {
        const char *rb = strchr(listen, ']');
        if (!rb || (size_t)(rb - listen - 1) >= hsize)
            return -1;
        memcpy(host, listen + 1, (size_t)(rb - listen - 1));
        host[rb - listen - 1] = 0;
        colon = rb[1] == ':' ? rb + 1 : NULL;
        if (rb[1] && !colon)
            return -1;
    } else {
        colon = strrchr(listen, ':');
        size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
        if (n >= hsize || (colon && strchr(listen, ':') != colon))
            return -1;
        memcpy(host, listen, n);
        host[n] = 0;
    }
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end || p < 0 || p > 65535)
            return -1;
        *port = (int)p;
    }
    return 0;
}

static int resolve(const char *listen, struct sockaddr_storage *ss,
                   socklen_t *sslen, kg_err *err)
{
    char host[256];
    int port;
    if (split_listen(listen, host, sizeof host, &port))
        return kg_errf(err, KG_EINVAL,
                       "--listen %s: expected HOST:PORT or [IPV6]:PORT",
                       listen);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ports[8];
    snprintf(ports, sizeof ports, "%d", port);
    int rc = getaddrinfo(host[0] ? host : NULL, ports, &hints, &ai);
    if (rc || !ai)
        return kg_errf(err, KG_EINVAL, "--listen %s: %s", listen,
                       gai_strerror(rc));
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *sslen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static int addr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
    }
    return 0;
}

int kg_http_is_loopback(const char *listen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    return resolve(listen, &ss, &len, NULL) == 0 && addr_is_loopback(&ss);
}

/* ---- start and stop --------------------------------------------------- */

/*
 * The connection cap that the process's descriptors allow: the soft
 * RLIMIT_NOFILE is raised towards the hard one as far as want needs, and
 * the cap is lowered (with a warning) to what is left after FD_RESERVE.
 * Running out of descriptors would make libmicrohttpd stop accepting, so
 * connections beyond would hang rather than be refused.
 */
static int fit_conn_cap(int want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return want;
    rlim_t need = (rlim_t)want * 3 / 2 + FD_RESERVE + 64;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need
                          ? need
                          : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)want + FD_RESERVE) {
        int cap = rl.rlim_cur > FD_RESERVE + 16
                      ? (int)(rl.rlim_cur - FD_RESERVE)
                      : 16;
        kg_warn("warning: %d connections asked for, but the descriptor "
                "limit (ulimit -n) is %llu: at most %d",
                want, (unsigned long long)rl.rlim_cur, cap);
        return cap;
    }
    return want;
}

int kg_http_start(const kg_http_config *cfg, struct kg_api *api,
                  struct kg_auth *auth, struct kg_metrics *metrics,
                  kg_http **out, kg_err *err)
{
    *out = NULL;
    const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:10907";
    struct sockaddr_storage ss;
    socklen_t sslen;
    int rc = resolve(listen, &ss, &sslen, err);
    if (rc)
        return rc;
    if (!cfg->allow_remote && !addr_is_loopback(&ss))
        return kg_errf(err, KG_EINVAL,
                       "--listen %s: not a loopback address and no token "
                       "configured (give --token-file)",
                       listen);
    kg_http *h = calloc(1, sizeof *h);
    if (!h)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    h->api = api;
    h->auth = auth;
    h->metrics = metrics;
    h->check_nul = !strncmp(MHD_get_version(), "0.9.", 4);
    h->conn_cap = fit_conn_cap(cfg->conn_limit > 0 ? cfg->conn_limit
                                               : DEFAULT_CONN_LIMIT);
    h->request_ms = 1000LL * (cfg->request_timeout_s > 0
                                  ? cfg->request_timeout_s
                                  : DEFAULT_REQUEST_TIMEOUT_S);
    pthread_mutex_init(&h->clock, NULL);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);

    /* default 4 per CPU: a handler waits in the store for an fsync, and
       the store's group commit shares one fsync among the requests that
       are in it at once (docs/store.md) */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads
                                        : 4 * (unsigned)(ncpu > 0 ? ncpu : 1);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* libmicrohttpd's own limit (split among the pool's threads, each of
       which stops accepting at its share) is kept out of the way: the cap
       is on_accept's */
    unsigned mhd_limit = (unsigned)h->conn_cap + (unsigned)h->conn_cap / 2 +
                         8 * threads;
    h->d = MHD_start_daemon(
        flags, 0, on_accept, h, on_request, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)(cfg->per_ip_limit > 0 ? cfg->per_ip_limit
                                         : DEFAULT_PER_IP_LIMIT),
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(cfg->idle_timeout_s > 0 ? cfg->idle_timeout_s
                                           : DEFAULT_IDLE_TIMEOUT_S),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY_LIMIT,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024U, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, h, MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
        MHD_OPTION_END);
    if (!h->d) {
        pthread_mutex_destroy(&h->clock);
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        free(h);
        return kg_errf(err, KG_EIO,
                       "cannot listen on %s (address in use, or not "
                       "permitted)",
                       listen);
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : 0;
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host,
                  sizeof host);
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host,
                  sizeof host);
    snprintf(h->address, sizeof h->address,
             ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, h->port);
    if (pthread_create(&h->ticker, NULL, ticker_main, h) == 0)
        h->ticker_started = 1;
    /* with deferred writes the store threads only take the writes that
       would wait for a lock held by another process */
    h->inline_writes = kg_api_defers(api);
    start_jobs(h, cfg->store_threads > 0 ? cfg->store_threads
                                         : DEFAULT_STORE_THREADS);
    *out = h;
    return 0;
}

int kg_http_port(kg_http *h)
{
    return h->port;
}

const char *kg_http_address(kg_http *h)
{
    return h->address;
}

int kg_http_parked(kg_http *h)
{
    pthread_mutex_lock(&h->lock);
    int n = h->nparked;
    pthread_mutex_unlock(&h->lock);
    return n;
}

void kg_http_stop(kg_http *h)
{
    if (!h)
        return;
    MHD_socket ls = MHD_quiesce_daemon(h->d);
    pthread_mutex_lock(&h->lock);
    h->stopping = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    if (h->ticker_started)
        pthread_join(h->ticker, NULL);
    kg_http_wake(h, -1);
    /* queued writes finish; later ones run on the connection's thread */
    stop_jobs(h);
    /* resumed polls answer at once now (park refuses); let them run, and
       let the store make the last deferred writes durable */
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&h->lock);
        int n = h->nparked + h->ndeferred;
        pthread_mutex_unlock(&h->lock);
        if (!n)
            break;
        kg_http_wake(h, -1);
        usleep(10000);
    }
    MHD_stop_daemon(h->d);
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    pthread_mutex_destroy(&h->clock);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h);
}
