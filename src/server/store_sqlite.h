/*
 * store_sqlite.h - what the files of the SQLite store share (internal to
 * src/server/store_sqlite*.c): the statement numbers and their SQL, the
 * handle, the helpers of store_sqlite_util.c and each file's store calls,
 * which store_sqlite.c puts in the store's vtable.
 */
#ifndef KGYM_STORE_SQLITE_H
#define KGYM_STORE_SQLITE_H

#include "server/sqldb.h"
#include "server/store_impl.h"

enum {
    ST_INSERT,
    ST_RESET,
    ST_GET,
    ST_TOUCH,
    ST_LEASE,
    ST_COMPLETE,
    ST_RETRY,
    ST_CANCEL,
    ST_STATUS,
    ST_EXPIRED,
    ST_EXPIRE_FAIL,
    ST_REQUEUE,
    ST_DEAD_HOLDERS,
    ST_COUNTER_ADD,
    ST_DATA_PUT,
    ST_DATA_REQUEST,
    ST_RESULT_SET,
    ST_CACHE_GET,
    ST_CACHE_PUT,
    ST_COUNTS,
    ST_WORKER_COUNTS,
    ST_DEV_OWNER,
    ST_DEV_DROP,
    ST_WORKER_UPSERT,
    ST_EXTEND,
    ST_WORKER_DEL,
    ST_HELD,
    ST_WORKER_LIST,
    ST_MAX_QSEQ,
    ST_SECRET_GET,
    ST_SECRET_SET,
    ST_READ_BEGIN,
    ST_READ_END,
    ST_N
};

/* The SQL of each statement (store_sqlite_sql.c). */
extern const char *const sq__sql[ST_N];

typedef struct sq_store {
    kg_store base;
    char path[4096];
    kg_sqldb *db;
    int64_t next_qseq; /* queue position of the next (re)queued task; the
                          writer's (touched only inside a write) */
} sq_store;

/* store_sqlite_util.c: helpers; c is the connection a write or read was
   given */

void sq__bind_str(sqlite3_stmt *st, int col, const char *v);
int sq__bind_json(sqlite3_stmt *st, int col, const json_t *v, kg_err *err);
void sq__copy_col(char *dst, size_t size, sqlite3_stmt *st, int col);
int sq__fill_task(sqlite3_stmt *st, unsigned what, kg_task *out, kg_err *err);
int sq__exec_id(kg_sqlconn *c, int which, const char *id, const char *text,
                kg_err *err);
int sq__exec_id_int(kg_sqlconn *c, int which, const char *id, int64_t v,
                    kg_err *err);
int sq__set_result(kg_sqlconn *c, const char *id, const json_t *result,
                   kg_err *err);
int sq__task_state(kg_sqlconn *c, const char *id, int64_t *rid, int *prio,
                   int *verdict, kg_err *err);
int sq__count_move(kg_sqlconn *c, int st0, int p0, int v0, int st1, int p1,
                   int v1, kg_err *err);
int sq__requeue(kg_sqlconn *c, sq_store *s, const char *id, kg_err *err);
int sq__not_held(kg_sqlconn *c, const char *id, const char *worker_id,
                 kg_err *err);
int sq__touch_worker(kg_sqlconn *c, const char *id, int64_t now, kg_err *err);
int sq__collect_ids(kg_sqlconn *c, sqlite3_stmt *st,
                    char (**out)[KG_MAX_TASK_ID + 1], size_t *n, kg_err *err);

/* store_sqlite_tasks.c: task calls */

int sq__submit_batch(kg_store *base, const kg_submit *t, size_t n, int *created,
                     kg_err *err);
int sq__status_many(kg_store *base, const char *const *ids, size_t n,
                    int *status, kg_err *err);
int sq__get(kg_store *base, const char *id, unsigned what, kg_task *out,
            kg_err *err);
int sq__lease(kg_store *base, const char *worker_id, unsigned what,
              kg_task *out, kg_err *err);
int sq__complete(kg_store *base, const char *id, const char *worker_id,
                 int status, const json_t *result, int verdict, kg_err *err);
int sq__retry(kg_store *base, const char *id, const char *worker_id,
              const json_t *result, int64_t avoid_ms, kg_err *err);
int sq__cancel(kg_store *base, const char *id, kg_err *err);
int sq__requeue_expired(kg_store *base, int max_attempts,
                        kg_requeue_counts *out, kg_err *err);

/* store_sqlite_cache.c: result cache and counts */

int sq__cache_get(kg_store *base, const char *key, json_t **result,
                  kg_err *err);
int sq__cache_get_many(kg_store *base, const char *const *keys, size_t n,
                       json_t **results, kg_err *err);
int sq__cache_put(kg_store *base, const char *key, const json_t *result,
                  kg_err *err);
int sq__counts(kg_store *base, kg_store_counts *out, kg_err *err);

/* store_sqlite_workers.c: workers */

int sq__worker_register(kg_store *base, const char *id, const char *device,
                        const char *host, kg_err *err);
int sq__worker_heartbeat(kg_store *base, const char *id, int *running,
                         kg_err *err);
int sq__worker_unregister(kg_store *base, const char *id, kg_err *err);
int sq__worker_list(kg_store *base, kg_worker **out, size_t *n, kg_err *err);
int sq__worker_secret_set(kg_store *base, const char *id, const char *digest,
                          kg_err *err);
int sq__worker_secret_get(kg_store *base, const char *id, char digest[65],
                          kg_err *err);

/* store_sqlite_sql.c: the schema, a write at open (arg unused) */

int sq__w_schema(kg_sqlconn *c, void *arg, kg_err *err);

#endif
