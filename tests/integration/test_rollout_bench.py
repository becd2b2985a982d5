"""bench/rollout/run.py on the CPU: a small rollout (2 samples x 2 turns x
1 problem) through a real `kgym serve --workers auto` with the script's
stand-in policy. The loop runs, every evaluation completes and passes,
none is answered from the result cache, and the per-turn figures (the
environment's share, evaluations per second) are printed and written. No
figure is claimed here; bench/speed/run.sh runs it on the GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kgym_env import KGYM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "bench", "rollout", "run.py")

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")



def _bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("rollout_bench", RUN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_samples_are_distinct_sources() -> None:
    bench = _bench()
    for mode in ("cpu", "gpu"):
        name, _, sol = bench.problem_set(mode, 1)[0]
        codes = {bench.variant(sol, f"r-{name}-{s}-{t}") for s in range(4) for t in range(3)}
        assert len(codes) == 12, mode
        assert all(compile(c, "x", "exec") for c in codes)


def test_cpu_rollout_runs_without_cache_hits(tmp_path) -> None:
    out = tmp_path / "ro.json"
    env = dict(os.environ, KGYM_BIN=KGYM)
    env.pop("KGYM_ROOT", None)
    p = subprocess.run([sys.executable, RUN, "--mode", "cpu", "--samples", "2", "--turns", "2",
                        "--problems", "1", "--fast", "--json", str(out),
                        "--log", str(tmp_path / "serve.log")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr + (tmp_path / "serve.log").read_text()[-3000:]
    assert "stand-in" in p.stdout and "env%" in p.stdout, p.stdout
    fig = json.loads(out.read_text())
    assert [t["turn"] for t in fig["per_turn"]] == [0, 1]
    for t in fig["per_turn"]:
        assert t["evals"] == 2 and t["verdicts"] == {"pass": 2} and t["cached"] == 0, t
        assert 0 < t["env_share"] <= 1 and t["evals_per_s"] > 0, t
    assert fig["total"]["evals"] == 4 and fig["total"]["cached"] == 0
