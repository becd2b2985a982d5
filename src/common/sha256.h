/*
 * sha256.h - SHA-256 (FIPS 180-4), for cache keys and source hashes.
 * Portable C, and the x86 SHA instructions when the CPU has them (chosen
 * at run time by kg_sha256_init).
 */
#ifndef KGYM_SHA256_H
#define KGYM_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct kg_sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
    int accel; /* 1: the CPU's SHA instructions (set by init; a test may
                  clear it after init to run the portable code) */
} kg_sha256;

void kg_sha256_init(kg_sha256 *s);
void kg_sha256_update(kg_sha256 *s, const void *data, size_t n);
void kg_sha256_final(kg_sha256 *s, uint8_t out[32]);
/* Hex digest of data into out (65 bytes, NUL-terminated). */
void kg_sha256_hex(const void *data, size_t n, char out[65]);
void kg_sha256_tohex(const uint8_t dig[32], char out[65]);

#endif
