/*
 * kgym/schema.h - the task request's fields (types, limits, defaults), the
 * verdicts, the hack reasons and the stable error codes: written once here
 * and read by every part. The server, the CLI and the worker validate
 * requests through it (src/common/request.c); the harness and the Python
 * client read it through ctypes as JSON (kg_schema_json). docs/design.md's
 * tables are the prose of this file; tests/integration/test_contract.py
 * holds the two to each other.
 */
#ifndef KGYM_SCHEMA_H
#define KGYM_SCHEMA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size limits that C code also needs at compile time (buffers). */
#define KG_MAX_KERNEL_CODE (256 * 1024)
#define KG_MAX_REFERENCE_CODE (512 * 1024)
#define KG_MAX_TASK_ID 100

typedef enum {
    KG_FIELD_STR,  /* a string of lo..hi bytes, no NUL */
    KG_FIELD_INT,  /* a whole number in lo..hi */
    KG_FIELD_NUM,  /* a finite number in lo..hi */
    KG_FIELD_BOOL, /* true or false */
    KG_FIELD_ENUM  /* one of choices ('|'-separated) */
} kg_field_type;

typedef struct {
    const char *name;
    kg_field_type type;
    int required;
    double lo, hi;        /* INT/NUM range; STR length range */
    const char *def_str;  /* STR/ENUM default; NULL: none */
    double def_num;       /* INT/NUM/BOOL default, when has_def */
    int has_def;
    double def_strict;    /* NUM: the default when "strict" is true */
    int has_strict_def;
    const char *choices;  /* ENUM */
    int in_cache_key;     /* changes the outcome of an evaluation */
} kg_field;

/* The request's fields in their fixed order (the cache key hashes them in
 * this order). */
size_t kg_schema_nfields(void);
const kg_field *kg_schema_field(size_t i);
/* The field named name, or NULL. */
const kg_field *kg_schema_find(const char *name);
/* "string", "integer", "number", "boolean" or "enum". */
const char *kg_schema_type_name(kg_field_type t);

/* The verdicts, in docs/design.md's order; never more than
 * KG_SCHEMA_MAX_VERDICTS (for fixed count arrays). */
#define KG_SCHEMA_MAX_VERDICTS 16
size_t kg_schema_nverdicts(void);
const char *kg_schema_verdict(size_t i);
int kg_schema_is_verdict(const char *s);

/* The hack reasons a hacked result may name. */
size_t kg_schema_nhack_reasons(void);
const char *kg_schema_hack_reason(size_t i);
int kg_schema_is_hack_reason(const char *s);

/* The stable error codes, each in its group: "compile", "runtime",
 * "mismatch" (the verdicts of those names), "other" (the harness's own:
 * TIMEOUT, BAD_REQUEST, REFERENCE_ERROR, INFRA_ERROR), "problem"
 * (problem_error) or "infra" (written by the engine, worker or server).
 * The hacked verdict's codes are the hack reasons in capitals (group
 * "hack" in kg_schema_json), not listed here. */
typedef struct {
    const char *code;
    const char *group;
} kg_error_code;
size_t kg_schema_nerror_codes(void);
const kg_error_code *kg_schema_error_code(size_t i);
/* The verdict a result with error code code has, or NULL for a code
 * that is none of the list (REFERENCE_ERROR, BAD_REQUEST: any). */
const char *kg_schema_code_verdict(const char *code);

/* The whole schema as compact JSON text: {"fields": [...], "verdicts":
 * [...], "hack_reasons": [...], "error_codes": {code: verdict}, "limits":
 * {...}}. Writes at most cap bytes with a NUL and returns the length the
 * text needs (without the NUL), like snprintf; -1 when out of memory. */
long kg_schema_json(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
