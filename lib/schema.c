/* schema.c - the request's fields, the verdicts, the hack reasons and the
 * error codes (include/kgym/schema.h): the one copy every part reads. */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "kgym/schema.h"

#define MAX_KERNEL_CODE KG_MAX_KERNEL_CODE
#define MAX_REFERENCE_CODE KG_MAX_REFERENCE_CODE
#define MAX_TASK_ID KG_MAX_TASK_ID
#define MAX_SEED 9007199254740991.0 /* 2^53 - 1: exact in a JSON number */

/* docs/design.md's request table, in the order the cache key hashes. */
static const kg_field FIELDS[] = {
    /* name, type, required, lo, hi, def_str, def_num, has_def,
     * def_strict, has_strict_def, choices, in_cache_key */
    {"task_id", KG_FIELD_STR, 0, 1, MAX_TASK_ID, NULL, 0, 0, 0, 0, NULL, 0},
    {"reference_code", KG_FIELD_STR, 1, 1, MAX_REFERENCE_CODE, NULL, 0, 0, 0,
     0, NULL, 1},
    {"kernel_code", KG_FIELD_STR, 1, 1, MAX_KERNEL_CODE, NULL, 0, 0, 0, 0,
     NULL, 1},
    {"backend", KG_FIELD_ENUM, 0, 0, 0, "triton", 0, 0, 0, 0,
     "triton|cuda|cpu", 1},
    {"entry_point", KG_FIELD_STR, 0, 1, 64, "Model", 0, 0, 0, 0, NULL, 1},
    {"num_correct_trials", KG_FIELD_INT, 0, 1, 100, NULL, 5, 1, 0, 0, NULL,
     1},
    {"num_perf_trials", KG_FIELD_INT, 0, 1, 10000, NULL, 100, 1, 0, 0, NULL,
     1},
    {"num_warmup", KG_FIELD_INT, 0, 0, 1000, NULL, 3, 1, 0, 0, NULL, 1},
    {"atol", KG_FIELD_NUM, 0, 0, 1e6, NULL, 1e-2, 1, 1e-4, 1, NULL, 1},
    {"rtol", KG_FIELD_NUM, 0, 0, 1e6, NULL, 1e-2, 1, 1e-4, 1, NULL, 1},
    {"strict", KG_FIELD_BOOL, 0, 0, 0, NULL, 0, 1, 0, 0, NULL, 1},
    {"reference_backend", KG_FIELD_ENUM, 0, 0, 0, "eager", 0, 0, 0, 0,
     "eager|torch_compile", 1},
    {"timeout", KG_FIELD_NUM, 0, 1, 3600, NULL, 300, 1, 0, 0, NULL, 0},
    {"priority", KG_FIELD_ENUM, 0, 0, 0, "normal", 0, 0, 0, 0,
     "low|normal|high", 0},
    {"enable_profiling", KG_FIELD_BOOL, 0, 0, 0, NULL, 1, 1, 0, 0, NULL, 1},
    {"run_hack_checks", KG_FIELD_BOOL, 0, 0, 0, NULL, 1, 1, 0, 0, NULL, 1},
    {"allow_tf32", KG_FIELD_BOOL, 0, 0, 0, NULL, 0, 1, 0, 0, NULL, 1},
    /* no default: drawn at random where the request is normalized */
    {"seed", KG_FIELD_INT, 0, 0, MAX_SEED, NULL, 0, 0, 0, 0, NULL, 1},
    {"force_refresh", KG_FIELD_BOOL, 0, 0, 0, NULL, 0, 1, 0, 0, NULL, 0},
    {"speedup_recheck_bound", KG_FIELD_NUM, 0, 1, 1e6, NULL, 10, 1, 0, 0,
     NULL, 1},
};
#define NFIELDS (sizeof FIELDS / sizeof FIELDS[0])

/* docs/design.md's verdict table, in its order. */
static const char *const VERDICTS[] = {
    "pass",    "mismatch", "compile_error", "runtime_error",
    "timeout", "hacked",   "problem_error", "infra_error"};
#define NVERDICTS (sizeof VERDICTS / sizeof VERDICTS[0])
_Static_assert(NVERDICTS <= KG_SCHEMA_MAX_VERDICTS, "KG_SCHEMA_MAX_VERDICTS");

