/* sha256.c - SHA-256 written from FIPS 180-4. */
#include <string.h>

#include "common/sha256.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t h[8], const uint8_t blk[64])
{
    uint32_t w[64], a, b, c, d, e, f, g, hh;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 |
               (uint32_t)blk[4 * i + 2] << 8 | blk[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 =
            rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 =
            rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6],
    hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) +
                      ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) +
                      ((a & b) ^ (a & c) ^ (b & c));
        hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d;
    h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

/*
 * The same compression with the x86 SHA extensions (SHA-NI), for n
 * blocks: ~10x the portable code. The state lives in two registers as
 * ABEF and CDGH; each _mm_sha256rnds2_epu32 does two rounds. Message
 * words are built four at a time: X[j] = msg2(msg1(X[j-4], X[j-3]) +
 * (the words 7 back: X[j-2] shifted by one with X[j-1]), X[j-1]).
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>

__attribute__((target("sha,sse4.1,ssse3"))) static void
compress_ni(uint32_t h[8], const uint8_t *p, size_t n)
{
    const __m128i bswap =
        _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i t = _mm_loadu_si128((const __m128i *)&h[0]);  /* A B C D */
    __m128i s1 = _mm_loadu_si128((const __m128i *)&h[4]); /* E F G H */
    t = _mm_shuffle_epi32(t, 0xB1);                       /* B A D C */
    s1 = _mm_shuffle_epi32(s1, 0x1B);                     /* H G F E */
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);               /* F E B A */
    s1 = _mm_blend_epi16(s1, t, 0xF0);                    /* H G D C */
    for (; n > 0; n--, p += 64) {
        __m128i save0 = s0, save1 = s1, x[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            x[i] = _mm_shuffle_epi8(
                _mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            __m128i m = _mm_add_epi32(
                x[j & 3], _mm_loadu_si128((const __m128i *)&K[4 * j]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            if (j >= 3 && j <= 14) { /* X[j+1] */
                __m128i w7 = _mm_alignr_epi8(x[j & 3], x[(j + 3) & 3], 4);
                x[(j + 1) & 3] = _mm_sha256msg2_epu32(
                    _mm_add_epi32(x[(j + 1) & 3], w7), x[j & 3]);
            }
            m = _mm_shuffle_epi32(m, 0x0E);
            s0 = _mm_sha256rnds2_epu32(s0, s1, m);
            if (j >= 1 && j <= 12) /* first half of X[j+3] */
                x[(j + 3) & 3] = _mm_sha256msg1_epu32(x[(j + 3) & 3], x[j & 3]);
        }
        s0 = _mm_add_epi32(s0, save0);
        s1 = _mm_add_epi32(s1, save1);
    }
    t = _mm_shuffle_epi32(s0, 0x1B);  /* A B E F */
    s1 = _mm_shuffle_epi32(s1, 0xB1); /* G H C D */
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(t, s1, 0xF0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(s1, t, 8));
}

/* 1 when this CPU has SHA-NI, SSE4.1 and SSSE3 (asked once: cpuid is
   slow, above all in a virtual machine, where it traps). */
static int cpu_has_ni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) ||
        !(c & (1u << 9)))
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 29) & 1;
}

static int have_ni(void)
{
    static atomic_int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        v = cpu_has_ni();
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}
#else
static void compress_ni(uint32_t h[8], const uint8_t *p, size_t n)
{
    (void)h, (void)p, (void)n;
}

static int have_ni(void)
{
    return 0;
}
#endif

/* n whole blocks at p. */
static void blocks(kg_sha256 *s, const uint8_t *p, size_t n)
{
    if (s->accel) {
        compress_ni(s->h, p, n);
        return;
    }
    for (; n > 0; n--, p += 64)
        compress(s->h, p);
}

void kg_sha256_init(kg_sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                   0xa54ff53a, 0x510e527f, 0x9b05688c,
                                   0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nbuf = 0;
    s->accel = have_ni();
}

void kg_sha256_update(kg_sha256 *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    s->len += n;
    if (s->nbuf > 0) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take, p += take, n -= take;
        if (s->nbuf < 64)
            return;
        blocks(s, s->buf, 1);
        s->nbuf = 0;
    }
    /* whole blocks straight from the input, no copy */
    blocks(s, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    memcpy(s->buf, p, n);
    s->nbuf = n;
}

void kg_sha256_final(kg_sha256 *s, uint8_t out[32])
{
    uint64_t bits = s->len * 8;
    s->buf[s->nbuf++] = 0x80;
    if (s->nbuf > 56) { /* no room for the length: one more block */
        memset(s->buf + s->nbuf, 0, 64 - s->nbuf);
        blocks(s, s->buf, 1);
        s->nbuf = 0;
    }
    memset(s->buf + s->nbuf, 0, 56 - s->nbuf);
    for (int i = 0; i < 8; i++)
        s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    blocks(s, s->buf, 1);
    s->nbuf = 0;
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void kg_sha256_tohex(const uint8_t dig[32], char out[65])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[dig[i] >> 4];
        out[2 * i + 1] = hx[dig[i] & 15];
    }
    out[64] = 0;
}

void kg_sha256_hex(const void *data, size_t n, char out[65])
{
    kg_sha256 s;
    uint8_t dig[32];
    kg_sha256_init(&s);
    kg_sha256_update(&s, data, n);
    kg_sha256_final(&s, dig);
    kg_sha256_tohex(dig, out);
}
