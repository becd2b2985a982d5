/* result.c - reward-bearing fields and KernelGym's names (result.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/result.h"
#include "kgym/kgym.h"

/* Figures a client may turn into a reward; null unless the verdict is pass. */
static const char *const REWARD_FIGURES[] = {"speedup", "kernel_runtime"};

static void withhold_figures(json_t *r)
{
    json_t *measured = json_object_get(r, "measured");
    for (size_t i = 0; i < sizeof REWARD_FIGURES / sizeof *REWARD_FIGURES;
         i++) {
        const char *k = REWARD_FIGURES[i];
        json_t *v = json_object_get(r, k);
        if (!v || json_is_null(v)) {
            json_object_set_new(r, k, json_null());
            continue;
        }
        if (!json_is_object(measured)) {
            measured = json_object();
            json_object_set_new(r, "measured", measured);
        }
        json_object_set(measured, k, v);
        json_object_set_new(r, k, json_null());
    }
}

static double num_or(const json_t *o, const char *k, double def)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* A kernel count: a number in 0..1e15 (else def), as an integer. */
static long long count_or(const json_t *o, const char *k, double def)
{
    double v = num_or(o, k, def);
    if (!(v >= 0 && v <= 1e15))
        v = def;
    return (long long)v;
}

/* The profile's counts and device times; all zero without a profile. */
struct prof_figures {
    long long n_custom, n_total;
    double custom_us, total_us, coverage;
};

static struct prof_figures read_profile(const json_t *prof)
{
    struct prof_figures f = {0, 0, 0, 0, 0};
    if (!json_is_object(prof))
        return f;
    f.custom_us = num_or(prof, "custom_device_us", 0);
    f.total_us = num_or(prof, "total_device_us", 0);
    double cov = f.total_us > 0 ? f.custom_us / f.total_us : 0;
    f.coverage = num_or(prof, "coverage", cov);
    if (!(f.coverage >= 0))
        f.coverage = 0;
    if (f.coverage > 1)
        f.coverage = 1;
    const json_t *rows = json_object_get(prof, "kernels");
    long long custom_rows = 0;
    for (size_t i = 0; json_is_array(rows) && i < json_array_size(rows); i++)
        custom_rows +=
            json_is_true(json_object_get(json_array_get(rows, i), "custom"));
    f.n_custom = count_or(prof, "num_custom_kernels", (double)custom_rows);
    f.n_total = count_or(prof, "num_total_kernels",
                         json_is_array(rows) ? (double)json_array_size(rows)
                                             : 0);
    return f;
}

/* KernelGym's four profiling figures and time_coverage, into o. */
static void put_figures(json_t *o, const struct prof_figures *f)
{
    json_object_set_new(o, "num_custom_kernels", json_integer(f->n_custom));
    json_object_set_new(o, "num_total_kernels", json_integer(f->n_total));
    json_object_set_new(o, "custom_kernel_cuda_time_in_profiling_us",
                        json_real(f->custom_us));
    json_object_set_new(o, "total_kernel_run_time_in_profiling_us",
                        json_real(f->total_us));
    json_object_set_new(o, "time_coverage", json_real(f->coverage));
}

static void kernelgym_fields(json_t *r, int pass)
{
    struct prof_figures f = {0, 0, 0, 0, 0};
    if (pass)
        f = read_profile(json_object_get(r, "profile"));
    json_t *meta = json_object_get(r, "metadata");
    if (!json_is_object(meta)) {
        meta = json_object();
        json_object_set_new(r, "metadata", meta);
    }
    put_figures(r, &f);
    put_figures(meta, &f);
    char s[256];
    double nratio = f.n_total > 0 ? (double)f.n_custom / (double)f.n_total : 0;
    snprintf(s, sizeof s,
             "Run %lld custom kernels / Total %lld kernels, Coverage: %.2f%%",
             f.n_custom, f.n_total, 100.0 * nratio);
    json_object_set_new(meta, "triton_kernel_coverage", json_string(s));
    snprintf(s, sizeof s,
             "Custom kernel CUDA time: %.2fus / Total time: %.2fus, "
             "Coverage: %.2f%%",
             f.custom_us, f.total_us, 100.0 * f.coverage);
    json_object_set_new(meta, "custom_kernel_cuda_time_coverage",
                        json_string(s));
}

void kg_result_finalize(json_t *r)
{
    if (!json_is_object(r))
        return;
    const char *verdict = json_string_value(json_object_get(r, "verdict"));
    if (!verdict)
        return;
    int pass = !strcmp(verdict, "pass");
    if (!pass) {
        withhold_figures(r);
        json_object_set_new(r, "correctness", json_false());
        if (!strcmp(verdict, "hacked"))
            json_object_set_new(r, "decoy_kernel", json_true());
    }
    kernelgym_fields(r, pass);
}

/* docs/design.md's verdicts, in its table's order. */
static const char *const VERDICTS[] = {
    "pass",   "mismatch", "compile_error", "runtime_error",
    "timeout", "hacked",  "problem_error", "infra_error"};

/* A median can be no longer than the longest evaluation (timeout 3600 s). */
#define MAX_RUNTIME_MS 3.6e6

