/* json_util.c - JSON reading with field-naming errors, and a writer. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "kgym/dynbuf.h"

int kg_json_read_all(FILE *f, char **buf, size_t *len, kg_err *err)
{
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    char tmp[1 << 16];
    *buf = NULL;
    *len = 0;
    for (;;) {
        size_t got = fread(tmp, 1, sizeof tmp, f);
        if (kg_dynbuf_put(&b, tmp, got)) {
            kg_dynbuf_free(&b);
            return kg_errf(err, KG_ENOMEM, "input: out of memory");
        }
        if (got < sizeof tmp) {
            if (ferror(f)) {
                int e = errno;
                kg_dynbuf_free(&b);
                return kg_errf(err, KG_EIO, "input: read error: %s",
                               strerror(e));
            }
            if (feof(f))
                break;
        }
    }
    if (!(*buf = kg_dynbuf_take(&b, len)))
        return kg_errf(err, KG_ENOMEM, "input: out of memory");
    return 0;
}

/* ---- parse errors ----------------------------------------------------- */

#define PATH_DEPTH 32

struct frame {
    int is_obj;
    int want_key; /* object: the next string is a key */
    size_t index; /* array: entry being read */
    const char *key;
    size_t keylen; /* object: the current key, if key != NULL */
};

/*
 * The path ("a[2].b") of the value being read at byte pos of buf, found by
 * a tolerant scan of the text before it (the document is broken there, so
 * jansson cannot say). Writes "" when pos is at the top level or a key.
 */
static void path_at(const char *buf, size_t len, size_t pos, char *out,
                    size_t size)
{
    struct frame fr[PATH_DEPTH];
    size_t depth = 0;
    int in_str = 0, esc = 0;
    const char *sstart = NULL;

    if (pos > len)
        pos = len;
    for (size_t i = 0; i < pos; i++) {
        char ch = buf[i];
        struct frame *top =
            depth > 0 && depth <= PATH_DEPTH ? &fr[depth - 1] : NULL;
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"') {
                in_str = 0;
                if (top && top->is_obj && top->want_key) {
                    top->key = sstart;
                    top->keylen = (size_t)(buf + i - sstart);
                }
            }
            continue;
        }
        switch (ch) {
        case '"':
            in_str = 1;
            sstart = buf + i + 1;
            break;
        case '{':
        case '[':
            if (depth < PATH_DEPTH) {
                fr[depth].is_obj = ch == '{';
                fr[depth].want_key = ch == '{';
                fr[depth].index = 0;
                fr[depth].key = NULL;
                fr[depth].keylen = 0;
            }
            depth++;
            break;
        case '}':
        case ']':
            if (depth > 0)
                depth--;
            break;
        case ',':
            if (top && top->is_obj) {
                top->want_key = 1;
                top->key = NULL;
            } else if (top) {
                top->index++;
            }
            break;
        case ':':
            if (top && top->is_obj)
                top->want_key = 0;
            break;
        default:
            break;
        }
    }

    size_t o = 0;
    out[0] = '\0';
    for (size_t d = 0; d < depth && d < PATH_DEPTH && o + 1 < size; d++) {
        int w;
        if (fr[d].is_obj) {
            if (!fr[d].key) /* between entries: no field yet */
                break;
            int n = fr[d].keylen > 64 ? 64 : (int)fr[d].keylen;
            w = snprintf(out + o, size - o, "%s%.*s", o ? "." : "", n,
                         fr[d].key);
        } else {
            w = snprintf(out + o, size - o, "[%zu]", fr[d].index);
        }
        if (w < 0 || (size_t)w >= size - o) {
            out[o] = '\0';
            break;
        }
        o += (size_t)w;
    }
}

static int parse(const char *buf, size_t len, size_t flags, json_t **out,
                 kg_err *err)
{
    json_error_t e;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | flags, &e);
    if (*out)
        return 0;
    char path[160];
    path_at(buf, len, e.position < 0 ? 0 : (size_t)e.position, path,
            sizeof path);
    if (path[0])
        return kg_errf(err, KG_EPARSE,
                       "field \"%s\": bad JSON at line %d, column %d: %s", path,
                       e.line, e.column, e.text);
    return kg_errf(err, KG_EPARSE, "bad JSON at line %d, column %d: %s", e.line,
                   e.column, e.text);
}

