/* auth.c - bearer tokens: loading, rotation, constant-time checks. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/sha256.h"
#include "server/auth.h"

#define MIN_TOKEN_LEN 16
#define MAX_TOKEN_LEN 4096
#define MAX_TOKENS 64

struct tokset {
    int n;
    uint8_t dig[MAX_TOKENS][32];
};

struct kg_auth {
    char *client_path, *worker_path; /* worker_path NULL: same as client */
    pthread_rwlock_t lock;
    struct tokset client, worker;
    int has_extra;     /* a worker token added in memory (local workers) */
    uint8_t extra[32]; /* its digest; survives reloads */
};

/* Reads one token file into *ts. Tokens are stored only as digests. */
static int load_file(const char *path, struct tokset *ts, kg_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return kg_errf(err, KG_EIO, "token file %s: %s", path, strerror(errno));
    char line[MAX_TOKEN_LEN + 2];
    int lineno = 0, rc = 0;
    ts->n = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            rc = kg_errf(err, KG_EINVAL, "token file %s:%d: line too long",
                         path, lineno);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
                         line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = 0;
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        n = strlen(s);
        if (n == 0 || s[0] == '#')
            continue;
        if (n < MIN_TOKEN_LEN) {
            rc = kg_errf(err, KG_EINVAL,
                         "token file %s:%d: token shorter than %d characters",
                         path, lineno, MIN_TOKEN_LEN);
            break;
        }
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 127) {
                rc = kg_errf(err, KG_EINVAL,
                             "token file %s:%d: token has a space or a "
                             "non-printable character",
                             path, lineno);
                break;
            }
        if (rc)
            break;
        if (ts->n == MAX_TOKENS) {
            rc = kg_errf(err, KG_EINVAL, "token file %s: more than %d tokens",
                         path, MAX_TOKENS);
            break;
        }
        kg_sha256 h;
        kg_sha256_init(&h);
        kg_sha256_update(&h, s, n);
        kg_sha256_final(&h, ts->dig[ts->n++]);
    }
    if (!rc && ferror(f))
        rc = kg_errf(err, KG_EIO, "token file %s: read error", path);
    fclose(f);
    if (!rc && ts->n == 0)
        rc = kg_errf(err, KG_EINVAL, "token file %s: no token in it", path);
    explicit_bzero(line, sizeof line);
    return rc;
}

static int load_all(kg_auth *a, struct tokset *c, struct tokset *w, kg_err *err)
{
    c->n = w->n = 0;
    if (a->client_path) {
        int rc = load_file(a->client_path, c, err);
        if (rc)
            return rc;
    }
    if (a->worker_path)
        return load_file(a->worker_path, w, err);
    *w = *c;
    return 0;
}

int kg_auth_open(const char *client_path, const char *worker_path,
                 kg_auth **out, kg_err *err)
{
    *out = NULL;
    kg_auth *a = calloc(1, sizeof *a);
    if (!a)
        return kg_errf(err, KG_ENOMEM, "out of memory");
    if ((client_path && !(a->client_path = strdup(client_path))) ||
        (worker_path && !(a->worker_path = strdup(worker_path)))) {
        kg_auth_free(a);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    pthread_rwlock_init(&a->lock, NULL);
    int rc = load_all(a, &a->client, &a->worker, err);
    if (rc) {
        kg_auth_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void kg_auth_free(kg_auth *a)
{
    if (!a)
        return;
    pthread_rwlock_destroy(&a->lock);
    free(a->client_path);
    free(a->worker_path);
    explicit_bzero(a, sizeof *a);
    free(a);
}

int kg_auth_reload(kg_auth *a, kg_err *err)
{
    struct tokset c, w;
    int rc = load_all(a, &c, &w, err);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&a->lock);
    a->client = c;
    a->worker = w;
    pthread_rwlock_unlock(&a->lock);
    return 0;
}

int kg_auth_add_worker_token(kg_auth *a, const char *token, kg_err *err)
{
    size_t n = token ? strlen(token) : 0;
    if (n < MIN_TOKEN_LEN || n > MAX_TOKEN_LEN)
        return kg_errf(err, KG_EINVAL, "worker token: %d..%d characters",
                       MIN_TOKEN_LEN, MAX_TOKEN_LEN);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)token[i] <= ' ' || (unsigned char)token[i] >= 127)
            return kg_errf(err, KG_EINVAL,
                           "worker token: a space or a non-printable "
                           "character");
    kg_sha256 h;
    kg_sha256_init(&h);
    kg_sha256_update(&h, token, n);
    pthread_rwlock_wrlock(&a->lock);
    kg_sha256_final(&h, a->extra);
    a->has_extra = 1;
    pthread_rwlock_unlock(&a->lock);
    return 0;
}

int kg_auth_enabled(const kg_auth *a)
{
    return a && (a->client_path || a->worker_path);
}

/* Clients are open when no token file is configured; workers when, in
 * addition, no worker token was added in memory. */
static int open_for(const kg_auth *a, int role)
{
    if (!a || role == KG_AUTH_NONE)
        return 1;
    if (a->client_path || a->worker_path)
        return 0;
    return !(role == KG_AUTH_WORKER && a->has_extra);
}

/* 1 when dig equals one of the set's digests; visits every entry and every
 * byte whatever matches. */
static int in_set(const struct tokset *ts, const uint8_t dig[32])
{
    unsigned found = 0;
    for (int i = 0; i < ts->n; i++) {
        unsigned diff = 0;
        for (int j = 0; j < 32; j++)
            diff |= (unsigned)(ts->dig[i][j] ^ dig[j]);
        found |= (unsigned)(diff == 0);
    }
    return found != 0;
}

int kg_auth_check(kg_auth *a, const char *authorization, int role)
{
    if (open_for(a, role))
        return 1;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t n = strlen(tok);
    while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t'))
        n--;
    if (n == 0 || n > MAX_TOKEN_LEN)
        return 0;
    uint8_t dig[32];
    kg_sha256 h;
    kg_sha256_init(&h);
    kg_sha256_update(&h, tok, n);
    kg_sha256_final(&h, dig);
    int ok = 0;
    pthread_rwlock_rdlock(&a->lock);
    if (role & KG_AUTH_CLIENT)
        ok |= in_set(&a->client, dig);
    if (role & KG_AUTH_WORKER) {
        ok |= in_set(&a->worker, dig);
        struct tokset one = {.n = a->has_extra};
        memcpy(one.dig[0], a->extra, 32);
        ok |= in_set(&one, dig);
    }
    pthread_rwlock_unlock(&a->lock);
    return ok;
}

void kg_auth_counts(kg_auth *a, int *clients, int *workers)
{
    pthread_rwlock_rdlock(&a->lock);
    *clients = a->client.n;
    *workers = a->worker.n + a->has_extra;
    pthread_rwlock_unlock(&a->lock);
}
