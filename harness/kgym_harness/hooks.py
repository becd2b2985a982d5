"""Run-time recording of custom kernel launches (the paper's hacking check).

Installed in the candidate process before the candidate's code is imported:

* Triton: the launch path is wrapped wherever this Triton has it
  (JITFunction.run, the interpreter's InterpretedFunction.run, a compiled
  kernel's direct launcher, and Autotuner/Heuristics.run, which only count
  when nothing inside them did). Found by feature detection, not versions.
* torch.utils.cpp_extension.load_inline / load: every build goes to a
  directory keyed by the sha256 of its sources and flags (so repeats do not
  rebuild), a failed build is remembered (so the error is classified as a
  build error even if it surfaces later), and the returned module is wrapped
  so every call into one of its functions is recorded and timed.

The recorder lives in the candidate's own address space, so a determined
candidate can forge records; the judge treats the records as evidence of
absence (no launch = decoy), and the profiler's device kernel names are the
cross-check on the GPU.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import time
from typing import Any, Callable

from .paths import ext_cache_root

_perf_ns = time.perf_counter_ns
MAX_RECORDS = 64


class LaunchRecorder:
    """Custom launches seen since the last take(): names, grids, time inside."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.count = 0
        self.depth = 0
        # light: only count launches (no grid, no clock). The timed loop runs
        # light so the hooks add next to nothing to what is measured.
        self.light = False
        self.ns_by_name: dict[str, int] = {}
        self.calls_by_name: dict[str, int] = {}
        self.build_error: str | None = None
        self.infra_error: str | None = None  # the build cache, not the candidate
        self.triton_names: set[str] = set()
        self.ext_names: set[str] = set()
        # precision_downgrade evidence, kept for the whole process: low-
        # precision float arguments of custom launches, casts in Triton
        # sources, half/bfloat16 types in extension sources
        self.low_precision: set[str] = set()
        # guards.Ablation while the judge's ablation forward runs, else None
        self.ablation: Any = None
        # ahead.compile_ahead's child: Triton launches compile and do not run
        self.compile_only = False
        self.compiled = 0

    def full(self) -> bool:
        return len(self.records) >= MAX_RECORDS

    def record(self, kind: str, name: str, grid: Any = None) -> None:
        self.count += 1
        if len(self.records) < MAX_RECORDS:
            self.records.append({"kind": kind, "name": name, "grid": grid})
        if kind == "triton":
            self.triton_names.add(name)
        else:
            self.ext_names.add(name)

    def add_time(self, name: str, ns: int) -> None:
        self.ns_by_name[name] = self.ns_by_name.get(name, 0) + ns
        self.calls_by_name[name] = self.calls_by_name.get(name, 0) + 1

    def take(self) -> dict:
        """Return and clear what was recorded since the last take()
        (low_precision is never cleared)."""
        out = {"count": self.count, "records": self.records,
               "low_precision": sorted(self.low_precision)[:8]}
        self.records, self.count = [], 0
        return out

    def take_times(self) -> tuple[dict[str, int], dict[str, int]]:
        out = (self.ns_by_name, self.calls_by_name)
        self.ns_by_name, self.calls_by_name = {}, {}
        return out


RECORDER = LaunchRecorder()


class CompileOnlyStop(Exception):
    """A launch that cannot be compiled without running (an autotuner's
    benchmark, a compiled kernel launched directly): ahead.py's dry run
    stops there."""


# ---- Triton -----------------------------------------------------------------

def _grid_dims(grid: Any) -> list[int] | None:
    if isinstance(grid, int) and not isinstance(grid, bool):
        return [grid]
    if isinstance(grid, (tuple, list)) and all(isinstance(g, int) for g in grid):
        return [int(g) for g in grid]
    return None


_SIGNATURES: dict[int, tuple[Any, inspect.Signature]] = {}


def _signature(py: Any) -> inspect.Signature:
    hit = _SIGNATURES.get(id(py))
    if hit is None or hit[0] is not py:
        hit = (py, inspect.signature(py))
        _SIGNATURES[id(py)] = hit
    return hit[1]


def _resolve_grid(fn: Any, grid: Any, args: tuple, kwargs: dict) -> Any:
    """The launch grid as a list of ints, or "callable" if it cannot be known."""
    if not callable(grid):
        return _grid_dims(grid)
    try:
        py = getattr(fn, "fn", None) or fn
        sig = _signature(py)
        named = {k: v for k, v in kwargs.items() if k in sig.parameters}
        bound = sig.bind_partial(*args, **named)
        bound.apply_defaults()
        meta = dict(bound.arguments)
        meta.update(kwargs)
        return _grid_dims(grid(meta)) or "callable"
    except Exception:
        return "callable"


