/* cli_util.h - helpers shared by the kgym subcommands: files, request
 * fields given as flags, and the server connection of client commands. */
#ifndef KGYM_CLI_UTIL_H
#define KGYM_CLI_UTIL_H

#include <jansson.h>

#include "common/http_client.h"
#include "kgym/kgym.h"

#define KG_CLI_DEFAULT_SERVER "http://127.0.0.1:10907"

/* The whole file as a NUL-terminated string (caller frees), or NULL. */
char *kg_cli_read_file(const char *path, kg_err *err);

/* A flag's value: a JSON literal when it parses as a number, boolean or
 * null, else a string. New reference. */
json_t *kg_cli_flag_value(const char *v);

/*
 * A request field given as a flag: "--num-perf-trials" -> "num_perf_trials"
 * set to kg_cli_flag_value(v) in fields. Refuses the code fields (they come
 * from files). Returns 0 or KG_EINVAL.
 */
int kg_cli_request_flag(json_t *fields, const char *flag, const char *v,
                        kg_err *err);

/*
 * A client for `server` (NULL: $KGYM_SERVER, else the default) with the
 * first token of `token_file` (NULL: $KGYM_TOKEN_FILE, else no token).
 * *out owned by the caller.
 */
int kg_cli_connect(kg_client **out, const char *server, const char *token_file,
                   kg_err *err);

#endif
