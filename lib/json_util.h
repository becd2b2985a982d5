/*
 * json_util.h - JSON helpers of libkgym (jansson underneath), shared with
 * kgym's tools: lib/rl_json.c reads the `kgym rl` input with them, the
 * server parses requests and writes answers with them. Internal to kgym,
 * not part of the installed API (include/kgym).
 *
 * Reading: typed access to values and fields whose errors name the field,
 * numeric matrices and vectors with null holes, boolean masks, ragged rows.
 * Writing: arrays from C arrays and a one-line writer whose numbers
 * round-trip exactly and print as Python's repr does (2.0, 2.01, 1e-05).
 *
 * Conventions: functions return 0 (or 1 where noted) or a negative KG_E*
 * code with a one-line message in err. A message about a value starts with
 * `field "NAME": `, where NAME is the caller's name for it (a key or a path
 * such as "turns[3].speedup"). Arrays returned through pointers are
 * malloc'd and owned by the caller, also on error (then they are NULL).
 * JSON null counts as absent wherever a field is optional.
 *
 * Numbers: wherever a number is read, the strings "NaN", "Infinity" and
 * "-Infinity" are read as those values too (JSON has no way to write them;
 * the spelling of protobuf's JSON mapping), so that a non-finite value
 * reaches the check that names it instead of failing as a type. The Python
 * bindings send non-finite floats so. Non-finite numbers are never written.
 */
#ifndef KGYM_JSON_UTIL_H
#define KGYM_JSON_UTIL_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "kgym/dynbuf.h"
#include "kgym/kgym.h"

/* Reads all of f into a NUL-terminated buffer (caller frees *buf). */
int kg_json_read_all(FILE *f, char **buf, size_t *len, kg_err *err);

/*
 * Parses buf[0..len) as one JSON document (duplicate keys rejected). On
 * failure the message gives the path of the value being read, when there is
 * one, then line, column and jansson's reason. Caller owns *out.
 */
int kg_json_parse(const char *buf, size_t len, json_t **out, kg_err *err);

/* The same for any value at the top (3, "x"), not only an object or an
 * array, so that the caller can say what it got. */
int kg_json_parse_value(const char *buf, size_t len, json_t **out, kg_err *err);

/* "object", "array", "string", "number", "boolean" or "null". */
const char *kg_json_type_name(const json_t *v);

/* A JSON integer, or a real with no fractional part (1e40 too: the range
 * is the caller's). Never casts an out-of-range double to an integer. */
int kg_json_is_whole(const json_t *v);

/* Typed values. Integers are ranged to [lo, hi]; a real is no integer. */
int kg_json_as_number(const json_t *v, const char *name, double *out,
                      kg_err *err);
int kg_json_as_bool(const json_t *v, const char *name, int *out, kg_err *err);
int kg_json_as_int(const json_t *v, const char *name, long long lo,
                   long long hi, long long *out, kg_err *err);

/*
 * Optional fields of obj: return 1 and set *out when key is present and
 * not null, 0 (leaving *out alone) when absent or null, < 0 on a wrong
 * type. name is used in messages; NULL means key. *out of the string
 * variant is borrowed from obj.
 */
int kg_json_opt_number(const json_t *obj, const char *key, const char *name,
                       double *out, kg_err *err);
int kg_json_opt_bool(const json_t *obj, const char *key, const char *name,
                     int *out, kg_err *err);
int kg_json_opt_int(const json_t *obj, const char *key, const char *name,
                    long long lo, long long hi, long long *out, kg_err *err);
int kg_json_opt_string(const json_t *obj, const char *key, const char *name,
                       const char **out, kg_err *err);

/* A rows x cols matrix of numbers, row-major, with its null holes. */
typedef struct kg_json_matrix {
    size_t rows, cols;
    double *x;        /* 0 where present[i] == 0 */
    uint8_t *present; /* 1 where a number was given, 0 for null */
} kg_json_matrix;

/*
 * An array of equally long arrays of numbers (and nulls if allow_null).
 * [] is 0 x 0. Ragged rows, wrong types and sizes over INT_MAX are errors.
 * Free with kg_json_matrix_free (also after an error).
 */
int kg_json_as_matrix(const json_t *v, const char *name, int allow_null,
                      kg_json_matrix *m, kg_err *err);
void kg_json_matrix_free(kg_json_matrix *m);

/* The same for true/false entries; *b gets rows*cols bytes of 0 or 1. */
int kg_json_as_bool_matrix(const json_t *v, const char *name, uint8_t **b,
                           size_t *rows, size_t *cols, kg_err *err);

/*
 * An array of numbers (and nulls if allow_null; then *present gets 1/0 per
 * entry, else present may be NULL). Null entries of *x are 0.
 */
int kg_json_as_vector(const json_t *v, const char *name, int allow_null,
                      double **x, uint8_t **present, size_t *n, kg_err *err);

/*
 * An array of arrays of numbers of any lengths: row r is x[off[r] ..
 * off[r+1]); off has nrows + 1 entries.
 */
int kg_json_as_rows(const json_t *v, const char *name, double **x, size_t **off,
                    size_t *nrows, kg_err *err);

/*
 * New arrays from C arrays (caller owns the reference): entries where mask
 * is 0 (mask may be NULL: none) become null. A non-finite entry is an error
 * (JSON has no NaN) naming `name`.
 */
int kg_json_real_array(json_t **out, const double *x, const uint8_t *mask,
                       size_t n, const char *name, kg_err *err);
int kg_json_real_matrix(json_t **out, const double *x, const uint8_t *mask,
                        size_t rows, size_t cols, const char *name,
                        kg_err *err);
json_t *kg_json_bool_array(const uint8_t *b, size_t n);
json_t *kg_json_int_array(const int *v, size_t n);

/*
 * Writes x in at most size bytes (26 suffice) as Python's repr(float) does:
 * the shortest digits that read back as x, a decimal point or an exponent
 * always. x must be finite. Returns the length, or -1.
 */
int kg_json_format_real(char *buf, size_t size, double x);

/* The two ways kgym writes JSON, both on one line with object keys in
 * insertion order; every value reads back equal. */
typedef enum {
    /* as Python's json.dumps: separators ", " and ": ", non-ASCII escaped
     * (ensure_ascii), reals as kg_json_format_real (HTTP replies, the RL
     * layer's output) */
    KG_JSON_PY,
    /* "," and ":", strings as UTF-8 with only what JSON requires escaped,
     * a real as its short decimal (up to 6 places) when one reads back
     * equal, else "%.17g": the quick form of the store's stored text */
    KG_JSON_COMPACT,
} kg_json_style;

/* Appends v to b in style; a failed append leaves b failed (dynbuf.h). */
void kg_json_write(kg_dynbuf *b, const json_t *v, kg_json_style style);

/* v in style as a malloc'd string (caller frees), or NULL if out of
 * memory. */
char *kg_json_text(const json_t *v, kg_json_style style);

/* kg_json_text(v, KG_JSON_PY). */
char *kg_json_dumps(const json_t *v);

#endif
