/*
 * store_redis_conn.c - the Redis store's connections: a pool of hiredis
 * contexts (hiredis is not thread-safe), each used by one call at a time;
 * connect and command timeouts of 1 s; a broken connection is dropped and
 * made again by a later call. Runs scripts (EVALSHA, loading them again
 * after a Redis restart) and plain commands, and reads replies.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_redis.h"

#define TIMEOUT_MS 1000
#define RETRY_CONNECT_MS 100 /* after a failed connect, fail fast this long */

static struct timeval tv_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Sends one command; NULL (and the connection dropped) on I/O errors. */
static redisReply *cmd(rconn *rc, int argc, const char **argv,
                       const size_t *len, kg_err *err)
{
    redisReply *r = redisCommandArgv(rc->c, argc, argv, len);
    if (!r) {
        kg_errf(err, KG_EUNAVAIL, "redis: %s",
                rc->c->errstr[0] ? rc->c->errstr : "connection lost");
        redisFree(rc->c);
        rc->c = NULL;
    }
    return r;
}

static int reply_err(redisReply *r, kg_err *err)
{
    const char *s = r->str ? r->str : "error";
    if (!strncmp(s, "NOTFOUND ", 9))
        return kg_errf(err, KG_ENOTFOUND, "%s", s + 9);
    if (!strncmp(s, "ESTATE ", 7))
        return kg_errf(err, KG_ESTATE, "%s", s + 7);
    if (!strncmp(s, "LOADING", 7) || !strncmp(s, "BUSY", 4) ||
        !strncmp(s, "MISCONF", 7) || !strncmp(s, "READONLY", 8))
        return kg_errf(err, KG_EUNAVAIL, "redis: %s", s);
    return kg_errf(err, KG_EIO, "redis: %s", s);
}

/* Connects rc (SELECT db, groups, scripts). 0 or KG_EUNAVAIL/KG_EIO. */
int rd__connect(rd_store *s, rconn *rc, kg_err *err)
{
    rc->c = redisConnectWithTimeout(s->host, s->port, tv_ms(TIMEOUT_MS));
    if (!rc->c || rc->c->err) {
        int e = kg_errf(err, KG_EUNAVAIL, "redis %s:%d: %s", s->host, s->port,
                        rc->c ? rc->c->errstr : "out of memory");
        if (rc->c)
            redisFree(rc->c);
        rc->c = NULL;
        return e;
    }
    redisSetTimeout(rc->c, tv_ms(TIMEOUT_MS));
    redisEnableKeepAlive(rc->c);
    char db[16];
    snprintf(db, sizeof db, "%d", s->db);
    const char *sel[] = {"SELECT", db};
    redisReply *r = cmd(rc, 2, sel, NULL, err);
    if (!r)
        return KG_EUNAVAIL;
    int e = r->type == REDIS_REPLY_ERROR ? reply_err(r, err) : 0;
    freeReplyObject(r);
    for (int p = 0; e == 0 && p < KG_NPRIO; p++) {
        char q[32];
        snprintf(q, sizeof q, "kg:q:%d", p);
        const char *a[] = {"XGROUP", "CREATE", q, "kg", "0", "MKSTREAM"};
        if (!(r = cmd(rc, 6, a, NULL, err)))
            return KG_EUNAVAIL;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9))
            e = reply_err(r, err);
        freeReplyObject(r);
    }
    for (int i = 0; e == 0 && i < SC_N; i++) {
        const char *a[] = {"SCRIPT", "LOAD", rd__scripts[i]};
        if (!(r = cmd(rc, 3, a, NULL, err)))
            return KG_EUNAVAIL;
        if (r->type == REDIS_REPLY_STRING && r->len == 40)
            memcpy(s->sha[i], r->str, 41);
        else
            e = r->type == REDIS_REPLY_ERROR
                    ? reply_err(r, err)
                    : kg_errf(err, KG_EIO, "redis: SCRIPT LOAD failed");
        freeReplyObject(r);
    }
    if (e < 0 && rc->c) {
        redisFree(rc->c);
        rc->c = NULL;
    }
    return e;
}

/*
 * Whether an idle connection was closed by Redis (a restart, a client
 * timeout, a kill): between calls there is nothing to read on it, so any
 * event (end of file, hang-up, error, stray bytes) means it is no longer
 * usable. Without this check every pooled connection failed its next call
 * once after a Redis restart (503s long after Redis was back, whenever a
 * deeper connection of the pool was first used again).
 */
static int conn_stale(const redisContext *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    return c->fd < 0 || poll(&p, 1, 0) != 0;
}

