/* cli_util.c - helpers shared by the kgym subcommands (cli_util.h). */
#include "cli/cli_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *kg_cli_read_file(const char *path, kg_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        kg_errf(err, KG_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b)
            break;
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        free(b);
        kg_errf(err, KG_EIO, "%s: read failed", path);
        return NULL;
    }
    b[n] = 0;
    return b;
}

json_t *kg_cli_flag_value(const char *v)
{
    json_error_t je;
    json_t *j = json_loads(v, JSON_DECODE_ANY, &je);
    if (j && (json_is_number(j) || json_is_boolean(j) || json_is_null(j)))
        return j;
    json_decref(j);
    return json_string(v);
}

int kg_cli_request_flag(json_t *fields, const char *flag, const char *v,
                        kg_err *err)
{
    char key[64];
    snprintf(key, sizeof key, "%s", flag + (strncmp(flag, "--", 2) ? 0 : 2));
    for (char *p = key; *p; p++)
        if (*p == '-')
            *p = '_';
    if (!strcmp(key, "reference_code") || !strcmp(key, "kernel_code"))
        return kg_errf(err, KG_EINVAL, "use --ref and --cand for code");
    json_object_set_new(fields, key, kg_cli_flag_value(v));
    return 0;
}

int kg_cli_connect(kg_client **out, const char *server, const char *token_file,
                   kg_err *err)
{
    *out = NULL;
    if (!server || !*server)
        server = getenv("KGYM_SERVER");
    if (!server || !*server)
        server = KG_CLI_DEFAULT_SERVER;
    if (!token_file || !*token_file)
        token_file = getenv("KGYM_TOKEN_FILE");
    char *token = NULL;
    if (token_file && *token_file) {
        int rc = kg_client_read_token(token_file, &token, err);
        if (rc)
            return rc;
    }
    int rc = kg_client_new(out, server, token, err);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    return rc;
}
