/*
 * store_redis.h - what the files of the Redis store share (internal to
 * src/server/store_redis*.c): the script numbers and their Lua, the
 * handle and its connection pool, the helpers of store_redis_conn.c and
 * each file's store calls, which store_redis.c puts in the store's vtable.
 */
#ifndef KGYM_STORE_REDIS_H
#define KGYM_STORE_REDIS_H

#include <pthread.h>
#include <sys/time.h>

#include <hiredis.h>

#include "server/store_impl.h"

enum {
    SC_SUBMIT,
    SC_LEASE,
    SC_COMPLETE,
    SC_RETRY,
    SC_CANCEL,
    SC_SWEEP,
    SC_REGISTER,
    SC_HEARTBEAT,
    SC_UNREGISTER,
    SC_WLIST,
    SC_COUNTS,
    SC_STATUS,
    SC_N
};

/* The Lua of each script (store_redis_lua.c). */
extern const char *const rd__scripts[SC_N];

typedef struct rconn {
    redisContext *c;
} rconn;

typedef struct rd_store {
    kg_store base;
    char host[256];
    int port, db;
    char sha[SC_N][41];
    pthread_mutex_t mu; /* the pool */
    pthread_cond_t cv;
    rconn *conns;
    int nconns;
    int *idle;
    int nidle;
    int64_t down_until; /* fail fast after a failed connect (under mu) */
} rd_store;

/* store_redis_conn.c: connections, scripts and replies */
int rd__connect(rd_store *s, rconn *rc, kg_err *err);
redisReply *rd__run(rd_store *s, int which, int argc, const char **argv,
                    const size_t *len, int *code, kg_err *err);
redisReply *rd__plain(rd_store *s, int argc, const char **argv,
                      const size_t *len, int *code, kg_err *err);
int64_t rd__num(const redisReply *r);
void rd__str(char *dst, size_t size, const redisReply *r);
int rd__set_json(json_t **dst, const redisReply *r, const char *id,
                 const char *what, kg_err *err);

/* store_redis_tasks.c: task calls */
int rd__submit_batch(kg_store *base, const kg_submit *t, size_t n, int *created,
                     kg_err *err);
int rd__submit_batch_cached(kg_store *base, const kg_submit *t, size_t n,
                            int *created, json_t **cached, kg_err *err);
int rd__status_many(kg_store *base, const char *const *ids, size_t n,
                    int *status, kg_err *err);
int rd__get(kg_store *base, const char *id, unsigned what, kg_task *out,
            kg_err *err);
int rd__lease(kg_store *base, const char *worker_id, unsigned what,
              kg_task *out, kg_err *err);
int rd__complete(kg_store *base, const char *id, const char *worker_id,
                 int status, const json_t *result, int verdict, kg_err *err);
int rd__retry(kg_store *base, const char *id, const char *worker_id,
              const json_t *result, int64_t avoid_ms, kg_err *err);
int rd__cancel(kg_store *base, const char *id, kg_err *err);
int rd__requeue_expired(kg_store *base, int max_attempts,
                        kg_requeue_counts *out, kg_err *err);

/* store_redis_cache.c: result cache and counts */
int rd__cache_get(kg_store *base, const char *key, json_t **result,
                  kg_err *err);
int rd__cache_get_many(kg_store *base, const char *const *keys, size_t n,
                       json_t **results, kg_err *err);
int rd__cache_put(kg_store *base, const char *key, const json_t *result,
                  kg_err *err);
int rd__counts(kg_store *base, kg_store_counts *out, kg_err *err);

/* store_redis_workers.c: workers */
int rd__worker_register(kg_store *base, const char *id, const char *device,
                        const char *host, kg_err *err);
int rd__worker_heartbeat(kg_store *base, const char *id, int *running,
                         kg_err *err);
int rd__worker_unregister(kg_store *base, const char *id, kg_err *err);
int rd__worker_list(kg_store *base, kg_worker **out, size_t *n, kg_err *err);
int rd__worker_secret_set(kg_store *base, const char *id, const char *digest,
                          kg_err *err);
int rd__worker_secret_get(kg_store *base, const char *id, char digest[65],
                          kg_err *err);

#endif
