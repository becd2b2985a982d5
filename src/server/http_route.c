/* http_route.c - what a request is before it reaches a handler: its
 * route, its cleaned path, and checks of its request line and headers. */
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
    {"POST", "/results/batch", KG_ROUTE_RESULTS_BATCH, KG_AUTH_CLIENT},
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
void kg_http_allowed_methods(const char *path, char *out, size_t size)
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

/* ---- the request head -------------------------------------------------- */

/*
 * libmicrohttpd's URI log callback: called once per request with the
 * request target exactly as sent, before libmicrohttpd decodes it (it
 * would turn %2F into '/' and %00 into the end of the string). Makes the
 * request's struct conn (our con_cls from here on) with a copy of the raw
 * path; on_request routes on that, never on libmicrohttpd's decoded URL.
 */
void *kg_http_on_uri(void *cls, const char *uri, struct MHD_Connection *mc)
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
int kg_http_line_has_nul(const struct conn *c, const char *method,
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
    const char *authz;    /* the first Authorization value */
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
const char *kg_http_check_head(kg_http *h, struct MHD_Connection *mc,
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
