/* http_reply.c - replies and long polls: queueing a reply, parking and
 * waking polls, and delivering a finished write's reply at completion
 * (also to a client that half-closed its connection). */
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

/* ---- replies ---------------------------------------------------------- */

/* Queues rep on the connection; takes ownership of rep's bodies. */
enum MHD_Result kg_http_send_reply(struct conn *c, kg_http_reply *rep,
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

enum MHD_Result kg_http_send_error_field(struct conn *c, int status,
                                         const char *code, const char *field,
                                         const char *msg, const char *allow)
{
    kg_http_reply rep = {0};
    kg_http_error(&rep, status, code, field, "%s", msg);
    c->answered = 1;
    return kg_http_send_reply(c, &rep, allow);
}

enum MHD_Result kg_http_send_error(struct conn *c, int status, const char *code,
                                   const char *msg, const char *allow)
{
    return kg_http_send_error_field(c, status, code, NULL, msg, allow);
}

/* ---- long polls ------------------------------------------------------- */

/*
 * Parked requests wait on one list per kind, oldest first: lease polls
 * (woken by new or requeued work, kg_http_wake) and result polls (woken
 * by the tasks they wait for finishing, kg_http_wake_keys), so that a
 * submission's wake never lands on a result poll while a worker waits.
 */
void kg_http_key_add(uint64_t mask[KG_HTTP_KEY_WORDS], const char *task_id)
{
    uint32_t x = 2166136261u; /* FNV-1a */
    for (const char *p = task_id; *p; p++)
        x = (x ^ (unsigned char)*p) * 16777619u;
    x ^= x >> 15; /* mix the high bits into the index */
    unsigned bit = x % (64u * KG_HTTP_KEY_WORDS);
    mask[bit / 64] |= 1ull << (bit % 64);
}

static int keys_meet(const uint64_t *a, const uint64_t *b)
{
    for (int i = 0; i < KG_HTTP_KEY_WORDS; i++)
        if (a[i] & b[i])
            return 1;
    return 0;
}

void kg_http_park_unlink(kg_http *h, struct conn *c)
{
    struct park_list *l = &h->parked[c->park_kind];
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
    l->n--;
}

/* Resumes a parked c (h->lock held). */
static void unpark(kg_http *h, struct conn *c)
{
    kg_http_park_unlink(h, c);
    MHD_resume_connection(c->mc);
}

void kg_http_wake(kg_http *h, int n)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    while (h->parked[KG_PARK_LEASE].head && n != 0) {
        unpark(h, h->parked[KG_PARK_LEASE].head);
        if (n > 0)
            n--;
    }
    pthread_mutex_unlock(&h->lock);
}

void kg_http_wake_keys(kg_http *h, const uint64_t keys[KG_HTTP_KEY_WORDS])
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    unsigned long long seq = h->wake_seq + 1;
    memcpy(h->wake_ring[seq % WAKE_RING], keys, sizeof h->wake_ring[0]);
    __atomic_store_n(&h->wake_seq, seq, __ATOMIC_RELEASE);
    struct conn *c = h->parked[KG_PARK_RESULTS].head;
    while (c) {
        struct conn *next = c->next;
        if (keys_meet(c->park_keys, keys))
            unpark(h, c);
        c = next;
    }
    pthread_mutex_unlock(&h->lock);
}

/* 1 when a wake for one of keys came after c's handler began (h->lock
 * held): it may have read the store before that task was finished. */
static int missed_wake(kg_http *h, const struct conn *c, const uint64_t *keys)
{
    if (h->wake_seq - c->wake_seen > WAKE_RING)
        return 1; /* too many to tell: look again */
    for (unsigned long long s = c->wake_seen + 1; s <= h->wake_seq; s++)
        if (keys_meet(h->wake_ring[s % WAKE_RING], keys))
            return 1;
    return 0;
}

void kg_http_wake_done(kg_http *h, const kg_http_reply *rep)
{
    static const uint64_t none[KG_HTTP_KEY_WORDS];
    if (rep->status >= 200 && rep->status < 300 &&
        memcmp(rep->done_keys, none, sizeof none))
        kg_http_wake_keys(h, rep->done_keys);
}

void kg_http_resume_due(kg_http *h, int all)
{
    double now = kg_http_now();
    pthread_mutex_lock(&h->lock);
    while (h->parked[KG_PARK_LEASE].head)
        unpark(h, h->parked[KG_PARK_LEASE].head);
    struct conn *c = h->parked[KG_PARK_RESULTS].head;
    while (c) {
        struct conn *next = c->next;
        if (all || now >= c->park_check || now >= c->park_until)
            unpark(h, c);
        c = next;
    }
    pthread_mutex_unlock(&h->lock);
}

/* Suspends c until woken. Returns 0, or -1 when the server is stopping
 * (then the caller answers at once). */
int kg_http_park(kg_http *h, struct conn *c, const kg_http_reply *rep)
{
    int kind =
        rep->park_kind == KG_PARK_RESULTS ? KG_PARK_RESULTS : KG_PARK_LEASE;
    pthread_mutex_lock(&h->lock);
    if (h->stopping) {
        pthread_mutex_unlock(&h->lock);
        return -1;
    }
    MHD_suspend_connection(c->mc);
    if (kind == KG_PARK_RESULTS && missed_wake(h, c, rep->park_keys)) {
        MHD_resume_connection(c->mc); /* its handler runs again at once */
        pthread_mutex_unlock(&h->lock);
        return 0;
    }
    struct park_list *l = &h->parked[kind];
    c->park_kind = kind;
    c->park_until = rep->park_until;
    c->park_check = kg_http_now() + RESULTS_RECHECK_S;
    memcpy(c->park_keys, rep->park_keys, sizeof c->park_keys);
    c->next = NULL;
    c->prev = l->tail;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
    l->n++;
    pthread_mutex_unlock(&h->lock);
    return 0;
}

/*
 * Writes a reply straight to the connection's socket, for a request whose
 * connection libmicrohttpd is closing before it sent the reply (see
 * kg_http_on_completed). Waits at most DIRECT_REPLY_S for the client to take
 * it. Returns 1 when every byte went out.
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

void kg_http_on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
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
                c->rep.undo(h->handler.ctx, c->rep.undo_arg);
        }
        json_decref(c->rep.undo_arg);
        json_decref(c->rep.json);
        free(c->rep.text);
    }
    kg_metrics_observe(h->metrics, c->route, c->status, kg_http_now() - c->t0);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        kg_http_request_deadline(h, mc,
                                 1); /* the next request on the connection */
    if (c->undo && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        c->undo(h->handler.ctx, c->undo_arg);
    json_decref(c->undo_arg);
    kg_dynbuf_free(&c->body);
    free(c);
}
