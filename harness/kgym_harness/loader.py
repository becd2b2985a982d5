"""Loading KernelBench programs, drawing inputs, and classifying failures.

Sources are written to real files (Triton's @jit reads its source back) and
imported under fixed module names. Every failure is turned into a plain dict
(verdict, code, phase, type, message, traceback, frames) so it can cross the
channel as data.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import random
import re
import sys
import traceback
from typing import Any

import torch

from . import chunked
from .hooks import RECORDER

KERNEL_FILE = "kernel.py"
REFERENCE_FILE = "reference.py"
MAX_MESSAGE = 4000
MAX_TRACEBACK = 8000
MAX_FRAMES = 40


def derive_seed(seed: int, label: str) -> int:
    """A seed for one purpose; the secret seed cannot be recovered from it."""
    digest = hashlib.sha256(f"kgym:{seed}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


# captured before any candidate code runs
_cpu_generator = torch.default_generator
_cuda_seed_all = torch.cuda.manual_seed_all
_cuda_initialized = torch.cuda.is_initialized
_cuda_available = torch.cuda.is_available


def set_seed(seed: int) -> None:
    """What torch.manual_seed does to the generators inputs are drawn from
    (the CPU's and every CUDA device's), plus Python's and numpy's. Not
    torch.manual_seed itself: it also seeds XPU and MTIA lazily, and on a
    machine without them each lazy seed formats a stack trace (two per
    call, ~0.16 ms of a 0.32 ms input draw on the H200). CUDA
    not yet initialised is seeded the lazy way, as torch.manual_seed does,
    only where a CUDA device exists."""
    seed = int(seed)
    if _cuda_initialized() or _cuda_available():
        _cuda_seed_all(seed)
    _cpu_generator.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


def write_source(directory: str, filename: str, code: str) -> str:
    """Writes code to directory/filename, unless the file holds it already
    (the profiler process loads from the candidate's files while the
    candidate may be importing them: never truncated under a reader)."""
    path = os.path.join(directory, filename)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == code:
                return path
    except (OSError, UnicodeDecodeError):
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(code)
    return path


def import_file(path: str, modname: str) -> Any:
    """Import path as modname. Raises whatever the code raises (SyntaxError too)."""
    with open(path, encoding="utf-8") as f:
        compile(f.read(), path, "exec")  # SyntaxError before any side effect
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device) if value.device.type != torch.device(device).type else value
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    return value


def clone_inputs(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [clone_inputs(v) for v in value]
    if isinstance(value, tuple):
        return tuple(clone_inputs(v) for v in value)
    return value


def call_get_inputs(module: Any, seed: int, device: str) -> Any:
    """get_inputs() under seed (on CUDA under `with torch.device(device)`),
    as it returned (the judge checks it before draw_inputs' conversion)."""
    set_seed(seed)
    if torch.device(device).type == "cuda":
        with torch.device(device):
            return module.get_inputs()
    return module.get_inputs()


def draw_inputs(module: Any, seed: int, device: str) -> list:
    """get_inputs() under seed, every tensor on device."""
    return list(to_device(list(call_get_inputs(module, seed, device)), device))


def fingerprint(inputs: Any) -> list:
    """Shapes, dtypes and float64 sums of an input set, for the judge to compare."""
    out = []
    for v in inputs if isinstance(inputs, (list, tuple)) else [inputs]:
        if isinstance(v, torch.Tensor):
            # summed in float64 chunk by chunk (on the CPU, torch's
            # sum(dtype=float64) makes a float64 copy of the whole tensor)
            total = (chunked.sum64(v) if v.numel() and not v.is_complex() else 0.0)
            out.append({"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""),
                        "sum": total if math.isfinite(total) else repr(total)})
        else:
            out.append({"value": repr(v)[:100]})
    return out


def fingerprints_match(a: Any, b: Any) -> bool:
    """Same shapes, dtypes and values (sums equal to 1e-9 relative)."""
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(x, dict) or not isinstance(y, dict):
            return False
        if x.get("shape") != y.get("shape") or x.get("dtype") != y.get("dtype") \
                or x.get("value") != y.get("value"):
            return False
        sx, sy = x.get("sum"), y.get("sum")
        if isinstance(sx, float) and isinstance(sy, (int, float)) and not isinstance(sy, bool):
            if abs(sx - sy) > 1e-9 * (1.0 + abs(sx)):
                return False
        elif sx != sy:
            return False
    return True


def init_inputs(module: Any, init_seed: int) -> list:
    set_seed(init_seed)
    fn = getattr(module, "get_init_inputs", None)
    return list(fn()) if fn is not None else []


def build_model(cls: Any, init: list, init_seed: int, device: str) -> Any:
    """cls(*init) under init_seed, moved to device (KernelBench's order)."""
    set_seed(init_seed)
    model = cls(*init)
    if hasattr(model, "to"):
        model = model.to(device)
    return model


def set_mode(model: Any, mode: str) -> None:
    fn = getattr(model, "train", None)
    if callable(fn):
        fn(mode == "train")


# ---- failure classification -----------------------------------------------

_RUNTIME_CAUSES = (RuntimeError, MemoryError, OSError, IndexError, ZeroDivisionError,
                   OverflowError)


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while exc is not None and id(exc) not in seen and len(out) < 10:
        out.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return out


def _is(exc: BaseException, clsname: str, modprefix: str) -> bool:
    return any(c.__name__ == clsname and c.__module__.startswith(modprefix)
               for c in type(exc).__mro__)


def safe_str(e: BaseException) -> str:
    """str(e), even for exceptions whose __str__ raises (candidate code may define them)."""
    try:
        return str(e)
    except Exception:
        return f"<{type(e).__name__} with an unprintable message>"


def _cuda_error(chain: list[BaseException]) -> str | None:
    for e in chain:
        text = safe_str(e)
        m = re.search(r"CUDA error: ([^\n]+)", text)
        if m:
            return m.group(1).strip()
        if type(e).__name__ == "AcceleratorError":
            return text.splitlines()[0] if text else "accelerator error"
    return None


def frames_of(exc: BaseException, kernel_path: str | None) -> list[dict]:
    """Frames of the whole exception chain in call order, the candidate's marked."""
    frames: list[dict] = []
    for e in _chain(exc):  # outermost first: the call path, then each cause below it
        for fs in traceback.extract_tb(e.__traceback__):
            mine = kernel_path is not None and os.path.abspath(fs.filename) == kernel_path
            frames.append({"file": KERNEL_FILE if mine else fs.filename,
                           "line": fs.lineno, "name": fs.name,
                           "source": (fs.line or "")[:200], "candidate": mine})
    if isinstance(exc, SyntaxError) and exc.filename and kernel_path and \
            os.path.abspath(exc.filename) == kernel_path:
        frames.append({"file": KERNEL_FILE, "line": exc.lineno or 0, "name": "<module>",
                       "source": (exc.text or "").rstrip()[:200], "candidate": True})
    return frames[-MAX_FRAMES:]


def _format_tb(exc: BaseException, kernel_path: str | None) -> str:
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        text = "".join(traceback.format_tb(exc.__traceback__)) + safe_str(exc)
    if kernel_path:
        text = text.replace(kernel_path, KERNEL_FILE)
    return text[-MAX_TRACEBACK:]


def _message(exc: BaseException, kernel_path: str | None) -> str:
    text = f"{type(exc).__name__}: {safe_str(exc)}"
    if kernel_path:
        text = text.replace(kernel_path, KERNEL_FILE)
    return text[:MAX_MESSAGE]


def _triton_compile_error(chain: list[BaseException]) -> bool:
    if any(_is(e, "CompilationError", "triton") for e in chain):
        return True
    for i, e in enumerate(chain):
        if _is(e, "InterpreterError", "triton"):
            cause = chain[i + 1] if i + 1 < len(chain) else None
            return cause is None or not isinstance(cause, _RUNTIME_CAUSES)
    return False


def classify(exc: BaseException, phase: str, kernel_path: str | None) -> dict:
    """Map an exception raised by candidate code in `phase` to a failure dict.

    phase is one of load, init, run, time, profile. Order matters: a failed
    extension build explains whatever it caused later; Triton compile errors
    surface at the first launch (inside forward) but are compile errors; a
    CUDA error is a runtime error wherever it happens.
    """
    chain = _chain(exc)
    info = {"phase": phase, "type": type(exc).__name__,
            "message": _message(exc, kernel_path),
            "traceback": _format_tb(exc, kernel_path),
            "frames": frames_of(exc, kernel_path)}
    cuda = _cuda_error(chain)
    if RECORDER.infra_error:  # the worker's cache, not the candidate's code
        info.update(verdict="infra_error", code="INFRA_ERROR",
                    message=RECORDER.infra_error[:MAX_MESSAGE])
    elif RECORDER.build_error:
        info.update(verdict="compile_error", code="BUILD_ERROR",
                    message=RECORDER.build_error[:MAX_MESSAGE])
    elif isinstance(exc, SyntaxError) and phase == "load":
        info.update(verdict="compile_error", code="SYNTAX_ERROR")
    elif _triton_compile_error(chain):
        info.update(verdict="compile_error", code="TRITON_COMPILE_ERROR")
    elif cuda is not None:
        info.update(verdict="runtime_error", code="CUDA_ERROR", type=f"CUDA error: {cuda}")
    elif any(isinstance(e, torch.OutOfMemoryError) for e in chain):
        info.update(verdict="runtime_error", code="OUT_OF_MEMORY")
    elif phase == "load":
        info.update(verdict="compile_error", code="IMPORT_ERROR")
    elif phase == "init":
        info.update(verdict="runtime_error", code="INIT_EXCEPTION")
    else:
        info.update(verdict="runtime_error", code="FORWARD_EXCEPTION")
    return info
