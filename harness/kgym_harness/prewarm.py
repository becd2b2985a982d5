"""What a warm spare's candidate does before its task (spare.run_warm_judge
drives it; docs/worker.md): everything a first evaluation in a fresh
process pays once and that does not depend on the task. On a GPU: the CUDA
context and cuBLAS handle, Triton's driver and launcher start-up (one tiny
kernel, compiled once into the candidate cache, then only loaded), and the
heavy torch.utils.cpp_extension import the extension hooks need; in both
processes (preload) the device code of the operations the harness runs in
a checked call, which CUDA otherwise loads lazily at their first use, under
the device lock (260-380 ms of the first call's hold on the H200). None of
it runs in the zygote: CUDA must never start before the fork."""

from __future__ import annotations

import importlib
import time
from typing import Any, Callable

import torch

from . import loader

_KERNEL: list = []  # the tiny kernel, built once per process


def _tiny_triton() -> object | None:
    if _KERNEL:
        return _KERNEL[0]
    try:
        import triton
        import triton.language as tl
    except Exception:  # triton is optional
        return None

    @triton.jit
    def kgym_warm_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
    _KERNEL.append(kgym_warm_kernel)
    return kgym_warm_kernel


def warm_prep(device: str) -> dict:
    """The part of a spare's warm-up that runs no device work, so it needs
    no device lock: the cpp_extension import (seconds when cold) and the
    tiny Triton kernel compiled (or loaded from the cache) without a launch.
    Returns what failed, by part."""
    errors: dict[str, str] = {}
    try:
        # (importlib: an `import torch.utils...` statement in a function
        # makes torch a local name of it)
        importlib.import_module("torch.utils.cpp_extension")
    except Exception as e:
        errors["cpp_extension"] = str(e)[:200]
    kernel = _tiny_triton()
    if kernel is not None and torch.device(device).type == "cuda":
        try:
            kernel.warmup(torch.float32, 1024, BLOCK=1024, grid=(1,))  # type: ignore[attr-defined]
        except Exception as e:
            errors["triton_compile"] = str(e)[:200]
    return errors


def _ops(*fns: Callable[[], Any]) -> tuple[Callable[[], Any], ...]:
    return fns


def _generator(dev: Any) -> Any:
    """A generator of the preload's own for its random operations (None on
    the meta device, which has none): the process's default generators,
    which inputs are drawn from, are not advanced by it."""
    if torch.device(dev).type == "meta":
        return None
    return torch.Generator(device=dev).manual_seed(0)


def _buffers(made: list | None) -> Callable[..., Any]:
    """How the preload's tables make their tensors: zeroed at once, or,
    given a list (a spare's set-up, which must launch nothing: _table),
    uninitialised and appended to it, for preload() to zero under the
    device lock before its first unit."""
    def make(*shape: int, device: Any, dtype: Any = None) -> Any:
        if made is None:
            return torch.zeros(*shape, device=device, dtype=dtype)
        t = torch.empty(*shape, device=device, dtype=dtype)
        made.append(t)
        return t
    return make


