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
if os.environ.get("WARM_META") == "1":
    ahead.warm_meta()  # as the zygote does with KGYM_COMPILE_AHEAD=1
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


def _ahead(tmp_path, kernel_code: str, budget: float = 120.0, ref: str = kit.REF,
           warm_meta: bool = False) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ref.py").write_text(ref)
    (tmp_path / "kernel.py").write_text(kernel_code)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), WARM_META="1" if warm_meta else "0")
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


def test_warm_meta_leaves_a_dry_run_nothing_heavy_to_import(tmp_path):
    """A meta forward's first use of torch's Python references imports
    torch._dynamo and sympy (2.8 s of a dry run on the H200, whose venv has
    no .pyc; a scalar product in get_inputs is enough). After warm_meta,
    which the zygote runs when compile ahead is on, the dry run of the same
    problem imports a few modules at most."""
    ref = kit.REF.replace("torch.randn(4, 16)", "4.0 * torch.randn(4, 16)")
    cold = _ahead(tmp_path / "cold", kit.triton_kernel(), ref=ref)
    warm = _ahead(tmp_path / "warm", kit.triton_kernel(), ref=ref, warm_meta=True)
    assert cold["outcome"] == warm["outcome"] == "done" and warm["kernels"] == 1, (cold, warm)
    print("imported: cold", cold["imported"], "warm", warm["imported"])
    assert cold["imported"] > 200 and warm["imported"] < 80, (cold["imported"], warm["imported"])


def test_the_zygote_warms_the_meta_device_only_when_compile_ahead_is_on():
    probe = ("import json; from kgym_harness import zygote; i = zygote._preimport(); "
             "print(json.dumps({'meta_ms': i.get('meta_ms'), 'errors': i.get('import_errors')}))")
    for on in ("1", "0"):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS), KGYM_COMPILE_AHEAD=on)
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           env=env, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert out["errors"] is None, out
        assert (out["meta_ms"] is not None) == (on == "1"), out
