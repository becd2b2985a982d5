/*
 * kgym.h - common definitions of libkgym: error codes and the error buffer.
 *
 * Every public function returns 0 or a negative KG_E* code and, on error,
 * writes a one-line human message into a caller-supplied kg_err (which may
 * be NULL when the caller does not want the text).
 */
#ifndef KGYM_KGYM_H
#define KGYM_KGYM_H

#include <stddef.h>

#define KG_VERSION "0.1.0"

enum {
    KG_OK = 0,
    KG_EINVAL = -1,     /* bad argument: size, range, NULL pointer */
    KG_ENONFINITE = -2, /* a NaN or an infinity where a number is needed */
    KG_ENOMEM = -3,     /* an allocation failed */
    KG_EIO = -4,        /* read/write failure */
    KG_EPARSE = -5,     /* malformed input (JSON, file format) */
    KG_ENOTFOUND = -6,  /* no such task, file, key */
    KG_ESTATE = -7,     /* operation not allowed in the current state */
    KG_ETIMEOUT = -8,   /* deadline passed */
    KG_EUNAVAIL = -9,   /* a dependency (store, server) is not reachable */
};

#define KG_ERR_MAX 256

/* Caller-owned error text. */
typedef struct kg_err {
    char msg[KG_ERR_MAX];
} kg_err;

/* Formats a message into err (if non-NULL) and returns code. */
int kg_errf(kg_err *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Static name of an error code ("KG_EINVAL"...). */
const char *kg_strerror(int code);

#endif
