/*
 * store_util.c - what both store backends (store_sqlite*.c, store_redis*.c)
 * use, below them and below store.c's API: the clock of leases and
 * deadlines, the stored JSON text and its parsing, and the result of a
 * task whose lease expired too often.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/json_util.h"
#include "common/result.h"
#include "server/store_util.h"

int64_t kg_store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The stored JSON text: lib/json_util.c's compact style (KG_JSON_COMPACT),
 * written there rather than by json_dumps, which spent half its time in
 * printf for the reals of a request (atol, rtol, timeout...).
 */
char *kg_store_json_text(const json_t *v)
{
    return kg_json_text(v, KG_JSON_COMPACT);
}

json_t *kg_store_json_parse(const char *s, size_t len)
{
    json_error_t je;
    return json_loadb(s, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
}

json_t *kg_store_expired_result(const char *id, int attempts,
                                const char *worker)
{
    char msg[256];
    snprintf(msg, sizeof msg,
             "the task's lease expired or its worker died %d time%s (last "
             "holder %s); not retried again",
             attempts, attempts == 1 ? "" : "s", worker[0] ? worker : "?");
    json_t *r = kg_result_new(id, "infra_error", "LEASE_EXPIRED_TOO_OFTEN",
                              "server", msg);
    json_object_set_new(r, "status", json_string("failed"));
    return r;
}
