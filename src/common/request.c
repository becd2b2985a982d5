/* request.c - validation and defaults of the task request (docs/design.md). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/json_util.h"
#include "common/request.h"
#include "common/sha256.h"



/* KernelGym's names for enum values (docs/api.md, KernelGym compatibility):
 * normalized to ours, so they mean the same and share cache entries. */
static const struct {
    const char *field, *alias, *value;
} ENUM_ALIASES[] = {
    {"reference_backend", "pytorch", "eager"},
    {"reference_backend", "torch-compile", "torch_compile"},
    {"reference_backend", "compile", "torch_compile"},
};

static const char *enum_alias(const kg_field *f, const char *s)
{
    for (size_t i = 0; i < sizeof ENUM_ALIASES / sizeof *ENUM_ALIASES; i++)
        if (!strcmp(ENUM_ALIASES[i].field, f->name) &&
            !strcmp(ENUM_ALIASES[i].alias, s))
            return ENUM_ALIASES[i].value;
    return s;
}

/* The request table of docs/design.md lives in libkgym (kgym/schema.h). */
#define NFIELDS kg_schema_nfields()
#define FIELD(i) kg_schema_field(i)


void kg_request_view_of(const json_t *req, kg_request_view *v)
{
    const kg_field *timeout = kg_schema_find("timeout");
    const kg_field *backend = kg_schema_find("backend");
    const kg_field *prof = kg_schema_find("enable_profiling");
    json_t *t = json_object_get(req, "timeout");
    json_t *p = json_object_get(req, "enable_profiling");
    v->task_id = json_string_value(json_object_get(req, "task_id"));
    v->backend = json_string_value(json_object_get(req, "backend"));
    if (!v->backend)
        v->backend = backend->def_str;
    v->timeout_s = json_is_number(t) && json_number_value(t) > 0
                       ? json_number_value(t)
                       : timeout->def_num;
    v->enable_profiling = json_is_boolean(p) ? json_is_true(p)
                                             : prof->def_num != 0;
}

int kg_task_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n < 1 || n > KG_MAX_TASK_ID)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-')
            return 0;
    }
    return 1;
}

static int enum_has(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return 1;
        if (!bar)
            break;
        p = bar + 1;
    }
    return 0;
}

static int is_identifier(const char *s)
{
    if (!isalpha((unsigned char)*s) && *s != '_')
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* Checks one present value; on success stores the (possibly converted)
 * value into out. */
static int check_field(const kg_field *f, json_t *v, json_t *out,
                       kg_err *err)
{
    switch (f->type) {
    case KG_FIELD_STR: {
        if (!json_is_string(v))
            return kg_errf(err, KG_EINVAL, "field \"%s\": must be a string",
                           f->name);
        size_t n = json_string_length(v);
        const char *s = json_string_value(v);
        if (n < (size_t)f->lo || n > (size_t)f->hi)
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": length %zu outside %.0f..%.0f bytes",
                           f->name, n, f->lo, f->hi);
        if (strlen(s) != n)
            return kg_errf(err, KG_EINVAL, "field \"%s\": contains a NUL byte",
                           f->name);
        if (!strcmp(f->name, "task_id") && !kg_task_id_valid(s))
            return kg_errf(
                err, KG_EINVAL,
                "field \"task_id\": use 1..100 characters of [A-Za-z0-9._:-]");
        if (!strcmp(f->name, "entry_point") && !is_identifier(s))
            return kg_errf(
                err, KG_EINVAL,
                "field \"entry_point\": must be a Python identifier");
        json_object_set(out, f->name, v);
        return 0;
    }
    case KG_FIELD_ENUM: {
        const char *s = json_is_string(v) ? enum_alias(f, json_string_value(v))
                                          : NULL;
        if (!s || !enum_has(f->choices, s))
            return kg_errf(err, KG_EINVAL, "field \"%s\": must be one of %s",
                           f->name, f->choices);
        json_object_set_new(out, f->name, json_string(s));
        return 0;
    }
    case KG_FIELD_BOOL:
        if (!json_is_boolean(v))
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": must be true or false", f->name);
        json_object_set(out, f->name, v);
        return 0;
    case KG_FIELD_INT: {
        if (!kg_json_is_whole(v))
            return kg_errf(err, KG_EINVAL, "field \"%s\": must be an integer",
                           f->name);
        double d = json_is_integer(v) ? (double)json_integer_value(v)
                                      : json_real_value(v);
        if (!(d >= f->lo && d <= f->hi))
            return kg_errf(err, KG_EINVAL,
                           "field \"%s\": must be in %.0f..%.0f", f->name,
                           f->lo, f->hi);
        json_object_set_new(out, f->name, json_integer((json_int_t)d));
        return 0;
    }
    case KG_FIELD_NUM: {
        if (!json_is_number(v))
            return kg_errf(err, KG_EINVAL, "field \"%s\": must be a number",
                           f->name);
        double d = json_number_value(v);
        if (!isfinite(d) || d < f->lo || d > f->hi)
            return kg_errf(err, KG_EINVAL, "field \"%s\": must be in %g..%g",
                           f->name, f->lo, f->hi);
        json_object_set_new(out, f->name, json_real(d));
        return 0;
    }
    }
    return kg_errf(err, KG_EINVAL, "field \"%s\": unsupported", f->name);
}