/* docs/harness.md's hack reasons; each one's code is its name in capitals. */
static const char *const HACK_REASONS[] = {
    "no_custom_kernel", "side_stream",      "output_cache",
    "input_mutation",   "timer_tamper",     "mode_branch",
    "aliases_input",    "lazy_output",      "thread_injection",
    "result_forgery",   "stale_memory",     "precision_downgrade",
    "l2_persist",       "call_count_switch", "profile_forgery"};
#define NHACK (sizeof HACK_REASONS / sizeof HACK_REASONS[0])

/* The stable error codes by group: "compile", "runtime", "mismatch" (the
 * candidate's verdicts of those names), "other" (the harness's own:
 * timeout, a bad request, the reference, an infra error), "problem"
 * (problem_error), "infra" (written by the engine, worker or server). The
 * hacked verdict's codes are the hack reasons in capitals. */
static const kg_error_code CODES[] = {
    {"SYNTAX_ERROR", "compile"},
    {"IMPORT_ERROR", "compile"},
    {"BUILD_ERROR", "compile"},
    {"TRITON_COMPILE_ERROR", "compile"},
    {"MISSING_MODEL_NEW", "compile"},
    {"FORWARD_EXCEPTION", "runtime"},
    {"INIT_EXCEPTION", "runtime"},
    {"CUDA_ERROR", "runtime"},
    {"OUT_OF_MEMORY", "runtime"},
    {"CHILD_DIED", "runtime"},
    {"PROTOCOL_ERROR", "runtime"},
    {"RESULT_INCOMPLETE", "runtime"},
    {"SHAPE_MISMATCH", "mismatch"},
    {"DTYPE_MISMATCH", "mismatch"},
    {"NONFINITE_OUTPUT", "mismatch"},
    {"VALUE_MISMATCH", "mismatch"},
    {"OUTPUT_TYPE", "mismatch"},
    {"TIMEOUT", "other"},
    {"BAD_REQUEST", "other"},
    {"REFERENCE_ERROR", "other"},
    {"INFRA_ERROR", "other"},
    {"PROBLEM_ERROR", "problem"},
    {"SPAWN_FAILED", "infra"},
    {"DEVICE_UNHEALTHY", "infra"},
    {"BAD_TASK", "infra"},
    {"INFRA_RETRIES_EXHAUSTED", "infra"},
    {"LEASE_EXPIRED_TOO_OFTEN", "infra"},
};
#define NCODES (sizeof CODES / sizeof CODES[0])

size_t kg_schema_nfields(void) { return NFIELDS; }

const kg_field *kg_schema_field(size_t i)
{
    return i < NFIELDS ? &FIELDS[i] : NULL;
}

const kg_field *kg_schema_find(const char *name)
{
    for (size_t i = 0; name && i < NFIELDS; i++)
        if (!strcmp(FIELDS[i].name, name))
            return &FIELDS[i];
    return NULL;
}

const char *kg_schema_type_name(kg_field_type t)
{
    switch (t) {
    case KG_FIELD_STR:
        return "string";
    case KG_FIELD_INT:
        return "integer";
    case KG_FIELD_NUM:
        return "number";
    case KG_FIELD_BOOL:
        return "boolean";
    case KG_FIELD_ENUM:
        return "enum";
    }
    return "?";
}

static int in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; s && i < n; i++)
        if (!strcmp(list[i], s))
            return 1;
    return 0;
}

size_t kg_schema_nverdicts(void) { return NVERDICTS; }
const char *kg_schema_verdict(size_t i)
{
    return i < NVERDICTS ? VERDICTS[i] : NULL;
}
int kg_schema_is_verdict(const char *s)
{
    return in_list(VERDICTS, NVERDICTS, s);
}

size_t kg_schema_nhack_reasons(void) { return NHACK; }
const char *kg_schema_hack_reason(size_t i)
{
    return i < NHACK ? HACK_REASONS[i] : NULL;
}
int kg_schema_is_hack_reason(const char *s)
{
    return in_list(HACK_REASONS, NHACK, s);
}

size_t kg_schema_nerror_codes(void) { return NCODES; }
const kg_error_code *kg_schema_error_code(size_t i)
{
    return i < NCODES ? &CODES[i] : NULL;
}

