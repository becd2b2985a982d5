"""Peak memory of this process, for each result's `memory` (docs/harness-notes.md
"Memory"): the host's peak resident set (getrusage's ru_maxrss, which on
Linux is in KiB and counts the process since its fork, the warm-up and
the zygote's pages included) and, on CUDA, torch's peak of allocated
device memory (torch.cuda.max_memory_allocated: the caching allocator's
blocks in use, not its cache nor the context) plus the most bytes of
channel regions it held at once (devregion.py: cudaMalloc'd, no allocator
block); the sum of the two peaks, never below the true one.
The judge reports its own;
the candidate's figures come in its replies and are its claim. Also the
problem's footprint (begin_pass/end_pass), which the engine's admission
by memory reads. And the judge's rule for tensors large relative to its
device (large_bytes, is_large), for giving its cached blocks back (trim),
and what counts as a full device (device_full)."""
from __future__ import annotations

import os
import resource
from typing import Any

import torch

from . import devregion


def device_full(exc: BaseException) -> bool:
    """exc is a device allocation failure: torch's OutOfMemoryError, or the
    CUDA runtime's "out of memory" raised as another error."""
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc))


def peak(before: int | None = None) -> dict:
    """{"host_peak_bytes": int, "device_peak_bytes": int or None (no CUDA
    in use in this process)}; before: a device peak from before the peak
    was last reset (begin_pass)."""
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    dev = None
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            dev = max(int(torch.cuda.max_memory_allocated()), before or 0) + devregion.owned_peak
    except Exception:  # a broken CUDA state must not cost the reply
        dev = None
    return {"host_peak_bytes": int(host), "device_peak_bytes": dev}


def claim(v: Any) -> dict | None:
    """A candidate's reported peak(), checked for shape (numbers in range);
    None when it sent nothing usable."""
    if not isinstance(v, dict):
        return None
    out: dict[str, int | None] = {}
    for k in ("host_peak_bytes", "device_peak_bytes"):
        x = v.get(k)
        ok = isinstance(x, int) and not isinstance(x, bool) and 0 <= x < (1 << 60)
        out[k] = x if ok else None
    return out



