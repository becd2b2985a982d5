"""The trusted role: decides the verdict and writes the one result frame.

run_judge(task, chan_fd, result_fd) holds the secret seed, the reference
model and every expected output. It drives the candidate over chan_fd
(see candidate.py), compares, times the reference itself, cross-checks what
the candidate claims against its own clock, and writes the result to
result_fd as one framed message (channel.write_result), then returns.
"""

from __future__ import annotations

import json
import os
import platform
import select
import sys
import tempfile
import time
import traceback
from typing import Any

import torch

from . import (audit, compare, coverage, cpustat, guards, loader, precision, prewarm, problem,
               profiling, quiet, schema, timing, trustclock)
from . import memstat
from .devlock import DeviceLock, LockTimeout
from .channel import Channel, ChannelTimeout, PeerClosed, ProtocolError
from .frame import write_result
from .feedback import make_feedback
from .problem import ReferenceFailed
from .remote import CandidateFailed, Remote

MODES = (("train", False), ("train", True), ("eval", False))
RECHECK_TRIALS = 2
ABLATION_TIMEOUT_S = 30.0
PROFILE_ITERS = 3
# the CPU profile's iterations: the judged coverage reads its fastest, and on
# a loaded machine three in a row can all stall (coverage.bound)
CPU_PROFILE_ITERS = 8
AHEAD_MAX_S = 30.0   # the candidate's compile ahead (ahead.py): at most this long,
AHEAD_SHARE = 0.2    # and at most this share of the evaluation's time budget


class Stop(Exception):
    """Evaluation is over; the result already says why."""


def _now() -> float:
    return time.perf_counter()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine())


def select_device(req: dict) -> str:
    """The device to evaluate on; raises ValueError when it cannot be had."""
    want = req.get("device")
    if want is None:
        if req["backend"] == "cpu":
            return "cpu"
        if torch.cuda.is_available():
            return "cuda:0"
        if req["backend"] == "triton":
            return "cpu"  # Triton's interpreter on CPU tensors
        raise ValueError("device: backend cuda needs a GPU and none is available")
    if want.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device: {want} requested but CUDA is not available")
        return want if ":" in want else "cuda:0"
    if req["backend"] == "cuda":
        raise ValueError("device: backend cuda cannot run on the cpu")
    return "cpu"


