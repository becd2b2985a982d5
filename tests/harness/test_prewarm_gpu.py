"""prewarm.preload on a CUDA device (skipped without one; `make test-gpu`
runs it on the H200): in a fresh process with CUDA's lazy module loading,
it loads the device code of the harness's operations by running each once
on small zeroed tensors, leaving the default generators alone, so that a
task's first checked call loads nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
HARNESS = os.path.join(os.path.dirname(__file__), "..", "..", "harness")

PROBE = r"""
import json, time, torch
from kgym_harness import compare, guards, prewarm
dev = torch.device("cuda:0")
torch.zeros(1, device=dev)  # the context
t = time.perf_counter()
setup = prewarm.preload_setup("cuda:0")  # unlocked in a spare: the table, before any unit
setup_ms = round((time.perf_counter() - t) * 1e3, 2)
made = "cuda:0" in prewarm._TABLES
took = {}
rng = torch.cuda.get_rng_state(dev)
segments = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0)
errors = prewarm.preload("cuda:0", took=took)  # every family
# the default generator (inputs are drawn from it) is where it was, and
# the units took next to nothing from the driver
untouched = bool(torch.equal(rng, torch.cuda.get_rng_state(dev)))
segments = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0) - segments
def first(fn):
    torch.cuda.synchronize(dev)
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize(dev)
    return round((time.perf_counter() - t) * 1e3, 2)
a = torch.arange(1 << 20, device=dev, dtype=torch.float32)
ms = {"digests": first(lambda: guards.digests([a])),
      "compare (mismatch)": first(lambda: compare.compare_outputs(a, a + 1.0, 1e-3, 1e-3))}
# another shape than preload's may pick another cuBLAS kernel: shown, not checked
big = first(lambda: a.view(1024, 1024) @ a.view(1024, 1024))
print(json.dumps({"setup": setup, "setup_ms": setup_ms, "made": made, "errors": errors, "segments": segments, "untouched": untouched, "ms": ms,
                  "matmul_1024_ms": big,
                  "took": took, "digest": guards.digests([a])[0]}))
"""


def test_preload_loads_without_running_and_first_calls_are_then_cheap():
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS), CUDA_MODULE_LOADING="LAZY")
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    print(out)  # preload's time and the 1024x1024 matmul's first call, for the log
    assert out["setup"] == {} and out["made"] is True, out
    assert out["errors"] == {} and out["untouched"] is True, out
    # a graph capture per unit would take a 2 MiB segment each (80 in all)
    assert out["segments"] <= 4, out
    # without it each first use costs 15-25 ms
    # (docs/worker.md has the run)
    assert all(v < 10.0 for v in out["ms"].values()), out["ms"]
    # and what the harness computes afterwards is what it computes without it
    from kgym_harness import guards
    a = torch.arange(1 << 20, device="cuda:0", dtype=torch.float32)
    assert out["digest"] == guards.digests([a])[0]


ZYGOTE = r"""
import json, os, time
from kgym_harness import zygote, cpustat
info = zygote._preimport()  # cpp_extension and Triton's code generator, CUDA untouched
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    cpustat.mark_fork()
    import torch
    from kgym_harness import prewarm
    torch.cuda.set_device(0)
    t = time.perf_counter()
    failed = prewarm.warm_prep("cuda:0")
    prep_ms = round((time.perf_counter() - t) * 1e3, 1)
    failed.update(prewarm.warm_device("cuda:0"))
    os.write(w, json.dumps({"failed": failed, "prep_ms": prep_ms,
                            "imported": cpustat.imported()}).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 65536) or b"{}")
os.waitpid(pid, 0)
print(json.dumps({"info": info, "child": child, "after": zygote.driver_fds()}))
"""


def test_the_zygotes_imports_leave_cuda_to_its_children(tmp_path):
    """On a GPU machine the zygote's pre-imports (cpp_extension, whose
    import asks torch.cuda.is_available(); Triton's code generator) open no
    driver device, and a child forked afterwards starts CUDA, compiles and
    launches the tiny Triton kernel and runs cuBLAS, importing little of
    its own."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS),
               TRITON_CACHE_DIR=str(tmp_path / "triton"))
    p = subprocess.run([sys.executable, "-c", ZYGOTE], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    print(out)  # the zygote's import times and the child's prep, for the log
    info = out["info"]
    assert "import_errors" not in info and info["driver_fds"] == 0 and out["after"] == 0, out
    assert out["child"].get("failed") == {}, out
    assert sum(out["child"]["imported"].values()) < 15, out["child"]
