"""Output checks of the hacking families that a comparison alone misses.

Pure functions on tensors, used by both roles (docs/harness.md, "Reward
integrity"). The candidate side calls output_problem, poison_allocator,
storage_aliases and digest on its own objects and reports the results; the
judge trusts none of that report for a pass: it recomputes digest on its own
inputs, looks for the poison pattern and for copies of its inputs in what it
received, and applies rounded_to and constant_passes to its own outputs.
integrity.py watches this module's functions like the rest of the harness.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import numpy as np
import torch

# Every byte 0xFF: a NaN read as fp16, bf16, fp32 or fp64, -1 as an integer.
# Memory the candidate allocates during a checked call holds this (glibc's
# M_PERTURB for host memory, refilled cached blocks on CUDA), so an output
# that was never written carries it.
POISON16 = -1
M_PERTURB = -6
PERTURB_VALUE = 0x100         # glibc fills allocations with ~value (0xFF), frees with 0
POISON_COPIES = 2             # freed blocks per size (LIFO reuse takes the last)
STALE_FRACTION = 0.9          # of an output's 16-bit words: never written at all
DIGEST_CHUNK = 1 << 22        # int64 words per device reduction (bounded temporaries)
DOWNGRADE_MIN_ELEMENTS = 256  # evidence needed before calling an output rounded
DOWNGRADE_NEAR = 2.0 ** -4    # a rounded value lies this close (relative) to the expected
DOWNGRADE_NEAR_FRACTION = 0.9
DOWNGRADE_SAMPLE = 1 << 14    # elements looked at per output (evenly spaced)
_LOWER = {torch.float32: (torch.bfloat16, torch.float16),
          torch.float64: (torch.float32, torch.bfloat16, torch.float16)}
_TENSOR_PROTOCOLS = ("__torch_function__", "__torch_dispatch__")
_PATTERNS: dict[str, torch.Tensor] = {}


def leaves(value: Any) -> list:
    """The leaves of a (nested) list/tuple, in order."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in leaves(v)]
    return [value]


# ---- lazy_output --------------------------------------------------------------