def _kernel_name(obj: Any) -> str:
    for attr in ("__name__", "_fn_name", "name"):
        v = getattr(obj, attr, None)
        if isinstance(v, str) and v:
            return v
    inner = getattr(obj, "fn", None)
    return getattr(inner, "__name__", type(obj).__name__)


def _is_empty_grid(grid: Any) -> bool:
    return isinstance(grid, list) and any(g <= 0 for g in grid)


def _wrap_launch(orig: Callable) -> Callable:
    """Wrap a KernelInterface.run: record non-warmup launches with their grid."""
    @functools.wraps(orig)
    def run(self, *args, **kwargs):
        if kwargs.get("warmup", False):
            return orig(self, *args, **kwargs)
        if RECORDER.compile_only:  # ahead.py: compile into the cache, launch nothing
            RECORDER.compiled += 1
            return orig(self, *args, **dict(kwargs, warmup=True))
        if RECORDER.light:
            RECORDER.count += 1
            return orig(self, *args, **kwargs)
        name = _kernel_name(self)
        grid = _resolve_grid(self, kwargs.get("grid"), args, kwargs)
        if not _is_empty_grid(grid):
            RECORDER.record("triton", name, grid)
        _note_precision(name, args, kwargs, self)
        RECORDER.depth += 1
        t0 = _perf_ns()
        try:
            if RECORDER.ablation is not None:
                return RECORDER.ablation.call(lambda: orig(self, *args, **kwargs), args,
                                              kwargs, name)
            return orig(self, *args, **kwargs)
        finally:
            RECORDER.depth -= 1
            RECORDER.add_time(name, _perf_ns() - t0)
    run.__kgym_wrapped__ = True
    return run


def _wrap_outer(orig: Callable) -> Callable:
    """Wrap Autotuner/Heuristics.run: count one launch only if no inner hook did."""
    @functools.wraps(orig)
    def run(self, *args, **kwargs):
        if RECORDER.compile_only and len(getattr(self, "configs", ())) > 1:
            raise CompileOnlyStop("an autotuner benchmarks its configs on the device")
        before = RECORDER.count
        out = orig(self, *args, **kwargs)
        if RECORDER.count == before and not kwargs.get("warmup", False):
            grid = _grid_dims(kwargs.get("grid"))
            if not _is_empty_grid(grid):
                RECORDER.record("triton", _kernel_name(self), grid)
        return out
    run.__kgym_wrapped__ = True
    return run


def _wrap_compiled_getitem(orig: Callable) -> Callable:
    """Wrap CompiledKernel.__getitem__ (a direct launch of a compiled kernel)."""
    @functools.wraps(orig)
    def getitem(self, grid):
        if RECORDER.compile_only:
            raise CompileOnlyStop("a compiled kernel launched directly")
        runner = orig(self, grid)
        name = getattr(self, "name", None) or "compiled_kernel"

        def launch(*args, **kwargs):
            dims = _grid_dims(grid)
            if not _is_empty_grid(dims):
                RECORDER.record("triton", name, dims)
            if RECORDER.light:
                return runner(*args, **kwargs)
            _note_precision(name, args, kwargs, None)
            if RECORDER.ablation is not None:
                return RECORDER.ablation.call(lambda: runner(*args, **kwargs), args, kwargs,
                                              name)
            return runner(*args, **kwargs)
        return launch
    getitem.__kgym_wrapped__ = True
    return getitem


_SCANNED: dict[int, Any] = {}


def _triton_source(fn: Any) -> tuple[str, dict | None]:
    """A Triton function's Python source and globals (JITFunction.src, or
    the interpreter's wrapped function)."""
    py = getattr(fn, "fn", None)
    src = getattr(fn, "src", None)
    if not isinstance(src, str) and py is not None:
        try:
            src = inspect.getsource(py)
        except (OSError, TypeError):
            src = None
    return (src if isinstance(src, str) else ""), getattr(py, "__globals__", None)


def _note_precision(name: str, args: tuple, kwargs: dict, fn: Any) -> None:
    """precision_downgrade evidence of one launch (checked calls only):
    float16/bfloat16/fp8 tensors among its arguments, a low-precision
    Triton dtype passed as a constexpr, and (once per Triton function)
    conversions to one in its source."""
    from . import guards
    for v in list(args) + list(kwargs.values()):
        dtype = getattr(v, "dtype", None)
        if dtype in guards.LOW_FLOAT_DTYPES:
            RECORDER.low_precision.add(f"{name}: a {str(dtype).replace('torch.', '')} argument")
        elif hasattr(v, "primitive_bitwidth") and guards.low_precision_name(str(v)):
            RECORDER.low_precision.add(f"{name}: a {v} dtype argument")
    if fn is not None and _SCANNED.get(id(fn)) is not fn:
        _SCANNED[id(fn)] = fn
        src, glb = _triton_source(fn)
        for low in guards.triton_low_casts(src, glb):
            RECORDER.low_precision.add(f"{name}: converts to {low}")


