/* prompt.c - filling prompt templates and reading code out of a reply
 * (prompt.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agent/prompt.h"
#include "common/request.h"

#define MAX_TEMPLATE (64 * 1024)

/* The index of the key that "{name}" at t names, or -1; *len gets the
 * placeholder's length. */
static int placeholder(const char *t, const char *const *keys, int n,
                       size_t *len)
{
    for (int i = 0; i < n; i++) {
        size_t k = strlen(keys[i]);
        if (!strncmp(t + 1, keys[i], k) && t[1 + k] == '}') {
            *len = k + 2;
            return i;
        }
    }
    return -1;
}

char *kg_prompt_fill(const char *tmpl, const char *const *keys,
                     const char *const *vals, int n)
{
    size_t cap = strlen(tmpl) + 1, used = 0;
    for (const char *t = tmpl; *t; t++) {
        size_t len;
        int k;
        if (*t == '{' && (k = placeholder(t, keys, n, &len)) >= 0)
            cap += strlen(vals[k]);
    }
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (const char *t = tmpl; *t;) {
        size_t len;
        int k = *t == '{' ? placeholder(t, keys, n, &len) : -1;
        if (k >= 0) {
            size_t v = strlen(vals[k]);
            memcpy(out + used, vals[k], v);
            used += v;
            t += len;
        } else {
            out[used++] = *t++;
        }
    }
    out[used] = 0;
    return out;
}

/* The end of the line that starts at p (its '\n' or NUL). */
static const char *eol(const char *p)
{
    const char *e = strchr(p, '\n');
    return e ? e : p + strlen(p);
}

/* 1 when the line at p opens a python block: spaces, ```, then "python"
 * or "py" not followed by a letter or digit. */
static int opens_python(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "```", 3))
        return 0;
    p += 3;
    while (*p == ' ')
        p++;
    size_t k = !strncasecmp(p, "python", 6) ? 6 : !strncasecmp(p, "py", 2) ? 2 : 0;
    return k && !isalnum((unsigned char)p[k]);
}

/* 1 when the line at p closes a block: spaces, then ```. */
static int closes(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return !strncmp(p, "```", 3);
}

/* 1 when code defines class ModelNew at the start of a line. */
static int has_modelnew(const char *code)
{
    for (const char *p = code; (p = strstr(p, "class ModelNew")); p++) {
        char c = p[14];
        if ((p == code || p[-1] == '\n') && (c == '(' || c == ':' || c == ' '))
            return 1;
    }
    return 0;
}

int kg_extract_code(const char *reply, char **code, const char **why)
{
    const char *body = NULL, *end = NULL, *open = NULL;
    *code = NULL;
    for (const char *p = reply ? reply : ""; *p;) {
        const char *e = eol(p);
        if (open && closes(p)) {
            body = open, end = p, open = NULL;
        } else if (!open && opens_python(p)) {
            open = *e ? e + 1 : e;
        }
        p = *e ? e + 1 : e;
    }
    int st = KG_CODE_OK;
    const char *w = "";
    if (open && (!body || open > body)) {
        st = KG_CODE_UNCLOSED;
        w = "the last ```python block of your reply is not closed with ``` "
            "(was the reply cut off?)";
    } else if (!body) {
        st = KG_CODE_NO_BLOCK;
        w = "your reply has no fenced ```python code block";
    } else if ((size_t)(end - body) > KG_MAX_KERNEL_CODE) {
        st = KG_CODE_TOO_LARGE;
        w = "the code of your last ```python block is over the 256 KiB limit";
    } else if (!(*code = strndup(body, (size_t)(end - body)))) {
        st = KG_CODE_NO_BLOCK;
        w = "out of memory";
    } else if (!has_modelnew(*code)) {
        free(*code);
        *code = NULL;
        st = KG_CODE_NO_MODELNEW;
        w = "the last ```python block of your reply defines no "
            "`class ModelNew`";
    }
    if (why)
        *why = w;
    return st;
}

char *kg_prompt_read_file(const char *path, kg_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        kg_errf(err, KG_ENOTFOUND, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *b = malloc(MAX_TEMPLATE + 2);
    size_t n = b ? fread(b, 1, MAX_TEMPLATE + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!b) {
        kg_errf(err, KG_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    b[n] = 0;
    const char *why = NULL;
    if (bad)
        why = "read error";
    else if (n > MAX_TEMPLATE)
        why = "over 64 KiB";
    else if (n == 0)
        why = "empty file";
    else if (memchr(b, 0, n))
        why = "holds a NUL byte";
    if (why) {
        kg_errf(err, KG_EINVAL, "%s: %s", path, why);
        free(b);
        return NULL;
    }
    return b;
}