static void set_default(const kg_field *f, json_t *out, int strict)
{
    switch (f->type) {
    case KG_FIELD_STR:
    case KG_FIELD_ENUM:
        if (f->def_str)
            json_object_set_new(out, f->name, json_string(f->def_str));
        return;
    case KG_FIELD_BOOL:
        if (f->has_def)
            json_object_set_new(out, f->name, json_boolean(f->def_num != 0));
        return;
    case KG_FIELD_INT:
        if (f->has_def)
            json_object_set_new(out, f->name,
                                json_integer((json_int_t)f->def_num));
        return;
    case KG_FIELD_NUM:
        if (strict && f->has_strict_def)
            json_object_set_new(out, f->name, json_real(f->def_strict));
        else if (f->has_def)
            json_object_set_new(out, f->name, json_real(f->def_num));
        return;
    }
}

json_t *kg_request_normalize(const json_t *in, int *code, const char **field,
                             kg_err *err)
{
    int rc = 0;
    const char *bad = NULL;
    json_t *out = NULL;

    if (!json_is_object(in)) {
        rc = kg_errf(err, KG_EINVAL, "request body must be a JSON object");
        goto fail;
    }
    out = json_object();
    if (!out) {
        rc = kg_errf(err, KG_ENOMEM, "out of memory");
        goto fail;
    }
    json_t *sv = json_object_get(in, "strict");
    int strict = json_is_true(sv);
    for (size_t i = 0; i < NFIELDS; i++) {
        const kg_field *f = FIELD(i);
        json_t *v = json_object_get(in, f->name);
        if (v && json_is_null(v) && !f->required)
            v = NULL; /* null means "use the default" */
        if (!v) {
            if (f->required) {
                bad = f->name;
                rc = kg_errf(err, KG_EINVAL, "field \"%s\": required", f->name);
                goto fail;
            }
            set_default(f, out, strict);
            continue;
        }
        rc = check_field(f, v, out, err);
        if (rc) {
            bad = f->name;
            goto fail;
        }
    }
    return out;
fail:
    json_decref(out);
    if (code)
        *code = rc ? rc : KG_EINVAL;
    if (field)
        *field = bad;
    return NULL;
}

/*
 * The byte stream of the key, into SHA-256. Small pieces (names, tags,
 * numbers) gather in buf and go in together; a long string goes in
 * straight from the request.
 */
struct keyw {
    kg_sha256 h;
    uint8_t buf[512];
    size_t n;
};

