"""KernelBench's own evaluation of each problem's reference as its own
candidate (ModelNew(Model): pass), in this one process, for the side by
side of bench/kernelbench/run.py. One JSON line per problem on --out.

With KernelBench's source (--kb DIR/src) importable, its
eval_kernel_against_ref runs (measure_performance, its CUDA-event timing,
the reference timed too): self-speedup = ref_runtime / runtime. Its package
imports LLM clients (openai, litellm, dotenv, tqdm) and requests that its
eval never calls, and pydantic for its result record; where one is
missing here a stand-in module is put in sys.modules (pydantic's
BaseModel: a plain record of the annotated defaults) and named in the
line ("stubbed"). Where its eval cannot be imported at all (numpy
missing, say) or there is no GPU (--cpu), a
minimal same-process timing of this file's own does what its eval does:
seeded init and inputs, the reference and the copy built alike, a
correctness check (allclose, atol = rtol = 1e-2), warm-up calls, then
timed calls (CUDA events around each call after a synchronize and an L2
flush on the GPU; perf_counter on the CPU), mean over trials; "method"
says which one ran."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import sys
import time
import traceback
import types

import torch

SELF = "\n\nclass ModelNew(Model):\n    pass\n"


class _Anything(types.ModuleType):
    """A stand-in module: any attribute is a harmless callable class."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None,
                               "__call__": lambda self, *a, **k: None})


class _Record:
    """A stand-in for pydantic's BaseModel where pydantic is missing: the
    class's annotated defaults (copied), then the keyword arguments."""

    def __init__(self, **kw):
        import copy
        for klass in reversed(type(self).__mro__):
            for k in getattr(klass, "__annotations__", {}):
                if hasattr(klass, k):
                    setattr(self, k, copy.deepcopy(getattr(klass, k)))
        for k, v in kw.items():
            setattr(self, k, v)


def import_kb_eval(src: str):
    """(KernelBench's eval module, [stubbed module names]) or (None, why)."""
    sys.path.insert(0, src)
    stubbed = []
    for name in ("dotenv", "tqdm", "openai", "litellm", "requests", "pydantic"):
        try:
            importlib.import_module(name)
        except Exception:
            mod = _Anything(name)
            if name == "dotenv":
                mod.load_dotenv = lambda *a, **k: None
            if name == "tqdm":
                mod.tqdm = lambda it=None, *a, **k: it
            if name == "pydantic":  # its eval's result record: fields with defaults
                mod.BaseModel = _Record
            sys.modules[name] = mod
            stubbed.append(name)
    try:
        kbe = importlib.import_module("kernelbench.eval")
        return kbe, stubbed
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def _seed(s: int) -> None:
    random.seed(s)
    torch.manual_seed(s)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(s)


def _to(x, dev):
    return x.to(dev) if isinstance(x, torch.Tensor) else x


def own_eval(ref_src: str, dev: str, trials: int, warmup: int) -> dict:
    """The minimal same-process evaluation (see the module's docstring)."""
    ctx: dict = {}
    exec(compile(ref_src + SELF, "<problem>", "exec"), ctx)
    _seed(42)
    init = [_to(x, dev) for x in ctx["get_init_inputs"]()]
    with torch.no_grad():
        _seed(42)
        ref = ctx["Model"](*init).to(dev)
        _seed(42)
        new = ctx["ModelNew"](*init).to(dev)
    _seed(42)
    inputs = [_to(x, dev) for x in ctx["get_inputs"]()]
    cuda = dev.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.no_grad():
        a, b = ref(*inputs), new(*inputs)
        correct = all(torch.allclose(x, y, atol=1e-2, rtol=1e-2)
                      for x, y in zip(a if isinstance(a, (list, tuple)) else [a],
                                      b if isinstance(b, (list, tuple)) else [b]))
        del a, b
        flush = torch.empty(64 << 20, dtype=torch.int32, device=dev) if cuda else None

        def timed(model) -> float:
            for _ in range(warmup):
                model(*inputs)
            sync()
            ms = []
            for _ in range(trials):
                sync()
                if cuda:
                    flush.zero_()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    model(*inputs)
                    e.record()
                    torch.cuda.synchronize()
                    ms.append(s.elapsed_time(e))
                else:
                    t0 = time.perf_counter()
                    model(*inputs)
                    ms.append((time.perf_counter() - t0) * 1e3)
            return sum(ms) / len(ms)

        runtime = timed(new)
        ref_runtime = timed(ref)
    return {"correct": bool(correct), "runtime_ms": runtime, "ref_runtime_ms": ref_runtime}


def kb_eval(kbe, ref_src: str, trials: int) -> dict:
    r = kbe.eval_kernel_against_ref(ref_src, ref_src + SELF, num_correct_trials=1,
                                    num_perf_trials=trials, measure_performance=True,
                                    timing_method="cuda_event", verbose=False, device=0,
                                    backend="cuda", check_for_excessive_speedup=True)
    if r is None:
        return {"correct": False, "error": "eval returned None (a lock or compile failure)"}
    return {"correct": bool(r.correctness), "runtime_ms": r.runtime / 1e3 if r.runtime > 0 else None,
            "ref_runtime_ms": r.ref_runtime / 1e3 if r.ref_runtime > 0 else None,
            "compiled": bool(r.compiled)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", required=True, help="KernelBench's checkout (with src/ and KernelBench/)")
    ap.add_argument("--problems", required=True, help="a file of levelN/name lines")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    dev = "cpu" if a.cpu or not torch.cuda.is_available() else "cuda:0"
    kbe, why = (None, "cpu run: KernelBench's eval needs CUDA") if dev == "cpu" else \
        import_kb_eval(os.path.join(a.kb, "src"))
    stubbed = why if kbe is not None else []
    method = "kernelbench.eval_kernel_against_ref" if kbe is not None else "own_same_process"
    print(f"kb_eval: {method}" + (f" (stubbed {', '.join(stubbed)})" if stubbed else "")
          + ("" if kbe is not None else f"; KernelBench's eval not used: {why}"), flush=True)
    root = os.path.join(a.kb, "KernelBench")
    with open(a.problems) as f, open(a.out, "a") as out:
        for line in f:
            rel = line.strip()
            if not rel:
                continue
            level, name = rel.split("/", 1)
            src = open(os.path.join(root, level, name + ".py")).read()
            t0 = time.perf_counter()
            rec = {"level": int(level[5:]), "problem": name, "method": method,
                   "stubbed": stubbed or None}
            try:
                rec.update(kb_eval(kbe, src, a.trials) if kbe is not None
                           else own_eval(src, dev, a.trials, a.warmup))
            except Exception as e:
                rec.update(correct=False, error=f"{type(e).__name__}: {str(e)[:300]}",
                           tb=traceback.format_exc()[-800:])
            if dev != "cpu":
                rec["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
                torch.cuda.empty_cache()
            r, rr = rec.get("runtime_ms"), rec.get("ref_runtime_ms")
            rec["speedup"] = rr / r if r and rr else None
            rec["seconds"] = time.perf_counter() - t0
            out.write(json.dumps(rec) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