const char *kg_schema_code_verdict(const char *code)
{
    static const struct {
        const char *group, *verdict;
    } G[] = {{"compile", "compile_error"}, {"runtime", "runtime_error"},
             {"mismatch", "mismatch"},     {"problem", "problem_error"},
             {"infra", "infra_error"}};
    if (!code)
        return NULL;
    if (!strcmp(code, "TIMEOUT"))
        return "timeout";
    if (!strcmp(code, "INFRA_ERROR"))
        return "infra_error";
    for (size_t i = 0; i < NHACK; i++) {
        const char *r = HACK_REASONS[i];
        size_t k = 0;
        while (r[k] && code[k] && toupper((unsigned char)r[k]) == code[k])
            k++;
        if (!r[k] && !code[k])
            return "hacked";
    }
    for (size_t i = 0; i < NCODES; i++)
        if (!strcmp(CODES[i].code, code))
            for (size_t g = 0; g < sizeof G / sizeof *G; g++)
                if (!strcmp(G[g].group, CODES[i].group))
                    return G[g].verdict;
    return NULL;
}

static json_t *field_json(const kg_field *f)
{
    json_t *o = json_pack("{s:s, s:s, s:b, s:b}", "name", f->name, "type",
                          kg_schema_type_name(f->type), "required",
                          f->required, "in_cache_key", f->in_cache_key);
    if (!o)
        return NULL;
    if (f->type == KG_FIELD_STR || f->type == KG_FIELD_INT ||
        f->type == KG_FIELD_NUM) {
        json_object_set_new(o, "min", json_real(f->lo));
        json_object_set_new(o, "max", json_real(f->hi));
    }
    if (f->def_str)
        json_object_set_new(o, "default", json_string(f->def_str));
    else if (f->has_def && f->type == KG_FIELD_BOOL)
        json_object_set_new(o, "default", json_boolean(f->def_num != 0));
    else if (f->has_def && f->type == KG_FIELD_INT)
        json_object_set_new(o, "default", json_integer((json_int_t)f->def_num));
    else if (f->has_def)
        json_object_set_new(o, "default", json_real(f->def_num));
    if (f->has_strict_def)
        json_object_set_new(o, "default_strict", json_real(f->def_strict));
    if (f->choices) {
        json_t *c = json_array();
        for (const char *p = f->choices; c && *p;) {
            const char *bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            json_array_append_new(c, json_stringn(p, n));
            p = bar ? bar + 1 : p + n;
        }
        json_object_set_new(o, "choices", c);
    }
    return o;
}

static json_t *schema_json(void)
{
    json_t *fields = json_array(), *verdicts = json_array(),
           *hacks = json_array(), *codes = json_object();
    json_t *root = json_pack(
        "{s:o, s:o, s:o, s:o, s:{s:i, s:i, s:i, s:f}}", "fields", fields,
        "verdicts", verdicts, "hack_reasons", hacks, "error_codes", codes,
        "limits", "kernel_code", MAX_KERNEL_CODE, "reference_code",
        MAX_REFERENCE_CODE, "task_id", MAX_TASK_ID, "seed", MAX_SEED);
    if (!root)
        return NULL;
    for (size_t i = 0; i < NFIELDS; i++)
        json_array_append_new(fields, field_json(&FIELDS[i]));
    for (size_t i = 0; i < NVERDICTS; i++)
        json_array_append_new(verdicts, json_string(VERDICTS[i]));
    for (size_t i = 0; i < NHACK; i++) {
        char up[64];
        size_t k = 0;
        for (; HACK_REASONS[i][k] && k < sizeof up - 1; k++)
            up[k] = (char)toupper((unsigned char)HACK_REASONS[i][k]);
        up[k] = '\0';
        json_array_append_new(hacks, json_string(HACK_REASONS[i]));
        json_object_set_new(codes, up, json_string("hack"));
    }
    for (size_t i = 0; i < NCODES; i++)
        json_object_set_new(codes, CODES[i].code, json_string(CODES[i].group));
    return root;
}

long kg_schema_json(char *buf, size_t cap)
{
    json_t *root = schema_json();
    char *text = root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text)
        return -1;
    size_t n = strlen(text);
    if (buf && cap) {
        size_t k = n < cap - 1 ? n : cap - 1;
        memcpy(buf, text, k);
        buf[k] = '\0';
    }
    free(text);
    return (long)n;
}