/* A pooled connection, connected; NULL with KG_EUNAVAIL in *code. */
static rconn *pool_get(rd_store *s, int *code, kg_err *err)
{
    pthread_mutex_lock(&s->mu);
    while (s->nidle == 0)
        pthread_cond_wait(&s->cv, &s->mu);
    rconn *rc = &s->conns[s->idle[--s->nidle]];
    int64_t down_until = s->down_until;
    pthread_mutex_unlock(&s->mu);
    if (rc->c && conn_stale(rc->c)) {
        redisFree(rc->c);
        rc->c = NULL;
    }
    if (rc->c)
        return rc;
    if (kg_store_now_ms() < down_until)
        *code = kg_errf(err, KG_EUNAVAIL, "redis %s:%d: unreachable", s->host,
                        s->port);
    else
        *code = rd__connect(s, rc, err);
    if (*code == 0)
        return rc;
    pthread_mutex_lock(&s->mu);
    if (*code == KG_EUNAVAIL && kg_store_now_ms() >= down_until)
        s->down_until = kg_store_now_ms() + RETRY_CONNECT_MS;
    s->idle[s->nidle++] = (int)(rc - s->conns);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void pool_put(rd_store *s, rconn *rc)
{
    pthread_mutex_lock(&s->mu);
    s->idle[s->nidle++] = (int)(rc - s->conns);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/*
 * Runs script `which` with argv (argc values, lengths len or NULL for C
 * strings). Returns the reply (caller frees) or NULL with *code set; an
 * error reply is turned into *code too. A script cache lost with a Redis
 * restart is loaded again once.
 */
redisReply *rd__run(rd_store *s, int which, int argc, const char **argv,
                    const size_t *len, int *code, kg_err *err)
{
    const char *a[64];
    size_t l[64];
    const char **av = a;
    size_t *lv = l;
    if (argc + 3 > 64) {
        av = malloc((size_t)(argc + 3) * sizeof *av);
        lv = malloc((size_t)(argc + 3) * sizeof *lv);
        if (!av || !lv) {
            free(av);
            free(lv);
            *code = kg_errf(err, KG_ENOMEM, "out of memory");
            return NULL;
        }
    }
    redisReply *r = NULL;
    *code = 0;
    rconn *rc = pool_get(s, code, err);
    if (!rc)
        goto out;
    for (int attempt = 0; attempt < 2; attempt++) {
        av[0] = "EVALSHA";
        av[1] = s->sha[which];
        av[2] = "0";
        lv[0] = 7;
        lv[1] = 40;
        lv[2] = 1;
        for (int i = 0; i < argc; i++) {
            av[3 + i] = argv[i];
            lv[3 + i] = len ? len[i] : strlen(argv[i]);
        }
        r = redisCommandArgv(rc->c, argc + 3, av, lv);
        if (!r) {
            *code =
                kg_errf(err, KG_EUNAVAIL, "redis: %s",
                        rc->c->errstr[0] ? rc->c->errstr : "connection lost");
            redisFree(rc->c);
            rc->c = NULL;
            break;
        }
        if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOSCRIPT", 8) &&
            attempt == 0) {
            freeReplyObject(r);
            r = NULL;
            redisFree(rc->c);
            rc->c = NULL;
            if ((*code = rd__connect(s, rc, err)) < 0)
                break;
            continue;
        }
        break;
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        *code = reply_err(r, err);
        freeReplyObject(r);
        r = NULL;
    }
    pool_put(s, rc);
out:
    if (av != a) {
        free(av);
        free(lv);
    }
    return r;
}

/* A plain command (not a script) on a pooled connection. */
redisReply *rd__plain(rd_store *s, int argc, const char **argv,
                      const size_t *len, int *code, kg_err *err)
{
    *code = 0;
    rconn *rc = pool_get(s, code, err);
    if (!rc)
        return NULL;
    redisReply *r = cmd(rc, argc, argv, len, err);
    if (!r)
        *code = KG_EUNAVAIL;
    else if (r->type == REDIS_REPLY_ERROR) {
        *code = reply_err(r, err);
        freeReplyObject(r);
        r = NULL;
    }
    pool_put(s, rc);
    return r;
}

int64_t rd__num(const redisReply *r)
{
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strtoll(r->str, NULL, 10);
    return 0;
}

void rd__str(char *dst, size_t size, const redisReply *r)
{
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
        snprintf(dst, size, "%.*s", (int)r->len, r->str);
    else
        dst[0] = 0;
}

int rd__set_json(json_t **dst, const redisReply *r, const char *id,
                 const char *what, kg_err *err)
{
    *dst = NULL;
    if (!r || r->type != REDIS_REPLY_STRING || r->len == 0)
        return 0;
    if (!(*dst = kg_store_json_parse(r->str, r->len)))
        return kg_errf(err, KG_EPARSE, "task %s: stored %s is corrupt", id,
                       what);
    return 0;
}