def _note_source_precision(kind: str, name: str, args: tuple, kwargs: dict) -> None:
    """precision_downgrade evidence of an extension build: half, bfloat16
    or fp8 types in its C++/CUDA sources (load_inline strings, load files)."""
    from . import guards
    texts: list[str] = []
    if kind == "load_inline":
        values = list(args[:2]) + [kwargs.get("cpp_sources"), kwargs.get("cuda_sources")]
        for v in values:
            texts += [v] if isinstance(v, str) else [x for x in (v or []) if isinstance(x, str)]
    else:
        srcs = args[0] if args else kwargs.get("sources")
        for p in ([srcs] if isinstance(srcs, (str, os.PathLike)) else list(srcs or [])):
            try:
                with open(p, encoding="utf-8", errors="replace") as f:
                    texts.append(f.read(1 << 20))
            except (OSError, TypeError):
                pass
    found = sorted({t for text in texts for t in guards.cxx_low_precision(text)})
    if found:
        RECORDER.low_precision.add(f"extension {name}: uses {', '.join(found[:4])}")


def _patch(cls: Any, attr: str, wrapper: Callable[[Callable], Callable]) -> bool:
    orig = cls.__dict__.get(attr)
    if orig is None or getattr(orig, "__kgym_wrapped__", False):
        return False
    setattr(cls, attr, wrapper(orig))
    return True


def install_triton_hooks() -> list[str]:
    """Wrap every Triton launch path present; returns what was wrapped."""
    try:
        import triton  # noqa: F401
    except Exception:
        return []
    done = []
    targets = [
        ("triton.runtime.jit", "JITFunction", "run", _wrap_launch),
        ("triton.runtime.interpreter", "InterpretedFunction", "run", _wrap_launch),
        ("triton.runtime.autotuner", "Autotuner", "run", _wrap_outer),
        ("triton.runtime.autotuner", "Heuristics", "run", _wrap_outer),
        ("triton.compiler.compiler", "CompiledKernel", "__getitem__", _wrap_compiled_getitem),
    ]
    for modname, clsname, attr, wrapper in targets:
        try:
            mod = __import__(modname, fromlist=[clsname])
        except Exception:
            continue
        cls = getattr(mod, clsname, None)
        if cls is not None and _patch(cls, attr, wrapper):
            done.append(f"{clsname}.{attr}")
    return done


def triton_jit_hooked() -> bool:
    """Real (compiled, not interpreted) Triton kernels, their launch hooked."""
    try:
        from triton.runtime.jit import JITFunction
    except Exception:
        return False
    return (getattr(JITFunction.__dict__.get("run"), "__kgym_wrapped__", False)
            and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"))


def interpret_language_functions() -> int:
    """Make Triton's own @jit library functions usable under the interpreter.

    triton.jit returns an InterpretedFunction only if TRITON_INTERPRET is
    set when the decorator runs. The zygote imports triton before the
    candidate sets it, so library functions written with @jit
    (tl.zeros, tl.sum, ...) are plain JITFunctions, which refuse to be
    called inside an interpreted kernel. Replace each of them, wherever
    triton.language holds it (module globals, tensor methods), by an
    InterpretedFunction of the same Python function. Returns how many.
    """
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except Exception:
        return 0
    owners: list[dict] = []
    for name, mod in list(sys.modules.items()):
        if mod is not None and (name == "triton.language" or name.startswith("triton.language.")):
            owners.append(vars(mod))
    core = sys.modules.get("triton.language.core")
    for clsname in ("tensor",):
        cls = getattr(core, clsname, None) if core is not None else None
        if isinstance(cls, type):
            owners.append(cls)  # type: ignore[arg-type]
    done: dict[int, Any] = {}
    for owner in owners:
        items = list(vars(owner).items()) if isinstance(owner, type) else list(owner.items())
        for attr, value in items:
            if type(value) is not JITFunction:  # noqa: E721 (exact type)
                continue
            new = done.get(id(value))
            if new is None:
                try:
                    new = InterpretedFunction(value.fn)
                except Exception:
                    continue
                done[id(value)] = new
            if isinstance(owner, type):
                setattr(owner, attr, new)
            else:
                owner[attr] = new
    return len(done)


# ---- torch.utils.cpp_extension ----------------------------------------------

class ExtensionProxy:
    """Stands in for an extension module; records and times each function call."""

    def __init__(self, module: Any, ext_name: str):
        object.__setattr__(self, "_kgym_module", module)
        object.__setattr__(self, "_kgym_name", ext_name)

    def __getattr__(self, attr: str) -> Any:
        module = object.__getattribute__(self, "_kgym_module")
        value = getattr(module, attr)
        if attr.startswith("__") or not callable(value) or isinstance(value, type):
            return value
        wrapped = _recording_call(value, attr)
        object.__setattr__(self, attr, wrapped)  # later lookups skip __getattr__
        return wrapped

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_kgym_module"), attr, value)

    def __dir__(self) -> list[str]:
        return dir(object.__getattribute__(self, "_kgym_module"))

    def __repr__(self) -> str:
        return f"<kgym extension {object.__getattribute__(self, '_kgym_name')}>"


def _recording_call(fn: Callable, name: str) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if RECORDER.light:
            RECORDER.count += 1
            return fn(*args, **kwargs)
        RECORDER.record("ext", name)
        _note_precision(name, args, kwargs, None)
        t0 = _perf_ns()
        try:
            if RECORDER.ablation is not None:
                return RECORDER.ablation.call(lambda: fn(*args, **kwargs), args, kwargs, name)
            return fn(*args, **kwargs)
        finally:
            RECORDER.add_time(name, _perf_ns() - t0)
    return call


def _read_sources(sources: Any) -> list[str]:
    paths = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources or [])
    out = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                out.append(hashlib.sha256(f.read()).hexdigest())
        except OSError:
            out.append(f"missing:{p}")
    return out


