/* err.c - error codes and the caller-owned error buffer. */
#include <stdarg.h>
#include <stdio.h>

#include "kgym/kgym.h"

int kg_errf(kg_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *kg_strerror(int code)
{
    switch (code) {
    case KG_OK: return "KG_OK";
    case KG_EINVAL: return "KG_EINVAL";
    case KG_ENONFINITE: return "KG_ENONFINITE";
    case KG_ENOMEM: return "KG_ENOMEM";
    case KG_EIO: return "KG_EIO";
    case KG_EPARSE: return "KG_EPARSE";
    case KG_ENOTFOUND: return "KG_ENOTFOUND";
    case KG_ESTATE: return "KG_ESTATE";
    case KG_ETIMEOUT: return "KG_ETIMEOUT";
    case KG_EUNAVAIL: return "KG_EUNAVAIL";
    }
    return "KG_E?";
}
