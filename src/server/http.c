/* http.c - kgym serve's HTTP daemon: start and stop, connection caps
 * and request deadlines, the access handler (a request from its head to
 * its handler), and listen addresses. Routing and head checks are in
 * http_route.c, replies and long polls in http_reply.c, store jobs in
 * http_jobs.c. */
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
#include "server/http_impl.h"

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
void kg_http_request_deadline(kg_http *h, struct MHD_Connection *mc, int on)
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

/* Re-runs parked lease polls every PARK_RECHECK_S (a task may have come
 * through another server on a shared store, or been requeued by the
 * scheduler), parked result polls every RESULTS_RECHECK_S (a task may
 * have been finished through another server, or failed by the
 * scheduler's sweep) and at their deadlines; cuts off requests past
 * theirs. */
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
        pthread_mutex_unlock(&h->lock);
        kg_http_resume_due(h, 0);
        sweep_deadlines(h);
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
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
        kg_http_request_deadline(h, c->mc,
                                 0); /* in whole: the handler has it */
    if (c->too_big)
        return kg_http_send_error(c, 413, "payload_too_large",
                                  "request body over 1 MiB", NULL);
    kg_http_reply rep = {0};
    int ran_here = !c->job_done; /* else finished tasks were woken already */
    c->wake_seen = __atomic_load_n(&h->wake_seq, __ATOMIC_ACQUIRE);
    if (c->job_done) {
        rep = c->rep; /* a store thread ran the handler */
        memset(&c->rep, 0, sizeof c->rep);
        c->job_done = 0;
    } else {
        c->method = method;
        int w = kg_http_writes(c->route);
        if (w && !h->inline_writes && kg_http_submit_job(h, c) == 0)
            return MHD_YES;
        if (w && h->inline_writes && kg_http_defer_start(h)) {
            kg_store_defer_begin();
            kg_http_run_handler(h, c, &rep);
            if (kg_store_defer_pending()) {
                /* answered once its writes are durable (kg_http_durable_done)
                 */
                MHD_suspend_connection(c->mc);
                c->rep = rep;
                kg_store_defer_end(kg_http_durable_done, c);
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
                if (kg_http_submit_job(h, c) == 0)
                    return MHD_YES;
                kg_http_run_handler(h, c, &rep);
            }
        } else {
            kg_http_run_handler(h, c, &rep);
        }
    }
    if (rep.status == 0) {
        if (rep.park_until > kg_http_now() && kg_http_park(h, c, &rep) == 0) {
            c->resumed++;
            json_decref(rep.json);
            return MHD_YES;
        }
        /* the wait is over, or the server is stopping: the handler's
           answer for that case, else none */
        rep.status = rep.json ? 200 : 204;
    }
    if (ran_here)
        kg_http_wake_done(h, &rep);
    c->answered = 1;
    return kg_http_send_reply(c, &rep, NULL);
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
    if (kg_http_line_has_nul(c, method, version))
        return kg_http_send_error(c, 400, "bad_request",
                                  "a NUL byte in the request line", NULL);

    /* route on the raw path: only unreserved characters (and ':') may be
       percent-encoded; an encoded '/', NUL or other byte is refused */
    if (c->raw_long ||
        kg_http_clean_path(c->raw, c->raw_len, c->path, c->raw_len + 1)) {
        static const char *const with_id[] = {"/status/", "/results/",
                                              "/tasks/"};
        for (size_t i = 0; i < sizeof with_id / sizeof with_id[0]; i++)
            if (!strncmp(c->raw, with_id[i], strlen(with_id[i])))
                return kg_http_send_error_field(
                    c, 404, "not_found", "task_id",
                    "task_id in the path: malformed (only letters, digits "
                    "and . _ : - may be sent, percent-encoded or not), so "
                    "no such task",
                    NULL);
        return kg_http_send_error(c, 404, "not_found",
                                  "no such endpoint (a path may percent-encode "
                                  "only letters, digits and - . _ ~ :)",
                                  NULL);
    }
    int rc = kg_http_route(method, c->path, &c->route, &c->role, &c->param);
    if (rc == 404)
        return kg_http_send_error(c, 404, "not_found", "no such endpoint",
                                  NULL);
    if (rc == 405) {
        char allow[64];
        kg_http_allowed_methods(c->path, allow, sizeof allow);
        return kg_http_send_error(c, 405, "method_not_allowed",
                                  "method not allowed on this path", allow);
    }
    const char *authz = NULL;
    const char *bad = kg_http_check_head(h, mc, &authz);
    if (bad)
        return kg_http_send_error(c, 400, "bad_request", bad, NULL);
    if (!kg_auth_check(h->auth, authz, c->role)) {
        /* a client from a --trust-clients-from range needs no token; one
           it sends must be right. Worker endpoints always need theirs. */
        if (authz || !(c->role == KG_AUTH_CLIENT || c->role == KG_AUTH_ANY) ||
            !kg_auth_peer_trusted(h->auth, (const struct sockaddr *)&c->sa))
            return kg_http_send_error(
                c, 401, "unauthorized",
                authz ? "bad token" : "missing bearer token", NULL);
        __atomic_add_fetch(&h->trusted_total, 1, __ATOMIC_RELAXED);
    }
    const char *cl = MHD_lookup_connection_value(
        mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end == cl || n > KG_HTTP_MAX_BODY)
            return kg_http_send_error(c, 413, "payload_too_large",
                                      "request body over 1 MiB", NULL);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)url; /* decoded by libmicrohttpd: kg_http_on_uri kept the raw one */
    kg_http *h = cls;
    struct conn *c = *con_cls;

    if (!c)
        return MHD_NO; /* kg_http_on_uri ran out of memory */
    if (!c->started)
        return start_request(h, c, mc, method, version);

    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->answered || c->too_big)
            return MHD_YES;
        if (n > KG_HTTP_MAX_BODY - c->body.len) {
            c->too_big = 1;
            kg_dynbuf_free(&c->body);
            return MHD_YES;
        }
        return kg_dynbuf_put(&c->body, upload, n) ? MHD_NO : MHD_YES;
    }
    if (c->answered)
        return MHD_YES;
    if (c->resumed && !c->job_done && peer_gone(c)) {
        c->status = 499; /* client closed; nothing is sent */
        return MHD_NO;
    }
    return dispatch(h, c, method);
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

