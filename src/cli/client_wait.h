/*
 * client_wait.h - how the client commands (`kgym wait`, `kgym submit
 * --wait`) wait for results: long polls of POST /results/batch, or GET
 * /results/{id} of each task on a server without it (docs/api.md).
 */
#ifndef KGYM_CLI_CLIENT_WAIT_H
#define KGYM_CLI_CLIENT_WAIT_H

#include <jansson.h>

#include "common/http_client.h"

/*
 * Waits until every task of ids[0..n) has a result (results[i], a new
 * reference) or an error (errors[i], malloc'd: the server refused it or
 * does not know it), or timeout_s passes (0: never). Entries already set
 * are not asked for. One request per result that comes in (a long poll
 * of up to 60 s); on a server without POST /results/batch, GET
 * /results/{id} of each, a round every 0.1 s growing to 1 s. A server
 * that does not answer is asked again until the timeout. Returns 0 when
 * every task is done, 1 on timeout (logged with how many are left).
 */
int kg_cli_wait_all(kg_client *c, const char *const *ids, json_t **results,
                    char **errors, int n, double timeout_s);

#endif
