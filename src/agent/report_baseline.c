/* report_baseline.c - KernelBench's baseline timing JSON as the speedup's
 * baseline of `kgym report --baseline FILE` (report.h): read as KernelBench
 * writes it, {"level1": {"1_Square_matrix_multiplication_.py": {"mean": ms,
 * "hardware": "...", ...}, ...}, ...}, and said to be taken on other
 * hardware. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "agent/report.h"

/* The baseline's mean for problem "levelN/NAME" (NAME.py in levelN), or
 * NAN. */
static double lookup(const json_t *base, const char *problem)
{
    const char *slash = strchr(problem, '/');
    if (!slash)
        return NAN;
    char level[128], file[600];
    snprintf(level, sizeof level, "%.*s", (int)(slash - problem), problem);
    snprintf(file, sizeof file, "%s.py", slash + 1);
    json_t *m = json_object_get(
        json_object_get(json_object_get(base, level), file), "mean");
    return json_is_number(m) && json_number_value(m) > 0 ? json_number_value(m)
                                                         : NAN;
}

/* The first entry's "hardware", for the label. */
static const char *hardware(const json_t *base)
{
    const char *lk, *pk;
    json_t *lv, *pv;
    json_object_foreach((json_t *)base, lk, lv) json_object_foreach(lv, pk, pv)
    {
        const char *h = json_string_value(json_object_get(pv, "hardware"));
        if (h)
            return h;
    }
    return "unknown hardware";
}

int rp_baseline_apply(rp_run *run, const char *path, char *label, size_t n,
                      kg_err *err)
{
    json_error_t je;
    json_t *base = json_load_file(path, 0, &je);
    if (!base)
        return kg_errf(err, KG_EPARSE, "--baseline %s: %s (line %d)", path,
                       je.text, je.line);
    const char *lk;
    json_t *lv;
    int rc = json_is_object(base) && json_object_size(base) ? 0 : -1;
    json_object_foreach(base, lk, lv) if (!json_is_object(lv)) rc = -1;
    if (rc) {
        json_decref(base);
        return kg_errf(err, KG_EPARSE,
                       "--baseline %s: not KernelBench's baseline timing "
                       "JSON ({\"level1\": {\"1_X.py\": {\"mean\": ms}}})",
                       path);
    }
    const char *b = strrchr(path, '/');
    snprintf(label, n, "KernelBench %s, taken on other hardware (%s)",
             b ? b + 1 : path, hardware(base));
    run->no_baseline = 0;
    for (size_t i = 0; i < run->n; i++) {
        rp_row *r = &run->rows[i];
        if (!r->correct)
            continue;
        double m = lookup(base, r->problem);
        if (isfinite(m) && isfinite(r->kernel_ms) && r->kernel_ms > 0)
            r->speedup = m / r->kernel_ms;
        else {
            r->speedup = NAN; /* still correct (Fast@0), fast at no p > 0 */
            run->no_baseline++;
        }
    }
    json_decref(base);
    return 0;
}
