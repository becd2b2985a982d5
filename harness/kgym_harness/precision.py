"""precision_downgrade by measurement: the judge's float64 reference.

Judge-only (docs/harness-notes.md, "precision_downgrade"). On a full-precision
problem the judge evaluates the reference once more in float64 (trial 0)
and compares two errors it computes itself: the float32 reference's own,
e_ref = ||expected - ref64||, and the candidate's, e_c = ||got - ref64||
(Euclidean over the float outputs, float64 arithmetic). A candidate that
computes with fewer mantissa bits than fp32 (TF32 matmuls or convolutions,
bf16/fp16 operands, reduced-precision reductions), whatever flag or
environment variable made it do so, has e_c far above e_ref. The
candidate's output is the only thing of the candidate's that this reads.

Also the precision of the judge's own reference: TF32 off for cuBLAS and
cuDNN (cuDNN's default is on) unless the request says allow_tf32.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from . import compare

# e_c > KAPPA * e_ref and e_c > FLOOR * ||ref64||: precision_downgrade.
# Measured relative errors (||y - ref64|| / ||ref64||) of a 128x256x192
# Linear on the CPU: fp32 2.0e-7, TF32-rounded operands 2.9e-4, fp16
# operands 3.6e-4, bf16 2.4e-3 to 2.9e-3 (docs/harness-notes.md has the H200's).
# An honest fp32 kernel with another summation order stays within a few x
# of e_ref and orders of magnitude under FLOOR; TF32 (unit roundoff 2^-11)
# lies about 10x above FLOOR and 1000x above an fp32 e_ref.
KAPPA = 32.0
FLOOR = 2.0 ** -15
# An error above CEIL of the norm is no lower-precision evaluation of the
# reference (fp8 operands lose about 2^-4): only a problem whose tolerance
# admits near-anything lets such an output pass (degenerate_problem).
CEIL = 0.25
MAX_REF_S = 10.0   # a float32 reference forward slower than this: skipped (cost)
KEEP_CACHE = 1 << 30  # device memory the float64 pass may leave cached in the judge


def set_reference_precision(allow_tf32: bool) -> None:
    """The judge's own process: fp32 matmuls and convolutions in full fp32
    (TF32 only with allow_tf32), for the reference's correctness and timing
    alike. Never called in the candidate's process for any check."""
    torch.backends.cuda.matmul.allow_tf32 = bool(allow_tf32)
    torch.backends.cudnn.allow_tf32 = bool(allow_tf32)
    torch.set_float32_matmul_precision("high" if allow_tf32 else "highest")


def process_defaults() -> None:
    """Every role's process starts with cuDNN TF32 off like cuBLAS's (torch
    turns it on by default for cuDNN only), so that an honest candidate
    that calls torch's convolution computes in fp32 as the reference does.
    A default, not a defence: the candidate may change it and is then
    judged by the numbers (measure below)."""
    torch.backends.cudnn.allow_tf32 = False


