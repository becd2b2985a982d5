"""Check project solutions against their reference problems, in a fresh process.

Usage: python tests/problems/check_solution.py JOBS.json

JOBS.json holds a list of jobs; for each one this prints one JSON line:

    {"problem": path, "solution": path, "backend": "cpu" | "triton" | "cuda",
     "small": bool,        # use get_small_inputs()/get_small_init_inputs()
     "seeds": [0, 1], "atol": 1e-4, "rtol": 1e-4,
     "device": "cpu" | "cuda",
     "time": bool}         # also time reference and solution (median ms)

The result line carries ok, error, max_abs_err, launches per mode and, when
timed, ref_ms and new_ms. A failing job never stops the others.

What is checked, per seed: Model and ModelNew built from the same seeded
init inputs hold identical parameters in the same order; outputs agree
within atol/rtol in eval mode (no grad) and in train mode (grad enabled);
outputs are plain tensors of the reference's dtype and shape that do not
share storage with an input; inputs are left unchanged; and at least one
custom kernel launch (a Triton kernel, or a call into a compiled extension
module) happens in each mode.

Triton kernels run through Triton's interpreter when TRITON_INTERPRET=1 is
in the environment; the caller sets it, since it must precede importing
triton. This is a test tool, not the harness: it trusts the solution.
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable

import torch


class _Counter:
    def __init__(self) -> None:
        self.n = 0


class _CountingKernel:
    """Stands in for a Triton kernel object; counts kernel[grid](...) launches."""

    def __init__(self, kernel: Any, counter: _Counter) -> None:
        self._kernel = kernel
        self._counter = counter

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        launch = self._kernel[grid]

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counter.n += 1
            return launch(*args, **kwargs)

        return counted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


class _CountingExtension:
    """Stands in for a compiled extension module; counts calls of its functions."""

    def __init__(self, module: types.ModuleType, counter: _Counter) -> None:
        self._module = module
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counter.n += 1
            return attr(*args, **kwargs)

        return counted


def _import_file(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _instrument(module: types.ModuleType, counter: _Counter) -> int:
    """Wrap the module's Triton kernels and extension modules; return how many."""
    wrapped = 0
    kernel_types: tuple[type, ...] = ()
    if "triton" in sys.modules:
        from triton.runtime.jit import KernelInterface

        kernel_types = (KernelInterface,)
    for name, obj in list(vars(module).items()):
        if kernel_types and isinstance(obj, kernel_types):
            setattr(module, name, _CountingKernel(obj, counter))
            wrapped += 1
        elif isinstance(obj, types.ModuleType) and str(getattr(obj, "__file__", "")).endswith(".so"):
            setattr(module, name, _CountingExtension(obj, counter))
            wrapped += 1
    return wrapped


def _inputs(ref: types.ModuleType, small: bool) -> tuple[list[Any], list[Any]]:
    get_init = getattr(ref, "get_small_init_inputs", ref.get_init_inputs) if small else ref.get_init_inputs
    get_in = getattr(ref, "get_small_inputs") if small else ref.get_inputs
    return list(get_init()), list(get_in())


def _clone(xs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn: Callable[[], Any], device: str, warmup: int = 3, iters: int = 20) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_job(job: dict[str, Any], index: int) -> dict[str, Any]:
    result: dict[str, Any] = {"problem": job["problem"], "solution": job["solution"],
                              "backend": job["backend"], "small": job.get("small", False), "ok": False}
    device = job.get("device", "cpu")
    atol, rtol = job.get("atol", 1e-4), job.get("rtol", 1e-4)
    t0 = time.perf_counter()
    ref = _import_file(Path(job["problem"]), f"kgym_ref_{index}")
    new = _import_file(Path(job["solution"]), f"kgym_new_{index}")
    result["import_s"] = round(time.perf_counter() - t0, 2)
    counter = _Counter()
    if _instrument(new, counter) == 0:
        raise AssertionError("solution holds no Triton kernel or extension module at module level")
    max_err = 0.0
    launches: dict[str, int] = {}
    for seed in job.get("seeds", [0, 1]):
        torch.manual_seed(seed)
        init, _ = _inputs(ref, job.get("small", False))
        torch.manual_seed(seed)
        model = ref.Model(*init).to(device)
        torch.manual_seed(seed)
        cand = new.ModelNew(*init).to(device)
        ps, qs = list(model.parameters()), list(cand.parameters())
        if len(ps) != len(qs) or any(p.shape != q.shape or not torch.equal(p, q) for p, q in zip(ps, qs)):
            raise AssertionError("ModelNew's parameters differ from Model's (order, shape or value)")
        torch.manual_seed(seed + 1000)
        _, inputs = _inputs(ref, job.get("small", False))
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
        for mode in ("eval", "train"):
            model.train(mode == "train")
            cand.train(mode == "train")
            with torch.set_grad_enabled(mode == "train"):
                expected = model(*_clone(inputs))
                args = _clone(inputs)
                counter.n = 0
                got = cand(*args)
                _sync(device)
                launches[mode] = counter.n
            if counter.n == 0:
                raise AssertionError(f"no custom kernel launch in {mode} mode")
            for a, x in zip(args, inputs):
                if isinstance(x, torch.Tensor) and not torch.equal(a, x):
                    raise AssertionError("solution mutated an input")
            if type(got) is not torch.Tensor:
                raise AssertionError(f"output is {type(got).__name__}, not a plain torch.Tensor")
            if any(isinstance(a, torch.Tensor) and _same_storage(got, a) for a in args):
                raise AssertionError("output shares storage with an input")
            if got.dtype != expected.dtype or got.shape != expected.shape:
                raise AssertionError(f"output {got.dtype}{tuple(got.shape)} != reference "
                                     f"{expected.dtype}{tuple(expected.shape)}")
            err = (got.detach().double() - expected.detach().double()).abs()
            max_err = max(max_err, float(err.max()) if err.numel() else 0.0)
            if not torch.allclose(got.detach(), expected.detach(), atol=atol, rtol=rtol):
                raise AssertionError(f"mismatch in {mode} mode (seed {seed}): max abs err {float(err.max()):.3g}")
    result["max_abs_err"] = max_err
    result["launches"] = launches
    if job.get("time"):
        with torch.no_grad():
            model.eval()
            cand.eval()
            result["ref_ms"] = round(_median_ms(lambda: model(*inputs), device), 4)
            result["new_ms"] = round(_median_ms(lambda: cand(*inputs), device), 4)
    result["ok"] = True
    return result


def main(argv: list[str]) -> int:
    jobs = json.loads(Path(argv[1]).read_text())
    for i, job in enumerate(jobs):
        t0 = time.perf_counter()
        try:
            result = run_job(job, i)
        except Exception as e:  # a failing job is reported, the others still run
            result = {"problem": job["problem"], "solution": job["solution"], "backend": job["backend"],
                      "small": job.get("small", False), "ok": False,
                      "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
        result["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
