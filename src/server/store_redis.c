/* store_redis.c - the Redis task store (in progress). */
#include "server/store_impl.h"

int kg_store_redis_open(kg_store **out, const char *host, int port, int db,
                        const kg_store_opts *opts, kg_err *err)
{
    (void)opts;
    *out = NULL;
    return kg_errf(err, KG_EUNAVAIL, "redis://%s:%d/%d: not implemented yet",
                   host, port, db);
}
