"""bench/speed/run.sh --dry: the H200 speed script's own run on the CPU
(a build against itself; no figure claimed). Every measurement (cold,
warm, the group of 16 through both service setups and a second group on
the first setup's service, the rollout, the
faults back to back then honest tasks) runs for
both sides, every evaluation passes, and the side-by-side lines and the
JSON are written to --out."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
from kgym_env import KGYM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "bench", "speed", "run.sh")

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")


def test_speed_script_dry_run(tmp_path) -> None:
    build = os.path.dirname(KGYM)
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("KGYM_ROOT", None)
    p = subprocess.run([RUN, build, "--dry", "--out", str(tmp_path)], capture_output=True,
                       text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for line in ("cold kgym eval, wall s", "warm: median of evals 2-6, s",
                 "group of 16, workers-auto, s", "group of 16, worker-c4, s",
                 "group of 16 again, workers-auto, s",
                 "rollout: evaluations / s", "faults back to back, cur: honest passed 2 of 2"):
        assert any(ln.startswith(line) and (re.search(r"cur/prev\s+x\d", ln) or "faults" in line)
                   for ln in p.stdout.splitlines()), (
            line, p.stdout[-3000:])
    [js] = glob.glob(str(tmp_path / "speed-dry-*.json"))
    assert glob.glob(str(tmp_path / "speed-dry-*.txt"))
    figs = json.load(open(js))["figures"]
    for side in ("prev", "cur"):
        f = figs[side]
        assert f["cold"]["verdicts"] == "pass:1", f["cold"]
        assert f["warm"]["verdicts"] == "pass:6", f["warm"]
        for setup in ("workers-auto", "worker-c4"):
            assert f[f"group-{setup}"]["verdicts"] == "pass:16", f
            assert f[f"group-{setup}"]["cached"] == 0, f
        # the second group, on the first setup's service (--dry)
        assert f["group-workers-auto"]["again_verdicts"] == "pass:16", f
        assert f["group-workers-auto"]["again_cached"] == 0, f
        assert "again_wall_s" not in f["group-worker-c4"], f
        assert f["rollout"]["cached"] == 0 and f["rollout"]["incomplete"] == 0, f["rollout"]
        assert f["faults"]["honest_passed"] == 2 and f["faults"]["results"] == 6, f["faults"]


def test_speed_script_refuses_a_path_without_kgym(tmp_path) -> None:
    p = subprocess.run([RUN, str(tmp_path), "--dry", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHON=sys.executable))
    assert p.returncode != 0 and "has no build/kgym nor kgym" in p.stderr, p.stderr
