"""Timing loops, statistics, the L2 flush, and the reference-time cache.

Used by both roles: the candidate times ModelNew, the judge times the
reference the same way. The clock functions are captured when this module is
imported, before any candidate code runs (integrity.py checks they stay).

CUDA: fresh inputs, L2 flush (a write to a buffer of at least twice the L2),
start event, forward, torch.cuda.synchronize() (device-wide, so work on other
streams is counted), end event. CPU: time.perf_counter_ns around the call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import tempfile
import time
from typing import Any, Callable

import torch

from .paths import cache_dir

_perf_ns = time.perf_counter_ns
_cuda_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize

DEFAULT_FLUSH_BYTES = 256 << 20


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def sync(device: str) -> None:
    if is_cuda(device):
        _cuda_sync(torch.device(device))


class L2Flusher:
    """Evicts the L2 by writing a buffer at least twice its size (CUDA only)."""

    def __init__(self, device: str):
        self.buf = None
        if not is_cuda(device):
            return
        props = torch.cuda.get_device_properties(torch.device(device))
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        nbytes = 2 * l2 if l2 > 0 else DEFAULT_FLUSH_BYTES
        self.buf = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def flush(self) -> None:
        if self.buf is not None:
            self.buf.zero_()


def stats(samples: list[float]) -> dict | None:
    """median, mean, std (sample), min, max, n of samples in ms."""
    if not samples:
        return None
    return {"median": statistics.median(samples), "mean": statistics.fmean(samples),
            "std": statistics.stdev(samples) if len(samples) > 1 else 0.0,
            "min": min(samples), "max": max(samples), "n": len(samples)}


def time_forward(call: Callable[[Any], Any], make_args: Callable[[int], Any],
                 n_warmup: int, n_iter: int, device: str) -> dict:
    """Warm up, then time n_iter calls, each on fresh arguments.

    make_args(i) draws the inputs of iteration i (untimed). Returns
    {"samples_ms", "prep_ms" (drawing inputs, until the device is done),
    "warmup_ms", "wall_ms"}: everything the trusted side needs to check
    the claimed samples against its own clock.
    """
    t_start = _perf_ns()
    prep_ns = 0
    cuda = is_cuda(device)
    flusher = L2Flusher(device)
    for i in range(n_warmup):
        t0 = _perf_ns()
        args = make_args(i)
        sync(device)
        prep_ns += _perf_ns() - t0
        call(args)
        del args
    sync(device)
    warmup_ns = _perf_ns() - t_start - prep_ns
    samples = []
    for i in range(n_iter):
        t0 = _perf_ns()
        args = make_args(n_warmup + i)
        sync(device)  # drawing counts as prep, until the device is done with it
        prep_ns += _perf_ns() - t0
        flusher.flush()
        if cuda:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(start)
            call(args)
            _cuda_sync(torch.device(device))
            _record(end)
            _event_sync(end)
            samples.append(float(_elapsed(start, end)))
        else:
            t1 = _perf_ns()
            call(args)
            samples.append((_perf_ns() - t1) / 1e6)
        del args
    return {"samples_ms": samples, "prep_ms": prep_ns / 1e6,
            "warmup_ms": warmup_ns / 1e6, "wall_ms": (_perf_ns() - t_start) / 1e6}


def flush_cost_ms(device: str, k: int = 5) -> float:
    """Host-observed time of one synchronised L2 flush (0 on the CPU)."""
    if not is_cuda(device):
        return 0.0
    flusher = L2Flusher(device)
    flusher.flush()
    sync(device)
    t0 = _perf_ns()
    for _ in range(k):
        flusher.flush()
    sync(device)
    return (_perf_ns() - t0) / 1e6 / k


# Trusted-side plausibility bound for a candidate's claimed timings.
TAMPER_FACTOR = 4.0
TAMPER_FIXED_MS = 100.0
TAMPER_PER_ITER_MS = 0.2


def tamper_excess(claim_ms: float, n_iter: int, n_warmup: int, wall_ms: float,
                  prep_ms: float, flush_ms: float) -> float:
    """How far (ms) the trusted wall time exceeds what the claim can explain.

    wall_ms is the judge's own measurement of the candidate's whole timing
    command. Subtract generous allowances for what is not forward time:
    twice the judge's own cost of the same input draws (prep_ms), twice a
    synchronised L2 flush per iteration, 0.2 ms of loop/sync overhead per
    iteration and 100 ms for messaging. What remains was spent in forward
    calls; an honest claim, scaled to the warmup iterations as well, is at
    least a quarter of it (event timing can hide launch overhead behind the
    flush, never 4x). A positive return value means the claim is too small.
    """
    if n_iter <= 0:
        return 0.0
    iters = n_iter + n_warmup
    budget = wall_ms - (2.0 * prep_ms + 2.0 * flush_ms * n_iter
                        + TAMPER_PER_ITER_MS * iters + TAMPER_FIXED_MS)
    explained = TAMPER_FACTOR * claim_ms * iters / n_iter
    return budget - explained


# ---- reference-time cache ---------------------------------------------------

def reftime_key(reference_code: str, config: dict, device_name: str) -> str:
    desc = {"ref": hashlib.sha256(reference_code.encode()).hexdigest(),
            "config": config, "device": device_name, "torch": torch.__version__}
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()


def reftime_load(key: str) -> dict | None:
    """A cached reference timing, or None if absent or malformed."""
    path = os.path.join(cache_dir("reftime"), key + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    samples = obj.get("samples_ms")
    if (not isinstance(samples, list) or not samples
            or not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0
                       for x in samples)):
        return None
    for k in ("prep_ms", "warmup_ms", "wall_ms"):
        if not isinstance(obj.get(k), (int, float)):
            return None
    return obj


def reftime_store(key: str, obj: dict) -> None:
    """Write atomically; a cache that cannot be written is silently skipped."""
    directory = cache_dir("reftime")
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f)
        os.replace(tmp, os.path.join(directory, key + ".json"))
    except OSError:
        pass