int kg_json_parse(const char *buf, size_t len, json_t **out, kg_err *err)
{
    return parse(buf, len, 0, out, err);
}

int kg_json_parse_value(const char *buf, size_t len, json_t **out, kg_err *err)
{
    return parse(buf, len, JSON_DECODE_ANY, out, err);
}

/* ---- typed values ----------------------------------------------------- */

const char *kg_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "value";
}

/*
 * 1 and *x for a number: a JSON number or one of the strings "NaN",
 * "Infinity", "-Infinity" (see json_util.h); 0 for anything else.
 */
static int number_of(const json_t *v, double *x)
{
    if (json_is_number(v)) {
        *x = json_number_value(v);
        return 1;
    }
    const char *s = json_string_value(v); /* NULL unless a string */
    if (!s)
        return 0;
    if (!strcmp(s, "NaN"))
        *x = NAN;
    else if (!strcmp(s, "Infinity"))
        *x = INFINITY;
    else if (!strcmp(s, "-Infinity"))
        *x = -INFINITY;
    else
        return 0;
    return 1;
}

int kg_json_as_number(const json_t *v, const char *name, double *out,
                      kg_err *err)
{
    if (!number_of(v, out))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected a number, got %s", name,
                       kg_json_type_name(v));
    return 0;
}

int kg_json_as_bool(const json_t *v, const char *name, int *out, kg_err *err)
{
    if (!json_is_boolean(v))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected true or false, got %s", name,
                       kg_json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

int kg_json_is_whole(const json_t *v)
{
    if (json_is_integer(v))
        return 1;
    if (!json_is_real(v))
        return 0;
    double x = json_real_value(v);
    return isfinite(x) && floor(x) == x;
}

int kg_json_as_int(const json_t *v, const char *name, long long lo,
                   long long hi, long long *out, kg_err *err)
{
    if (json_is_real(v)) {
        char num[32];
        if (kg_json_format_real(num, sizeof num, json_real_value(v)) < 0)
            strcpy(num, "number");
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an integer, got %s", name, num);
    }
    if (!json_is_integer(v))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an integer, got %s", name,
                       kg_json_type_name(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": %lld is out of range [%lld, %lld]", name,
                       x, lo, hi);
    *out = x;
    return 0;
}

/* The field key of obj, or NULL when absent or null. */
static const json_t *opt_get(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

int kg_json_opt_number(const json_t *obj, const char *key, const char *name,
                       double *out, kg_err *err)
{
    const json_t *v = opt_get(obj, key);
    if (!v)
        return 0;
    int rc = kg_json_as_number(v, name ? name : key, out, err);
    return rc ? rc : 1;
}

int kg_json_opt_bool(const json_t *obj, const char *key, const char *name,
                     int *out, kg_err *err)
{
    const json_t *v = opt_get(obj, key);
    if (!v)
        return 0;
    int rc = kg_json_as_bool(v, name ? name : key, out, err);
    return rc ? rc : 1;
}

int kg_json_opt_int(const json_t *obj, const char *key, const char *name,
                    long long lo, long long hi, long long *out, kg_err *err)
{
    const json_t *v = opt_get(obj, key);
    if (!v)
        return 0;
    int rc = kg_json_as_int(v, name ? name : key, lo, hi, out, err);
    return rc ? rc : 1;
}

int kg_json_opt_string(const json_t *obj, const char *key, const char *name,
                       const char **out, kg_err *err)
{
    const json_t *v = opt_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected a string, got %s",
                       name ? name : key, kg_json_type_name(v));
    *out = json_string_value(v);
    return 1;
}

/* ---- matrices and vectors --------------------------------------------- */

/* n elements of size bytes, zeroed; never NULL for n == 0 unless OOM. */
static void *alloc_array(size_t n, size_t size)
{
    return calloc(n ? n : 1, size);
}

/*
 * Checks that v is an array of equally long arrays and gives the shape.
 * Entries are checked by the caller afterwards, so a shape error is
 * reported before an entry error.
 */
static int check_shape(const json_t *v, const char *name, size_t *rows,
                       size_t *cols, kg_err *err)
{
    if (!json_is_array(v))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an array of arrays, got %s",
                       name, kg_json_type_name(v));
    size_t r = json_array_size(v), c = 0;
    if (r > INT_MAX)
        return kg_errf(err, KG_EINVAL, "field \"%s\": %zu rows, at most %d",
                       name, r, INT_MAX);
    for (size_t i = 0; i < r; i++) {
        const json_t *row = json_array_get(v, i);
        if (!json_is_array(row))
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": row %zu: expected an array, got %s",
                           name, i, kg_json_type_name(row));
        size_t n = json_array_size(row);
        if (i == 0)
            c = n;
        else if (n != c)
            return kg_errf(
                err, KG_EINVAL,
                "field \"%s\": row %zu has %zu entries, expected %zu", name, i,
                n, c);
    }
    if (c > INT_MAX)
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": rows of %zu entries, at most %d", name, c,
                       INT_MAX);
    if (r && c > SIZE_MAX / r / sizeof(double))
        return kg_errf(err, KG_ENOMEM, "field \"%s\": too large", name);
    *rows = r;
    *cols = c;
    return 0;
}

