"""A warm spare's judge: its life before the task, then run_judge.

run_warm_judge is forked before its task: it warms itself and its
candidate (imports, CUDA context, the harness's device code, cuBLAS, the
channel's device regions) with device work only under the device lock held
shared, waits for the worker's task, then evaluates exactly as run_judge. A
warm-up that leaves the pair in no known state makes the spare unfit
(spare_unfit): it ends before a task, or answers one with infra_error.
Tested by tests/harness/test_warm_unfit.py, test_prewarm.py and
test_spare_profiler.py.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from typing import Any

import torch

from . import cpustat, prewarm, schema
from .channel import Channel
from .devlock import DeviceLock
from .frame import write_result
from .judge import _finish, run_judge
from .stages import now


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
    t = now()
    chan.send({"cmd": "warm", "part": part})
    failed: BaseException | None = None
    if meanwhile is not None:
        try:
            meanwhile()
        except Exception as e:  # noqa: BLE001 - raised after the reply is read
            failed = e
        out[f"{part}_judge_ms"] = round((now() - t) * 1e3, 1)
    # the candidate's reply is read even when our part failed: a reply left
    # on the channel would answer the task's first command
    reply = chan.recv()[0]
    if failed is not None:
        raise failed
    _note_warm_error(out, f"{part}_error", reply)
    out[f"{part}_ms"] = round((now() - t) * 1e3, 1)
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
    t0 = now()
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
    out["preload_ms"] = round((now() - t0) * 1e3, 1)
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


def _warm_pair(chan: Channel, device_lock: str | None, task_fd: int | None = None) -> dict:
    """A spare's start-up before its task. What runs no device work goes
    first, unlocked: the candidate's imports and Triton compile (and this
    process's CUDA context meanwhile), both processes' preload set-up
    (prewarm.preload_setup). Then, with
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
            t = now()
            torch.cuda.set_device(dev)
            torch.cuda.init()
            t1 = now()
            failed = prewarm.preload_setup(str(dev))
            out["prep_judge_parts_ms"] = {"context": round((t1 - t) * 1e3, 1),
                                          "setup": round((now() - t1) * 1e3, 1)}
            if failed:
                out["preload_setup_error"] = str(failed)[:300]
        _warm_part(chan, out, "prep", prep if cuda else None)
        if not spare_preloads():
            out["preload_off"] = True  # KGYM_SPARE_PRELOAD=0: the task's first call loads
        elif cuda:
            _preload_pair(chan, out, lock, str(dev),
                          None if task_fd is None else lambda: _task_waiting(task_fd))
        t = now()
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
        out["locked_ms"] = round((now() - t) * 1e3 - out["lock_wait_ms"], 1)
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
    t = now()
    task, gate_fd = _wait_for_task(task_fd)
    # ready this long before its task came (near 0: the task waited for us)
    warm["idle_ms"] = round((now() - t) * 1e3, 1)
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
    _finish(result, None, now())
    write_result(result_fd, result)
    try:
        os.close(result_fd)
    except OSError:
        pass