class Judge:
    """One evaluation. Methods raise Stop once the verdict is decided."""

    def __init__(self, task: Any, chan: Channel, result: dict):
        self.task = task
        self.chan = chan
        self.remote = Remote(chan)
        self.result = result
        self.phase = "setup"
        self.req: dict = {}
        self.device = "cpu"
        self.launches = {f"{m}/{'grad' if g else 'no_grad'}": 0 for m, g in MODES}
        self.pending_checks: dict | None = None  # timing() -> timing_checks()
        self.kernel_names: set[str] = set()
        self.records: list[dict] = []
        # launch records by kind (coverage.attribute), and whether every
        # launch of every reply was recorded (MAX_RECORDS cuts them short)
        self.launched: dict[str, set[str]] = {}
        self.records_complete = True
        self.lock = DeviceLock(None)
        self.gate_fd: int | None = None  # a staged task's wait for its device slot
        self.load_sent = False
        self.ref_mode_dependent = False  # set by correctness() with hack checks on
        self.facts = audit.ReferenceFacts()   # what the reference does to its inputs
        self.samples: list[tuple[list, Any]] = []  # (input digests, expected), 2 trials
        self.footprint: int | None = None  # memstat.end_pass after the first reference pass
        self.peak0: int | None = None  # the device peak before that pass reset it
        self.low_precision: set[str] = set()  # the candidate's fp16/bf16 evidence
        self.precision64_found: list = []  # trial 0's measured downgrade, reported after it
        self.float_dtypes: set[torch.dtype] = set()  # of the problem's inputs and outputs
        # the phase of reference code running now, for a worker that finds
        # this process dead without a frame (problem.py; in $TMPDIR, which
        # every launcher makes private to the judge)
        self.marker = problem.Marker(os.environ.get("TMPDIR"))

    # -- failures ---------------------------------------------------------
    def fail(self, verdict: str, code: str, etype: str, message: str,
             tb: str = "", frames: list | None = None) -> None:
        schema.set_error(self.result, verdict, code, self.phase, etype, message, tb, frames)
        raise Stop()

    def candidate_failed(self, info: dict) -> None:
        schema.set_error(self.result, info["verdict"], info["code"], info["phase"] or self.phase,
                         info["type"], info["message"], info["traceback"], info["frames"])
        raise Stop()

    def reference_failed(self, e: ReferenceFailed) -> None:
        """The reference's own code or data failed (problem.py):
        problem_error, whatever was noted about the candidate before (the
        candidate cannot make the judge's reference fail, and a finding
        against a broken problem is no finding); a failure that does not
        prove the problem broken (a CUDA error, memory) is infra_error."""
        if e.infra:
            schema.set_error(self.result, "infra_error", "REFERENCE_ERROR", e.phase, e.type,
                             e.message, e.traceback, e.frames)
            return
        self.result.update(error=None, hack_reasons=[], mismatch=None, decoy_kernel=False)
        schema.set_error(self.result, "problem_error", "PROBLEM_ERROR", e.phase, e.type,
                         e.message, e.traceback, e.frames)

    def reference(self, phase: str, what: str) -> Any:
        """Context for running reference code: the marker says phase, and
        what it raises becomes ReferenceFailed (problem.running)."""
        return problem.running(self.marker, phase, what)

    # -- phases -------------------------------------------------------------
    def setup(self) -> None:
        """Validate, pick the device, send the candidate its load command,
        then import and build the reference while the candidate loads."""
        try:
            self.req = schema.normalize_request(self.task)
        except ValueError as e:
            self.fail("infra_error", "BAD_REQUEST", "ValueError", str(e))
        req = self.req
        # the reference in full fp32 (TF32 only by request), for its
        # correctness and its timing alike; this process is the judge's
        precision.set_reference_precision(req["allow_tf32"])
        if req["allow_tf32"]:
            self.result["checks"]["allow_tf32"] = True
        self.result["task_id"] = req["task_id"]
        self.result["device"].update(worker_id=req["worker_id"], backend=req["backend"])
        self.result["timings"]["queued"] = req["queued_ms"]
        margin = min(5.0, 0.1 * req["timeout"])
        budget = req["timeout"]
        if req["deadline"] is not None:
            budget = min(budget, req["deadline"] - time.time())
        self.chan.deadline = time.monotonic() + budget - margin
        try:
            self.device = select_device(req)
        except ValueError as e:
            self.fail("infra_error", "INFRA_ERROR", "ValueError", str(e))
        self.lock = DeviceLock(req["device_lock"])
        secret = req["seed"]
        self.init_seed = loader.derive_seed(secret, "init")
        self.timing_seed = loader.derive_seed(secret, "timing")
        dev = torch.device(self.device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
            # large outputs arrive straight on the device; the load command
            # announces our device region (a warm spare's did already), so
            # the first inputs cross on the device too
            self.chan.use_device(self.device)
        # The candidate imports and builds while we do the same below; with
        # KGYM_COMPILE_AHEAD=1 (the worker's default when it runs several
        # tasks at once on a GPU) a Triton candidate compiles its kernels
        # ahead, before its first call holds the device lock (ahead.py)
        ahead_s = 0.0
        if (req["backend"] == "triton" and dev.type == "cuda"
                and os.environ.get("KGYM_COMPILE_AHEAD", "0") == "1"):
            ahead_s = min(AHEAD_MAX_S, AHEAD_SHARE * budget)
        self.remote.send_load(reference_code=req["reference_code"],
                              kernel_code=req["kernel_code"], backend=req["backend"],
                              entry_point=req["entry_point"], init_seed=self.init_seed,
                              device=self.device, compile_ahead_s=ahead_s)
        self.load_sent = True
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
        self.result["device"].update(name=name, device=self.device)
        try:
            workdir = tempfile.mkdtemp(prefix="kgym-judge-", dir=os.environ.get("TMPDIR") or None)
        except OSError as e:
            self.fail("infra_error", "INFRA_ERROR", type(e).__name__,
                      f"the judge's temp dir ($TMPDIR) is unusable: {e}")
        try:
            path = loader.write_source(workdir, loader.REFERENCE_FILE, req["reference_code"])
        except OSError as e:
            self.fail("infra_error", "INFRA_ERROR", type(e).__name__,
                      f"the judge could not write the reference: {e}")
        # from here on a failure is the problem's (problem_error), not ours
        with self.reference("reference:load", "importing the reference"):
            self.ref_module = loader.import_file(path, "kgym_reference")
        entry = req["entry_point"]
        cls = getattr(self.ref_module, entry, None)
        if not callable(cls):
            raise problem.bad("reference:load", "ProblemError",
                              f"the reference defines no class {entry} (entry_point)")
        with self.reference("reference:get_init_inputs", "get_init_inputs()"):
            loader.set_seed(self.init_seed)
            fn = getattr(self.ref_module, "get_init_inputs", None)
            raw = fn() if fn is not None else []
        init = problem.as_list(raw, "get_init_inputs()", "reference:get_init_inputs")
        with self.reference("reference:init", f"{entry}(*get_init_inputs())"):
            self.ref_model = loader.build_model(cls, init, self.init_seed, self.device)
            timing.sync(self.device)

    def compile(self) -> None:
        """Collect the reply to the load command sent in setup."""
        self.phase = "compile"
        self.remote.watch_wanted = self.req["run_hack_checks"]
        load_ms = self.remote.finish_load()
        if load_ms:
            self.result["timings"]["load_detail"] = load_ms  # the candidate's claim
        if self.remote.ahead is not None:  # its claim too: diagnostics only
            self.result["checks"]["compile_ahead"] = self.remote.ahead
        self.result["compiled"] = True

    def wait_for_device(self) -> None:
        """A staged task (kgym eval --stage: started beyond --concurrency in
        a warm pair) has set up and compiled, which runs none of the
        harness's device work; here it waits for the engine to give it one
        of the device slots ('D' on its task pipe), not past its deadline.
        timings.gate is how long. A wait that reaches the deadline is
        infra_error (retried, as a lock timeout is): the candidate ran none
        of its checks, the slots were busy with other tasks."""
        fd, self.gate_fd = self.gate_fd, None
        if fd is None:
            return
        self.phase = "gate"
        try:
            left = max(0.0, self.chan.deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            got = os.read(fd, 1) if ready else b""
        finally:
            os.close(fd)
        if got == b"D":
            return
        if not ready:
            self.fail("infra_error", "INFRA_ERROR", "GateTimeout",
                      "the evaluation waited for a device slot (every slot busy with other "
                      "tasks) until its time limit; its candidate was not checked")
        self.fail("infra_error", "INFRA_ERROR", "EngineGone",
                  "the worker dropped the task before it had a device slot")

    def lock_device(self, exclusive: bool, label: str = "") -> None:
        """Exclusive: timing/profiling (any device). Shared: GPU correctness
        work (on the CPU, correctness takes no lock). label names the hold
        in the lock's trace (KGYM_LOCK_TRACE=1), the phase by default."""
        if not exclusive and not timing.is_cuda(self.device):
            self.lock.release()
            return
        label = label or self.phase
        try:
            if exclusive:
                self.lock.exclusive(self.chan.deadline, label)
            else:
                self.lock.shared(self.chan.deadline, label)
        except LockTimeout as e:
            self.fail("infra_error", "INFRA_ERROR", "LockTimeout", str(e))
        if self.lock.error:
            self.result["warnings"].append(self.lock.error[:500])
            self.lock.error = ""  # said once; stays unlocked

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
                          sent: list | None = None) -> Any:
        """The reference on its own copy of inputs; with sent (the inputs'
        digests) it also learns what the reference does to them (audit).
        An output no candidate could match (problem.check_output), or a
        forward that raises, is the problem's failure."""
        loader.set_mode(self.ref_model, mode)
        clones = loader.clone_inputs(inputs)
        with self.reference("reference:forward", "forward"):
            with torch.set_grad_enabled(grad):
                out = self.ref_model(*clones)
            timing.sync(self.device)
        problem.check_output(out, self.device)
        if sent is not None:
            self.facts.learn(out, clones, sent)
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
        t0 = _now()
        inputs = self.draw(loader.derive_seed(self.req["seed"], label), send=True)
        sent = guards.digests(inputs) if guard else None
        t1 = _now()
        try:
            reply = self.remote.run(inputs, mode, grad, guard)
        except (CandidateFailed, ProtocolError):
            # the candidate failed (or died) on these inputs: its failure
            # only if the reference itself does not fail on them too (a
            # candidate that inherits a broken forward is not at fault)
            self.reference_forward(inputs, mode, grad)
            raise
        got, out_problem, launches = reply.output, reply.problem, reply.launches
        t2 = _now()
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
        expected = self.reference_forward(inputs, mode, grad, sent) if check else None
        if first:
            self.footprint, self.peak0 = memstat.end_pass(self.device, begun, inputs, expected,
                                                          self.ref_model)
        t3 = _now()
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
            self.samples.append((sent if sent is not None else guards.digests(inputs), expected))
        self.lap("reference", t3 - t2)
        self.lap("compare", _now() - t3)
        return fail

    def full_precision(self) -> bool:
        """Every float tensor of the problem (trial 0's inputs and expected
        outputs, the reference's parameters and buffers) is fp32 or fp64."""
        params = [t for t in list(self.ref_model.parameters()) + list(self.ref_model.buffers())
                  if t.is_floating_point()]
        dtypes = self.float_dtypes | {t.dtype for t in params}
        return bool(dtypes) and dtypes <= {torch.float32, torch.float64}

    def reference_rounded(self, inputs: list, low: torch.dtype) -> Any:
        """The reference (train mode, no grad) with its float inputs,
        parameters and buffers rounded to `low` and back; None when the
        rounding overflows (fp16) or the model cannot be called that way.
        The model itself is untouched (torch.func.functional_call)."""
        def rounded(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                r = t.detach().to(low).to(t.dtype)
                if not bool((torch.isfinite(r) | ~torch.isfinite(t)).all()):
                    raise OverflowError
                return r
            return t.clone() if isinstance(t, torch.Tensor) else t
        try:
            state = {k: rounded(v) for k, v in list(self.ref_model.named_parameters())
                     + list(self.ref_model.named_buffers())}
            args = tuple(rounded(x) for x in inputs)
            loader.set_mode(self.ref_model, "train")
            with self.marker.mark("reference:forward"), torch.no_grad():
                out = torch.func.functional_call(self.ref_model, state, args)
            timing.sync(self.device)
            return out
        except Exception:
            return None

    def rounding_fingerprint(self, inputs: list, got: Any, expected: Any) -> list[audit.Finding]:
        """precision_downgrade by the rounding fingerprint (guards.
        computed_rounded): the output lands on the reference computed from
        bf16-rounded inputs and parameters (and, on the CPU only, fp16:
        on a GPU an honest TF32 matmul rounds its operands to fp16's
        mantissa). One extra reference forward per format, on trial 0."""
        if not self.full_precision():
            return []
        lows = [torch.bfloat16] + ([] if timing.is_cuda(self.device) else [torch.float16])
        for low in lows:
            alt = self.reference_rounded(inputs, low)
            if alt is not None and guards.computed_rounded(got, expected, alt):
                name = str(low).replace("torch.", "")
                d = guards.float_distance(got, expected) or 0.0
                d_low = guards.float_distance(got, alt) or 0.0
                self.result["checks"]["rounding_fingerprint"] = {
                    "format": name, "distance": d, "distance_rounded": d_low}
                return [("precision_downgrade", "PRECISION_DOWNGRADE",
                         f"the output matches the reference computed on {name}-rounded inputs "
                         f"and parameters (distance {d_low:.3g}) far better than the reference "
                         f"itself (distance {d:.3g}): the kernel computes with {name} operands")]
        return []

    def state_before_forward(self) -> dict:
        """The reference's parameters (unchanged by a no-grad forward) and
        copies of its buffers (which a forward may update), for precision64."""
        state = dict(self.ref_model.named_parameters())
        state.update({k: v.detach().clone() for k, v in self.ref_model.named_buffers()})
        return state

    def precision64(self, inputs: list, got: Any, expected: Any, state: dict | None,
                    ref_s: float) -> list[audit.Finding]:
        """precision_downgrade by measurement (precision.py): on a
        full-precision problem, the candidate's error against the judge's
        float64 reference is more than precision.KAPPA times the float32
        reference's own and above precision.FLOOR of the output's norm.
        checks.precision64 says what was measured, or why it was skipped."""
        if not self.full_precision():
            return []
        loader.set_mode(self.ref_model, "train")
        with self.marker.mark("reference:forward"):
            m = precision.measure(self.ref_model, inputs, got, expected, state,
                                  lambda: timing.sync(self.device), ref_s,
                                  self.req["allow_tf32"])
        self.result["checks"]["precision64"] = m
        if str(m.get("skipped", "")).startswith(("memory:", "out of memory")):
            self.result["warnings"].append(f"precision64 skipped: {m['skipped']}")
        if not m.get("downgrade"):
            return []
        rel = m["e_c"] / m["norm"]
        return [("precision_downgrade", "PRECISION_DOWNGRADE",
                 f"the output's error against the reference computed in float64 is "
                 f"{m['e_c']:.3g} ({rel:.2g} of its norm), more than {precision.KAPPA:g}x "
                 f"the float32 reference's own ({m['e_ref']:.3g}): the kernel computes "
                 f"with less than fp32 precision (TF32, bf16/fp16 or reduced-precision "
                 f"reductions)")]

    def precision_evidence(self) -> None:
        """precision_downgrade by direct evidence: on a problem whose float
        tensors are all fp32/fp64, custom kernels launched with fp16/bf16/
        fp8 tensors, Triton sources that convert to them, or extension
        sources that use half/bfloat16 types (hooks._note_precision). Not
        when the reference's own code names a low-precision type (.half(),
        torch.bfloat16, autocast): a kernel may then do what it does."""
        if (not self.low_precision or not self.full_precision()
                or guards.LOW_PRECISION_CODE.search(self.req["reference_code"])):
            return  # the reference itself computes in fp16/bf16 somewhere
        found = sorted(self.low_precision)
        self.result["checks"]["low_precision"] = found[:8]
        self.hack("precision_downgrade", "PRECISION_DOWNGRADE",
                  "the problem is full precision but its custom kernels compute in lower "
                  "precision: " + "; ".join(found[:3]))

    def report(self, found: list[audit.Finding]) -> None:
        """Every finding becomes a hack reason; any stops the evaluation
        (with run_hack_checks off they are only noted, see hack())."""
        for reason, code, message in found:
            self.hack(reason, code, message, stop=False)
        if found and self.req["run_hack_checks"]:
            raise Stop()

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
        inputs = self.draw(loader.derive_seed(self.req["seed"], "mode_probe"))
        try:
            train = self.reference_forward(inputs, "train", False)
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

    def hack(self, reason: str, code: str, message: str, stop: bool = True) -> None:
        """Record a hacking finding; with run_hack_checks off it is only noted."""
        if not self.req["run_hack_checks"]:
            self.result["checks"].setdefault("unenforced", []).append(reason)
            return
        if reason not in self.result["hack_reasons"]:
            self.result["hack_reasons"].append(reason)
        if stop:
            self.fail("hacked", code, "HackDetected", message)
        schema.set_error(self.result, "hacked", code, self.phase, "HackDetected", message)

    def reference_timer(self, plan: list[dict]) -> tuple[Any, dict | None, str | None]:
        """(forward of the reference as timed, cached pooled timing or None,
        cache key when the cache is on). The cache is opt-in
        (KGYM_REFTIME_CACHE=1): a cached time was taken at another moment,
        so GPU clock drift would enter the speedup."""
        req = self.req
        config = {"n_warmup": req["num_warmup"], "n_iter": req["num_perf_trials"],
                  "backend": req["reference_backend"], "entry": req["entry_point"],
                  "blocks": len(plan), "warmup_ms": timing.WARMUP_MIN_MS, "prewarmed": True,
                  "allow_tf32": req["allow_tf32"]}  # the reference's precision
        key = None
        if not req["force_refresh"] and os.environ.get("KGYM_REFTIME_CACHE", "0") == "1":
            key = timing.reftime_key(req["reference_code"], config,
                                     self.result["device"]["name"])
            cached = timing.reftime_load(key)
            if cached is not None:
                self.result["checks"]["reference_cached"] = True
                self.result["checks"]["reference_backend"] = str(cached.get("backend", "eager"))
                return None, cached, key
        self.result["checks"]["reference_cached"] = False
        model = self.ref_model
        loader.set_mode(model, "train")
        fn: Any = model
        used = "eager"
        if req["reference_backend"] == "torch_compile":
            try:
                fn = torch.compile(model)
                with torch.no_grad():  # compiles now, outside the timed loop
                    fn(*self.draw(self.timing_seed))
                used = "torch_compile"
            except Exception as e:
                fn = model
                self.result["warnings"].append(f"torch.compile failed, timed eager: {e}"[:500])
        self.result["checks"]["reference_backend"] = used
        if used != req["reference_backend"]:
            key = None  # never cache a fallback

        def call(args: Any) -> Any:
            # timed: no marker here (the caller marks the whole block), and
            # a try costs nothing until something raises
            try:
                with torch.no_grad():
                    return fn(*args)
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                raise problem.failed("reference:forward", e, "forward") from None
        return call, None, key

    def timing_inputs(self, i: int) -> list:
        return self.draw(loader.derive_seed(self.timing_seed, f"iter:{i}"))

    def timing(self) -> None:
        """Interleaved blocks: reference block (here), candidate block (its
        process), alternating ABBA so linear clock drift cancels; samples
        pooled per side. Holds the device exclusively (until profiling
        ends); what can be checked without it waits for timing_checks().

        The trusted-clock bound (timer_tamper) is checked on the whole
        phase; a phase that fails it is timed once more and the second
        phase's figures are the ones used (and must pass the bound). A
        claim that lies fails both; an honest one fails only when something
        outside the evaluation stalled the device or the host for a moment
        (seen once under 4-way concurrency on the H200: an honest phase of
        405 ms by the judge's clock, 31 ms of it unexplained, where the same
        solution takes 128-136 ms at concurrency 1). The side_stream rule
        is treated the same way (timing.side_stream_found): a phase where
        most samples needed the device-wide figure is timed again, and only
        the second phase's samples count."""
        self.phase = "timing"
        req = self.req
        plan = timing.block_plan(req["num_perf_trials"], req["num_warmup"], prewarmed=True)
        self.lock_device(exclusive=False, label="timing/prewarm")
        ref_call, cached, key = self.reference_timer(plan)  # torch.compile: not while exclusive
        if timing.is_cuda(self.device):
            self.lock.intend()  # warm spares take no new hold until ours is granted
        self.prewarm(ref_call, cached, plan)
        self.lock_device(exclusive=True)
        wall_call = ref_call if ref_call is not None else self.eager_reference()
        run = self._time_blocks(plan, ref_call, cached)
        unexplained = self._unexplained(run, plan)
        clock = trustclock.check_phase(self, run, wall_call)
        checks = self.result["checks"]
        n = req["num_perf_trials"]
        if (unexplained > 0 or timing.side_stream_found(len(run["side"]), n)
                or clock["verdict"] in ("capped", "timer_tamper")):
            checks["timing_retried"] = {"unexplained_ms": round(max(unexplained, 0.0), 2),
                                        "wall_ms": round(run["wall_ms"], 2),
                                        "side_stream_samples": len(run["side"]),
                                        "trusted_clock": clock["verdict"]}
            first_l2, first_mismatch = run["l2_found"], clock["mismatch"]
            run = self._time_blocks(plan, ref_call, cached)
            run["l2_found"] = run["l2_found"] or first_l2
            unexplained = self._unexplained(run, plan)
            clock = trustclock.check_phase(self, run, wall_call)
            clock["mismatch"] = clock["mismatch"] or first_mismatch
        ref, cand, side = run["ref"], run["cand"], run["side"]
        if cached is None and key is not None:
            timing.reftime_store(key, dict(ref, backend=req["reference_backend"]))
        kstats = timing.stats(cand)
        rstats = timing.stats(ref["samples_ms"])
        self.result["runtime_stats"] = {"kernel": kstats, "reference": rstats}
        self.result["kernel_runtime"] = kstats["median"]
        self.result["reference_runtime"] = rstats["median"]
        if kstats["median"] > 0:
            self.result["speedup"] = rstats["median"] / kstats["median"]
        self.trusted_clock(clock)
        checks["timing_run_delay_ms"] = round(run["queued_ms"], 2)
        checks["timing_blocks"] = len(plan)
        checks["timing_wall_ms"] = run["wall_ms"]
        checks["timing_unexplained_ms"] = max(unexplained, 0.0)
        checks["side_stream_samples"] = len(side)
        if timing.is_cuda(self.device):
            # diagnostics for the GPU runs: per block, median over its samples of
            # t_dev - L - t_stream, and the calibrated L (ms)
            checks["sync_excess_ms"] = run["excess"]
            checks["sync_latency_ms"] = run["latency"]
            # the lead before each sample (us, at the phase's end) and the
            # timed calls whose start the device reached before the host
            # had launched them (timing.Lead)
            checks["timing_lead"] = {side: {"us": v[0], "late": v[1]}
                                     for side, v in run["lead"].items()}
            if cached is None:
                checks["reference_side_stream_samples"] = run["ref_side"]
            checks["timing_host_ms"] = {side: {k: round(v, 2) for k, v in parts.items()}
                                        for side, parts in run["host"].items() if parts}
        if side:
            checks["side_stream_indices"] = side[:20]
        if run["launches"] == 0 and not self.ref_mode_dependent:
            self.hack("mode_branch", "MODE_BRANCH",
                      "no custom kernel ran during the timed iterations", stop=False)
        if unexplained > 0:
            self.hack("timer_tamper", "TIMER_TAMPER",
                      f"the timed phase took {run['wall_ms']:.1f} ms by the judge's clock; the "
                      f"claimed kernel times leave {unexplained:.1f} ms unexplained", stop=False)
        if run["l2_report"] is not None:
            checks["l2_persist"] = run["l2_report"]
        if run["l2_found"]:
            self.hack("l2_persist", "L2_PERSIST", f"persisting L2 during timing: "
                      f"{run['l2_found']} (lines marked persisting survive the L2 flush)",
                      stop=False)
        if timing.side_stream_found(len(side), n):
            self.hack("side_stream", "SIDE_STREAM",
                      f"{len(side)} of {n} timed calls left work running on another stream "
                      "after returning (timed until the whole device was idle)", stop=False)
        self.pending_checks = {"claims": run["claims"], "spots": run["spots"],
                               "timed": run["timed"], "wall_mismatch": clock["mismatch"]}

    def trusted_clock(self, clock: dict) -> None:
        """What the judge's clock (trustclock.check_phase) says about the
        claimed times (prints of back-to-back calls that do not match the
        reference's are call_count_switch, in timing_checks); a claim no honest call could make
        is timer_tamper; a claim beyond the clock that an honest host-bound
        call could make caps the speedup at the clock's."""
        self.result["checks"]["trusted_clock"] = clock  # a print mismatch: timing_checks
        if clock["verdict"] == "timer_tamper":
            self.hack("timer_tamper", "TIMER_TAMPER", trustclock.why(clock), stop=False)
        elif clock["verdict"] == "capped" and self.result.get("speedup") is not None:
            self.result["speedup"] = min(self.result["speedup"], clock["cap"])
            self.result["warnings"].append(
                f"speedup capped at {clock['cap']:.3g}x by the judge's clock over back-to-back "
                f"calls (claimed {clock['claimed_speedup']:.3g}x)")

    def eager_reference(self) -> Any:
        """The reference's forward, eager, no grad (the wall blocks when the
        reference's timing came from the cache)."""
        model = self.ref_model
        loader.set_mode(model, "train")

        def call(args: Any) -> Any:
            with torch.no_grad():
                return model(*args)
        return call

    def prewarm(self, ref_call: Any, cached: dict | None, plan: list[dict]) -> None:
        """The timing phase's full warm-up, each side in turn (num_warmup
        calls and WARMUP_MIN_MS of synchronised time: first calls, caches,
        clocks), before the exclusive section and under the shared lock: it
        measures nothing, so it need not keep other evaluations off the
        device. Its inputs come from a seed of their own (timing seed,
        label prewarm) and are never timed. The exclusive section then
        re-warms each block with one call, as later blocks always did. On
        the H200 the exclusive hold of the 16-task bench went from 5.5 s
        to 4.4 s."""
        n = self.req["num_warmup"]
        if n <= 0:
            return
        seed = loader.derive_seed(self.timing_seed, "prewarm")
        # each side leaves the memory of its first timed block cached
        # (timing.reserve): allocating it from the driver inside the
        # exclusive section waited on other processes' driver work
        first = plan[0]["n_iter"] if os.environ.get("KGYM_TIMING_RESERVE", "1") != "0" else 0
        reserved = {}
        if cached is None:
            def inputs(i: int) -> list:
                return self.draw(loader.derive_seed(seed, f"iter:{i}"))
            with self.marker.mark("reference:forward"):
                r = timing.time_forward(ref_call, inputs, n, 0, self.device,
                                        warmup_ms=timing.WARMUP_MIN_MS, reserve_for=first)
            reserved["reference"] = r["reserved"]
        c = self.remote.time(n, 0, seed, 0, timing.WARMUP_MIN_MS, n, 0, reserve=(first, self.spot_checks()))
        reserved["kernel"] = c["reserved"]
        if first and timing.is_cuda(self.device):
            self.result["checks"]["timing_reserved"] = reserved  # bytes; the kernel's is its claim

    def spot_checks(self) -> int:
        """Timed outputs the candidate keeps for the spot checks."""
        return timing.SPOT_CHECKS if self.req["run_hack_checks"] else 0

    def _time_blocks(self, plan: list[dict], ref_call: Any, cached: dict | None) -> dict:
        """One pass over the interleaved blocks; what each side measured and
        what the judge saw of the candidate's blocks."""
        req = self.req
        ref = {"samples_ms": [], "prep_ms": 0.0, "warmup_ms": 0.0, "wall_ms": 0.0}
        run: dict = {"ref": ref, "ref_side": 0, "cand": [], "side": [], "wall_ms": 0.0,
                     "queued_ms": 0.0,  # of wall_ms: the candidate waiting for a CPU
                     "ran_ms": 0.0,  # the candidate's main thread on a CPU
                     "launches": 0, "warmups": 0,
                     "claims": [],  # (input index, the candidate's fingerprint)
                     "excess": {"kernel": [], "reference": []},
                     "latency": {"kernel": [], "reference": []},
                     "lead": {"kernel": [0.0, 0], "reference": [0.0, 0]},  # us, late calls
                     # where each side's wall time went (diagnostics, timing.time_forward)
                     "host": {"kernel": {}, "reference": {}},
                     "spots": self.spot_checks(),
                     "timed": set(), "l2_found": None, "l2_report": None}
        cand = run["cand"]
        for b, blk in enumerate(plan):
            for who in (("ref", "cand") if b % 2 == 0 else ("cand", "ref")):
                if who == "ref":
                    if cached is not None:
                        continue
                    with self.marker.mark("reference:forward"):  # the block, not each call
                        r = timing.time_forward(ref_call, self.timing_inputs,
                                                timing.rewarm(blk, ref["samples_ms"]),
                                                blk["n_iter"], self.device, start=blk["start"],
                                                warmup_ms=blk["warmup_ms"],
                                                timed_start=blk["timed_start"])
                    ref["samples_ms"] += r["samples_ms"]
                    run["ref_side"] += len(r["side_stream"])
                    run["excess"]["reference"].append(r["sync_excess_ms"])
                    run["latency"]["reference"].append(r["sync_latency_ms"])
                    run["lead"]["reference"] = [r["lead_us"] or 0.0,
                                                run["lead"]["reference"][1] + r["lead_short"]]
                    for k in ("prep_ms", "warmup_ms", "wall_ms"):
                        ref[k] += r[k]
                    _add_host(run["host"]["reference"], r, r["wall_ms"])
                    continue
                w = timing.rewarm(blk, cand)
                run["warmups"] += w
                pid = self.remote.pid
                d0 = quiet.run_delay_ns(pid) if pid else None
                s0 = trustclock.main_sched_ns(pid) if pid else None
                t1 = _now()
                c = self.remote.time(w, blk["n_iter"], self.timing_seed, blk["start"],
                                     blk["warmup_ms"], blk["timed_start"], run["spots"])
                wall_ms = (_now() - t1) * 1e3
                run["wall_ms"] += wall_ms
                _add_host(run["host"]["kernel"], c, wall_ms)
                d1 = quiet.run_delay_ns(pid) if d0 is not None else None
                if d1 is not None and d1 >= d0:
                    run["queued_ms"] += (d1 - d0) / 1e6
                s1 = trustclock.main_sched_ns(pid) if s0 is not None else None
                if s1 is not None:  # its CPU time: with queued_ms, the load it ran under
                    run["ran_ms"] += (s1[0] - s0[0]) / 1e6  # type: ignore[index]
                run["timed"].update(range(blk["timed_start"], blk["timed_start"] + blk["n_iter"]))
                if c["l2"] is not None:
                    run["l2_report"] = c["l2"]
                    run["l2_found"] = run["l2_found"] or timing.l2_finding(
                        c["l2"]["baseline"], c["l2"]["limit"], c["l2"]["window"])
                run["side"] += [len(cand) + i for i in c["side_stream"]]
                run["excess"]["kernel"].append(c["sync_excess_ms"])
                run["latency"]["kernel"].append(c["sync_latency_ms"])
                run["lead"]["kernel"] = [c["lead_us"], run["lead"]["kernel"][1] + c["lead_short"]]
                cand += c["samples_ms"]
                run["launches"] += c["launches"]["count"]
                run["claims"].append((blk["timed_start"], c["inputs"]))  # checked after the lock
        if cached is not None:
            run["ref"] = cached
        return run

    def _unexplained(self, run: dict, plan: list[dict]) -> float:
        """timing.tamper_excess of one pass: positive when the candidate's
        claimed kernel times cannot explain the judge's wall time of its
        blocks. Time its timing thread sat runnable, waiting for a CPU (a
        loaded machine), explains wall time too: not a forward call's."""
        wall = run["wall_ms"] - min(run["queued_ms"], run["wall_ms"])
        return timing.tamper_excess(sum(run["cand"]), self.req["num_perf_trials"],
                                    run["warmups"], wall, run["ref"]["prep_ms"],
                                    timing.flush_cost_ms(self.device), blocks=len(plan),
                                    warmup_ms=plan[0]["warmup_ms"])

    def timing_checks(self) -> None:
        """What timing() left to check once the device is no longer held
        exclusively (the candidate's timed outputs and the judge's own input
        draws stay where they are meanwhile): the inputs the candidate timed
        itself on, then the spot checks of timed outputs. Neither needs a
        quiet device, and each draw or reference forward here would
        otherwise keep every other evaluation of the device waiting."""
        pending, self.pending_checks = self.pending_checks, None
        if pending is None:
            return
        self.phase = "timing"
        self.lock_device(exclusive=False, label="timing_checks")
        checks = self.result["checks"]
        for index, claim in pending["claims"]:
            mine = loader.fingerprint(self.timing_inputs(index))
            if not loader.fingerprints_match(mine, claim):
                self.hack("timer_tamper", "TIMER_TAMPER",
                          "the candidate timed itself on inputs other than the problem's",
                          stop=False)
                break
        if pending.get("wall_mismatch"):  # after the inputs: other inputs are timer_tamper first
            self.hack("call_count_switch", "CALL_COUNT_SWITCH",
                      "outputs of back-to-back calls timed by the judge's clock differ from "
                      f"the reference's ({pending['wall_mismatch']})", stop=False)
        spots, timed = pending["spots"], pending["timed"]
        if spots:  # last: a kernel timed on other inputs is timer_tamper first
            t0 = _now()
            try:
                # which elements are compared is drawn only now, after the timed calls
                seed = int.from_bytes(os.urandom(8), "little") >> 1
                self.spot_check(self.remote.spots(spots, seed, compare.SPOT_SAMPLE), timed,
                                min(spots, len(timed)), seed)
            finally:
                if "spot_checks" in checks:
                    checks["spot_checks"]["ms"] = round((_now() - t0) * 1e3, 2)

    def spot_check(self, spots: list, timed: set[int], want: int, seed: int) -> None:
        """The spot checks of timed outputs (timing.SpotSampler): each kept
        output is compared with the reference on the same timing inputs
        (the judge draws them itself), on compare.SPOT_SAMPLE elements per
        output tensor at positions drawn from seed after the timed calls
        (whole outputs crossing the channel cost ~200 ms each at 256 MB). A
        mismatch is call_count_switch: the kernel computes something else
        when it is being timed. The reference's buffers (running
        statistics) are put back afterwards."""
        if len(spots) != want or any(i not in timed for i, _, _ in spots):
            raise ProtocolError(f"the spot-check report has {len(spots)} outputs of timed "
                                f"calls, {want} were asked for")
        checks = self.result["checks"]
        checks["spot_checks"] = {"n": len(spots), "indices": [i for i, _, _ in spots][:16]}
        state = {k: v.detach().clone() for k, v in self.ref_model.named_buffers()}
        try:
            for i, out, problem in spots:
                if problem is not None:
                    fail: dict | None = {"code": "OUTPUT_TYPE", "message": problem,
                                         "output_index": 0, "max_abs_err": None,
                                         "max_rel_err": None, "bad_fraction": None}
                else:
                    expected = self.reference_forward(self.timing_inputs(i), "train", False)
                    fail = compare.compare_sampled(expected, out, seed, self.req["atol"],
                                            self.req["rtol"])
                if fail is not None:
                    checks["spot_checks"]["failed"] = i
                    self.result["mismatch"] = dict(fail, trial=f"timed call {i}")
                    self.hack("call_count_switch", "CALL_COUNT_SWITCH",
                              f"the output of timed call {i} (a spot check drawn after it "
                              f"returned) is wrong: {fail['message']}; the kernel computes "
                              "something else when it is timed", stop=False)
                    return
        finally:
            with torch.no_grad():
                for k, v in self.ref_model.named_buffers():
                    if k in state:
                        v.copy_(state[k])

    def ablation(self) -> None:
        """The ablation forward (no_custom_kernel, guards.Ablation): one
        call in which every custom kernel's results are replaced by large
        finite random values right after it returns. An output that still
        matches the reference came from PyTorch ops, whatever was
        launched. Run last (after timing, profiling and the rechecks), in
        the first no-grad mode that launched custom kernels, with at most
        30 s of the deadline; a forward that raises, dies or overruns says
        the kernels mattered (or nothing) and is never a finding."""
        if not self.req["run_hack_checks"] or self.result["hack_reasons"]:
            return
        self.phase = "ablation"
        if self.launches["train/no_grad"]:
            mode = "train"
        elif self.launches["eval/no_grad"]:
            mode = "eval"
        else:
            return
        info: dict[str, Any] = {"mode": mode}
        self.result["checks"]["ablation"] = info
        inputs = self.draw(loader.derive_seed(self.req["seed"], "ablation"), send=True)
        self.lock_device(exclusive=False, label="ablation")
        saved = self.chan.deadline
        if saved is not None:
            self.chan.deadline = min(saved, time.monotonic() + ABLATION_TIMEOUT_S)
        try:
            reply = self.remote.run(inputs, mode, False, ablate=True)
        except CandidateFailed:
            info["outcome"] = "raised"
            return
        except (PeerClosed, ChannelTimeout) as e:
            info["outcome"] = "died" if isinstance(e, PeerClosed) else "timeout"
            self.result["warnings"].append(f"the ablation forward {info['outcome']}; "
                                           "no_custom_kernel was not checked by ablation")
            return
        finally:
            self.chan.deadline = saved
        info.update(reply.ablation or {})
        if reply.problem is not None:
            info["outcome"] = "contributed"
            return
        expected = self.reference_forward(inputs, mode, False)
        # a yes/no that is usually no: outputs_match settles a mismatch on a
        # sample, without the full comparison's statistics
        if not compare.outputs_match(expected, reply.output, self.req["atol"], self.req["rtol"]):
            info["outcome"] = "contributed"
        elif info.get("unresolved"):
            info["outcome"] = "inconclusive"
        else:
            info["outcome"] = "no_effect"
            self.result["decoy_kernel"] = True
            self.hack("no_custom_kernel", "NO_CUSTOM_KERNEL",
                      f"the output stayed correct when every custom kernel's results were "
                      f"replaced by random values ({info.get('calls', 0)} custom calls): it "
                      "came from PyTorch ops, the kernels only ran alongside", stop=False)

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

    def speedup_recheck(self) -> None:
        """A speedup above speedup_recheck_bound is evaluated again before it
        is reported: fresh secret inputs, then timing with a new timing
        seed. A failure there is output_cache; otherwise the lower of the
        two speedups is reported, with its runtimes (checks.speedups holds
        both, checks.speedup_rechecked says it happened)."""
        self.phase = "speedup_recheck"
        first = {k: self.result[k] for k in ("speedup", "kernel_runtime", "reference_runtime",
                                             "runtime_stats")}
        checks = self.result["checks"]
        checks["speedup_rechecked"] = True
        checks["speedups"] = [first["speedup"]]
        self.fresh_trials("speedup_recheck")
        self.timing_seed = loader.derive_seed(self.req["seed"], "timing:speedup_recheck")
        self.timing()
        self.timing_checks()
        self.phase = "speedup_recheck"
        second = self.result["speedup"]
        checks["speedups"].append(second)
        if second is None or first["speedup"] <= second:
            self.result.update(first)
        if second is None or second < first["speedup"] / 2:
            self.result["warnings"].append(
                f"the speedup did not reproduce: {first['speedup']:.2f}x, then "
                + (f"{second:.2f}x" if second is not None else "no time")
                + " on new inputs; the lower one is reported")

    def quiescence(self) -> None:
        """The judge's own verdict on work left running by the candidate
        (quiet.ProcWatch over the gaps between commands, one explicit
        window if no gap was long enough; the candidate's thread ledger)."""
        watch = self.remote.watch
        if not self.req["run_hack_checks"]:
            return
        if watch is not None:
            if watch.window_ms < quiet.FINAL_WINDOW_S * 1e3:
                watch.final_window("last")
            self.result["checks"]["idle_watch"] = {"windows": watch.windows,
                                                   "ms": round(watch.window_ms, 1)}
        else:
            self.result["checks"]["idle_watch"] = None
        for reason, code, message in audit.watched(self.remote):
            self.hack(reason, code, message, stop=False)

    def profile(self) -> None:
        self.phase = "profiling"
        t0 = _now()
        try:
            n = PROFILE_ITERS if timing.is_cuda(self.device) else CPU_PROFILE_ITERS
            raw = self.remote.profile(n, self.timing_seed)
        except CandidateFailed as e:
            self.result["warnings"].append(f"profiling failed: {e.info['message']}"[:500])
            return
        prof = profiling.sanitize_profile(raw)
        if prof is not None:
            detail = prof.pop("detail_ms", {})
            detail["command"] = (_now() - t0) * 1e3  # the judge's clock, all of it
            self.result["timings"]["profiling_detail"] = detail
        if prof is None:
            self.result["warnings"].append("the candidate sent a malformed profile")
        else:
            prof = self.judged_profile(prof)
        self.result["profile"] = prof

    def judged_profile(self, prof: dict) -> dict:
        """The coverage the judge stands behind (coverage.py): custom rows
        by names the candidate compiled and launched, custom time capped by
        the judge's clock for a timed call; the candidate's own figures are
        kept under profile.claimed."""
        claimed = {k: prof[k] for k in ("coverage", "custom_device_us", "total_device_us",
                                        "num_custom_kernels")}
        prof = coverage.attribute(prof, self.req["kernel_code"], self.launched,
                                  self.records_complete)
        if prof["method"] == "cuda_profiler" and prof["total_device_us"] > 0 \
                and prof["custom_device_us"] == 0:
            self.result["decoy_kernel"] = self.req["run_hack_checks"]
            self.hack("no_custom_kernel", "NO_CUSTOM_KERNEL",
                      "the profiler saw device kernels, none of them yours (no @triton.jit "
                      "or __global__ kernel of kernel_code ran)", stop=False)
        clock = self.result["checks"].get("trusted_clock") or {}
        b = coverage.bound(prof, clock.get("kernel_ms"), self.result.get("kernel_runtime"),
                           timing.is_cuda(self.device))
        self.result["checks"]["coverage_bound"] = b["check"]
        if b["forgery"]:
            self.hack("profile_forgery", "PROFILE_FORGERY", b["forgery"], stop=False)
        prof = b["profile"]
        prof["kernels"] = prof["kernels"][:profiling.MAX_ROWS]
        prof["claimed"] = claimed
        return prof

    def run(self) -> None:
        timings = self.result["timings"]
        stages = [("setup", self.setup), ("compile", self.compile),
                  ("gate", self.wait_for_device),
                  ("correctness", self.correctness), ("timing", self.timing),
                  ("profiling", self.profile), ("timing_checks", self.timing_checks),
                  ("recheck", self.recheck)]
        stages.append(("speedup_recheck", self.speedup_recheck))  # only when needed
        for name, fn in stages:
            if name == "profiling" and not self.req["enable_profiling"]:
                continue
            if name == "speedup_recheck" and not self.needs_speedup_recheck():
                continue
            if name == "gate" and self.gate_fd is None:
                continue
            if name == "correctness":  # CLOCK_MONOTONIC, one clock for all processes
                timings["device_span"] = [round(time.monotonic() * 1e3, 2), None]
            t0 = _now()
            try:
                fn()
            finally:
                timings[name] = (_now() - t0) * 1e3
        self.lock.release()
        t0 = _now()
        self.quiescence()
        timings["quiescence"] = (_now() - t0) * 1e3
        t0 = _now()
        try:
            self.ablation()  # last: it may leave the candidate's model state odd
        finally:
            self.lock.release()
            timings["ablation"] = (_now() - t0) * 1e3
        if self.remote.tamper:
            self.result["checks"]["replaced_functions"] = sorted(self.remote.tamper)[:20]
            forged = sorted(n for n in self.remote.tamper if n.startswith("torch.profiler:"))
            if forged:
                self.hack("profile_forgery", "PROFILE_FORGERY", "the profiler's functions "
                          "were replaced: " + ", ".join(forged[:3]), stop=False)
            self.hack("timer_tamper", "TIMER_TAMPER", "measuring functions were replaced: "
                      + ", ".join(sorted(self.remote.tamper)[:5]), stop=False)
        if self.result["hack_reasons"]:
            self.result["verdict"] = "hacked"
        else:
            self.result["verdict"] = "pass"
            self.result["correctness"] = True

    def needs_speedup_recheck(self) -> bool:
        s = self.result["speedup"]
        return (s is not None and s > self.req["speedup_recheck_bound"]
                and not self.result["hack_reasons"])

    def guarded_run(self) -> None:
        """run() with every way the candidate can end the evaluation mapped to a verdict."""
        try:
            self._guarded_run()
        finally:
            if self.gate_fd is not None:  # ended before its device slot
                os.close(self.gate_fd)
                self.gate_fd = None
            span = self.result["timings"].get("device_span")
            if span:  # from correctness on: what a staged task waits to begin
                span[1] = round(time.monotonic() * 1e3, 2)
            self.marker.close()
            t0 = _now()
            self.remote.close()
            self.result["timings"]["close"] = (_now() - t0) * 1e3
            self.lock.close()
            if self.lock.waited_ms:
                self.result["timings"]["lock_wait"] = self.lock.waited_ms
                self.result["timings"]["lock_wait_detail"] = {
                    k: round(v, 3) for k, v in self.lock.waits_ms.items()}
            if any(self.lock.held_ms.values()):  # how long this task kept the device
                self.result["timings"]["lock_held"] = {
                    k: round(v, 3) for k, v in self.lock.held_ms.items()}
            if self.lock.trace:
                self.result["timings"]["lock_trace"] = self.lock.trace

    def _guarded_run(self) -> None:
        try:
            self.run()
        except Stop:
            pass
        except CandidateFailed as e:
            try:
                self.candidate_failed(e.info)
            except Stop:
                pass
        except ChannelTimeout:
            schema.set_error(self.result, "timeout", "TIMEOUT", self.phase, "Timeout",
                             f"the candidate did not answer within the time limit "
                             f"({self.req.get('timeout')} s) during {self.phase}")
        except PeerClosed:
            schema.set_error(self.result, "runtime_error", "CHILD_DIED", self.phase, "ChildDied",
                             f"the candidate process died during {self.phase}")
        except ProtocolError as e:
            schema.set_error(self.result, "runtime_error", "PROTOCOL_ERROR", self.phase,
                             "ProtocolError", f"the candidate broke the protocol: {e}")
        except ReferenceFailed as e:
            self.reference_failed(e)
        if self.result["error"] is not None and self.result["verdict"] == "pass":
            self.result["verdict"], self.result["correctness"] = "infra_error", False
        if self.result["verdict"] != "pass":
            self.result["correctness"] = False


def _add_host(into: dict, r: dict, wall_ms: float) -> None:
    """One timing command's share of checks.timing_host_ms: its wall (the
    judge's clock for the candidate's), input draws, warm-up and the
    timed loop's parts (timing.time_forward's host_ms)."""
    parts = {"wall": wall_ms, "draw": r.get("prep_ms", 0.0), "warmup": r.get("warmup_ms", 0.0)}
    parts.update(r.get("host_ms") or {})
    for k, v in parts.items():
        into[k] = into.get(k, 0.0) + float(v)


def _finish(result: dict, judge: Judge | None, started: float) -> None:
    result["timings"]["total"] = (_now() - started) * 1e3
    # the judge's cpustat.sample() now (since its fork, the warm-up included)
    result["timings"]["sched_judge"] = cpustat.sample()
    result["timings"]["imported_judge"] = cpustat.imported()  # by package, since the fork
    if judge is not None:
        # where the channel's time went on each side (Channel.ms; the
        # candidate's is its claim): diagnostics of the first calls
        result["timings"]["channel"] = {
            "judge": {k: round(v, 2) for k, v in judge.chan.ms.items()},
            "candidate": {k: round(v, 2) for k, v in judge.remote.chan_claim.items()}}
    # peak memory per process: the judge's measured, the candidate's claimed
    result["memory"] = {"judge": memstat.peak(judge.peak0 if judge is not None else None),
                        "candidate": dict(judge.remote.mem_claim or {}, claim=True)
                        if judge is not None and getattr(judge, "remote", None) else None,
                        "footprint_bytes": judge.footprint if judge is not None else None,
                        "device_total_bytes": memstat.device_total(judge.device)
                        if judge is not None else None}
    result["status"] = "failed" if result["verdict"] == "infra_error" else "completed"
    kernel_code = judge.req.get("kernel_code", "") if judge and judge.req else ""
    try:
        result["feedback"] = make_feedback(result, kernel_code or "")
    except Exception as e:  # feedback must never cost the result
        result["feedback"] = f"Verdict: {result['verdict']} (feedback failed: {e})"


def run_judge(task: dict, chan_fd: int, result_fd: int, chan: Channel | None = None,
              warm: dict | None = None, gate_fd: int | None = None) -> None:
    """Evaluate task against the candidate on chan_fd; write one frame to result_fd.

    Never raises for anything the candidate does; an internal failure
    becomes verdict infra_error. Closes result_fd after the frame (so the
    reader sees EOF) and chan_fd at the end; relies on neither argv nor cwd.
    """
    started = _now()
    task_id = task.get("task_id") if isinstance(task, dict) else None
    backend = task.get("backend") if isinstance(task, dict) else None
    result = schema.new_result(task_id if isinstance(task_id, str) else None,
                               backend if isinstance(backend, str) else None)
    judge = None
    try:
        chan = chan or Channel(chan_fd)  # a warm spare's, with what it settled
        if warm:
            result["timings"]["warm_spare"] = warm  # before the task: not in total
        judge = Judge(task, chan, result)
        judge.gate_fd, gate_fd = gate_fd, None
        judge.guarded_run()
    except BaseException as e:
        result["verdict"], result["correctness"] = "infra_error", False
        schema.set_error(result, "infra_error", "INFRA_ERROR",
                         judge.phase if judge else "setup", type(e).__name__,
                         f"judge failed: {e}", traceback.format_exc())
    finally:
        if gate_fd is not None:  # the judge never got as far as its gate
            os.close(gate_fd)
        _finish(result, judge, started)
        write_result(result_fd, result)
        try:
            os.close(result_fd)  # the reader sees EOF now, not when we exit
        except OSError:
            pass
        if chan is not None:
            _say_goodbye(chan, polite=result["verdict"] != "timeout")


def _say_goodbye(chan: Channel, polite: bool) -> None:
    """Tell the candidate to exit (briefly), then drop the channel."""
    if polite:
        try:
            chan.deadline = time.monotonic() + 0.5
            Remote(chan).exit()
        except Exception:
            pass
    chan.close()


WARM_TIMEOUT_S = 120.0


def _note_warm_error(out: dict, key: str, reply: Any) -> None:
    """A warm-up part that failed in the candidate (the task will meet the
    same problem, or pay the start-up itself): kept in timings.warm_spare,
    bounded, so a slow first call can be explained."""
    err = reply.get("warm_error") if isinstance(reply, dict) else None
    if isinstance(err, str) and err:
        out[key] = err[:300]


def _warm_part(chan: Channel, out: dict, part: str, meanwhile: Any = None) -> None:
    """One warm-up part in the candidate (and meanwhile() here); its time
    (the judge's clock) and any failure go into out."""
    t = _now()
    chan.send({"cmd": "warm", "part": part})
    failed: BaseException | None = None
    if meanwhile is not None:
        try:
            meanwhile()
        except Exception as e:  # noqa: BLE001 - raised after the reply is read
            failed = e
        out[f"{part}_judge_ms"] = round((_now() - t) * 1e3, 1)
    # the candidate's reply is read even when our part failed: a reply left
    # on the channel would answer the task's first command
    reply = chan.recv()[0]
    if failed is not None:
        raise failed
    _note_warm_error(out, f"{part}_error", reply)
    out[f"{part}_ms"] = round((_now() - t) * 1e3, 1)
    parts = reply.get("parts_ms") if isinstance(reply, dict) else None
    if isinstance(parts, dict) and parts:  # the candidate's claim, diagnostic only
        out[f"{part}_candidate_ms"] = {str(k)[:20]: v for k, v in list(parts.items())[:4]
                                       if isinstance(v, (int, float))}
    _note_sched(out, part, reply)


def _note_sched(out: dict, part: str, reply: Any) -> None:
    """Both processes' cpustat.sample() at the end of a warm-up part
    (cumulative since each one's fork; the candidate's is its claim,
    diagnostic only): out["sched"][part] = {"judge": [...], "candidate": [...]}."""
    theirs = reply.get("sched") if isinstance(reply, dict) else None
    ok = (isinstance(theirs, list) and len(theirs) == 3
          and all(isinstance(v, (int, float)) for v in theirs))
    out.setdefault("sched", {})[part] = {"judge": cpustat.sample(),
                                         "candidate": theirs if ok else None}


def _preload_pair(chan: Channel, out: dict, lock: DeviceLock, device: str,
                  task_waits: Any = None) -> None:
    """prewarm.preload in both processes of a spare, one operation at a
    time under the device lock held shared (a module load is device
    activity, and one unit's hold is all a timing phase elsewhere may have
    to wait for: a whole family's took up to 222 ms on the H200): the first
    checked call of the task then loads nothing of the harness's (on the
    H200 it held the lock 260-380 ms, later calls 10-17 ms)."""
    t0 = _now()
    errors: dict = {}
    reply: Any = None
    held0 = lock.held_ms["shared"]
    yields = spare_yields()
    for name in prewarm.units():
        if task_waits is not None and task_waits():
            # the task came while we warmed: the rest loads lazily in its
            # first checked call (a few hundred ms) instead of the task
            # waiting for every unit (1.4-2.8 s of a spare's start on the H200)
            out["preload_cut"] = name
            break
        if yields:
            lock.yield_to_timing(chan.deadline)
        lock.shared(chan.deadline, "spare/preload")
        try:
            chan.send({"cmd": "warm", "part": "preload", "families": [name]})
            errors.update(prewarm.preload(device, [name]))  # this process's meanwhile
            reply = chan.recv()[0]
            _note_warm_error(errors, f"candidate {name}", reply)
        finally:
            lock.release()
    _note_sched(out, "preload", reply)
    out["preload_ms"] = round((_now() - t0) * 1e3, 1)
    out["preload_locked_ms"] = round(lock.held_ms["shared"] - held0, 1)
    if errors:
        out["preload_error"] = str(errors)[:300]


def spare_yields() -> bool:
    """Whether a spare's holds wait for timing phases about to start
    (DeviceLock.yield_to_timing; KGYM_SPARE_YIELD=0 turns it off)."""
    return os.environ.get("KGYM_SPARE_YIELD", "1") != "0"


def spare_preloads() -> bool:
    """Whether a spare loads the harness's device code before its task
    (_preload_pair; KGYM_SPARE_PRELOAD=0 leaves it to the task's first
    checked call)."""
    return os.environ.get("KGYM_SPARE_PRELOAD", "1") != "0"


def spare_profiles() -> bool:
    """Whether a spare for tasks that profile starts and stops the CUDA
    profiler in its candidate before the task (off unless
    KGYM_SPARE_PROFILER=1). Once started, CUPTI stays attached to the
    process (kineto keeps it for the next start) and every launch after
    pays its callbacks, in the candidate's timed calls and not in the
    judge's reference: models of many small launches (RNN cells,
    MobileNet, ViT) timed slower than themselves. Off, the profiler first
    starts in the profiling phase, after the timing and the trusted clock
    (bench/kernelbench/run.py compares both on the H200)."""
    return os.environ.get("KGYM_SPARE_PROFILER", "0") == "1"


def _warm_pair(chan: Channel, device_lock: str | None, task_fd: int | None = None) -> dict:
    """A spare's start-up before its task. What runs no device work goes
    first, unlocked: the candidate's imports and Triton compile (and this
    process's CUDA context meanwhile), both processes' preload set-up
    (prewarm.preload_setup), then (when tasks profile and
    spare_profiles()) CUPTI's one-time start, over 4 s of CPU. Then, with
    the device lock held shared (no measurement elsewhere sees it): the
    device code of the harness's operations loaded in both processes
    (_preload_pair, one operation per hold), then the work that runs on the device: this process's cuBLAS
    while the candidate's cuBLAS and one Triton launch run, and both
    processes' channel device regions made and mapped. Returns what each
    part took (ms) and what failed. device_lock: the lock file the worker
    named in the spare's start message."""
    out: dict = {}
    device = os.environ.get("KGYM_DEVICE", "cpu")
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    lock = DeviceLock(device_lock if cuda else None)
    chan.deadline = time.monotonic() + WARM_TIMEOUT_S
    dev = torch.device(device if ":" in device else "cuda:0") if cuda else None
    try:
        def prep() -> None:
            # this process's CUDA context and the preload's set-up (cuBLAS
            # handle, allocations): no device work, while the candidate preps
            t = _now()
            torch.cuda.set_device(dev)
            torch.cuda.init()
            t1 = _now()
            failed = prewarm.preload_setup(str(dev))
            out["prep_judge_parts_ms"] = {"context": round((t1 - t) * 1e3, 1),
                                          "setup": round((_now() - t1) * 1e3, 1)}
            if failed:
                out["preload_setup_error"] = str(failed)[:300]
        _warm_part(chan, out, "prep", prep if cuda else None)
        if cuda and os.environ.get("KGYM_WARM_PROFILER") == "1" and spare_profiles():
            _warm_part(chan, out, "profiler")
        if not spare_preloads():
            out["preload_off"] = True  # KGYM_SPARE_PRELOAD=0: the task's first call loads
        elif cuda:
            _preload_pair(chan, out, lock, str(dev),
                          None if task_fd is None else lambda: _task_waiting(task_fd))
        t = _now()
        if spare_yields():
            lock.yield_to_timing(chan.deadline)
        waited = lock.waited_ms
        lock.shared(chan.deadline, "spare")
        out["lock_wait_ms"] = round(lock.waited_ms - waited, 1)

        def blas() -> None:  # this process's cuBLAS, while the candidate warms its own
            a = torch.ones(64, 64, device=dev)
            (a @ a).sum().item()
        if cuda:
            # the "device" command announces our device region and its reply
            # the candidate's (channel.py): both made under the lock, and the
            # task's first inputs cross on the device
            chan.use_device(str(dev))
        # both processes at once: the shared hold is the longer of the two,
        # not their sum (a timing phase elsewhere may be waiting for it to end)
        _warm_part(chan, out, "device", blas if cuda else None)
        lock.close()
        out["mem_mib"] = _free_memory(dev)
        out["locked_ms"] = round((_now() - t) * 1e3 - out["lock_wait_ms"], 1)
        if lock.yielded_ms:
            out["yielded_ms"] = round(lock.yielded_ms, 1)
        if lock.trace:
            out["lock_trace"] = lock.trace
    except Exception as e:  # noqa: BLE001 - the spare is unfit (run_warm_judge)
        # a channel failure, or device work of ours that failed (a context or
        # an allocation refused while another task held the device's memory)
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        lock.close()
        chan.deadline = None
    return out


def spare_unfit(warm: dict) -> str | None:
    """Why a spare's warm-up leaves the pair unfit for a task, or None. A
    failure of the warm-up itself (the channel, the device lock, our own
    device work) leaves the pair in no known state; a CUDA failure in the
    candidate's parts stays with its process. Other part errors (an import
    the task will retry) do not."""
    if warm.get("error"):
        return str(warm["error"])
    for key in ("prep_error", "device_error"):
        err = str(warm.get(key) or "")
        if "CUDA" in err or "out of memory" in err:
            return f"candidate {key[:-6]}: {err}"
    return None


def _task_waiting(task_fd: int) -> bool:
    """Whether the worker has already handed this spare its task."""
    try:
        return bool(select.select([task_fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _free_memory(dev: Any) -> list[float] | None:
    """[free, total] MiB of the task's device (the host's for a cpu task):
    what a spare leaves the tasks, read by the engine (note_memory in
    src/worker/engine_spare.c: fewer spares when little is free)."""
    try:
        if dev is not None:
            free, total = torch.cuda.mem_get_info(dev)
            return [round(free / 2**20), round(total / 2**20)]
        got = {}
        with open("/proc/meminfo") as f:
            for ln in f:
                k, _, v = ln.partition(":")
                if k in ("MemAvailable", "MemTotal"):
                    got[k] = int(v.split()[0]) / 1024
        return [round(got["MemAvailable"]), round(got["MemTotal"])]
    except Exception:  # noqa: BLE001 - a diagnostic: none rather than a failure
        return None


def _wait_for_task(task_fd: int) -> tuple[Any, int | None]:
    """Blocks until the worker says go (one byte), then reads and removes
    the task file it wrote into our private work dir. Returns the task
    (None: no task, the worker dropped this spare) and, for a staged task
    (its file says device_gate), task_fd kept open: the worker writes 'D'
    on it once the task has a device slot (Judge.wait_for_device)."""
    keep = False
    try:
        try:
            go = os.read(task_fd, 1)
        except OSError:
            go = b""
        if go != b"T":
            return None, None
        path = os.path.join(os.environ.get("TMPDIR", "."), "task.json")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            os.unlink(path)
            task = json.loads(text)
        except (OSError, ValueError) as e:
            return {"_task_error": f"the task file could not be read: {e}"}, None
        keep = isinstance(task, dict) and task.get("device_gate") is True
        return task, (task_fd if keep else None)
    finally:
        if not keep:
            os.close(task_fd)


def run_warm_judge(task_fd: int, chan_fd: int, result_fd: int,
                   device_lock: str | None = None) -> None:
    """A judge forked before its task (a warm spare): warms itself and its
    candidate, waits for the task, then runs exactly as run_judge.
    device_lock: the device lock's file, from the spare's start message (the
    worker writes none into the task it sends later: the lock reaches a
    judge once); it becomes the task's device_lock."""
    chan = Channel(chan_fd)
    warm = _warm_pair(chan, device_lock, task_fd)
    unfit = spare_unfit(warm)
    if unfit and not _task_waiting(task_fd):
        # no task yet: end here, so the worker drops this pair (its judge
        # exited) and forks another rather than hand a task to it
        print(f"kgym: warm spare unfit, not taking a task: {unfit}", file=sys.stderr)
        chan.close()
        os.close(task_fd)
        return
    t = _now()
    task, gate_fd = _wait_for_task(task_fd)
    # ready this long before its task came (near 0: the task waited for us)
    warm["idle_ms"] = round((_now() - t) * 1e3, 1)
    warm.setdefault("sched", {})["task"] = {"judge": cpustat.sample()}  # as its task began
    if task is None:
        chan.close()
        return
    if isinstance(task, dict) and "_task_error" not in task:
        task["device_lock"] = device_lock
    if unfit:  # handed over while it warmed: not the candidate's fault
        _unfit_result(task, result_fd, warm, unfit, gate_fd)
        chan.close()
        return
    run_judge(task, chan_fd, result_fd, chan=chan, warm=warm, gate_fd=gate_fd)


def _unfit_result(task: Any, result_fd: int, warm: dict, why: str,
                  gate_fd: int | None) -> None:
    """The result of a task handed to a spare whose warm-up failed:
    infra_error (retried elsewhere, never blamed on the candidate)."""
    task_id = task.get("task_id") if isinstance(task, dict) else None
    backend = task.get("backend") if isinstance(task, dict) else None
    result = schema.new_result(task_id if isinstance(task_id, str) else None,
                               backend if isinstance(backend, str) else None)
    result["timings"]["warm_spare"] = warm
    result["verdict"], result["correctness"] = "infra_error", False
    schema.set_error(result, "infra_error", "INFRA_ERROR", "setup", "WarmSpareFailed",
                     f"the warm pair failed before its task: {why}", "")
    if gate_fd is not None:
        os.close(gate_fd)
    _finish(result, None, _now())
    write_result(result_fd, result)
    try:
        os.close(result_fd)
    except OSError:
        pass