int kg_json_as_matrix(const json_t *v, const char *name, int allow_null,
                      kg_json_matrix *m, kg_err *err)
{
    memset(m, 0, sizeof *m);
    size_t rows, cols;
    int rc = check_shape(v, name, &rows, &cols, err);
    if (rc)
        return rc;
    m->x = alloc_array(rows * cols, sizeof *m->x);
    m->present = alloc_array(rows * cols, sizeof *m->present);
    if (!m->x || !m->present) {
        kg_json_matrix_free(m);
        return kg_errf(err, KG_ENOMEM, "field \"%s\": out of memory", name);
    }
    m->rows = rows;
    m->cols = cols;
    for (size_t i = 0; i < rows; i++) {
        const json_t *row = json_array_get(v, i);
        for (size_t j = 0; j < cols; j++) {
            const json_t *e = json_array_get(row, j);
            size_t k = i * cols + j;
            if (number_of(e, &m->x[k])) {
                m->present[k] = 1;
            } else if (!(allow_null && json_is_null(e))) {
                kg_json_matrix_free(m);
                return kg_errf(err, KG_EINVAL,
                               "field \"%s\": row %zu, entry %zu: expected a "
                               "number%s, got %s",
                               name, i, j, allow_null ? " or null" : "",
                               kg_json_type_name(e));
            }
        }
    }
    return 0;
}

void kg_json_matrix_free(kg_json_matrix *m)
{
    free(m->x);
    free(m->present);
    memset(m, 0, sizeof *m);
}

int kg_json_as_bool_matrix(const json_t *v, const char *name, uint8_t **b,
                           size_t *rows, size_t *cols, kg_err *err)
{
    *b = NULL;
    int rc = check_shape(v, name, rows, cols, err);
    if (rc)
        return rc;
    uint8_t *out = alloc_array(*rows * *cols, 1);
    if (!out)
        return kg_errf(err, KG_ENOMEM, "field \"%s\": out of memory", name);
    for (size_t i = 0; i < *rows; i++) {
        const json_t *row = json_array_get(v, i);
        for (size_t j = 0; j < *cols; j++) {
            const json_t *e = json_array_get(row, j);
            if (!json_is_boolean(e)) {
                free(out);
                return kg_errf(err, KG_EINVAL,
                               "field \"%s\": row %zu, entry %zu: expected "
                               "true or false, got %s",
                               name, i, j, kg_json_type_name(e));
            }
            out[i * *cols + j] = json_is_true(e);
        }
    }
    *b = out;
    return 0;
}

