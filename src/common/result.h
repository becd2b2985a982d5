/*
 * result.h - what a result's reward-bearing fields mean, and KernelGym's
 * names for them (docs/api.md, "KernelGym compatibility").
 *
 * A KernelGym client rewards from `speedup`, `correctness`, `decoy_kernel`
 * and the profiling counts without looking at kgym's `verdict`. So every
 * result that leaves kgym (the worker engine's, the server's views) goes
 * through kg_result_finalize, which makes those fields safe to read alone.
 */
#ifndef KGYM_RESULT_H
#define KGYM_RESULT_H

#include <jansson.h>

#include "kgym/kgym.h"

/*
 * In place, idempotent; a non-object or an object without a verdict is
 * left alone. For every verdict other than "pass": `speedup` and
 * `kernel_runtime` become null (a measured value moves to
 * `measured.speedup` / `measured.kernel_runtime`, diagnostic only),
 * `correctness` is false, and a "hacked" verdict sets `decoy_kernel`.
 * Then KernelGym's profiling fields are written from `profile`, at the
 * top level and in `metadata` (zero unless the verdict is "pass").
 */
void kg_result_finalize(json_t *result);

/*
 * 0 when a worker's result meets docs/design.md's result contract, else
 * KG_EINVAL with the first fault in err, naming the field as
 * "result.FIELD: ...". The contract: a verdict from the list; a pass is
 * correct, with kernel_runtime and reference_runtime in (0, 3.6e6] ms and
 * a speedup in (0, reference_runtime / kernel_runtime] (the judge's clock
 * may lower it, nothing raises it); any other verdict has null speedup and
 * kernel_runtime, correctness not true, and a hacked one decoy_kernel true
 * where it is given. The server stores and caches only such results.
 */
int kg_result_check(const json_t *result, kg_err *err);

/*
 * A new result (caller owns it) with every field of docs/design.md's result
 * table, nothing measured: the given verdict, error_code and error_message,
 * error {phase, type: code, message, traceback: ""}, feedback naming the
 * verdict and the message, status "completed" (the server's scheduler
 * decides "failed"). task_id may be NULL. For results kgym writes itself (the
 * engine, the worker, the store), so they are as complete as the judge's.
 */
json_t *kg_result_new(const char *task_id, const char *verdict,
                      const char *code, const char *phase, const char *message);

#endif