def build_key(kind: str, name: str, args: tuple, kwargs: dict) -> str:
    """sha256 over everything that changes the built module (not paths)."""
    import torch
    desc: dict[str, Any] = {"kind": kind, "name": name, "torch": torch.__version__,
                            "python": sys.version.split()[0]}
    params = dict(kwargs)
    positional = list(args)
    if kind == "load":
        if positional:
            positional[0] = _read_sources(positional[0])
        if "sources" in params:
            params["sources"] = _read_sources(params["sources"])
    params["args"] = positional
    params.pop("build_directory", None)
    params.pop("verbose", None)
    desc["params"] = params
    blob = json.dumps(desc, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def _build_dir(key: str) -> str:
    """The build directory of one key; raises PermissionError (recorded as
    the worker's problem) when the cache cannot be written."""
    path = os.path.join(ext_cache_root(), key)
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable", path)
    except OSError as e:
        RECORDER.infra_error = f"the extension build cache is unusable: {e}"
        raise
    return path


def _cache_permission_error(exc: BaseException) -> bool:
    """A PermissionError on a path inside the extension cache, anywhere in
    the exception chain (not one on the candidate's own files)."""
    root = os.path.abspath(ext_cache_root())
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, PermissionError):
            name = exc.filename if isinstance(exc.filename, str) else ""
            if name and os.path.abspath(name).startswith(root + os.sep):
                return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _trim_build_log(text: str, build_dir: str | None, limit: int = 4000) -> str:
    """The compiler's diagnostics, without the build directory's path."""
    if build_dir:
        text = text.replace(build_dir + os.sep, "")
    lines = text.splitlines()
    keep = [ln for ln in lines if "error:" in ln or "fatal error" in ln]
    if not keep:
        keep = [ln for ln in lines if "error" in ln.lower()] or lines[-30:]
    return "\n".join(keep[:20])[:limit]


def _wrap_builder(orig: Callable, kind: str) -> Callable:
    @functools.wraps(orig)
    def builder(name, *args, **kwargs):
        key = build_key(kind, str(name), args, kwargs)
        _note_source_precision(kind, str(name), args, kwargs)
        path = _build_dir(key)
        kwargs["build_directory"] = path
        try:
            module = orig(name, *args, **kwargs)
        except BaseException as e:
            if _cache_permission_error(e):
                RECORDER.infra_error = f"the extension build cache is unusable: {e}"
            else:
                RECORDER.build_error = (f"building extension {name!r} failed:\n"
                                        f"{_trim_build_log(str(e), path)}")
            raise
        if module is None or isinstance(module, str) or not hasattr(module, "__dict__"):
            return module
        return ExtensionProxy(module, str(name))
    builder.__kgym_wrapped__ = True
    return builder


def install_extension_hooks() -> list[str]:
    """Wrap torch.utils.cpp_extension.load_inline and load."""
    import torch.utils.cpp_extension as ce
    done = []
    for attr, kind in (("load_inline", "load_inline"), ("load", "load")):
        orig = getattr(ce, attr, None)
        if orig is not None and not getattr(orig, "__kgym_wrapped__", False):
            setattr(ce, attr, _wrap_builder(orig, kind))
            done.append(f"cpp_extension.{attr}")
    return done