def _harness_ops(dev: Any, made: list | None = None) -> dict[str, tuple[Callable[[], Any], ...]]:
    """The operation families the harness runs on a device in a checked
    call (input draws, digests, poison, copies, comparisons, audits), each
    operation on small zeroed tensors of its own (valid indices, defined
    values; what they compute is thrown away), random ones from the
    preload's own generator. No harness function runs (one that caches a
    tensor, as guards._pattern does, would keep the preload's). One
    operation per entry: a spare loads each under its own hold of the
    device lock (a family in one hold took up to 222 ms on the H200)."""
    n = 4096
    z = _buffers(made)
    f = z(n, device=dev)
    h = z(n, device=dev, dtype=torch.float16)
    b = z(n, device=dev, dtype=torch.bfloat16)
    i = z(n, device=dev, dtype=torch.int64)
    u = z(n, device=dev, dtype=torch.uint8)
    m = z(n, device=dev, dtype=torch.bool)
    idx = z(16, device=dev, dtype=torch.int64)
    g = _generator(dev)
    return {
        "arith": _ops(lambda: f + f, lambda: f - f, lambda: f * f, lambda: f / f, lambda: -f,
                      lambda: i * 3 + 1, lambda: i + i, lambda: i % 7, lambda: h + h,
                      lambda: b * b, lambda: f * 0.5, lambda: f + 0.5),
        "compare": _ops(lambda: f <= f, lambda: f < f, lambda: f == f, lambda: f != f,
                        lambda: f >= f, lambda: i == i, lambda: u == u, lambda: h == h,
                        lambda: b == b),
        "logic": _ops(lambda: m & m, lambda: m | m, lambda: ~m, lambda: i ^ i, lambda: i & i,
                      lambda: i | i, lambda: i >> 1, lambda: i << 1),
        "unary": _ops(lambda: f.abs(), lambda: h.abs(), lambda: b.abs(),
                      lambda: torch.isfinite(f), lambda: torch.isnan(f),
                      lambda: torch.isinf(f), lambda: f.sign(), lambda: f.clamp(max=1.0)),
        "where": _ops(lambda: torch.where(m, f, f), lambda: f.masked_fill(m, 0.0)),
        "reduce": _ops(lambda: f.sum(), lambda: i.sum(), lambda: m.all(), lambda: m.any(),
                       lambda: f.amax(), lambda: f.max(), lambda: torch.aminmax(f),
                       lambda: f.mean(), lambda: m.sum(), lambda: f.argmax(), lambda: h.sum(),
                       lambda: b.sum(), lambda: f.sum(dtype=torch.float64)),
        "shape": _ops(lambda: torch.cat([f, f]), lambda: torch.stack([i, i]),
                      lambda: f.clone(), lambda: f.flip(0),
                      lambda: u.view(n // 8, 8).t().contiguous()),
        "fill": _ops(lambda: torch.zeros(n, device=dev), lambda: torch.ones(n, device=dev),
                     lambda: torch.empty(n, device=dev).fill_(1.0), lambda: torch.zeros_like(u)),
        "copy": _ops(lambda: f.to(torch.float16), lambda: f.to(torch.bfloat16),
                     lambda: f.to(torch.float64), lambda: h.float(), lambda: b.float(),
                     lambda: f.to(torch.int64), lambda: m.to(torch.uint8),
                     lambda: u.to(torch.int64), lambda: f.view(torch.uint8).clone(),
                     lambda: h.to(torch.bfloat16)),
        "index": _ops(lambda: f[idx], lambda: f.index_select(0, idx), lambda: f.gather(0, idx),
                      lambda: f.take(idx), lambda: i.index_select(0, idx)),
        "arange": _ops(lambda: torch.arange(n, device=dev, dtype=torch.int64)),
        "random": _ops(lambda: torch.randn(n, device=dev, generator=g),
                       lambda: torch.rand(n, device=dev, generator=g),
                       lambda: torch.randint(0, 7, (n,), device=dev, generator=g),
                       lambda: torch.randn(n, device=dev, dtype=torch.float16, generator=g),
                       lambda: torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)),
        "scan": _ops(lambda: f.cumsum(0), lambda: torch.sort(f), lambda: f.topk(4)),
    }


def _common_ops(dev: Any, made: list | None = None) -> dict[str, tuple[Callable[[], Any], ...]]:
    """What reference models use most (activations, normalisations, the
    cuBLAS products): the judge's first reference forward pays for these
    otherwise."""
    import torch.nn.functional as F
    z = _buffers(made)
    x = z(8, 64, 64, device=dev)
    w = z(64, 64, device=dev)
    bias = z(64, device=dev)
    mats = [z(64, 64, device=dev, dtype=dt)
            for dt in (torch.float32, torch.float16, torch.bfloat16)]
    return {
        "activations": _ops(lambda: F.relu(x), lambda: F.gelu(x),
                            lambda: F.gelu(x, approximate="tanh"), lambda: F.silu(x),
                            lambda: torch.sigmoid(x), lambda: torch.tanh(x),
                            lambda: F.leaky_relu(x), lambda: F.hardtanh(x)),
        "math": _ops(lambda: torch.exp(x), lambda: torch.log(x), lambda: torch.sqrt(x),
                     lambda: torch.rsqrt(x), lambda: torch.pow(x, 2.0), lambda: x.clamp(0, 1)),
        "softmax": _ops(lambda: torch.softmax(x, -1), lambda: torch.log_softmax(x, -1)),
        "norm": _ops(lambda: F.layer_norm(x, (64,)), lambda: F.layer_norm(x, (64,), w[0], bias),
                     lambda: x.mean(-1, keepdim=True), lambda: x.var(-1, keepdim=True)),
        "blas": _ops(*[(lambda a=a: a @ a) for a in mats], lambda: F.linear(x, w, bias),
                     lambda: torch.bmm(x, x)),
    }


# what a spare loads, in both processes: the families a task's first checked
# call uses (input draws, digests, poison, copies, comparisons). Not cuBLAS or
# the Triton launch (warm_device runs both for real right after, under the
# same lock), nor the usual reference operations (_common_ops): with them
# and cuBLAS, 19 families under the lock, a spare held the device 1.0-1.7 s
# in all and 4-way throughput did not improve (H200:
# docs/worker.md has the run).
SPARE_FAMILIES = ("arith", "compare", "logic", "unary", "where", "reduce", "shape", "fill",
                  "copy", "index", "arange", "random")


def _families(dev: Any, made: list | None = None) -> dict[str, tuple[Callable[[], Any], ...]]:
    """Every family preload() knows, by name, as its operations."""
    fams = dict(_harness_ops(dev, made))
    fams.update(_common_ops(dev, made))
    kernel = _tiny_triton()
    if kernel is not None:
        x = _buffers(made)(1024, device=dev)
        fams["triton"] = (lambda: kernel[(1,)](x, x.numel(), BLOCK=1024),)  # type: ignore[index]
    return fams


def units(families: Any = SPARE_FAMILIES) -> list[str]:
    """The preload units of the families named: "family/k", one per
    operation (what one hold of the device lock loads). Counted on the meta
    device: no CUDA needed, nothing allocated."""
    table = _families(torch.device("meta"))
    return [f"{name}/{k}" for name in families if name in table
            for k in range(len(table[name]))]


def spare_unit(name: Any) -> bool:
    """Whether name is a unit (or a whole family) of SPARE_FAMILIES: what a
    candidate agrees to preload when its judge asks."""
    return isinstance(name, str) and name.split("/", 1)[0] in SPARE_FAMILIES


_TABLES: dict[str, dict] = {}  # device -> units, made once
_UNZEROED: dict[str, list] = {}  # device -> the table's tensors not zeroed yet
_LOADED: set[str] = set()


def _table(dev: Any) -> dict:
    """This process's preload units, made once: cuBLAS's handle and the
    small tensors each unit works on, allocated but not yet zeroed (that
    launches a kernel, which preload() does under the lock)."""
    key = str(dev)
    if key not in _TABLES:
        torch.cuda.current_blas_handle()
        made: list = []
        _TABLES[key] = {f"{name}/{k}": fn for name, ops in _families(dev, made).items()
                        for k, fn in enumerate(ops)}
        _UNZEROED[key] = made
    return _TABLES[key]


def _zero_table(dev: Any) -> None:
    """The table's tensors zeroed (once; the caller holds the device lock),
    so that every unit runs on defined values and valid indices."""
    made = _UNZEROED.pop(str(dev), None)
    if made:
        for t in made:
            t.zero_()
        torch.cuda.synchronize(dev)


def preload_setup(device: str) -> dict:
    """What preload() needs before its first unit, made now: cuBLAS's
    handle and device allocations (the table of _table). None of it
    launches a kernel or loads device code, so a spare does it in its
    unlocked "prep" part: done inside the first unit's hold of the device
    lock it made that hold 250-1200 ms long at concurrency 4 on the H200
    (57 ms alone), and a timing phase elsewhere waited for it. Returns
    what failed."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return {}
    try:
        _table(dev)
    except Exception as e:
        return {"preload_setup": f"{type(e).__name__}: {loader.safe_str(e)}"[:160]}
    return {}


def preload(device: str, names: Any = None, took: dict | None = None) -> dict:
    """Load the device code that a first checked call would otherwise load
    (CUDA loads torch's modules lazily, 15-25 ms each on the H200): the
    units named ("family/k", or a family's name for all of its units;
    everything when names is None), once per process, each by running its
    operation once on the table's small zeroed tensors (a few microseconds
    of device work; the launch loads the module) and waiting for it, so
    that a unit's device work ends inside its hold. Run, not captured into
    a CUDA graph never launched: a capture takes a 2 MiB segment of a
    private pool from the driver (cudaMalloc, 80 per process, kept to its
    exit), and the 78 units take 296-422 ms run against 520-1240 ms
    captured (H200, alone and 8 processes at once:
    docs/worker.md has the run). Loading a module is device
    activity: with another process's timing phase running it made 4 of 4
    honest Linear+ReLU evaluations side_stream (H200:
    docs/worker.md has the run), so a spare runs
    it under the device lock, one unit per hold. Returns what failed, by
    unit; took gets the time (ms)."""
    t0 = time.perf_counter()
    errors: dict[str, str] = {}
    dev = torch.device(device)
    if dev.type != "cuda":
        return errors
    import warnings
    try:
        table = _table(dev)
        _zero_table(dev)
        if names is None:
            wanted = list(table)
        else:
            wanted = [u for n in names for u in
                      ([n] if n in table else [u for u in table if u.split("/")[0] == n])]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in wanted:
                if name in _LOADED:
                    continue
                try:
                    table[name]()
                    torch.cuda.synchronize(dev)
                    _LOADED.add(name)
                except Exception as e:
                    errors[name] = f"{type(e).__name__}: {loader.safe_str(e)}"[:160]
    except Exception as e:
        errors["preload"] = f"{type(e).__name__}: {loader.safe_str(e)}"[:160]
    if took is not None:
        took["preload"] = round(took.get("preload", 0.0) + (time.perf_counter() - t0) * 1e3, 1)
    return errors


def warm_device(device: str, took: dict | None = None) -> dict:
    """The part that runs on the device (the judge holds the device lock
    shared): a cuBLAS matmul (handle and kernels) and one launch of the tiny
    Triton kernel (module load, launcher). Returns what failed, by part;
    took (if given) gets each part's time in ms."""
    errors: dict[str, str] = {}
    took = took if took is not None else {}
    dev = torch.device(device)
    t0 = time.perf_counter()
    try:
        a = torch.ones(64, 64, device=dev)
        (a @ a).sum().item()
    except Exception as e:
        errors["cublas"] = str(e)[:200]
    t1 = time.perf_counter()
    took["cublas"] = round((t1 - t0) * 1e3, 1)
    kernel = _tiny_triton()
    if kernel is not None:
        try:
            x = torch.zeros(1024, device=dev)
            kernel[(1,)](x, x.numel(), BLOCK=1024)  # type: ignore[index]
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        except Exception as e:
            errors["triton"] = str(e)[:200]
    took["triton"] = round((time.perf_counter() - t1) * 1e3, 1)
    return errors