int kg_json_as_vector(const json_t *v, const char *name, int allow_null,
                      double **x, uint8_t **present, size_t *n, kg_err *err)
{
    *x = NULL;
    if (present)
        *present = NULL;
    if (!json_is_array(v))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an array, got %s", name,
                       kg_json_type_name(v));
    size_t len = json_array_size(v);
    double *xs = alloc_array(len, sizeof *xs);
    uint8_t *ps = present ? alloc_array(len, 1) : NULL;
    if (!xs || (present && !ps)) {
        free(xs);
        free(ps);
        return kg_errf(err, KG_ENOMEM, "field \"%s\": out of memory", name);
    }
    for (size_t i = 0; i < len; i++) {
        const json_t *e = json_array_get(v, i);
        if (number_of(e, &xs[i])) {
            if (ps)
                ps[i] = 1;
        } else if (!(allow_null && present && json_is_null(e))) {
            free(xs);
            free(ps);
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": entry %zu: expected a number%s, got "
                           "%s",
                           name, i, allow_null ? " or null" : "",
                           kg_json_type_name(e));
        }
    }
    *x = xs;
    if (present)
        *present = ps;
    *n = len;
    return 0;
}

int kg_json_as_rows(const json_t *v, const char *name, double **x, size_t **off,
                    size_t *nrows, kg_err *err)
{
    *x = NULL;
    *off = NULL;
    if (!json_is_array(v))
        return kg_errf(err, KG_EINVAL,
                       "field \"%s\": expected an array of arrays, got %s",
                       name, kg_json_type_name(v));
    size_t r = json_array_size(v), total = 0;
    size_t *o = alloc_array(r + 1, sizeof *o);
    if (!o)
        return kg_errf(err, KG_ENOMEM, "field \"%s\": out of memory", name);
    for (size_t i = 0; i < r; i++) {
        const json_t *row = json_array_get(v, i);
        if (!json_is_array(row)) {
            free(o);
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": row %zu: expected an array, got %s",
                           name, i, kg_json_type_name(row));
        }
        o[i] = total;
        total += json_array_size(row);
    }
    o[r] = total;
    double *xs = alloc_array(total, sizeof *xs);
    if (!xs) {
        free(o);
        return kg_errf(err, KG_ENOMEM, "field \"%s\": out of memory", name);
    }
    for (size_t i = 0; i < r; i++) {
        const json_t *row = json_array_get(v, i);
        for (size_t j = 0; j < o[i + 1] - o[i]; j++) {
            const json_t *e = json_array_get(row, j);
            if (!number_of(e, &xs[o[i] + j])) {
                free(o);
                free(xs);
                return kg_errf(err, KG_EINVAL,
                               "field \"%s\": row %zu, entry %zu: expected a "
                               "number, got %s",
                               name, i, j, kg_json_type_name(e));
            }
        }
    }
    *x = xs;
    *off = o;
    *nrows = r;
    return 0;
}

/* ---- building output -------------------------------------------------- */

/* Appends x[0..n) (null where mask is 0) to arr; the error names the entry
 * by its position within the row when row >= 0. */
