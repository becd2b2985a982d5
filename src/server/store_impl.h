/*
 * store_impl.h - what a store backend implements (internal to
 * src/server/store*.c). store.c validates arguments and dispatches; a
 * backend may assume ids are valid, priorities and statuses in range,
 * and pointers non-NULL where store.h requires them.
 */
#ifndef KGYM_STORE_IMPL_H
#define KGYM_STORE_IMPL_H

#include "server/store.h"
#include "server/store_util.h"

struct kg_store_ops {
    const char *name;
    void (*close)(kg_store *s);
    int (*defers)(const kg_store *s); /* NULL: never */
    int (*describe)(kg_store *s, char *buf, size_t size, kg_err *err);
    int (*submit_batch)(kg_store *s, const kg_submit *t, size_t n, int *created,
                        kg_err *err);
    /* kg_store_submit_batch_cached; NULL: store.c reads the cache, then
       calls submit_batch. cached[] is all NULL on entry. */
    int (*submit_batch_cached)(kg_store *s, const kg_submit *t, size_t n,
                               int *created, json_t **cached, kg_err *err);
    int (*get)(kg_store *s, const char *id, unsigned what, kg_task *out,
               kg_err *err);
    /* status[] is all -1 on entry; NULL: store.c calls get per id */
    int (*status_many)(kg_store *s, const char *const *ids, size_t n,
                       int *status, kg_err *err);
    /* what: KG_GET_REQUEST (parsed) or KG_GET_REQUEST_TEXT (as stored) */
    int (*lease)(kg_store *s, const char *worker_id, unsigned what,
                 kg_task *out, kg_err *err);
    int (*complete)(kg_store *s, const char *id, const char *worker_id,
                    int status, const json_t *result, int verdict, kg_err *err);
    int (*retry)(kg_store *s, const char *id, const char *worker_id,
                 const json_t *result, int64_t avoid_ms, kg_err *err);
    int (*cancel)(kg_store *s, const char *id, kg_err *err);
    int (*requeue_expired)(kg_store *s, int max_attempts,
                           kg_requeue_counts *out, kg_err *err);
    int (*cache_get)(kg_store *s, const char *key, json_t **result,
                     kg_err *err);
    int (*cache_put)(kg_store *s, const char *key, const json_t *result,
                     kg_err *err);
    /* results[] is all NULL on entry; keys are valid or NULL */
    int (*cache_get_many)(kg_store *s, const char *const *keys, size_t n,
                          json_t **results, kg_err *err);
    int (*counts)(kg_store *s, kg_store_counts *out, kg_err *err);
    int (*worker_register)(kg_store *s, const char *id, const char *device,
                           const char *host, kg_err *err);
    int (*worker_heartbeat)(kg_store *s, const char *id, int *running,
                            kg_err *err);
    int (*worker_unregister)(kg_store *s, const char *id, kg_err *err);
    int (*worker_list)(kg_store *s, kg_worker **out, size_t *n, kg_err *err);
    /* digest: 64 lowercase hex characters (kg_store_worker_secret_*) */
    int (*worker_secret_set)(kg_store *s, const char *id, const char *digest,
                             kg_err *err);
    int (*worker_secret_get)(kg_store *s, const char *id, char digest[65],
                             kg_err *err);
};

/* The head of every backend's handle. */
struct kg_store {
    const struct kg_store_ops *ops;
    kg_store_opts opts;
};

int kg_store_sqlite_open(kg_store **out, const char *path,
                         const kg_store_opts *opts, kg_err *err);
int kg_store_redis_open(kg_store **out, const char *host, int port, int db,
                        const kg_store_opts *opts, kg_err *err);

#endif
