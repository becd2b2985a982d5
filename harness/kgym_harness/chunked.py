"""Reductions of whole tensors in chunks, so that the harness's own checks
cost one chunk of temporaries, not copies of whole tensors: torch's CPU
sum(dtype=float64) of a float32 tensor first makes a float64 copy (8 bytes
per element: 6 GiB for a 3.2 GB input), and cuBLAS's dot refuses more than
2^31 - 1 elements. CHUNK is the knob (KGYM_CHUNK_ELEMS; tests set it small
to stand for a device with little memory)."""
from __future__ import annotations

import os
from typing import Iterator

import torch


def _env_chunk() -> int:
    try:
        n = int(os.environ.get("KGYM_CHUNK_ELEMS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else 1 << 26


CHUNK = _env_chunk()  # elements per chunk: 64 Mi (512 MB of float64 temporaries)


def flat(t: torch.Tensor) -> torch.Tensor:
    """t's elements as a flat tensor (a view when t is contiguous)."""
    return t.detach().reshape(-1)


def spans(n: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of each chunk of n elements, in order."""
    step = max(1, CHUNK)
    for lo in range(0, n, step):
        yield lo, min(n, lo + step)


def sum64(t: torch.Tensor) -> float:
    """The float64 sum of t's elements, chunk by chunk (one read back)."""
    f = flat(t)
    parts = [f[lo:hi].sum(dtype=torch.float64) for lo, hi in spans(f.numel())]
    if not parts:
        return 0.0
    return float(parts[0] if len(parts) == 1 else torch.stack(parts).sum())


def count_within(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float,
                 wide: torch.dtype | None = None) -> int:
    """How many elements satisfy |g - e| <= atol + rtol * |e| (a NaN on
    either side never does; the tolerance is clamped to the largest finite
    value of the arithmetic's type, so an infinite difference never does),
    computed chunk by chunk in `wide` (default: e's dtype), one read back."""
    fe, fg = flat(e), flat(g)
    wide = wide or (fe.dtype if fe.is_floating_point() else torch.float64)
    big = torch.finfo(wide).max
    counts = []
    for lo, hi in spans(fe.numel()):
        a, b = fe[lo:hi].to(wide), fg[lo:hi].to(wide)
        tol = a.abs().mul_(rtol).add_(atol).clamp_(max=big)
        counts.append((b.sub(a).abs_() <= tol).sum())
    if not counts:
        return 0
    return int(counts[0] if len(counts) == 1 else torch.stack(counts).sum())