def _double(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return t.double() if t.is_floating_point() else t.clone()
    return t


def _nbytes(value: Any) -> int:
    return sum(x.numel() * x.element_size() for x in compare.flatten(value)
               if isinstance(x, torch.Tensor))


def float64_need(model: torch.nn.Module, inputs: list, expected: Any,
                 state: dict | None) -> int:
    """Bytes the float64 pass allocates at most, about: float64 copies of
    the inputs and of the parameters and buffers, the float64 output, and
    errors()' per-output temporaries (four float64 arrays of the largest
    output). Sizes in float32 count twice."""
    if state is None:
        state = dict(list(model.named_parameters()) + list(model.named_buffers()))
    outs = [x for x in compare.flatten(expected) if isinstance(x, torch.Tensor)]
    widest = max((x.numel() for x in outs), default=0)
    return (2 * (_nbytes(list(inputs)) + _nbytes(list(state.values())) + _nbytes(expected))
            + 4 * 8 * widest)


def free_bytes(expected: Any) -> int | None:
    """The free memory of the outputs' device (the host's available memory
    on the CPU), or None when it cannot be read."""
    try:
        dev = next((x.device for x in compare.flatten(expected)
                    if isinstance(x, torch.Tensor)), torch.device("cpu"))
        if dev.type == "cuda":
            free, _ = torch.cuda.mem_get_info(dev)
            return int(free + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except Exception:  # no figure: the pass runs and an out of memory skips it
        return None
    return None


def reference64(model: torch.nn.Module, inputs: list, state: dict | None = None,
                call: Callable[[], Any] | None = None) -> Any:
    """The reference in float64: float inputs, parameters and buffers as
    float64 copies (the model itself untouched, torch.func.functional_call),
    no grad. state: the parameters/buffers to use (a snapshot taken before
    the float32 forward changed any buffer), else the model's own."""
    if state is None:
        state = dict(list(model.named_parameters()) + list(model.named_buffers()))
    state64 = {k: _double(v) for k, v in state.items()}
    args = tuple(_double(x) for x in inputs)
    with torch.no_grad():
        return torch.func.functional_call(model, state64, args)


def _floats(value: Any) -> list:
    return [x for x in compare.flatten(value) if isinstance(x, torch.Tensor)]


def errors(got: Any, expected: Any, ref64: Any) -> tuple[float, float, float] | str:
    """(e_ref, e_c, ||ref64||) over the float outputs where the reference is
    finite in both precisions, or why they cannot be had."""
    g, e, r = _floats(got), _floats(expected), _floats(ref64)
    if not (len(g) == len(e) == len(r)):
        return "the float64 reference's outputs differ in structure"
    e_ref = e_c = norm = 0.0
    seen = False
    for a, b, c in zip(g, e, r):
        if not b.is_floating_point():
            continue
        if not c.is_floating_point() or a.shape != b.shape or c.shape != b.shape:
            return "the float64 reference's outputs differ in shape or type"
        c = c.detach().double()
        ok = torch.isfinite(b.detach()).to(c.device) & torch.isfinite(c)
        zero = c.new_zeros(())
        d_ref = torch.where(ok, b.detach().to(c.device).double() - c, zero)
        d_c = torch.where(ok, a.detach().to(c.device).double() - c, zero)
        sums = torch.stack([d_ref.square().sum(), d_c.square().sum(),
                            torch.where(ok, c, zero).square().sum(), ok.sum().double()])
        s_ref, s_c, s_norm, n_ok = sums.tolist()  # one synchronisation
        if not n_ok:
            continue
        if s_c != s_c or s_c == float("inf"):
            return "the output is not finite where the reference is"
        e_ref, e_c, norm, seen = e_ref + s_ref, e_c + s_c, norm + s_norm, True
    if not seen:
        return "no finite float output"
    return e_ref ** 0.5, e_c ** 0.5, norm ** 0.5


def verdict(e_ref: float, e_c: float, norm: float,
            kappa: float = KAPPA, floor: float = FLOOR) -> bool:
    """precision_downgrade: far above the reference's own error and above
    float noise (an exact reference, e_ref = 0, needs the floor), yet an
    evaluation of the reference at all (CEIL)."""
    return e_c > kappa * e_ref and e_c > floor * norm and e_c <= CEIL * norm


def measure(model: torch.nn.Module, inputs: list, got: Any, expected: Any,
            state: dict | None, sync: Callable[[], None], ref_s: float,
            allow_tf32: bool = False) -> dict:
    """checks.precision64: {e_ref, e_c, ratio, kappa, floor, ms, downgrade}
    or {skipped: why}. Never raises: a float64 reference that cannot run
    (no double kernel, out of memory) skips the check."""
    out: dict[str, Any] = {"kappa": KAPPA, "floor": FLOOR, "ceil": CEIL}
    if allow_tf32:
        out["allow_tf32"] = True
    if ref_s > MAX_REF_S:
        out["skipped"] = f"the float32 reference took {ref_s:.1f} s (> {MAX_REF_S:g} s)"
        return out
    t0 = time.perf_counter()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    need, free = float64_need(model, inputs, expected, state), free_bytes(expected)
    if free is not None and need > free:
        out["skipped"] = (f"memory: the float64 pass needs about {need / 2**30:.1f} GiB, "
                          f"{free / 2**30:.1f} GiB free")
        return out
    reserved = torch.cuda.memory_reserved() if cuda else 0
    ref64 = None
    try:
        ref64 = reference64(model, inputs, state)
        sync()
        got_err = errors(got, expected, ref64)
    except torch.cuda.OutOfMemoryError:
        got_err = "out of memory"
    except Exception as e:  # an op without a float64 kernel, a dtype check, ...
        got_err = f"{type(e).__name__}: {str(e)[:160]}"
    finally:
        ref64 = None
        # what the float64 pass left cached goes back to the device when it
        # is much (the candidate's process shares it), or after running out
        if cuda and (got_err == "out of memory"
                     or torch.cuda.memory_reserved() - reserved > KEEP_CACHE):
            torch.cuda.empty_cache()
    out["ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    if isinstance(got_err, str):
        out["skipped"] = got_err
        return out
    e_ref, e_c, norm = got_err
    out.update(e_ref=e_ref, e_c=e_c, norm=norm,
               ratio=(e_c / e_ref) if e_ref > 0 else (None if e_c == 0 else float("inf")),
               downgrade=verdict(e_ref, e_c, norm))
    if out["ratio"] == float("inf"):
        out["ratio"] = None  # JSON has no infinity; e_ref = 0 says it
    return out