static int append_reals(json_t *arr, const double *x, const uint8_t *mask,
                        size_t n, const char *name, long row, kg_err *err)
{
    for (size_t i = 0; i < n; i++) {
        json_t *e;
        if (mask && !mask[i]) {
            e = json_null();
        } else if (!isfinite(x[i])) {
            if (row >= 0)
                return kg_errf(err, KG_ENONFINITE,
                               "field \"%s\": result row %ld, entry %zu is "
                               "not finite",
                               name, row, i);
            return kg_errf(err, KG_ENONFINITE,
                           "field \"%s\": result entry %zu is not finite", name,
                           i);
        } else {
            e = json_real(x[i]);
        }
        if (json_array_append_new(arr, e))
            return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    return 0;
}

int kg_json_real_array(json_t **out, const double *x, const uint8_t *mask,
                       size_t n, const char *name, kg_err *err)
{
    json_t *arr = json_array();
    *out = NULL;
    if (!arr)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    int rc = append_reals(arr, x, mask, n, name, -1, err);
    if (rc) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return 0;
}

int kg_json_real_matrix(json_t **out, const double *x, const uint8_t *mask,
                        size_t rows, size_t cols, const char *name, kg_err *err)
{
    json_t *arr = json_array();
    *out = NULL;
    if (!arr)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    for (size_t i = 0; i < rows; i++) {
        json_t *row = json_array();
        if (!row || json_array_append_new(arr, row)) {
            json_decref(arr);
            return kg_errf(err, KG_ENOMEM, "out of memory");
        }
        int rc = append_reals(row, x + i * cols, mask ? mask + i * cols : NULL,
                              cols, name, (long)i, err);
        if (rc) {
            json_decref(arr);
            return rc;
        }
    }
    *out = arr;
    return 0;
}

json_t *kg_json_bool_array(const uint8_t *b, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        if (json_array_append_new(arr, json_boolean(b[i]))) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

json_t *kg_json_int_array(const int *v, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        if (json_array_append_new(arr, json_integer(v[i]))) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* ---- writing ---------------------------------------------------------- */

/*
 * Shortest round-trip digits: the first precision at which printf's
 * correctly rounded %e reads back as x. Then Python's layout: positional
 * when the decimal exponent is in [-4, 16), else d.ddde+XX.
 */
int kg_json_format_real(char *buf, size_t size, double x)
{
    char tmp[40], out[48];
    size_t o = 0;

    if (!isfinite(x))
        return -1;
    if (x == 0) {
        const char *z = signbit(x) ? "-0.0" : "0.0";
        if (strlen(z) + 1 > size)
            return -1;
        strcpy(buf, z);
        return (int)strlen(z);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    const char *p = tmp;
    if (*p == '-') {
        out[o++] = '-';
        p++;
    }
    char dig[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (isdigit((unsigned char)*p) && nd < 20)
            dig[nd++] = *p;
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int decpt = e + 1; /* x = 0.d1d2... * 10^decpt */

    if (decpt <= -4 || decpt > 16) {
        out[o++] = dig[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, dig + 1, (size_t)(nd - 1));
            o += (size_t)(nd - 1);
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d",
                              e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[o++] = '0';
        memcpy(out + o, dig, (size_t)nd);
        o += (size_t)nd;
    } else if (decpt >= nd) {
        memcpy(out + o, dig, (size_t)nd);
        o += (size_t)nd;
        for (int i = nd; i < decpt; i++)
            out[o++] = '0';
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, dig, (size_t)decpt);
        o += (size_t)decpt;
        out[o++] = '.';
        memcpy(out + o, dig + decpt, (size_t)(nd - decpt));
        o += (size_t)(nd - decpt);
    }
    if (o + 1 > size)
        return -1;
    memcpy(buf, out, o);
    buf[o] = '\0';
    return (int)o;
}

/* The writer's buffer (kgym/dynbuf.h): a failed append stops the rest. */
static void put(kg_dynbuf *b, const char *s, size_t n)
{
    kg_dynbuf_put(b, s, n);
}

static void put_u16(kg_dynbuf *b, unsigned u)
{
    static const char hex[] = "0123456789abcdef";
    char esc[6] = {'\\', 'u', hex[(u >> 12) & 15], hex[(u >> 8) & 15],
                   hex[(u >> 4) & 15], hex[u & 15]};
    put(b, esc, 6);
}

/* Decodes one UTF-8 sequence at s (n bytes left); U+FFFD if malformed. */
static unsigned utf8_next(const unsigned char *s, size_t n, size_t *used)
{
    unsigned c = s[0];
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    *used = 1;
    if (len == 0 || len > n)
        return 0xfffd;
    unsigned cp = c & (0x3f >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0xfffd;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *used = len;
    return cp > 0x10ffff ? 0xfffd : cp;
}

/* A JSON string: runs that need no escape are copied whole; KG_JSON_PY
 * escapes non-ASCII (ensure_ascii) and writes \b and \f short, as
 * json.dumps does. */
static void put_string(kg_dynbuf *b, const char *s, size_t n,
                       kg_json_style style)
{
    const unsigned char *u = (const unsigned char *)s;
    int py = style == KG_JSON_PY;
    size_t run = 0; /* bytes that need no escape, not yet copied */
    put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x80 || !py)) {
            run++;
            i++;
            continue;
        }
        put(b, s + i - run, run);
        run = 0;
        size_t used = 1;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c == '\n') {
            put(b, "\\n", 2);
        } else if (c == '\r') {
            put(b, "\\r", 2);
        } else if (c == '\t') {
            put(b, "\\t", 2);
        } else if (py && c == '\b') {
            put(b, "\\b", 2);
        } else if (py && c == '\f') {
            put(b, "\\f", 2);
        } else if (c < 0x20) {
            put_u16(b, c);
        } else {
            unsigned cp = utf8_next(u + i, n - i, &used);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                put_u16(b, 0xd800 | (cp >> 10));
                put_u16(b, 0xdc00 | (cp & 0x3ff));
            } else {
                put_u16(b, cp);
            }
        }
        i += used;
    }
    put(b, s + n - run, run);
    put(b, "\"", 1);
}

