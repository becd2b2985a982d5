"""Peak memory of this process, for each result's `memory` (docs/harness.md
"Memory"): the host's peak resident set (getrusage's ru_maxrss, which on
Linux is in KiB and counts the process since its fork, the warm-up and
the zygote's pages included) and, on CUDA, torch's peak of allocated
device memory (torch.cuda.max_memory_allocated: the caching allocator's
blocks in use, not its cache nor the context). The judge reports its own;
the candidate's figures come in its replies and are its claim."""
from __future__ import annotations

import resource
from typing import Any

import torch


def peak() -> dict:
    """{"host_peak_bytes": int, "device_peak_bytes": int or None (no CUDA
    in use in this process)}."""
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    dev = None
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            dev = int(torch.cuda.max_memory_allocated())
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


def footprint(device: str, before: dict) -> int | None:
    """The problem's own memory as the judge saw it over the reference's
    first pass: on CUDA the peak of allocated device memory (the model, an
    input set, the reference's output and working memory, and the
    candidate's output it holds), on the CPU the growth of the peak
    resident set since `before` (peak() at the judge's start)."""
    now = peak()
    if str(device).startswith("cuda"):
        return now["device_peak_bytes"]
    return max(0, now["host_peak_bytes"] - before["host_peak_bytes"])


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