def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in value (a tensor, or lists/tuples of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def begin_pass(device: str) -> tuple[int, int] | None:
    """Before the reference's first pass on CUDA: (allocated now, the peak
    so far), the peak then reset so that end_pass sees the pass's own;
    None on the CPU."""
    if not str(device).startswith("cuda"):
        return None
    dev = torch.device(device)
    before = (int(torch.cuda.memory_allocated(dev)), int(torch.cuda.max_memory_allocated(dev)))
    torch.cuda.reset_peak_memory_stats(dev)
    return before


def end_pass(device: str, begun: tuple[int, int] | None, inputs: Any, expected: Any,
             model: Any, clone_skipped: bool = False) -> tuple[int, int | None]:
    """(the problem's footprint, the judge's device peak before the pass)
    after the reference's first pass: its input set, its parameters and
    buffers, and on CUDA what the pass allocated at its peak (its output
    and working memory, the reference's copy of the inputs included), on
    the CPU its output. Copies of the judge's own (the candidate's output,
    channel regions) are not the problem's. clone_skipped: the pass ran
    on the inputs themselves (is_large); a copy's worth is counted all
    the same, so the figure the engine's admission multiplies (docs/worker.md)
    keeps the margin it was set with: the judge's received output and its
    channel region are in no footprint."""
    params = 0
    for t in list(getattr(model, "parameters", lambda: [])()) + \
            list(getattr(model, "buffers", lambda: [])()):
        params += tensor_bytes(t)
    fixed = tensor_bytes(list(inputs)) + params
    if begun is None:
        return fixed + tensor_bytes(expected), None
    dev = torch.device(device)
    work = max(0, int(torch.cuda.max_memory_allocated(dev)) - begun[0])
    if clone_skipped:
        work += tensor_bytes(list(inputs))
    return fixed + max(work, tensor_bytes(expected)), begun[1]


def estimate(module: Any, model: Any) -> int | None:
    """The problem's footprint guessed before any pass, for the worker's
    admission: the model's parameters and buffers plus 3x its inputs'
    bytes (the inputs, the judge's copy, an output as large: what the
    first pass measures for KernelBench's elementwise problems), the
    inputs from get_inputs() on the meta device (shapes, no memory). None
    when get_inputs() cannot run there (it reads values, say)."""
    try:
        with torch.device("meta"):
            raw = module.get_inputs()
        inputs = tensor_bytes(list(raw))
        params = sum(tensor_bytes(t) for t in list(model.parameters()) + list(model.buffers()))
    except Exception:  # noqa: BLE001 - a guess: none rather than a failure
        return None
    return int(params + 3 * inputs)


def device_total(device: str) -> int | None:
    """The task's device memory in bytes (the host's on the CPU), or None."""
    try:
        if str(device).startswith("cuda"):
            return int(torch.cuda.mem_get_info(torch.device(device))[1])
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except Exception:  # a figure for the engine's admission: none rather than a failure
        return None
    return None


# A set of tensors over 1/LARGE_SHARE of the device's memory is large: the
# judge then keeps no whole copies of it it can do without (docs/harness-notes.md
# "Memory"). 2.5 GB on an 80 GB H100: KernelBench's 8 GiB L1Norm is large.
LARGE_SHARE = 32
_totals: dict[str, int | None] = {}


def large_bytes(device: str) -> int | None:
    """From how many bytes tensors are large on device: KGYM_LARGE_BYTES
    when set (tests set it small on the CPU), else 1/LARGE_SHARE of a CUDA
    device's memory; None (nothing is large) on the CPU, where the host's
    copies are cheap next to its memory."""
    try:
        n = int(os.environ.get("KGYM_LARGE_BYTES", ""))
    except ValueError:
        n = 0
    if n > 0:
        return n
    if not str(device).startswith("cuda"):
        return None
    key = str(device)
    if key not in _totals:
        _totals[key] = device_total(key)
    total = _totals[key]
    return total // LARGE_SHARE if total else None


def is_large(value: Any, device: str) -> bool:
    """value's tensors (tensor_bytes) are large on device (large_bytes)."""
    limit = large_bytes(device)
    return limit is not None and tensor_bytes(value) >= limit


def should_trim(need: int, limit: int | None, free: int, cached: int) -> bool:
    """Whether to give the allocator's cached free blocks back before work
    that needs `need` bytes: only for large work (limit: large_bytes), only
    when the device has fewer than need bytes free and we cache some."""
    return limit is not None and need >= limit and cached > 0 and free < need


def trim(device: str, need: int) -> bool:
    """On CUDA, torch.cuda.empty_cache() when should_trim: our cached blocks
    are memory the candidate's process cannot allocate, and a large
    allocation of ours cannot use the fragments of them. Small work costs
    no driver query; True when the cache was emptied."""
    if not str(device).startswith("cuda"):
        return False
    limit = large_bytes(device)
    if limit is None or need < limit:
        return False
    dev = torch.device(device)
    cached = int(torch.cuda.memory_reserved(dev)) - int(torch.cuda.memory_allocated(dev))
    free = int(torch.cuda.mem_get_info(dev)[0])
    if not should_trim(need, limit, free, cached):
        return False
    torch.cuda.empty_cache()
    return True


def give_back(device: str) -> bool:
    """On CUDA, torch.cuda.empty_cache() when the allocator caches free
    blocks worth a large tensor (large_bytes): after the candidate's timed
    outputs are taken, so the judge's next large work finds the device's
    memory, not this process's cache. True when the cache was emptied."""
    if not str(device).startswith("cuda"):
        return False
    limit = large_bytes(device)
    dev = torch.device(device)
    cached = int(torch.cuda.memory_reserved(dev)) - int(torch.cuda.memory_allocated(dev))
    if limit is None or cached < limit:
        return False
    torch.cuda.empty_cache()
    return True
