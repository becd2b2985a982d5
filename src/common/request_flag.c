/* request_flag.c - request fields given as command-line flags
 * (request.h): "--num-perf-trials 20" -> {"num_perf_trials": 20}, shared by
 * every command that builds a request and by the red-team corpus's
 * headers. */
#include <stdio.h>
#include <string.h>

#include "common/request.h"

json_t *kg_request_flag_value(const char *v)
{
    json_error_t je;
    json_t *j = json_loads(v, JSON_DECODE_ANY, &je);
    if (j && (json_is_number(j) || json_is_boolean(j) || json_is_null(j)))
        return j;
    json_decref(j);
    return json_string(v);
}

int kg_request_flag(json_t *fields, const char *flag, const char *v,
                    kg_err *err)
{
    char key[64];
    snprintf(key, sizeof key, "%s", flag + (strncmp(flag, "--", 2) ? 0 : 2));
    for (char *p = key; *p; p++)
        if (*p == '-')
            *p = '_';
    if (!strcmp(key, "reference_code") || !strcmp(key, "kernel_code"))
        return kg_errf(err, KG_EINVAL, "use --ref and --cand for code");
    json_object_set_new(fields, key, kg_request_flag_value(v));
    return 0;
}
