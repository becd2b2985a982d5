"""ahead.compile_ahead on the CPU: the fork, the meta forward, Triton
launches turned into compiles (a real compile for an H200, sm_90, with the
ptxas Triton ships), the outcomes, and the parent left as it was.

Each case runs in a fresh interpreter with Triton's interpreter off, as in
a candidate on a GPU; Triton's driver is the child's stand-in (no GPU
here). On the H200, make test-gpu's pytest step runs a whole evaluation
with it (test_channel_ipc_gpu.py) and the concurrency step measures it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kit

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness")

PROBE = r"""
import glob, json, os, sys
from triton.backends.compiler import GPUTarget
from kgym_harness import ahead, hooks, loader
hooks.install_triton_hooks()
ref = loader.import_file(sys.argv[1], "kgym_reference")
mod = loader.import_file(sys.argv[2], "kgym_kernel")
res = ahead.compile_ahead(mod.ModelNew, loader.init_inputs(ref, 0), ref, float(sys.argv[3]),
                          info=(0, GPUTarget("cuda", 90, 32), 0))
res["cubins"] = sorted(os.path.basename(p) for p in
                       glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "*", "*.cubin")))
res["parent_state"] = getattr(mod, "STATE", None)
res["compile_only_here"] = hooks.RECORDER.compile_only
print(json.dumps(res))
"""


def _ahead(tmp_path, kernel_code: str, budget: float = 120.0) -> dict:
    (tmp_path / "ref.py").write_text(kit.REF)
    (tmp_path / "kernel.py").write_text(kernel_code)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS),
               TRITON_CACHE_DIR=str(tmp_path / "triton"))
    env.pop("TRITON_INTERPRET", None)
    p = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "ref.py"),
                        str(tmp_path / "kernel.py"), str(budget)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_kernels_of_a_meta_forward_are_compiled_into_the_cache(tmp_path):
    r = _ahead(tmp_path, kit.triton_kernel())
    print(r)
    assert r["kernels"] == 1 and r["cubins"] == ["add_relu_scale_kernel.cubin"], r
    # the compile needs no device; whatever the stand-in driver lacks
    # afterwards (a module load, which only a launch does) ends the child
    # after the cache was written
    assert r["outcome"] == "done" or r["outcome"].startswith("raised"), r
    assert r["compile_only_here"] is False  # the mode was the child's alone
    assert set(r["phases_ms"]) == {"fork", "start", "run", "exit"}
    assert all(v >= 0 for v in r["phases_ms"].values()), r


def test_a_forward_that_cannot_run_on_meta_tensors_only_stops_the_dry_run(tmp_path):
    body = """
        if float(a.sum()) > 1e30:  # a read back: no value on the meta device
            return a
        return add_relu_scale(a, b, self.scale)
    """
    r = _ahead(tmp_path, kit.triton_kernel(kit.model_new(body)))
    assert r["outcome"].startswith("raised") and r["kernels"] == 0 and r["cubins"] == [], r


def test_the_dry_run_changes_nothing_in_the_candidate_process(tmp_path):
    body = """
        global STATE
        STATE = "set by the dry run"
        return add_relu_scale(a, b, self.scale)
    """
    r = _ahead(tmp_path, "STATE = None\n" + kit.triton_kernel(kit.model_new(body)))
    assert r["kernels"] == 1 and r["parent_state"] is None, r


def test_a_dry_run_past_its_budget_is_killed(tmp_path):
    body = """
        while True:
            pass
    """
    r = _ahead(tmp_path, kit.triton_kernel(kit.model_new(body)), budget=1.0)
    assert r["outcome"] == "timeout" and 1000 <= r["ms"] < 5000, r
