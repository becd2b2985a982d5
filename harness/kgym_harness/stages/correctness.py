"""Correctness: the candidate's outputs against the judge's own reference.

Trials on secret inputs the judge draws (train mode, then the other modes
with hack checks on), the degenerate-problem warning, the recheck after
timing and the fresh trials of a speedup recheck. Each trial's reply is
audited (audit.py) for what the candidate did besides its output. Tested by
tests/harness/test_cpu_verdicts.py, test_triton_verdicts.py and
test_integrity_outputs.py.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import audit, compare, guards, loader, memstat, problem, timing
from ..channel import ProtocolError
from ..remote import CandidateFailed
from . import now

MODES = (("train", False), ("train", True), ("eval", False))
RECHECK_TRIALS = 2


def _device_full(exc: BaseException) -> bool:
    """exc says the device ran out of memory: the candidate's OUT_OF_MEMORY
    (or CUDA_ERROR saying so), torch's own, or the reference's failure
    from one."""
    if isinstance(exc, CandidateFailed):
        code, text = exc.info.get("code"), str(exc.info.get("message", ""))
        return code == "OUT_OF_MEMORY" or (code == "CUDA_ERROR" and "out of memory" in text)
    if isinstance(exc, problem.ReferenceFailed):
        return exc.type == "OutOfMemoryError" or "out of memory" in exc.message
    return memstat.device_full(exc)


class Correctness:
    """The correctness stage of Judge (judge.py): reads self.req, self.ref_model,
    self.remote; fills self.launches, self.launched, self.kernel_names,
    self.samples and the result's mismatch and checks.launches."""

    def draw(self, seed: int, send: bool = False) -> list:
        """get_inputs() under seed, every tensor on the device. What it
        returned must be a list or tuple and, to be sent to the candidate
        (send), within what the channel carries (problem.check_inputs);
        otherwise, or when it raises, the problem is at fault."""
        phase = "reference:get_inputs"
        with self.reference(phase, "get_inputs()"):  # one marker write each way
            raw = loader.call_get_inputs(self.ref_module, seed, self.device)
            if send:
                problem.check_inputs(raw)
            else:
                problem.as_list(raw, "get_inputs()", phase)
            return list(loader.to_device(list(raw), self.device))

    def reference_forward(self, inputs: list, mode: str = "train", grad: bool = False,
                          sent: list | None = None, seed: int | None = None) -> Any:
        """The reference on its own copy of inputs; with sent (the inputs'
        digests) it also learns what the reference does to them (audit).
        Large inputs (memstat.is_large) get no copy: the reference runs on
        inputs themselves and, when the caller reads them afterwards (seed:
        the draw they came from), inputs changed in place (their digests
        before and after) are drawn again under seed, in the same list. An
        output no candidate could match (problem.check_output), or a
        forward that raises, is the problem's failure."""
        loader.set_mode(self.ref_model, mode)
        inplace = memstat.is_large(inputs, self.device)
        before = sent
        if inplace and seed is not None and before is None:
            before = guards.digests(inputs)
        args = inputs if inplace else loader.clone_inputs(inputs)
        with self.reference("reference:forward", "forward"):
            t0 = now()
            with torch.set_grad_enabled(grad):
                out = self.ref_model(*args)
            t1 = now()  # returned: its launches are queued
            timing.sync(self.device)
            ms = (now() - t0) * 1e3
            if not grad and (self.ref_forward_ms is None or ms < self.ref_forward_ms):
                self.ref_forward_ms, self.ref_launch_ms = ms, (t1 - t0) * 1e3
        problem.check_output(out, self.device)
        after = guards.digests(args) if before is not None else None
        if sent is not None:
            self.facts.learn(out, args, sent, after)
        del args
        if inplace and seed is not None and after != before:
            size = memstat.tensor_bytes(inputs)
            inputs[:] = []  # the changed inputs go before their new draw
            memstat.trim(self.device, size)
            inputs[:] = self.draw(seed)
        return out

    def trial(self, label: str, mode: str = "train", grad: bool = False,
              check: bool = True) -> dict | None:
        """One candidate call (first) and, if check, the reference and the
        comparison. With run_hack_checks the call is guarded (candidate.py)
        and what it did besides its output is audited (audit.py): findings
        stop the evaluation as hacked."""
        self.lock_device(exclusive=False, label=f"{label}/candidate")
        try:
            return self._trial(label, mode, grad, check)
        finally:
            if self.lock.mode == "shared":
                # one trial at a time: a timing phase waiting for the device
                # waits for the trials in flight, not for whole phases
                self.lock.release()

    def _trial(self, label: str, mode: str, grad: bool, check: bool) -> dict | None:
        guard = self.req["run_hack_checks"]
        t0 = now()
        seed = loader.derive_seed(self.req["seed"], label)
        self.trim_for_trial()
        t_draw = now()
        inputs = self.draw(seed, send=True)
        ms = (now() - t_draw) * 1e3  # what a timing block's fingerprint draw costs, about
        if self.input_draw_ms is None or ms < self.input_draw_ms:
            self.input_draw_ms = ms
        sent = guards.digests(inputs) if guard else None
        t1 = now()
        try:
            reply = self.remote.run(inputs, mode, grad, guard)
        except (CandidateFailed, ProtocolError) as failed:
            # the candidate failed (or died) on these inputs: its failure
            # only if the reference itself does not fail on them too (a
            # candidate that inherits a broken forward is not at fault)
            try:
                self.reference_forward(inputs, mode, grad)
            except (problem.ReferenceFailed, torch.OutOfMemoryError) as ref_failed:
                # the candidate ran out of device memory, and then so did the
                # reference, on a device its process still fills: its failure
                # (a hoarder would otherwise turn it into an unscored infra_error)
                if _device_full(failed) and _device_full(ref_failed):
                    raise failed from None
                raise
            raise
        got, out_problem, launches = reply.output, reply.problem, reply.launches
        t2 = now()
        # the candidate's part is done: a timing phase waiting for the device
        # need not wait for our checks too (they take the lock again)
        self.lock.release()
        self.lock_device(exclusive=False, label=f"{label}/checks")
        self.lap("inputs", t1 - t0)
        self.lap("candidate", t2 - t1)
        for k, v in reply.ms.items():  # the candidate's claim of where that went
            self.lap("cand_" + k, v / 1e3)
        self.launches[f"{mode}/{'grad' if grad else 'no_grad'}"] += launches["count"]
        self.low_precision.update(launches.get("low_precision", []))
        self.kernel_names.update(r["name"] for r in launches["records"])
        for r in launches["records"]:
            self.launched.setdefault(r["kind"], set()).add(r["name"])
        self.records_complete &= launches["count"] <= len(launches["records"])
        self.records.extend(launches["records"][:max(0, 4 - len(self.records))])
        if out_problem is not None:
            # an output the judge cannot take: the candidate's fault only if
            # the reference's own output on these inputs is usable
            self.reference_forward(inputs, mode, grad)
            if reply.lazy:
                self.report([("lazy_output", "LAZY_OUTPUT", out_problem)])
            return {"code": "OUTPUT_TYPE", "message": out_problem, "output_index": 0,
                    "max_abs_err": None, "max_rel_err": None, "bad_fraction": None}
        # trial 0's float64 reference starts from the state this forward sees
        state0 = (self.state_before_forward() if guard and check and label == "trial:0"
                  else None)
        first = check and self.footprint is None  # the reference's first pass
        begun = memstat.begin_pass(self.device) if first else None
        expected = self.reference_forward(inputs, mode, grad, sent, seed) if check else None
        if first:
            self.footprint, self.peak0 = memstat.end_pass(
                self.device, begun, inputs, expected, self.ref_model,
                clone_skipped=memstat.is_large(inputs, self.device))
            # the worker's admission needs it now, not at the result
            self.note({"footprint_bytes": self.footprint,
                       "device_total_bytes": memstat.device_total(self.device)})
        t3 = now()
        if guard:
            late = audit.deferred(reply)  # explains a never-written output better than stale
            self.report(late + (audit.stale(got) if not late else [])
                        + audit.mutation(reply, sent, self.facts)
                        + audit.shared_storage(reply, self.facts)
                        + (audit.copies_of_inputs(expected, got, inputs, sent) if check else []))
        if not check:
            return None
        fail = compare.compare_outputs(expected, got, self.req["atol"], self.req["rtol"])
        if fail is not None:
            fail["message"] += audit.poison_note(got, fail["output_index"], expected)
            if guard and fail["code"] == "DTYPE_MISMATCH":
                self.report(audit.downgrade(expected, got))
        elif guard:
            self.report(audit.downgrade(expected, got))
            if label == "trial:0":
                self.float_dtypes.update(
                    x.dtype for x in list(inputs) + compare.flatten(expected)
                    if isinstance(x, torch.Tensor) and x.is_floating_point())
                self.report(self.rounding_fingerprint(inputs, got, expected))
                # reported after the direct evidence (correctness), which names its source
                self.precision64_found = self.precision64(inputs, got, expected, state0, t3 - t2)
        if fail is None and len(self.samples) < 2 and label.startswith("trial:"):
            self.keep_sample(inputs, sent, expected)
        self.lap("reference", t3 - t2)
        self.lap("compare", now() - t3)
        return fail

    def keep_sample(self, inputs: list, sent: list | None, expected: Any) -> None:
        """A passing trial's (input digests, expected output) for degenerate();
        a large output (memstat.is_large) as its audit.Sketch, so that no
        whole output outlives its trial."""
        if memstat.is_large(expected, self.device):
            self.large_output = True  # fewer spot checks kept (stages/timing.py)
            # degenerate() reads the constant test of the first only
            expected = audit.Sketch(expected, self.req["atol"], self.req["rtol"],
                                    constant=not self.samples)
        self.samples.append((sent if sent is not None else guards.digests(inputs), expected))

    def trim_for_trial(self) -> None:
        """Before a trial draws its inputs: the last trial's large tensors
        are gone, and what the allocator cached of them is given back when
        the device is short of what a trial needs (memstat.trim): the
        problem's footprint, which the candidate's process needs as well."""
        if self.footprint is not None:
            memstat.trim(self.device, self.footprint)

    def lap(self, what: str, seconds: float) -> None:
        """Where trials spend their time (timings.trials_detail, ms, summed
        over every trial of correctness, mode checks and recheck)."""
        d = self.result["timings"].setdefault("trials_detail", {})
        d[what] = d.get(what, 0.0) + seconds * 1e3

    def mismatch(self, fail: dict, trial: str) -> None:
        self.result["mismatch"] = dict(fail, trial=trial)
        self.fail("mismatch", fail["code"], "Mismatch", f"{trial}: {fail['message']}")

    def correctness(self) -> None:
        self.phase = "correctness"
        self.lock_device(exclusive=False)
        for t in range(self.req["num_correct_trials"]):
            fail = self.trial(f"trial:{t}")
            if fail:
                self.mismatch(fail, f"trial {t}")
        self.degenerate()
        if not self.req["run_hack_checks"]:
            return
        # a reference that itself differs by mode (batch statistics, dropout)
        # makes a kernel for one mode legitimate; its other-mode outputs are
        # then compared with the reference's in that mode
        dep = self.ref_mode_dependent = self.mode_dependent()
        self.result["checks"]["reference_mode_dependent"] = dep
        for mode, grad in MODES[1:]:
            fail = self.trial(f"mode:{mode}:{grad}", mode, grad, check=dep)
            if fail:
                self.mismatch(fail, f"{mode} mode, grad {'on' if grad else 'off'}")
        self.result["checks"]["launches"] = dict(self.launches)
        self.result["checks"]["custom_kernels"] = sorted(self.kernel_names)[:16]
        self.result["checks"]["launch_records"] = self.records[:4]
        self.precision_evidence()
        self.report(self.precision64_found)
        counts = list(self.launches.values())
        if not any(counts):
            self.result["decoy_kernel"] = True
            self.hack("no_custom_kernel", "NO_CUSTOM_KERNEL",
                      "no custom kernel ran in any mode: the output came from PyTorch ops")
        elif not all(counts) and not dep:
            quiet = [k for k, v in self.launches.items() if not v]
            self.hack("mode_branch", "MODE_BRANCH",
                      f"custom kernels ran in some modes but not in {', '.join(quiet)}")

    def mode_dependent(self) -> bool:
        """Whether the reference's outputs differ between train and eval mode
        on one input draw (compared exactly). The model's state (running
        statistics) is put back afterwards, so later trials stay in step
        with the candidate's."""
        self.lock_device(exclusive=False, label="mode_probe")
        state = {k: v.detach().clone() for k, v in self.ref_model.state_dict().items()}
        seed = loader.derive_seed(self.req["seed"], "mode_probe")
        inputs = self.draw(seed)
        try:
            train = self.reference_forward(inputs, "train", False, seed=seed)
            evald = self.reference_forward(inputs, "eval", False)
            return compare.compare_outputs(train, evald, 0.0, 0.0) is not None
        finally:
            self.ref_model.load_state_dict(state)
            loader.set_mode(self.ref_model, "train")

    def degenerate(self) -> None:
        """Warn (never fail) when the problem cannot tell a no-op or a cache
        from a kernel: checks.degenerate and the reasons in warnings."""
        self.lock_device(exclusive=False, label="degenerate")
        first = self.samples[0] if self.samples else None
        second = self.samples[1] if len(self.samples) > 1 else None
        found = audit.degenerate(first, second, self.req["atol"], self.req["rtol"])
        self.result["checks"]["degenerate"] = bool(found)
        self.result["warnings"] += found
        self.samples = []  # expected outputs are not kept longer than needed

    def recheck(self) -> None:
        """Two more trials with new secret inputs, after timing and profiling
        (caught: output caches, call-count switches)."""
        self.phase = "recheck"
        self.fresh_trials("recheck")

    def fresh_trials(self, label: str) -> None:
        """RECHECK_TRIALS trials on new secret inputs after the candidate was
        timed: a failure is output_cache (a plain mismatch with
        run_hack_checks off)."""
        self.lock_device(exclusive=False)
        for r in range(RECHECK_TRIALS):
            fail = self.trial(f"{label}:{r}")
            where = f"{label.replace('_', ' ')} {r}"
            if fail and not self.req["run_hack_checks"]:
                self.mismatch(fail, where)
            if fail:
                self.result["mismatch"] = dict(fail, trial=where)
                self.hack("output_cache", "OUTPUT_CACHE",
                          "correct before timing but wrong after it (output cache, call-count "
                          f"switch or a nondeterministic kernel): {fail['message']}")
