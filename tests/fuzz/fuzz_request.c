/*
 * fuzz_request.c - libFuzzer harness for what kgym serve does with
 * untrusted bytes before the store sees them: cleaning a raw path (only
 * unreserved characters decoded) and routing a method and path,
 * checking an Authorization header, parsing a body, validating a task
 * request (and each task of a batch) and hashing it into a cache key, and
 * checking a results poll's list of ids.
 *
 * Built and run by `make fuzz` (part of `make test`): under ASan + UBSan,
 * FUZZ_SECONDS (default 30) from the seeds in tests/fuzz/corpus, with
 * clang's libFuzzer (scripts/install-deps installs clang), else with gcc
 * and driver.c (the seeds, then random mutations). A crash, a leak or a
 * sanitizer report fails it, and leaves the input as crash-... in the
 * build directory (build-fuzz-libfuzzer or build-fuzz-driver).
 * A longer run: make fuzz FUZZ_SECONDS=600.
 *
 * Input layout: byte 0 picks the method, then the path up to the first
 * newline, then the Authorization header up to the next newline, then the
 * body.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/request.h"
#include "common/result.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/http.h"

static kg_auth *auth;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char path[] = "/tmp/kgym-fuzz-tokens-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    static const char toks[] = "# tokens\nclient-token-0123456789\n"
                               "second-token-abcdefghij\n";
    if (write(fd, toks, sizeof toks - 1) != (ssize_t)(sizeof toks - 1))
        abort();
    close(fd);
    kg_err err;
    if (kg_auth_open(path, NULL, &auth, &err))
        abort();
    unlink(path);
    return 0;
}

/* The next line of [*p, end) as a NUL-terminated copy (caller frees). */
static char *take_line(const uint8_t **p, const uint8_t *end)
{
    const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, *p, n);
    s[n] = 0;
    *p += n + (nl ? 1 : 0);
    return s;
}

static void check_task(const json_t *task)
{
    json_t *norm = NULL;
    kg_api_error e;
    if (kg_api_check_task(task, &norm, &e) == 0) {
        char key[65];
        if (!norm || kg_request_cache_key(norm, key, NULL) || strlen(key) != 64)
            abort();
        json_decref(norm);
        return;
    }
    if (norm || !e.code ||
        !(e.status == 400 || e.status == 413 || e.status == 422 ||
          e.status == 500))
        abort();
    if (e.field && !strstr(e.message, e.field))
        abort(); /* an error that blames a field names it */
}

/* A results poll's ids: accepted only as 1..the cap distinct valid ids;
 * refused with a 4xx (or 500 out of memory) that names task_ids. */
static void check_poll(const json_t *in)
{
    kg_api_error e;
    const json_t *ids = kg_api_check_poll_ids(in, &e);
    if (!ids) {
        if (!(e.status == 400 || e.status == 413 || e.status == 422 ||
              e.status == 500) ||
            (e.status != 500 && (!e.field || strcmp(e.field, "task_ids"))))
            abort();
        return;
    }
    size_t n = json_array_size(ids);
    if (ids != json_object_get(in, "task_ids") || n < 1 ||
        n > KG_API_MAX_POLL_IDS)
        abort();
    for (size_t i = 0; i < n; i++) {
        const char *id = json_string_value(json_array_get(ids, i));
        if (!id || !kg_task_id_valid(id))
            abort();
        for (size_t j = 0; j < i; j++)
            if (!strcmp(id, json_string_value(json_array_get(ids, j))))
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "POST", "DELETE", "HEAD",
                                          "PUT"};
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1, *end = data + size;
    const char *method = methods[data[0] % 5];
    char *path = take_line(&p, end);
    char *authz = take_line(&p, end);

    /* the raw path as sent: only a path that cleans is routed; what it
       cleans to holds no byte a proxy would read differently (no NUL, no
       '%', no space or control byte) and is never longer than the raw one */
    char clean[256];
    size_t rawn = strlen(path);
    if (kg_http_clean_path(path, rawn, clean, sizeof clean) == 0) {
        size_t cn = strlen(clean);
        if (cn > rawn)
            abort();
        for (size_t i = 0; i < cn; i++)
            if (clean[i] == '%' || (unsigned char)clean[i] <= ' ' ||
                clean[i] == 0x7f)
                abort();
        int croute, crole;
        const char *cparam;
        (void)kg_http_route(method, clean, &croute, &crole, &cparam);
    }

    int route, role;
    const char *param;
    int rc = kg_http_route(method, path, &route, &role, &param);
    if (rc != 0 && rc != 404 && rc != 405)
        abort();
    if (param && (param < path || param > path + strlen(path)))
        abort();
    for (int r = 0; r <= KG_AUTH_ANY; r++)
        (void)kg_auth_check(auth, authz, r);

    json_t *body = NULL;
    kg_api_error e;
    if (kg_api_parse_body((const char *)p, (size_t)(end - p), &body, &e) == 0) {
        check_task(body);
        check_poll(body);
        /* a worker's result as any view sends it: finalizing twice changes
           nothing more, and no verdict but pass keeps a speedup */
        json_t *r = json_deep_copy(body);
        kg_result_finalize(r);
        char *once = json_dumps(r, JSON_SORT_KEYS);
        kg_result_finalize(r);
        char *twice = json_dumps(r, JSON_SORT_KEYS);
        if ((once || twice) && (!once || !twice || strcmp(once, twice)))
            abort();
        const char *v = json_string_value(json_object_get(r, "verdict"));
        if (v && strcmp(v, "pass") && !json_is_null(json_object_get(r, "speedup")))
            abort();
        free(once);
        free(twice);
        json_decref(r);
        json_t *tasks = json_object_get(body, "tasks");
        size_t i;
        json_t *t;
        json_array_foreach(tasks, i, t) check_task(t);
        json_decref(body);
    } else if (body || e.status != 400) {
        abort();
    }
    free(path);
    free(authz);
    return 0;
}