static void put_int(kg_dynbuf *b, long long v)
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
    put(b, t + i, sizeof t - (size_t)i);
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

/* A real: KG_JSON_PY as kg_json_format_real (jansson holds no NaN or
 * infinity, so it cannot fail); KG_JSON_COMPACT as its short decimal when
 * it has one, else "%.17g", which a real costs one printf (a ".0" keeps an
 * integral one a real when read back). */
static void put_real(kg_dynbuf *b, double d, kg_json_style style)
{
    char t[48];
    int n = style == KG_JSON_PY ? kg_json_format_real(t, sizeof t, d)
                                : short_real(d, t, sizeof t);
    if (n < 0) {
        n = 4;
        memcpy(t, "null", 5);
    } else if (n == 0) {
        n = snprintf(t, sizeof t, "%.17g", d);
        if (n > 0 && (size_t)n < sizeof t - 2 && !strpbrk(t, ".eEn")) {
            memcpy(t + n, ".0", 3);
            n += 2;
        }
    }
    put(b, t, (size_t)n);
}

void kg_json_write(kg_dynbuf *b, const json_t *v, kg_json_style style)
{
    int py = style == KG_JSON_PY;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        int first = 1;
        put(b, "{", 1);
        json_object_foreach((json_t *)v, key, val)
        {
            if (!first)
                put(b, py ? ", " : ",", py ? 2 : 1);
            first = 0;
            put_string(b, key, strlen(key), style);
            put(b, py ? ": " : ":", py ? 2 : 1);
            kg_json_write(b, val, style);
        }
        put(b, "}", 1);
        return;
    }
    case JSON_ARRAY:
        put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(b, py ? ", " : ",", py ? 2 : 1);
            kg_json_write(b, json_array_get(v, i), style);
        }
        put(b, "]", 1);
        return;
    case JSON_STRING:
        put_string(b, json_string_value(v), json_string_length(v), style);
        return;
    case JSON_INTEGER:
        put_int(b, (long long)json_integer_value(v));
        return;
    case JSON_REAL:
        put_real(b, json_real_value(v), style);
        return;
    case JSON_TRUE:
        put(b, "true", 4);
        return;
    case JSON_FALSE:
        put(b, "false", 5);
        return;
    default:
        put(b, "null", 4);
    }
}

char *kg_json_text(const json_t *v, kg_json_style style)
{
    kg_dynbuf b;
    kg_dynbuf_init(&b, 0);
    kg_json_write(&b, v, style);
    if (!b.len) {
        kg_dynbuf_free(&b);
        return NULL;
    }
    return kg_dynbuf_take(&b, NULL);
}

char *kg_json_dumps(const json_t *v)
{
    return kg_json_text(v, KG_JSON_PY);
}
