/*
 * store_util.h - helpers of both store backends, below store.c's API
 * (store_util.c). Only the store's own files include this.
 */
#ifndef KGYM_STORE_UTIL_H
#define KGYM_STORE_UTIL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t kg_store_now_ms(void);

/* The JSON text stored for v (compact; caller frees), NULL if no memory. */
char *kg_store_json_text(const json_t *v);

/* Parses stored JSON text (caller owns the result); NULL if corrupt. */
json_t *kg_store_json_parse(const char *s, size_t len);

/*
 * The result given to a task failed by the sweep (caller owns it):
 * error_code LEASE_EXPIRED_TOO_OFTEN and a message naming the attempts
 * and the last holder.
 */
json_t *kg_store_expired_result(const char *id, int attempts,
                                const char *worker);

#endif
