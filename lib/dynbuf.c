/* dynbuf.c - the growable byte buffer of kgym/dynbuf.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kgym/dynbuf.h"

void kg_dynbuf_init(kg_dynbuf *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max;
}

int kg_dynbuf_reserve(kg_dynbuf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (n > SIZE_MAX - 1 - b->len || (b->max && b->len + n > b->max)) {
        b->failed = 1;
        return -1;
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int kg_dynbuf_put(kg_dynbuf *b, const void *s, size_t n)
{
    if (kg_dynbuf_reserve(b, n))
        return -1;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int kg_dynbuf_puts(kg_dynbuf *b, const char *s)
{
    return kg_dynbuf_put(b, s, strlen(s));
}

int kg_dynbuf_vprintf(kg_dynbuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int k = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (k < 0) {
        b->failed = 1;
        return -1;
    }
    if ((size_t)k < sizeof small)
        return kg_dynbuf_put(b, small, (size_t)k);
    if (kg_dynbuf_reserve(b, (size_t)k))
        return -1;
    vsnprintf(b->p + b->len, (size_t)k + 1, fmt, ap);
    b->len += (size_t)k;
    return 0;
}

int kg_dynbuf_printf(kg_dynbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = kg_dynbuf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

char *kg_dynbuf_take(kg_dynbuf *b, size_t *len)
{
    char *p = NULL;
    if (!b->failed)
        p = b->p ? b->p : calloc(1, 1);
    else
        free(b->p);
    if (len)
        *len = p ? b->len : 0;
    size_t max = b->max;
    kg_dynbuf_init(b, max);
    return p;
}

void kg_dynbuf_free(kg_dynbuf *b)
{
    free(b->p);
    kg_dynbuf_init(b, b->max);
}