/* A positive, finite runtime in ms; -1 with err set, naming the field. */
static int runtime(const json_t *r, const char *k, double *out, kg_err *err)
{
    const json_t *v = json_object_get(r, k);
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x > 0 && x <= MAX_RUNTIME_MS))
        return kg_errf(err, KG_EINVAL,
                       "result.%s: a pass needs a runtime in (0, %g] ms", k,
                       MAX_RUNTIME_MS);
    *out = x;
    return 0;
}

int kg_result_check(const json_t *r, kg_err *err)
{
    if (!json_is_object(r))
        return kg_errf(err, KG_EINVAL, "result: not an object");
    const char *verdict = json_string_value(json_object_get(r, "verdict"));
    size_t i, nv = sizeof VERDICTS / sizeof *VERDICTS;
    for (i = 0; verdict && i < nv; i++)
        if (!strcmp(verdict, VERDICTS[i]))
            break;
    if (!verdict || i == nv)
        return kg_errf(err, KG_EINVAL,
                       "result.verdict: must be one of pass, mismatch, "
                       "compile_error, runtime_error, timeout, hacked, "
                       "problem_error, infra_error");
    const json_t *corr = json_object_get(r, "correctness");
    if (strcmp(verdict, "pass")) {
        /* no reward-bearing field on anything but a pass */
        static const char *const none[] = {"speedup", "kernel_runtime"};
        for (size_t k = 0; k < 2; k++) {
            const json_t *v = json_object_get(r, none[k]);
            if (v && !json_is_null(v))
                return kg_errf(err, KG_EINVAL,
                               "result.%s: must be null unless the verdict "
                               "is pass (got verdict %s)",
                               none[k], verdict);
        }
        if (json_is_true(corr))
            return kg_errf(err, KG_EINVAL,
                           "result.correctness: true on verdict %s", verdict);
        const json_t *decoy = json_object_get(r, "decoy_kernel");
        if (!strcmp(verdict, "hacked") && decoy && !json_is_true(decoy))
            return kg_errf(err, KG_EINVAL,
                           "result.decoy_kernel: must be true on verdict "
                           "hacked");
        return 0;
    }
    if (!json_is_true(corr))
        return kg_errf(err, KG_EINVAL,
                       "result.correctness: a pass must be correct (true)");
    double k, ref;
    if (runtime(r, "kernel_runtime", &k, err) < 0 ||
        runtime(r, "reference_runtime", &ref, err) < 0)
        return KG_EINVAL;
    const json_t *v = json_object_get(r, "speedup");
    double sp = json_is_number(v) ? json_number_value(v) : NAN;
    /*
     * The judge reports reference median / kernel median, or less when its
     * own clock caps it (stages/timing.py, trusted_clock), never more. Both sides
     * are IEEE doubles sent as shortest round-trip text, so the quotient
     * recomputed here is the same double; 1e-9 relative covers a producer
     * that prints 15 significant digits.
     */
    double most = ref / k;
    if (!(sp > 0 && isfinite(sp) && sp <= most * (1 + 1e-9)))
        return kg_errf(err, KG_EINVAL,
                       "result.speedup: must be in (0, reference_runtime / "
                       "kernel_runtime = %.6g] on a pass",
                       most);
    return 0;
}

json_t *kg_result_new(const char *task_id, const char *verdict,
                      const char *code, const char *phase, const char *message)
{
    json_t *r = json_object();
    json_object_set_new(r, "task_id",
                        task_id ? json_string(task_id) : json_null());
    json_object_set_new(r, "status", json_string("completed"));
    json_object_set_new(r, "verdict", json_string(verdict));
    json_object_set_new(r, "compiled", json_false());
    json_object_set_new(r, "correctness", json_false());
    json_object_set_new(r, "decoy_kernel", json_false());
    json_object_set_new(r, "hack_reasons", json_array());
    json_object_set_new(r, "speedup", json_null());
    json_object_set_new(r, "kernel_runtime", json_null());
    json_object_set_new(r, "reference_runtime", json_null());
    json_object_set_new(r, "runtime_stats",
                        json_pack("{s:n, s:n}", "kernel", "reference"));
    json_object_set_new(r, "profile", json_null());
    json_object_set_new(r, "error_message", json_string(message));
    json_object_set_new(r, "error_code", json_string(code));
    json_object_set_new(r, "error",
                        json_pack("{s:s, s:s, s:s, s:s, s:[]}", "phase", phase,
                                  "type", code, "message", message,
                                  "traceback", "", "frames"));
    json_object_set_new(r, "mismatch", json_null());
    size_t n = strlen(verdict) + strlen(message) + 16;
    char *fb = malloc(n);
    if (fb)
        snprintf(fb, n, "Verdict: %s\n%s\n", verdict, message);
    json_object_set_new(r, "feedback", json_string(fb ? fb : message));
    free(fb);
    json_object_set_new(r, "device",
                        json_pack("{s:n, s:n, s:n, s:n}", "worker_id", "name",
                                  "backend", "device"));
    json_object_set_new(r, "timings", json_object());
    json_object_set_new(r, "checks", json_object());
    json_object_set_new(r, "warnings", json_array());
    json_object_set_new(r, "kgym_version", json_string(KG_VERSION));
    kg_result_finalize(r);
    return r;
}
