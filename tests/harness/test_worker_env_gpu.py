"""A GPU worker's children make their CUDA contexts with one hardware work
queue (CUDA_DEVICE_MAX_CONNECTIONS=1) and launch queues four times CUDA's
default depth (CUDA_SCALE_LAUNCH_QUEUES=4x) unless the worker's environment
says otherwise (skipped without a CUDA device; `make test-gpu` runs it on the
H200). Both the judge, which loads the reference, and the candidate are
checked: each file refuses to load with another value."""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GELU = os.path.join(ROOT, "problems", "gpu", "level1", "1_GELU.py")
SOL = os.path.join(ROOT, "problems", "gpu", "level1", "solutions", "1_GELU.triton.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from kgym_env import env_probe, eval_json  # noqa: E402


@pytest.mark.parametrize("var,given,want", [
    ("CUDA_DEVICE_MAX_CONNECTIONS", None, "1"), ("CUDA_DEVICE_MAX_CONNECTIONS", "2", "2"),
    ("CUDA_SCALE_LAUNCH_QUEUES", None, "4x"), ("CUDA_SCALE_LAUNCH_QUEUES", "2x", "2x")])
def test_children_get_cuda_queues_unless_the_worker_says(tmp_path, var, given, want):
    os.chmod(tmp_path, 0o755)
    ref, cand = tmp_path / "ref.py", tmp_path / "cand.py"
    env_probe(GELU, ref, want, var)
    env_probe(SOL, cand, want, var)
    env = dict(os.environ)
    env.setdefault("TMPDIR", "/tmp")  # enterable by the candidate's uid
    env.pop(var, None)
    if given:
        env[var] = given
    rs, p = eval_json(["--ref", str(ref), "--cand", str(cand), "--cand", str(cand),
                       "--backend", "triton", "--device", "cuda:0",
                       "--num-perf-trials", "3", "--num-correct-trials", "2",
                       "--enable-profiling", "false"], env, timeout=300)
    assert len(rs) == 2, p.stderr[-3000:]
    assert [r["verdict"] for r in rs] == ["pass", "pass"], [r["error_message"] for r in rs]
    assert "warm_spare" in rs[1]["timings"]  # the second pair was a warm spare
