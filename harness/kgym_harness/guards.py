"""Output checks of the hacking families that a comparison alone misses.

Pure functions on tensors, used by both roles (docs/harness-notes.md,
"Reward integrity"). The candidate side calls output_problem, poison_allocator,
storage_aliases and digest on its own objects and reports the results; the
judge trusts none of that report for a pass: it recomputes digest on its own
inputs, looks for the poison pattern and for copies of its inputs in what it
received, and applies rounded_to and constant_passes to its own outputs.
integrity.py watches this module's functions like the rest of the harness.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import re
import textwrap
import weakref
from typing import Any, Callable

import numpy as np
import torch

from . import chunked, devregion, heap

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
ROUND_RATIO = 0.25            # closer to the rounded reference than this: computed rounded
ROUND_FLOOR = 2.0 ** -20      # relative distance from the reference below which nothing is said
POINTER_MIN = 1 << 16         # an int argument of a custom call this large may be an address
ABLATE_LO, ABLATE_HI = 1e3, 1e4  # poison magnitudes: finite in every float format, fp16 too
LOW_FLOAT_DTYPES = tuple(d for d in (torch.float16, torch.bfloat16,
                                     *(getattr(torch, n, None) for n in (
                                         "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                         "float8_e5m2fnuz", "float8_e8m0fnu")))
                         if d is not None)
_TENSOR_PROTOCOLS = ("__torch_function__", "__torch_dispatch__")
_urandom = os.urandom  # the CSPRNG, as it was before the candidate's code ran
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

_MALLOPT = heap.libc_mallopt()


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


def _poison_cached_blocks(dev: torch.device) -> list[int] | None:
    """Fill every free block the CUDA caching allocator holds for dev with
    the poison pattern, where it lies (nothing is freed or allocated: a
    cudaFree/cudaMalloc per checked call synchronises the device and, with
    other evaluations on it, waits for them too); the sizes of the blocks
    filled, or None when the allocator cannot list its blocks."""
    try:
        segments = torch.cuda.memory_snapshot()
    except Exception:
        return None
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    mine = [seg for seg in segments if seg.get("device") == index]
    if any(seg.get("is_expandable") for seg in mine):
        return None  # expandable segments: a free block may be unmapped memory
    sizes = []
    for seg in mine:
        for b in seg.get("blocks", ()):
            n = int(b.get("size") or 0)
            if b.get("state") != "inactive" or n < 2 or not b.get("address"):
                continue
            raw = devregion.device_bytes(int(b["address"]), n - n % 2, str(dev))
            raw.view(torch.int16).fill_(POISON16)
            sizes.append(n)
    return sizes


class Poisoned:
    """Context for one checked call: memory the candidate allocates inside
    it holds the poison pattern. Host: glibc's M_PERTURB is on for the
    duration (every malloc is filled with 0xFF; without glibc, freed blocks
    of the sizes given are poisoned instead). CUDA: every free block of the
    caching allocator is poisoned where it lies, and where fewer than
    POISON_COPIES of them fit one of the sizes given (bytes: the inputs',
    the last outputs'), blocks of that size are allocated, filled and
    freed, so poisoned blocks are what it hands out next. (An allocator
    that cannot list its blocks gets the older way: release every cached
    block, then allocate, fill and free blocks of the sizes given.)"""

    def __init__(self, device: str, sizes: list[int]):
        self.dev = torch.device(device)
        self.sizes = sizes
        self.perturbed = False

    def __enter__(self) -> "Poisoned":
        if self.dev.type == "cuda":
            free = _poison_cached_blocks(self.dev)
            if free is None:
                torch.cuda.empty_cache()
                _fill_blocks(self.dev, self.sizes)
            else:
                short = [n for n in set(self.sizes)
                         if sum(1 for f in free if f >= n) < POISON_COPIES]
                _fill_blocks(self.dev, short)
                torch.cuda.synchronize(self.dev)
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
    # chunk by chunk: a whole comparison's bool is half the output's size
    hits = [(w[lo:hi] == POISON16).sum() for lo, hi in chunked.spans(w.numel())]
    return int(torch.stack(hits).sum()), w.numel()


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


_U64 = 2**64 - 1


def _word_sums(raw: torch.Tensor) -> torch.Tensor:
    """[sum, weighted sum] of a flat uint8 tensor read as int64 words
    (zero-padded), the weights 1..251 by position, as an int64 tensor of 2
    on raw's device, not read back. The sums wrap modulo 2^64, which is
    exact, so the reduction order does not matter."""
    n = raw.numel()
    if n % 8:
        raw = torch.cat([raw, raw.new_zeros(8 - n % 8)])
    words = raw.view(torch.int64)
    sums = []
    for start in range(0, words.numel(), DIGEST_CHUNK):
        w = words[start:start + DIGEST_CHUNK]
        sums += [w.sum(), (w * _pattern(w.device, w.numel())).sum()]
    if not sums:
        return words.new_zeros(2)
    return torch.stack(sums).view(-1, 2).sum(0)


def word_digest(raw: torch.Tensor) -> list[int]:
    """[nbytes, sum, weighted sum] of a flat uint8 tensor (_word_sums), one
    read back."""
    a, b = _word_sums(raw).tolist()
    return [raw.numel(), a & _U64, b & _U64]


def digest_on(t: torch.Tensor, device: torch.device) -> list[int]:
    """digest() of t as if it lived on `device` (the algorithm of that
    device type), without moving it there."""
    return digest(t) if device.type == "cpu" else word_digest(_bytes(t))


def digests(values: list) -> list[list[int] | None]:
    """digest() of each tensor of a list, None for anything else. The
    device digests of one device are read back together, once: every read
    back waits for the device, and with other evaluations on it, for their
    work too (one per 32 MB chunk cost ~30 waits per trial, H200)."""
    out: list[list[int] | None] = [None] * len(values)
    pending: dict[Any, list[tuple[int, int, torch.Tensor]]] = {}
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            continue
        raw = _bytes(v)
        if raw.device.type == "cpu":
            out[i] = digest(v)
        else:
            pending.setdefault(raw.device, []).append((i, raw.numel(), _word_sums(raw)))
    for items in pending.values():
        sums = torch.stack([s for _, _, s in items]).tolist()
        for (i, n, _), (a, b) in zip(items, sums):
            out[i] = [n, a & _U64, b & _U64]
    return out


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
        mag = ev.abs()
        counts = []  # per format: k, hits, near; read back once for all formats
        for low in _LOWER[e.dtype]:
            info = torch.finfo(low)
            usable = torch.isfinite(ev) & (mag >= info.tiny) & (mag <= info.max)
            mask = usable & (ev.to(low).to(ev.dtype) != ev)
            counts += [mask.sum(), ((gv.to(low).to(gv.dtype) == gv) & mask).sum(),
                       (((gv - ev).abs() <= DOWNGRADE_NEAR * mag) & mask).sum()]
        values = torch.stack(counts).tolist()
        for j, low in enumerate(_LOWER[e.dtype]):
            k, hits, near = values[3 * j:3 * j + 3]
            if k >= DOWNGRADE_MIN_ELEMENTS and hits == k and near >= DOWNGRADE_NEAR_FRACTION * k:
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
        # one read back: aminmax propagates NaN, and an infinity is an
        # extreme, so finite extremes mean every element is finite
        lo, hi = torch.stack(torch.aminmax(v)).double().tolist()
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return False
        c = (lo + hi) / 2
        # the extremes must pass (cheap, and it settles almost every problem)
        if max(hi - c, c - lo) > atol + rtol * min(abs(lo), abs(hi)):
            return False
        # chunk by chunk: a float64 copy of a whole large output would not fit
        ok = []
        for lo, hi in chunked.spans(v.numel()):
            w = v[lo:hi].double()
            ok.append(((w - c).abs() <= atol + rtol * w.abs()).all())
        if not bool(torch.stack(ok).all()):
            return False
    return True


def float_distance(a: Any, b: Any) -> float | None:
    """Euclidean distance between the floating-point leaves of two outputs
    (float64 arithmetic), or None when their structure, shapes or dtypes
    differ or they hold no floating-point tensor."""
    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return None
    total, seen = 0.0, False
    for x, y in zip(la, lb):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            continue
        if x.shape != y.shape or not x.is_floating_point() or not y.is_floating_point():
            continue
        # chunk by chunk: float64 copies of a whole large output would not fit
        fx, fy = chunked.flat(x), chunked.flat(y)
        for lo, hi in chunked.spans(fx.numel()):
            d = fx[lo:hi].double() - fy[lo:hi].to(x.device).double()
            if not bool(torch.isfinite(d).all()):
                return None
            total += float((d * d).sum())
        seen = True
    return total ** 0.5 if seen else None


def computed_rounded(got: Any, expected: Any, rounded: Any) -> bool:
    """The rounding fingerprint: got is much closer to `rounded` (the
    reference evaluated on inputs and parameters rounded to a lower
    precision) than to `expected` (the reference itself), and its distance
    from the reference is above float noise. An honest full-precision
    result is at least as far from the rounded reference as from the
    reference (its own error and the rounding's are independent); a
    kernel that rounds its operands and computes the rest in fp32 lands on
    the rounded reference up to its summation order."""
    d = float_distance(got, expected)
    d_low = float_distance(got, rounded)
    scale = float_distance(expected, [e.new_zeros(()).expand(e.shape)
                                      if isinstance(e, torch.Tensor) else e
                                      for e in leaves(expected)])
    if d is None or d_low is None or not scale:
        return False
    return d > ROUND_FLOOR * scale and d_low < ROUND_RATIO * d


# ---- precision_downgrade: direct evidence in the candidate's kernels ------------------

_LOW_NAMES = ("float16", "bfloat16", "fp16", "bf16", "half")
# Python source that computes in a low-precision float somewhere
LOW_PRECISION_CODE = re.compile(r"\b(half|float16|bfloat16|float8\w*|autocast)\b")


def low_precision_name(name: str) -> bool:
    """A dtype name (torch, triton or numpy spelling) of a float narrower than fp32."""
    n = name.lower().replace("torch.", "").replace("tl.", "")
    return n in _LOW_NAMES or n.startswith(("float8", "fp8"))


def _dtype_name(node: ast.AST, glb: dict | None) -> str | None:
    """The dtype a cast argument names: tl.float16 -> float16; a global
    bound to a Triton dtype -> its name; a string constant as it is."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and glb is not None:
        value = glb.get(node.id)
        if value is not None and hasattr(value, "primitive_bitwidth"):
            return str(value)
    return None


def triton_low_casts(src: str, glb: dict | None = None) -> list[str]:
    """Low-precision float types a Triton function's source converts to:
    x.to(tl.float16), tl.cast(x, tl.bfloat16), dtype=/out_dtype= of
    tl.zeros, tl.full, tl.dot. Comparisons (x.dtype == tl.float16) are
    not conversions and are not reported."""
    try:
        tree = ast.parse(textwrap.dedent(src))
    except (SyntaxError, ValueError):
        return []
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        args: list[ast.AST] = []
        if fname in ("to", "cast", "astype"):
            args += node.args[:2]
        args += [k.value for k in node.keywords if k.arg in ("dtype", "out_dtype", "dst_ty")]
        for a in args:
            name = _dtype_name(a, glb)
            if name and low_precision_name(name):
                found.add(name.replace("tl.", ""))
    return sorted(found)


_CXX_LOW = re.compile(r"(?<![\w:])((?:at|c10)::(?:Half|BFloat16)\b|"
                      r"(?:at::|c10::|torch::|ScalarType::)?k(?:Half|BFloat16)\b|"
                      r"__half2?\b|half2\b|__nv_bfloat162?\b|__nv_fp8\w*|"
                      r"__float2half\w*|__float2bfloat16\w*|__half2float\b)")
_CXX_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_CXX_DISPATCH = re.compile(r"AT_DISPATCH\w*\s*\([^\[]*")  # a dispatch macro's type list


def cxx_low_precision(text: str) -> list[str]:
    """Half/bfloat16/fp8 types and conversions a C++/CUDA source uses
    (__half, half2, __nv_bfloat16, at::Half, at::BFloat16, kHalf,
    kBFloat16, __float2half, ...). Comments, #include lines and the type
    lists of AT_DISPATCH macros (which name fp16 without computing in it
    on an fp32 problem) are ignored."""
    text = _CXX_COMMENT.sub(" ", text)
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#include"))
    text = _CXX_DISPATCH.sub(" ", text)
    return sorted({m.group(1) for m in _CXX_LOW.finditer(text)})


# ---- no_custom_kernel: the ablation forward -----------------------------------------------

def _storage_view(t: torch.Tensor) -> torch.Tensor:
    """A flat tensor of t's dtype over the whole of t's storage."""
    st = t.untyped_storage()
    n = st.nbytes() // max(1, t.element_size())
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(st, 0, (n,))


def _register_mode(ablation: "Ablation") -> Any:
    from torch.overrides import TorchFunctionMode

    class Register(TorchFunctionMode):
        """Notes every tensor a torch function returns during the ablation
        forward, so a raw address passed to an extension can be mapped
        back to its tensor. A function mode, not a dispatch mode: the
        first dispatch mode of a process imports torch._dynamo (2-3 s)."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for leaf in leaves(out):
                ablation.add(leaf)
            return out
    return Register()


class Ablation:
    """The ablation forward (no_custom_kernel): every custom kernel's
    results are replaced, right after it returns, by large finite random
    values. Results are the tensors an extension call returns and the
    memory a call or a Triton launch changed: tensor arguments, and
    tensors whose storage holds an address passed as an int (a raw
    extension's data_ptr() arguments; tensors from the forward's inputs,
    the model's parameters, buffers and tensor attributes, and every
    tensor a torch function returned during the forward; a
    garbage-collector scan as the last resort). Floats get large finite
    values (so a `token * 0` still shows), integers random values (an
    argmax kernel's indices are its result; random indices may crash a
    later kernel, and a forward that raises or dies is never a finding),
    booleans coin flips. If the output is still right, no custom
    kernel contributed to it. An address that maps to no tensor makes the
    run inconclusive (`unresolved`). Every replaced storage is put back by
    restore() once the output has been copied, so the model's caches stay
    as the kernels left them. With only (launch names), just the calls of
    those names are replaced: the per-kernel ablation behind the judged
    coverage (stages/integrity.py, coverage_ablation)."""

    def __init__(self, device: str, roots: list, only: set[str] | None = None):
        self.dev = torch.device(device)
        self.only = only
        self.spans: list[tuple[int, int, Any]] = []
        self.calls = 0
        self.poisoned = 0
        self.unresolved = 0
        self.depth = 0
        self.scanned = False
        self.maps: list[tuple[int, int]] | None = None
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(int.from_bytes(_urandom(8), "little") >> 1)
        self.streams = {0}
        if self.dev.type == "cuda":
            self.streams.add(int(torch.cuda.current_stream(self.dev).cuda_stream))
        for r in roots:
            self.add(r)
        self.mode = _register_mode(self)

    def add(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        span = _span(t)
        if span is not None:
            self.spans.append((span[1], span[2], weakref.ref(t)))

    def __enter__(self) -> "Ablation":
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)

    def _resolve(self, addr: int) -> torch.Tensor | None:
        for start, end, ref in reversed(self.spans):
            if start <= addr < end:
                t = ref()
                if t is not None and _span(t) is not None and _span(t)[1] == start:
                    return t
        return None

    def _scan(self) -> None:
        """The last resort: every tensor (and CUDA stream) the process holds."""
        import gc
        self.scanned = True
        stream_type = getattr(torch.cuda, "Stream", None)
        for o in gc.get_objects():
            if isinstance(o, torch.Tensor):
                self.add(o)
            elif stream_type is not None and isinstance(o, stream_type):
                try:
                    self.streams.add(int(o.cuda_stream))
                except Exception:
                    pass

    def _mapped(self, addr: int) -> bool:
        """addr lies in a writable mapping of this process (/proc/self/maps):
        an int that maps to no tensor is then memory the ablation cannot
        see, else a plain number (a size, a seed)."""
        if self.maps is None:
            self.maps = []
            try:
                with open("/proc/self/maps", encoding="utf-8") as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) >= 2 and parts[1].startswith("rw"):
                            lo, hi = parts[0].split("-")
                            self.maps.append((int(lo, 16), int(hi, 16)))
            except (OSError, ValueError):
                pass
        return any(lo <= addr < hi for lo, hi in self.maps)

    def _targets(self, values: list) -> tuple[list[torch.Tensor], bool]:
        """(storages a call may write, flat views; whether an address
        argument could not be mapped to a tensor)."""
        out: dict[tuple[str, int], torch.Tensor] = {}
        unresolved = False
        for v in values:
            if isinstance(v, torch.Tensor):
                t: torch.Tensor | None = v
            elif isinstance(v, int) and not isinstance(v, bool) and POINTER_MIN <= v < 1 << 64 \
                    and v not in self.streams:
                t = self._resolve(v)
                if t is None and not self.scanned and self._mapped(v):
                    self._scan()
                    if v in self.streams:
                        continue
                    t = self._resolve(v)
                if t is None:
                    unresolved = unresolved or self._mapped(v)
                    continue
            else:
                continue
            span = _span(t)
            if span is not None:
                out.setdefault((span[0], span[1]), _storage_view(t))
        return list(out.values()), unresolved

    def _poison(self, flat: torch.Tensor) -> None:
        """Replace a storage's contents: floats (and complex parts) by
        +-[ABLATE_LO, ABLATE_HI], integers by random values in [0, 2^15),
        booleans by coin flips (values drawn on the generator's device)."""
        if flat.numel() == 0:
            return
        target = torch.view_as_real(flat).reshape(-1) if flat.is_complex() else flat
        self.saved.append((flat, flat.clone()))
        n = target.numel()
        if target.is_floating_point():
            v = torch.empty(n, dtype=torch.float32, device=self.dev)
            v.uniform_(ABLATE_LO, ABLATE_HI, generator=self.gen)
            sign = torch.empty_like(v).bernoulli_(0.5, generator=self.gen).mul_(2).sub_(1)
            target.copy_(v.mul_(sign))
        elif target.dtype == torch.bool:
            target.copy_(torch.empty(n, device=self.dev).bernoulli_(0.5, generator=self.gen) > 0)
        else:
            v = torch.empty(n, dtype=torch.int64, device=self.dev)
            target.copy_(v.random_(0, 1 << 15, generator=self.gen))
        self.poisoned += 1

    def call(self, fn: Callable[[], Any], args: tuple, kwargs: dict, name: str = "") -> Any:
        """Run one custom call (fn, launched as name) and replace what it
        produced; with only, a call of another name runs untouched."""
        if self.depth or (self.only is not None and name not in self.only):
            return fn()
        self.calls += 1
        values = [x for v in list(args) + list(kwargs.values()) for x in leaves(v)]
        with torch.no_grad():
            targets, unresolved = self._targets(values)
            before = [digest(t) for t in targets]
        self.depth += 1
        try:
            out = fn()
        finally:
            self.depth -= 1
        if unresolved:
            self.unresolved += 1
        with torch.no_grad():
            if self.dev.type == "cuda":
                torch.cuda.synchronize(self.dev)
            hit = {_span(t)[:2]: t for t, d in zip(targets, before) if digest(t) != d}
            for o in leaves(out):
                if isinstance(o, torch.Tensor) and _span(o) is not None:
                    hit.setdefault(_span(o)[:2], _storage_view(o))
            for flat in hit.values():
                self._poison(flat)
        return out

    def restore(self) -> None:
        """Put every replaced storage back as the kernels left it (in call
        order, so the last write wins)."""
        with torch.no_grad():
            for flat, copy in self.saved:
                flat.copy_(copy)
        self.saved.clear()

    def report(self) -> dict:
        return {"calls": self.calls, "poisoned": self.poisoned, "unresolved": self.unresolved}


def model_tensors(model: Any) -> list:
    """Parameters, buffers and tensor attributes (one level into lists,
    tuples and dicts) of every submodule of a model."""
    out: list = []
    mods = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    for m in mods:
        out += list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
        for v in vars(m).values():
            if isinstance(v, dict):
                v = list(v.values())
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(x, torch.Tensor):
                    out.append(x)
    return out
