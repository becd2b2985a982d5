/* http_jobs.c - requests that write: the store threads that run them,
 * deferred durability, and running a handler (with /metrics' HTTP books). */
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
int kg_http_writes(int route)
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
 * syncer calls kg_http_durable_done once every write of the request is on disk,
 * which resumes the connection to send the reply (dispatch, job_done).
 * That saves the two thread hand-offs of a store job per write.
 */
void kg_http_durable_done(void *arg, int rc, const char *msg)
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
    } else {
        kg_http_wake_done(h, &c->rep); /* durable now: readers see it */
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
int kg_http_defer_start(kg_http *h)
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
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    kg_dynbuf_put(&b, rep->text, rep->text_len);
    kg_dynbuf_printf(
        &b,
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
        kg_dynbuf_printf(
            &b,
            "# HELP kgym_http_trusted_requests_total Requests let in without "
            "a token from a --trust-clients-from range.\n"
            "# TYPE kgym_http_trusted_requests_total counter\n"
            "kgym_http_trusted_requests_total %lld\n",
            __atomic_load_n(&h->trusted_total, __ATOMIC_RELAXED));
    size_t len;
    char *t = kg_dynbuf_take(&b, &len);
    if (!t)
        return; /* out of memory: the registry's text alone */
    free(rep->text);
    rep->text = t;
    rep->text_len = len;
}

void kg_http_run_handler(kg_http *h, struct conn *c, kg_http_reply *rep)
{
    kg_http_req req = {
        .method = c->method,
        .path = c->path,
        .param = c->param,
        .body = c->body.p ? c->body.p : "",
        .body_len = c->body.len,
        .peer = c->peer,
        .route = c->route,
        .resumed = c->resumed,
        .now = kg_http_now(),
        .slot = &c->slot,
    };
    h->handler.dispatch(h->handler.ctx, &req, rep);
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
        kg_http_run_handler(h, c, &c->rep);
        kg_http_wake_done(h, &c->rep);
        c->job_done = 1;
        MHD_resume_connection(c->mc); /* on_request sends c->rep */
        pthread_mutex_lock(&h->jlock);
    }
    pthread_mutex_unlock(&h->jlock);
    return NULL;
}

/* Suspends c and queues it for a store thread. Returns 0, or -1 when
 * there is no pool or it is stopping (then the caller runs it inline). */
int kg_http_submit_job(kg_http *h, struct conn *c)
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
void kg_http_start_jobs(kg_http *h, int n)
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
void kg_http_stop_jobs(kg_http *h)
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
