/*
 * kgym/dynbuf.h - the one growable byte buffer of kgym: appends, printf,
 * an optional size cap, and a sticky failure flag so that a writer can
 * append many pieces and check once at the end.
 *
 * The text is always NUL-terminated once anything was appended (p may be
 * NULL before). On a failed allocation or a write past max, failed is
 * set, nothing more is appended, and the buffer keeps what it had.
 */
#ifndef KGYM_DYNBUF_H
#define KGYM_DYNBUF_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kg_dynbuf {
    char *p;
    size_t len, cap;
    size_t max;  /* the most bytes it may hold (0: no cap) */
    int failed;  /* an allocation failed or max would be passed */
} kg_dynbuf;

/* An empty buffer holding at most max bytes (0: no cap). Allocates nothing. */
void kg_dynbuf_init(kg_dynbuf *b, size_t max);

/* Room for n more bytes and the NUL; 0, or -1 with failed set. */
int kg_dynbuf_reserve(kg_dynbuf *b, size_t n);

/* Appends n bytes of s; 0, or -1 with failed set. */
int kg_dynbuf_put(kg_dynbuf *b, const void *s, size_t n);
int kg_dynbuf_puts(kg_dynbuf *b, const char *s);

/* Appends printf text; 0, or -1 with failed set. */
int kg_dynbuf_printf(kg_dynbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
int kg_dynbuf_vprintf(kg_dynbuf *b, const char *fmt, va_list ap);

/* Hands the text over (the caller frees it; "" when nothing was
 * appended, NULL when out of memory or failed) and empties b. */
char *kg_dynbuf_take(kg_dynbuf *b, size_t *len);

/* Frees the text and empties b. */
void kg_dynbuf_free(kg_dynbuf *b);

#ifdef __cplusplus
}
#endif

#endif
