/* redteam_case.c - the red-team header line and matching a result against
 * it (redteam_case.h, docs/redteam.md). */
#include "corpus/redteam_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/request.h"
#include "kgym/schema.h"


/* 1 when word is one of the '|'-separated items of list. */
static int in_list(const char *list, const char *word)
{
    size_t w = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == w && !strncmp(p, word, l))
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* 1 when s[0..l) is a verdict a header may expect: the schema's verdicts
 * but infra_error (kgym's failure) and problem_error (the problem's),
 * never a candidate's expected outcome. */
static int is_verdict(const char *s, size_t l)
{
    for (size_t i = 0; i < kg_schema_nverdicts(); i++) {
        const char *v = kg_schema_verdict(i);
        if (!strcmp(v, "infra_error") || !strcmp(v, "problem_error"))
            continue;
        if (strlen(v) == l && !strncmp(v, s, l))
            return 1;
    }
    return 0;
}

/* 1 when s is a non-empty list of [a-z0-9_] words joined by seps. */
static int words_ok(const char *s, const char *seps)
{
    int need_word = 1;
    for (; *s; s++) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
            (*s >= 'A' && *s <= 'Z'))
            need_word = 0;
        else if (strchr(seps, *s) && !need_word)
            need_word = 1;
        else
            return 0;
    }
    return !need_word;
}

/* "name:value,name:value" -> request fields; values as kgym eval's flags. */
static int parse_fields(kg_rt_case *c, const char *v, kg_err *err)
{
    char *copy = strdup(v), *save = NULL;
    if (!copy)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    for (char *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon || colon == tok || !colon[1]) {
            kg_errf(err, KG_EINVAL, "fields: '%s' is not name:value", tok);
            free(copy); /* tok points into it */
            return KG_EINVAL;
        }
        *colon = 0;
        if (!strcmp(tok, "kernel_code") || !strcmp(tok, "reference_code") ||
            !strcmp(tok, "backend")) {
            kg_errf(err, KG_EINVAL,
                    "fields: %s comes from the file and the header", tok);
            free(copy);
            return KG_EINVAL;
        }
        json_object_set_new(c->fields, tok, kg_request_flag_value(colon + 1));
    }
    free(copy);
    return 0;
}

/* Stores one key=value of the header; the strings are owned by c. */
static int header_kv(kg_rt_case *c, const char *key, const char *val,
                     kg_err *err)
{
    char **slot = NULL;
    if (!strcmp(key, "family"))
        slot = &c->family;
    else if (!strcmp(key, "problem"))
        slot = &c->problem;
    else if (!strcmp(key, "backend"))
        slot = &c->backend;
    else if (!strcmp(key, "expect"))
        slot = &c->expect;
    else if (!strcmp(key, "reasons"))
        slot = &c->reasons;
    else if (!strcmp(key, "code"))
        slot = &c->code;
    else if (!strcmp(key, "warn"))
        slot = &c->warn;
    else if (!strcmp(key, "needs")) {
        if (strcmp(val, "gpu"))
            return kg_errf(err, KG_EINVAL, "needs=%s: only needs=gpu exists",
                           val);
        c->needs_gpu = 1;
        return 0;
    } else if (!strcmp(key, "fields"))
        return parse_fields(c, val, err);
    else
        return kg_errf(err, KG_EINVAL,
                       "unknown key '%s' (family, problem, backend, expect, "
                       "reasons, code, warn, needs, fields)",
                       key);
    if (*slot)
        return kg_errf(err, KG_EINVAL, "%s= given twice", key);
    *slot = strdup(val);
    return *slot ? 0 : kg_errf(err, KG_ENOMEM, "out of memory");
}

/* Checks what the header says against itself (not yet the problem file). */
static int header_check(kg_rt_case *c, kg_err *err)
{
    static const char *const need[] = {"family", "problem", "backend",
                                       "expect"};
    char *const have[] = {c->family, c->problem, c->backend, c->expect};
    for (int i = 0; i < 4; i++)
        if (!have[i] || !*have[i])
            return kg_errf(err, KG_EINVAL, "header lacks %s=", need[i]);
    if (!words_ok(c->family, ""))
        return kg_errf(err, KG_EINVAL, "family=%s: one word of [a-z0-9_]",
                       c->family);
    if (strcmp(c->backend, "cpu") && strcmp(c->backend, "triton") &&
        strcmp(c->backend, "cuda"))
        return kg_errf(err, KG_EINVAL,
                       "backend=%s: must be cpu, triton or cuda", c->backend);
    for (const char *p = c->expect; p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (!is_verdict(p, l))
            return kg_errf(err, KG_EINVAL,
                           "expect=%s: '%.*s' is not a verdict (pass, "
                           "mismatch, compile_error, runtime_error, timeout, "
                           "hacked)",
                           c->expect, (int)l, p);
        p = e ? e + 1 : NULL;
    }
    if (!strcmp(c->family, "honest") && strcmp(c->expect, "pass"))
        return kg_errf(err, KG_EINVAL, "family=honest must expect=pass, not %s",
                       c->expect);
    if (c->reasons && !words_ok(c->reasons, ",|"))
        return kg_errf(err, KG_EINVAL, "reasons=%s: codes joined by , or |",
                       c->reasons);
    if (c->reasons && !in_list(c->expect, "hacked"))
        return kg_errf(err, KG_EINVAL,
                       "reasons= needs expect= to include hacked");
    if (c->code && !words_ok(c->code, "|"))
        return kg_errf(err, KG_EINVAL, "code=%s: codes joined by |", c->code);
    if (c->warn && !words_ok(c->warn, ""))
        return kg_errf(err, KG_EINVAL, "warn=%s: one word", c->warn);
    if (!strcmp(c->backend, "cuda"))
        c->needs_gpu = 1;
    return 0;
}