static void kw_put(struct keyw *k, const void *p, size_t n)
{
    if (k->n + n > sizeof k->buf) {
        kg_sha256_update(&k->h, k->buf, k->n);
        k->n = 0;
    }
    if (n > sizeof k->buf / 2) {
        kg_sha256_update(&k->h, p, n);
        return;
    }
    memcpy(k->buf + k->n, p, n);
    k->n += n;
}

/* A tag byte, then n as 8 bytes, most significant first. */
static void kw_tag_u64(struct keyw *k, char tag, uint64_t n)
{
    uint8_t b[9];
    b[0] = (uint8_t)tag;
    for (int i = 0; i < 8; i++)
        b[1 + i] = (uint8_t)(n >> (56 - 8 * i));
    kw_put(k, b, 9);
}

/* A tag byte, the length as 8 bytes, then the bytes. */
static void key_bytes(struct keyw *k, char tag, const void *p, size_t n)
{
    kw_tag_u64(k, tag, n);
    kw_put(k, p, n);
}

/*
 * One value, tagged with its JSON type so that no two values encode
 * alike: strings (the codes too) as their raw bytes with their length,
 * numbers as 8 exact bytes (integer or IEEE double), true/false/absent as
 * one byte. Objects and arrays (no field has them after normalization)
 * as their sorted compact JSON text.
 */
static int key_value(struct keyw *k, const json_t *v, kg_err *err)
{
    char tag;
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_STRING:
        key_bytes(k, 's', json_string_value(v), json_string_length(v));
        return 0;
    case JSON_INTEGER:
        kw_tag_u64(k, 'i', (uint64_t)json_integer_value(v));
        return 0;
    case JSON_REAL: {
        double d = json_real_value(v);
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        kw_tag_u64(k, 'r', bits);
        return 0;
    }
    case JSON_TRUE:
    case JSON_FALSE:
        tag = json_is_true(v) ? 't' : 'f';
        kw_put(k, &tag, 1);
        return 0;
    case JSON_NULL:
        tag = v ? 'n' : 'a'; /* null, absent */
        kw_put(k, &tag, 1);
        return 0;
    default: {
        char *t = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT);
        if (!t)
            return kg_errf(err, KG_ENOMEM, "out of memory");
        key_bytes(k, 'j', t, strlen(t));
        free(t);
        return 0;
    }
    }
}

/*
 * SHA-256 of a canonical encoding of the fields marked in_cache_key, in
 * the order of the schema's fields: a version label, then per field its name and its
 * value (key_value). Every byte of each code is hashed once, straight
 * from the request: no JSON text is built.
 */
int kg_request_cache_key(const json_t *req, char out[65], kg_err *err)
{
    static const char label[] = "kgym cache key v2";
    struct keyw k;
    uint8_t dig[32];
    if (!json_is_object(req))
        return kg_errf(err, KG_EINVAL, "cache key: request is no object");
    kg_sha256_init(&k.h);
    k.n = 0;
    kw_put(&k, label, sizeof label);
    for (size_t i = 0; i < NFIELDS; i++) {
        const kg_field *f = FIELD(i);
        if (!f->in_cache_key)
            continue;
        kw_put(&k, f->name, strlen(f->name) + 1);
        int rc = key_value(&k, json_object_get(req, f->name), err);
        if (rc < 0)
            return rc;
    }
    kg_sha256_update(&k.h, k.buf, k.n);
    kg_sha256_final(&k.h, dig);
    kg_sha256_tohex(dig, out);
    return 0;
}

int kg_request_reseed(json_t *req)
{
    uint64_t s;
    if (!json_is_object(req) ||
        getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
        return -1;
    /* 53 bits: the schema's largest seed, exact in a JSON number */
    return json_object_set_new(req, "seed", json_integer((json_int_t)(s >> 11)))
               ? -1
               : 0;
}