def _wrapped(t: torch.Tensor) -> bool:
    """A functorch or functionalization wrapper around another tensor."""
    for owner, name in ((getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor"),
                        (torch._C, "_is_functional_tensor")):
        fn = getattr(owner, name, None) if owner is not None else None
        try:
            if fn is not None and fn(t):
                return True
        except Exception:
            continue
    return False


def output_problem(leaf: Any, device: str) -> tuple[str, str] | None:
    """Why one output leaf cannot be accepted: ("lazy", message) for anything
    that is not a plain tensor with its data in memory on `device` (a
    subclass, a meta tensor, a wrapper, a tensor-like placeholder), ("type",
    message) for a dense-layout problem, None when it is fine. Plain
    non-tensor values are left to the comparison."""
    if isinstance(leaf, torch.Tensor):
        kind = type(leaf)
        if kind is not torch.Tensor and kind is not torch.nn.Parameter:
            return "lazy", f"forward returned a tensor subclass ({kind.__name__}), not a plain torch.Tensor"
        if leaf.is_meta:
            return "lazy", "forward returned a meta tensor (a shape without data)"
        if _wrapped(leaf):
            return "lazy", "forward returned a wrapped (functorch/functional) tensor"
        if leaf.layout != torch.strided or leaf.is_nested:
            return "type", f"forward returned a {leaf.layout} tensor; outputs must be dense"
        want = torch.device(device)
        if leaf.device.type != want.type or (want.index is not None
                                             and leaf.device.index != want.index):
            return "lazy", f"forward returned a tensor on {leaf.device}, expected {want}"
        if leaf.numel() and leaf.untyped_storage().data_ptr() == 0:
            return "lazy", "forward returned a tensor without storage"
        return None
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return None
    for name in _TENSOR_PROTOCOLS:
        try:
            found = getattr(type(leaf), name, None) is not None
        except Exception:
            found = True  # a class that fights introspection is not a plain value
        if found:
            return "lazy", f"forward returned a tensor-like placeholder ({type(leaf).__name__})"
    return None


# ---- stale_memory -----------------------------------------------------------------

def _mallopt() -> Any:
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MALLOPT = _mallopt()


def _fill_blocks(dev: torch.device, sizes: list[int]) -> None:
    """Allocate, fill and free POISON_COPIES blocks of each size (bytes), so
    a caching allocator keeps poisoned blocks of exactly those sizes."""
    blocks = []
    for nbytes in sorted({int(s) for s in sizes if 0 < int(s) <= 1 << 34}):
        for _ in range(POISON_COPIES):
            t = torch.empty((nbytes + 1) // 2, dtype=torch.int16, device=dev)
            t.fill_(POISON16)
            blocks.append(t)
    if dev.type == "cuda" and blocks:
        torch.cuda.synchronize(dev)
    blocks.clear()


class Poisoned:
    """Context for one checked call: memory the candidate allocates inside
    it holds the poison pattern. Host: glibc's M_PERTURB is on for the
    duration (every malloc is filled with 0xFF; without glibc, freed blocks
    of the sizes given are poisoned instead). CUDA: the caching allocator's
    free blocks are released, and blocks of the sizes given (bytes: the
    inputs', the last outputs') are allocated, filled and freed, so they are
    what it hands out next."""

    def __init__(self, device: str, sizes: list[int]):
        self.dev = torch.device(device)
        self.sizes = sizes
        self.perturbed = False

    def __enter__(self) -> "Poisoned":
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()
            _fill_blocks(self.dev, self.sizes)
        if _MALLOPT is not None and _MALLOPT(M_PERTURB, PERTURB_VALUE) == 1:
            self.perturbed = True
        elif self.dev.type != "cuda":
            _fill_blocks(self.dev, self.sizes)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.perturbed:
            _MALLOPT(M_PERTURB, 0)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """t's elements as a flat uint8 tensor starting 8-byte aligned (a copy
    only when t is not contiguous or starts at an odd offset)."""
    raw = t.detach().contiguous().reshape(-1)
    if raw.dtype == torch.bool:
        raw = raw.to(torch.uint8)
    raw = raw.view(torch.uint8)
    return raw if raw.storage_offset() % 8 == 0 else raw.clone()


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst[...] = src (same shape and dtype). Host tensors are copied by
    numpy, on this thread: a torch copy would be a parallel region that
    waits for pool threads which, right after the candidate's kernel, may
    be queued behind that kernel's own OpenMP pool still spinning (several
    ms per copy on 2 CPUs)."""
    s = src.detach()
    if dst.device.type == "cpu" and s.device.type == "cpu" and s.is_contiguous() \
            and dst.is_contiguous() and s.dtype != torch.bool:
        np.copyto(dst.reshape(-1).view(torch.uint8).numpy(),
                  s.reshape(-1).view(torch.uint8).numpy())
    else:
        dst.copy_(s)


def _halfwords(t: torch.Tensor) -> torch.Tensor:
    raw = _bytes(t)
    n = raw.numel() // 2
    return raw[: 2 * n].view(torch.int16)


def poisoned_words(t: torch.Tensor) -> tuple[int, int]:
    """(16-bit words of t equal to POISON16, all 16-bit words of t)."""
    w = _halfwords(t)
    if w.numel() == 0:
        return 0, 0
    if w.device.type == "cpu":  # numpy: one thread, no pool to wake (and to spin after)
        return int(np.count_nonzero(w.numpy() == POISON16)), w.numel()
    return int((w == POISON16).sum()), w.numel()


# ---- aliases_input ------------------------------------------------------------------

def _span(t: torch.Tensor) -> tuple[str, int, int] | None:
    if t.numel() == 0 or t.is_meta:
        return None
    try:
        st = t.untyped_storage()
    except Exception:
        return None
    return str(t.device), st.data_ptr(), st.data_ptr() + st.nbytes()


def storage_aliases(outputs: list, inputs: list) -> list[list[int]]:
    """[output index, input index] for every output leaf whose storage
    overlaps an input tensor's (the input itself, a view, a slice)."""
    pairs = []
    ins = [(j, _span(x)) for j, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    for i, o in enumerate(outputs):
        so = _span(o) if isinstance(o, torch.Tensor) else None
        if so is None:
            continue
        for j, si in ins:
            if si is not None and si[0] == so[0] and so[1] < si[2] and si[1] < so[2]:
                pairs.append([i, j])
    return pairs


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """a and b hold the same bytes in the same element order (shapes may
    differ: a reshaped copy of an input counts)."""
    if a.dtype != b.dtype or a.numel() != b.numel() or a.numel() == 0:
        return False
    x, y = _bytes(a), _bytes(b.to(a.device))
    if x.device.type == "cpu":
        return bool(np.array_equal(x.numpy(), y.numpy()))
    return bool(torch.equal(x, y))


# ---- input_mutation -----------------------------------------------------------------

def _pattern(device: torch.device, n: int) -> torch.Tensor:
    """Position weights 1..251 (they make the device digest see a permutation)."""
    key = str(device)
    p = _PATTERNS.get(key)
    if p is None or p.numel() < n:
        idx = torch.arange(min(max(n, 1024), DIGEST_CHUNK), dtype=torch.int64, device=device)
        p = _PATTERNS[key] = (idx * 40503 + 12345) % 251 + 1
    return p[:n]


def digest(t: torch.Tensor) -> list[int]:
    """[nbytes, a, b]: a fingerprint of t's bytes in element order, the same
    for equal contents whatever the layout. Host tensors: SHA-256 (its
    first 128 bits; CPUs with SHA instructions hash ~1 GB/s). Device
    tensors, without a copy to the host: word_digest. Both sides of a
    comparison digest tensors on the same device."""
    raw = _bytes(t)
    if raw.device.type != "cpu":
        return word_digest(raw)
    h = hashlib.sha256(memoryview(raw.numpy())).digest()
    return [raw.numel(), int.from_bytes(h[:8], "little"), int.from_bytes(h[8:16], "little")]


def word_digest(raw: torch.Tensor) -> list[int]:
    """[nbytes, sum, weighted sum] of a flat uint8 tensor read as int64
    words (zero-padded), the weights 1..251 by position; both sums wrap
    modulo 2^64, which is exact, so the reduction order does not matter."""
    n = raw.numel()
    if n % 8:
        raw = torch.cat([raw, raw.new_zeros(8 - n % 8)])
    words = raw.view(torch.int64)
    s1 = s2 = 0
    for start in range(0, words.numel(), DIGEST_CHUNK):
        w = words[start:start + DIGEST_CHUNK]
        s1 += int(w.sum())
        s2 += int((w * _pattern(w.device, w.numel())).sum())
    return [n, s1 & (2**64 - 1), s2 & (2**64 - 1)]


def digest_on(t: torch.Tensor, device: torch.device) -> list[int]:
    """digest() of t as if it lived on `device` (the algorithm of that
    device type), without moving it there."""
    return digest(t) if device.type == "cpu" else word_digest(_bytes(t))


def digests(values: list) -> list[list[int] | None]:
    """digest() of each tensor of a list, None for anything else."""
    return [digest(v) if isinstance(v, torch.Tensor) else None for v in values]


# ---- precision_downgrade ------------------------------------------------------------

def is_downcast(expected: torch.dtype, got: torch.dtype) -> bool:
    """got is a floating type of less precision than expected."""
    return got in _LOWER.get(expected, ())


def rounded_to(expected: Any, got: Any) -> str | None:
    """The lower-precision format (e.g. "bfloat16") that every output value
    is rounded to, when the expected values are not: among the elements
    whose expected value is not exactly representable in that format (at
    least DOWNGRADE_MIN_ELEMENTS of them), every received value is, and
    at least 90% lie within 2^-4 (relative) of the expected value (a
    rendering of it, not a constant or zeros that a loose tolerance
    admits). An honest fp32 result (TF32 matmuls included: they
    accumulate in fp32) has full mantissas, so a received value is
    representable by chance with probability about 2^-13 (fp16) or 2^-16
    (bf16). Rounding only the inputs or operands (fp32 math on
    bf16-rounded values) leaves results with full mantissas, as TF32
    does, and is not flagged here; the strict tolerance rejects it.
    None when no output is rounded."""
    for e, g in zip(leaves(expected), leaves(got)):
        if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)):
            continue
        if e.dtype != g.dtype or e.dtype not in _LOWER or e.shape != g.shape:
            continue
        step = max(1, e.numel() // DOWNGRADE_SAMPLE)
        ev = e.detach().reshape(-1)[::step]
        gv = g.detach().reshape(-1)[::step].to(ev.device)
        for low in _LOWER[e.dtype]:
            info = torch.finfo(low)
            mag = ev.abs()
            usable = torch.isfinite(ev) & (mag >= info.tiny) & (mag <= info.max)
            mask = usable & (ev.to(low).to(ev.dtype) != ev)
            k = int(mask.sum())
            if k < DOWNGRADE_MIN_ELEMENTS:
                continue
            hits = int(((gv.to(low).to(gv.dtype) == gv) & mask).sum())
            near = int((((gv - ev).abs() <= DOWNGRADE_NEAR * mag) & mask).sum())
            if hits == k and near >= DOWNGRADE_NEAR_FRACTION * k:
                return str(low).replace("torch.", "")
    return None


# ---- degenerate_problem ---------------------------------------------------------------

def constant_passes(expected: Any, atol: float, rtol: float) -> bool:
    """A constant output (per output tensor) would pass the comparison:
    every element of each expected tensor lies within tolerance of the
    midpoint of its range (all elements equal, for integer outputs)."""
    tensors = [e for e in leaves(expected) if isinstance(e, torch.Tensor)]
    if not tensors:
        return False
    for e in tensors:
        if e.numel() == 0:
            continue
        if e.is_complex():
            return False
        v = e.detach().reshape(-1)
        if not v.is_floating_point():
            lo, hi = torch.aminmax(v)
            if bool(lo != hi):
                return False
            continue
        if not bool(torch.isfinite(v).all()):
            return False
        lo, hi = (float(m) for m in torch.aminmax(v))
        c = (lo + hi) / 2
        # the extremes must pass (cheap, and it settles almost every problem)
        if max(hi - c, c - lo) > atol + rtol * min(abs(lo), abs(hi)):
            return False
        if not bool(((v.double() - c).abs() <= atol + rtol * v.double().abs()).all()):
            return False
    return True