int kg_http_start(const kg_http_config *cfg, const kg_http_handler *handler,
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
    h->handler = *handler;
    h->auth = auth;
    h->metrics = metrics;
    h->check_nul = !strncmp(MHD_get_version(), "0.9.", 4);
    h->conn_cap = fit_conn_cap(cfg->conn_limit > 0 ? cfg->conn_limit
                                                   : DEFAULT_CONN_LIMIT);
    h->request_ms =
        1000LL * (cfg->request_timeout_s > 0 ? cfg->request_timeout_s
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
    unsigned mhd_limit =
        (unsigned)h->conn_cap + (unsigned)h->conn_cap / 2 + 8 * threads;
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
        kg_http_on_completed, h, MHD_OPTION_URI_LOG_CALLBACK, kg_http_on_uri, h,
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
    h->inline_writes =
        handler->defers_writes ? handler->defers_writes(handler->ctx) : 0;
    kg_http_start_jobs(h, cfg->store_threads > 0 ? cfg->store_threads
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

int kg_http_parked(kg_http *h, int kind)
{
    if (kind < 0 || kind >= KG_PARK_KINDS)
        return 0;
    pthread_mutex_lock(&h->lock);
    int n = h->parked[kind].n;
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
    kg_http_resume_due(h, 1);
    /* queued writes finish; later ones run on the connection's thread */
    kg_http_stop_jobs(h);
    /* resumed polls answer at once now (park refuses); let them run, and
       let the store make the last deferred writes durable */
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&h->lock);
        int n = h->ndeferred;
        for (int k = 0; k < KG_PARK_KINDS; k++)
            n += h->parked[k].n;
        pthread_mutex_unlock(&h->lock);
        if (!n)
            break;
        kg_http_resume_due(h, 1);
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
