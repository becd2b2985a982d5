/*
 * store_util.c - what both store backends (store_sqlite*.c, store_redis*.c)
 * use, below them and below store.c's API: the clock of leases and
 * deadlines, the stored JSON text and its parsing, and the result of a
 * task whose lease expired too often.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/result.h"
#include "kgym/dynbuf.h"
#include "server/store_util.h"

int64_t kg_store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The stored JSON text: compact, object members in their order, strings
 * as UTF-8 with only what JSON requires escaped. Written here rather than
 * by json_dumps, which spent half its time in printf for the reals of a
 * request (atol, rtol, timeout...): a real that is a short decimal is
 * written as one (checked by reading it back); only others go through
 * "%.17g". Every value reads back equal (json_equal).
 */
/* The writer's buffer (kgym/dynbuf.h): a failed append stops the rest. */
static void jb_put(kg_dynbuf *b, const char *s, size_t n)
{
    kg_dynbuf_put(b, s, n);
}

static void jb_str(kg_dynbuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    jb_put(b, "\"", 1);
    size_t run = 0; /* bytes that need no escape, not yet copied */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        jb_put(b, s + i - run, run);
        run = 0;
        char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char)c;
            jb_put(b, esc, 2);
            break;
        case '\n':
            jb_put(b, "\\n", 2);
            break;
        case '\t':
            jb_put(b, "\\t", 2);
            break;
        case '\r':
            jb_put(b, "\\r", 2);
            break;
        default:
            jb_put(b, esc, 6);
        }
    }
    jb_put(b, s + n - run, run);
    jb_put(b, "\"", 1);
}

static void jb_int(kg_dynbuf *b, long long v)
{
    char t[24];
    int i = sizeof t;
    unsigned long long u =
        v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        t[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        t[--i] = '-';
    jb_put(b, t + i, sizeof t - (size_t)i);
}

/* d as the shortest of "m.f" (up to 6 decimals, |d| < 1e15) that reads
   back as d; 0 when there is none (the caller uses %.17g). */
static int short_real(double d, char *out, size_t size)
{
    static const double p10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6};
    if (!(d > -1e15 && d < 1e15) || (d == 0 && signbit(d)))
        return 0;
    for (int k = 0; k <= 6; k++) {
        double m = d * p10[k];
        if (!(m > -9e18 && m < 9e18))
            return 0; /* past long long: no short form */
        if (m != (double)(long long)m)
            continue;
        long long i = (long long)m;
        unsigned long long u =
            i < 0 ? 0ull - (unsigned long long)i : (unsigned long long)i;
        unsigned long long ip = u / (unsigned long long)p10[k];
        unsigned long long fp = u % (unsigned long long)p10[k];
        int n = k == 0 ? snprintf(out, size, "%s%llu.0", i < 0 ? "-" : "", ip)
                       : snprintf(out, size, "%s%llu.%0*llu", i < 0 ? "-" : "",
                                  ip, k, fp);
        if (n <= 0 || (size_t)n >= size)
            return 0;
        return strtod(out, NULL) == d ? n : 0;
    }
    return 0;
}

static void jb_real(kg_dynbuf *b, double d)
{
    char t[40];
    int n = short_real(d, t, sizeof t);
    if (n == 0) {
        n = snprintf(t, sizeof t, "%.17g", d);
        if (n > 0 && (size_t)n < sizeof t - 2 && !strpbrk(t, ".eEn")) {
            memcpy(t + n, ".0", 3); /* stays a real when read back */
            n += 2;
        }
    }
    jb_put(b, t, (size_t)n);
}

static void jb_value(kg_dynbuf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;
        int first = 1;
        jb_put(b, "{", 1);
        json_object_foreach((json_t *)v, k, m)
        {
            if (!first)
                jb_put(b, ",", 1);
            first = 0;
            jb_str(b, k, strlen(k));
            jb_put(b, ":", 1);
            jb_value(b, m);
        }
        jb_put(b, "}", 1);
        return;
    }
    case JSON_ARRAY:
        jb_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                jb_put(b, ",", 1);
            jb_value(b, json_array_get(v, i));
        }
        jb_put(b, "]", 1);
        return;
    case JSON_STRING:
        jb_str(b, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER:
        jb_int(b, (long long)json_integer_value(v));
        return;
    case JSON_REAL:
        jb_real(b, json_real_value(v));
        return;
    case JSON_TRUE:
        jb_put(b, "true", 4);
        return;
    case JSON_FALSE:
        jb_put(b, "false", 5);
        return;
    default:
        jb_put(b, "null", 4);
    }
}

char *kg_store_json_text(const json_t *v)
{
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    jb_value(&b, v);
    if (!b.len) {
        kg_dynbuf_free(&b);
        return NULL;
    }
    return kg_dynbuf_take(&b, NULL);
}

json_t *kg_store_json_parse(const char *s, size_t len)
{
    json_error_t je;
    return json_loadb(s, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
}

json_t *kg_store_expired_result(const char *id, int attempts,
                                const char *worker)
{
    char msg[256];
    snprintf(msg, sizeof msg,
             "the task's lease expired or its worker died %d time%s (last "
             "holder %s); not retried again",
             attempts, attempts == 1 ? "" : "s", worker[0] ? worker : "?");
    json_t *r = kg_result_new(id, "infra_error", "LEASE_EXPIRED_TOO_OFTEN",
                              "server", msg);
    json_object_set_new(r, "status", json_string("failed"));
    return r;
}
