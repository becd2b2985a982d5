"""The trusted role: decides the verdict and writes the one result frame.

run_judge(task, chan_fd, result_fd) holds the secret seed, the reference
model and every expected output. It drives the candidate over chan_fd
(see candidate.py), compares, times the reference itself, cross-checks what
the candidate claims against its own clock, and writes the result to
result_fd as one framed message (channel.write_result), then returns.

Judge is the pipeline: setup and compile here, then the stages, each a
module of stages/ with one job (correctness, precision, timing and the
trusted clock, integrity checks, profiling), in the order Judge.run names
them. A warm spare's life before its task is spare.py.
"""

from __future__ import annotations

import os
import platform
import select
import tempfile
import time
import traceback
from typing import Any, Callable

import torch

from . import audit, cpustat, loader, memstat, precision, problem, schema, timing
from .devlock import DeviceLock, LockTimeout
from .channel import Channel, ChannelTimeout, PeerClosed, ProtocolError
from .frame import write_note, write_result
from .feedback import make_feedback
from .problem import ReferenceFailed
from .remote import CandidateFailed, Remote
from .stages import Stop, now
from .stages.correctness import MODES, Correctness
from .stages.integrity import Integrity
from .stages.precision import Precision
from .stages.profile import Profiling
from .stages.timing import Timing

__all__ = ["Judge", "Stop", "run_judge", "select_device"]

AHEAD_MAX_S = 30.0   # the candidate's compile ahead (ahead.py): at most this long,
AHEAD_SHARE = 0.2    # and at most this share of the evaluation's time budget

# The evaluation's stages in order: (timings key, Judge method, when it runs;
# None: always). Each raises Stop once the verdict is decided.
PIPELINE: tuple[tuple[str, str, Callable[[Any], bool] | None], ...] = (
    ("setup", "setup", None),                      # here: request, device, reference
    ("compile", "compile", None),                  # here: the candidate's load reply
    ("gate", "wait_for_device", lambda j: j.gate_fd is not None),  # a staged task's slot
    ("correctness", "correctness", None),          # stages/correctness.py (+ precision)
    ("timing", "timing", None),                    # stages/timing.py, device held
    ("profiling", "profile", lambda j: j.req["enable_profiling"]),  # stages/profile.py
    ("timing_checks", "timing_checks", None),      # stages/timing.py, device shared
    ("recheck", "recheck", None),                  # stages/correctness.py
    ("speedup_recheck", "speedup_recheck", lambda j: j.needs_speedup_recheck()),
)


def cpu_name() -> str:
    """The host CPU's model, the device name of a CPU evaluation."""
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


class Judge(Correctness, Precision, Timing, Integrity, Profiling):
    """One evaluation: the state every stage reads and writes, and the
    pipeline (run). Methods raise Stop once the verdict is decided."""

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
        self.large_output = False  # a passing trial's output was memstat.is_large
        # the reference's fastest forward in correctness and the host's share
        # of it (until the call returned), ms by the judge's clock: how finely
        # the timing phase interleaves (timing.blocks_for)
        self.ref_forward_ms: float | None = None
        self.ref_launch_ms: float | None = None
        self.input_draw_ms: float | None = None  # the fastest input draw of a trial
        self.note_fd: int | None = None  # the result pipe, for notes before the frame
        self.peak0: int | None = None  # the device peak before that pass reset it
        self.low_precision: set[str] = set()  # the candidate's fp16/bf16 evidence
        self.precision64_found: list = []  # trial 0's measured downgrade, reported after it
        self.float_dtypes: set[torch.dtype] = set()  # of the problem's inputs and outputs
        # the phase of reference code running now, for a worker that finds
        # this process dead without a frame (problem.py; in $TMPDIR, which
        # every launcher makes private to the judge)
        self.marker = problem.Marker(os.environ.get("TMPDIR"))

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
        # the worker raises the pair's CPU priority while it times alone
        self.lock.on_exclusive = lambda held: self.note({"timing": held})
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
        # the worker admits the next problem it does not know yet once this
        # one has told its size: an estimate now, measured after the first pass
        if self.note_fd is not None:
            with self.reference("reference:get_inputs", "get_inputs() on the meta device"):
                guess = memstat.estimate(self.ref_module, self.ref_model)
            self.note({"footprint_bytes": guess, "estimate": True,
                       "device_total_bytes": memstat.device_total(self.device)})

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

    def note(self, obj: dict) -> None:
        """A note to the worker before the result (frame.write_note), when
        its task asked for notes; a pipe that fails takes no more."""
        if self.note_fd is None:
            return
        try:
            write_note(self.note_fd, obj)
        except (OSError, ValueError):
            self.note_fd = None

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

    def run(self) -> None:
        """PIPELINE in order, each stage timed under its name (timings, ms),
        then the closing checks with the device lock released."""
        timings = self.result["timings"]
        for name, method, when in PIPELINE:
            if when is not None and not when(self):
                continue
            if name == "correctness":  # CLOCK_MONOTONIC, one clock for all processes
                timings["device_span"] = [round(time.monotonic() * 1e3, 2), None]
            t0 = now()
            try:
                getattr(self, method)()
            finally:
                timings[name] = (now() - t0) * 1e3
        self.lock.release()
        t0 = now()
        self.quiescence()
        timings["quiescence"] = (now() - t0) * 1e3
        t0 = now()
        try:
            self.ablation()  # last: it may leave the candidate's model state odd
        finally:
            self.lock.release()
            timings["ablation"] = (now() - t0) * 1e3
        t0 = now()
        try:
            self.coverage_ablation()  # the custom time the judged coverage keeps
        finally:
            self.lock.release()
            timings["coverage_ablation"] = (now() - t0) * 1e3
        self.tamper()
        if self.result["hack_reasons"]:
            self.result["verdict"] = "hacked"
        else:
            self.result["verdict"] = "pass"
            self.result["correctness"] = True

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
            t0 = now()
            self.remote.close()
            self.result["timings"]["close"] = (now() - t0) * 1e3
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


def _finish(result: dict, judge: Judge | None, started: float) -> None:
    result["timings"]["total"] = (now() - started) * 1e3
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
    started = now()
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
        if task.get("result_notes") is True:  # the worker's engine reads them
            judge.note_fd = result_fd
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
        if judge is not None:
            judge.note_fd = None  # nothing follows the frame: its fd is closed next
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