/* Parses the first line of code ("# redteam: key=value ..."). */
int kg_rt_case_parse(kg_rt_case *c, const char *code, kg_err *err)
{
    if (!c->fields && !(c->fields = json_object()))
        return kg_errf(err, KG_ENOMEM, "out of memory");
    size_t tag = strlen(KG_RT_HEADER_TAG);
    if (strncmp(code, KG_RT_HEADER_TAG, tag))
        return kg_errf(err, KG_EINVAL,
                       "no header: the first line must start with '%s' "
                       "(docs/redteam.md)",
                       KG_RT_HEADER_TAG);
    const char *eol = strchr(code, '\n');
    size_t len = eol ? (size_t)(eol - code) : strlen(code);
    char *line = strndup(code + tag, len - tag);
    if (!line)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    char *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(line, " \t\r", &save); tok && !rc;
         tok = strtok_r(NULL, " \t\r", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            rc = kg_errf(err, KG_EINVAL, "header: '%s' is not key=value", tok);
            break;
        }
        *eq = 0;
        rc = header_kv(c, tok, eq + 1, err);
    }
    free(line);
    return rc ? rc : header_check(c, err);
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static int has_reason(json_t *reasons, const char *code, size_t l)
{
    size_t i;
    json_t *v;
    json_array_foreach(reasons, i, v)
    {
        const char *s = json_string_value(v);
        if (s && strlen(s) == l && !strncmp(s, code, l))
            return 1;
    }
    return 0;
}

/* Every ','-group of c->reasons has one of its '|'-alternatives in r's
 * hack_reasons. */
static int reasons_met(const kg_rt_case *c, json_t *r)
{
    json_t *hr = json_object_get(r, "hack_reasons");
    for (const char *g = c->reasons; g && *g;) {
        const char *ge = strchr(g, ',');
        size_t gl = ge ? (size_t)(ge - g) : strlen(g);
        int found = 0;
        for (const char *a = g; a < g + gl;) {
            const char *ae = memchr(a, '|', (size_t)(g + gl - a));
            size_t al = ae ? (size_t)(ae - a) : (size_t)(g + gl - a);
            found |= has_reason(hr, a, al);
            a += al + 1;
        }
        if (!found)
            return 0;
        g = ge ? ge + 1 : NULL;
    }
    return 1;
}

/* The warning is present: in a warnings entry (substring) or as a truthy
 * key of checks. */
static int warn_met(const kg_rt_case *c, json_t *r)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r, "warnings"), i, v)
    {
        const char *s = json_string_value(v);
        if (s && strstr(s, c->warn))
            return 1;
    }
    json_t *chk = json_object_get(json_object_get(r, "checks"), c->warn);
    return chk && !json_is_false(chk) && !json_is_null(chk) &&
           !(json_is_integer(chk) && json_integer_value(chk) == 0);
}

int kg_rt_case_judge(const kg_rt_case *c, json_t *r)
{
    const char *verdict = str(r, "verdict");
    int ok = in_list(c->expect, verdict);
    if (ok && !strcmp(verdict, "hacked"))
        ok = reasons_met(c, r);
    /* code= names the failing verdicts' code; a pass carries none, so an
     * expected pass (hacked|pass) is met without one */
    if (ok && c->code && strcmp(verdict, "pass"))
        ok = in_list(c->code, str(r, "error_code"));
    if (ok && c->warn)
        ok = warn_met(c, r);
    if (ok)
        return KG_RT_OK;
    if (!strcmp(verdict, "infra_error") || !strcmp(verdict, "problem_error") ||
        !*verdict)
        return KG_RT_ERROR;
    return strcmp(c->family, "honest") ? KG_RT_MISS : KG_RT_FALSE_ALARM;
}

void kg_rt_expected_text(const kg_rt_case *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s%s%s%s", c->expect, c->reasons ? "[" : "",
             c->reasons ? c->reasons : "", c->reasons ? "]" : "",
             c->code ? " " : "", c->code ? c->code : "", c->warn ? " +" : "",
             c->warn ? c->warn : "");
}

/* Appends to buf (size n, holding *k bytes), truncating at the end. */
static void append(char *buf, size_t n, size_t *k, const char *s)
{
    size_t l = strlen(s);
    if (*k + 1 >= n)
        return;
    if (l > n - 1 - *k)
        l = n - 1 - *k;
    memcpy(buf + *k, s, l);
    *k += l;
    buf[*k] = 0;
}

void kg_rt_got_text(json_t *r, char *buf, size_t n)
{
    const char *v = str(r, "verdict");
    json_t *hr = json_object_get(r, "hack_reasons");
    size_t k = 0;
    if (n == 0)
        return;
    buf[0] = 0;
    append(buf, n, &k, *v ? v : "?");
    if (json_array_size(hr) > 0) {
        size_t i;
        json_t *x;
        append(buf, n, &k, "[");
        json_array_foreach(hr, i, x)
        {
            if (i)
                append(buf, n, &k, ",");
            append(buf, n, &k, json_is_string(x) ? json_string_value(x) : "?");
        }
        append(buf, n, &k, "]");
    } else if (strcmp(v, "pass") && *str(r, "error_code")) {
        append(buf, n, &k, " ");
        append(buf, n, &k, str(r, "error_code"));
    }
}

void kg_rt_case_free(kg_rt_case *c)
{
    free(c->family), free(c->problem), free(c->backend), free(c->expect);
    free(c->reasons), free(c->code), free(c->warn);
    json_decref(c->fields);
    memset(c, 0, sizeof *c);
}
