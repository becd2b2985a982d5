/* auth.c - bearer tokens: loading, rotation, constant-time checks;
 * trusted client ranges. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

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
    int ntrusted;      /* --trust-clients-from ranges, set before serving */
    kg_cidr trusted[KG_AUTH_MAX_TRUSTED];
};

/* A token file is a few lines: 64 tokens of 4 KiB with their comments fit. */
#define MAX_TOKEN_FILE (1024 * 1024)

/*
 * The whole of a token file, read as a regular file only: opened with
 * O_NONBLOCK and checked with fstat before any read, so a FIFO, a device
 * (/dev/zero) or a directory is refused at once instead of blocking or
 * spinning. Returns 0 with malloc'd bytes in *out (length in *len), or a
 * KG_E* code with err set.
 */
static int read_token_file(const char *path, char **out, size_t *len,
                           kg_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return kg_errf(err, KG_EIO, "token file %s: %s", path,
                       strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kg_errf(err, KG_EINVAL, "token file %s: not a regular file",
                       path);
    }
    if (st.st_size > MAX_TOKEN_FILE) {
        close(fd);
        return kg_errf(err, KG_EINVAL, "token file %s: larger than %d bytes",
                       path, MAX_TOKEN_FILE);
    }
    /* one byte more than the cap tells a file that grew past it */
    char *buf = malloc(MAX_TOKEN_FILE + 1);
    if (!buf) {
        close(fd);
        return kg_errf(err, KG_ENOMEM, "out of memory");
    }
    size_t n = 0;
    int rc = 0;
    while (n <= MAX_TOKEN_FILE) {
        ssize_t r = read(fd, buf + n, MAX_TOKEN_FILE + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kg_errf(err, KG_EIO, "token file %s: %s", path,
                         strerror(errno));
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (!rc && n > MAX_TOKEN_FILE)
        rc = kg_errf(err, KG_EINVAL, "token file %s: larger than %d bytes",
                     path, MAX_TOKEN_FILE);
    if (rc) {
        explicit_bzero(buf, n);
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* 1 for a byte no token file holds: NUL, DEL, a control other than tab/CR. */
static int bad_byte(unsigned char c)
{
    return (c < ' ' && c != '\t' && c != '\r' && c != '\n') || c == 127;
}

/*
 * Reads one token file into *ts. Tokens are stored only as digests. Lines
 * are taken by their byte length, never by a C string's: a NUL is refused
 * with the rest, never a place where a token silently ends.
 */
static int load_file(const char *path, struct tokset *ts, kg_err *err)
{
    size_t len = 0;
    char *buf;
    int rc = read_token_file(path, &buf, &len, err);
    if (rc)
        return rc;
    int lineno = 0;
    ts->n = 0;
    for (size_t pos = 0; pos < len && !rc;) {
        lineno++;
        char *line = buf + pos;
        char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl != NULL);
        for (size_t i = 0; i < n; i++)
            if (bad_byte((unsigned char)line[i])) {
                rc = kg_errf(err, KG_EINVAL,
                             "token file %s:%d: a NUL or control byte "
                             "(0x%02x) at column %zu",
                             path, lineno, (unsigned char)line[i], i + 1);
                break;
            }
        if (rc)
            break;
        while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' ||
                         line[n - 1] == '\t'))
            n--;
        char *s = line;
        while (n > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            n--;
        }
        if (n == 0 || s[0] == '#')
            continue;
        if (n > MAX_TOKEN_LEN) {
            rc = kg_errf(err, KG_EINVAL, "token file %s:%d: line too long",
                         path, lineno);
            break;
        }
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
    explicit_bzero(buf, len);
    free(buf);
    if (!rc && ts->n == 0)
        rc = kg_errf(err, KG_EINVAL, "token file %s: no token in it", path);
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

/* ---- trusted client ranges -------------------------------------------- */

static const unsigned char V4MAPPED[12] = {0, 0, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0xff, 0xff};

int kg_cidr_parse(const char *s, size_t n, kg_cidr *out, kg_err *err)
{
    char buf[INET6_ADDRSTRLEN + 8];
    memset(out, 0, sizeof *out);
    if (n == 0)
        return kg_errf(err, KG_EINVAL, "empty prefix");
    if (n >= sizeof buf)
        return kg_errf(err, KG_EINVAL, "%.*s...: too long for a prefix", 48,
                       s);
    memcpy(buf, s, n);
    buf[n] = 0;
    if (strlen(buf) != n)
        return kg_errf(err, KG_EINVAL, "a NUL byte in a prefix");
    char *slash = strchr(buf, '/');
    if (!slash)
        return kg_errf(err, KG_EINVAL,
                       "%s: expected ADDRESS/LENGTH (e.g. 10.0.0.0/8, "
                       "fd00::/8, 127.0.0.1/32)",
                       buf);
    *slash = 0;
    const char *len = slash + 1;
    if (inet_pton(AF_INET, buf, out->addr) == 1)
        out->family = AF_INET;
    else if (inet_pton(AF_INET6, buf, out->addr) == 1)
        out->family = AF_INET6;
    else
        return kg_errf(err, KG_EINVAL, "%s/%s: %s is not an IPv4 or IPv6 "
                       "address", buf, len, buf);
    int max = out->family == AF_INET ? 32 : 128;
    size_t ln = strlen(len);
    int p = 0;
    int ok = ln >= 1 && ln <= 3 && !(ln > 1 && len[0] == '0');
    for (size_t i = 0; ok && i < ln; i++) {
        if (len[i] < '0' || len[i] > '9')
            ok = 0;
        else
            p = p * 10 + (len[i] - '0');
    }
    if (!ok || p > max)
        return kg_errf(err, KG_EINVAL,
                       "%s/%s: the length must be a decimal number in 0..%d",
                       buf, len, max);
    out->prefix = p;
    int nbytes = out->family == AF_INET ? 4 : 16;
    for (int bit = p; bit < nbytes * 8; bit++)
        if (out->addr[bit / 8] & (0x80 >> (bit % 8))) {
            kg_cidr net = *out;
            for (int b = p; b < nbytes * 8; b++)
                net.addr[b / 8] &= (unsigned char)~(0x80 >> (b % 8));
            char want[64];
            kg_cidr_format(&net, want, sizeof want);
            return kg_errf(err, KG_EINVAL,
                           "%s/%s: bits set past the /%d prefix (did you "
                           "mean %s?)",
                           buf, len, p, want);
        }
    if (out->family == AF_INET6 && p >= 96 &&
        !memcmp(out->addr, V4MAPPED, sizeof V4MAPPED)) {
        /* ::ffff:a.b.c.d/n is the IPv4 prefix a.b.c.d/(n-96) */
        memmove(out->addr, out->addr + 12, 4);
        memset(out->addr + 4, 0, 12);
        out->family = AF_INET;
        out->prefix = p - 96;
    }
    return 0;
}

void kg_cidr_format(const kg_cidr *c, char *buf, size_t size)
{
    char a[INET6_ADDRSTRLEN] = "?";
    inet_ntop(c->family, c->addr, a, sizeof a);
    snprintf(buf, size, "%s/%d", a, c->prefix);
}

int kg_cidr_match(const kg_cidr *c, const struct sockaddr *sa)
{
    const unsigned char *addr;
    int family;
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET) {
        addr = (const unsigned char *)&((const struct sockaddr_in *)sa)
                   ->sin_addr;
        family = AF_INET;
    } else if (sa->sa_family == AF_INET6) {
        addr = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        family = AF_INET6;
        if (!memcmp(addr, V4MAPPED, sizeof V4MAPPED)) {
            addr += 12; /* an IPv4 client on a [::] listener */
            family = AF_INET;
        }
    } else {
        return 0;
    }
    if (family != c->family)
        return 0;
    int full = c->prefix / 8, rest = c->prefix % 8;
    if (memcmp(addr, c->addr, (size_t)full))
        return 0;
    if (rest) {
        unsigned char mask = (unsigned char)(0xff << (8 - rest));
        if ((addr[full] & mask) != c->addr[full])
            return 0;
    }
    return 1;
}

int kg_auth_trust(kg_auth *a, const char *list, kg_err *err)
{
    kg_cidr got[KG_AUTH_MAX_TRUSTED];
    int n = a->ntrusted;
    if (!list || !*list)
        return kg_errf(err, KG_EINVAL,
                       "--trust-clients-from: expected CIDR[,CIDR...]");
    memcpy(got, a->trusted, sizeof got);
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == KG_AUTH_MAX_TRUSTED)
            return kg_errf(err, KG_EINVAL,
                           "--trust-clients-from: more than %d prefixes",
                           KG_AUTH_MAX_TRUSTED);
        kg_err e;
        if (kg_cidr_parse(p, len, &got[n], &e))
            return kg_errf(err, KG_EINVAL, "--trust-clients-from: %s",
                           e.msg);
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    memcpy(a->trusted, got, sizeof got);
    a->ntrusted = n;
    return 0;
}

int kg_auth_trusted(const kg_auth *a, const kg_cidr **out)
{
    if (out)
        *out = a ? a->trusted : NULL;
    return a ? a->ntrusted : 0;
}

int kg_auth_peer_trusted(const kg_auth *a, const struct sockaddr *sa)
{
    if (!a)
        return 0;
    for (int i = 0; i < a->ntrusted; i++)
        if (kg_cidr_match(&a->trusted[i], sa))
            return 1;
    return 0;
}
