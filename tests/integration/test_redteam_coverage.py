"""The coverage family of the red-team corpus on the CPU (tests/redteam/corpus/
cpu/*covlr*, docs/redteam.md): every cheat on the profile caught, or its
judged coverage within 0.05 of the same kernel without the trick; every
honest candidate's judged coverage equal to what its profile measured
(within 0.05); and bench/coverage/run.py --dry, the GPU bench's CPU mode,
end to end (its rollout: no forging kernel out-earns an honest one).

Needs root and build/kgym, like test_redteam.py.
"""
from __future__ import annotations

import json
import os
import shutil
import importlib.util
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
# by path, under its own name: bench/kernelbench/run.py is a "run" too
_spec = importlib.util.spec_from_file_location(
    "kgym_bench_coverage", os.path.join(ROOT, "bench", "coverage", "run.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

pytestmark = [
    pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandboxed corpus needs root"),
]


def corpus(filter_: str, profile_proc: str = "1") -> dict[str, dict]:
    """The corpus rows matching filter_; profile_proc: KGYM_PROFILE_PROC
    ("cpu": profiled in the profiler process, as a GPU task is; "1": on
    the CPU, in the candidate's process)."""
    tmp = tempfile.mkdtemp(prefix="kgym-rtcov-", dir="/tmp")
    os.chmod(tmp, 0o755)
    try:
        p = subprocess.run([KGYM, "redteam", "--backend", "cpu", "--filter", filter_, "--json"],
                           capture_output=True, text=True, timeout=1200, cwd=ROOT,
                           env=dict(os.environ, TMPDIR=tmp, KGYM_PROFILE_PROC=profile_proc))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = json.loads(p.stdout)
    return {r["candidate"]: r for r in doc["rows"]}


def cov(row: dict) -> tuple[float, float]:
    prof = row["result"]["profile"]
    return prof["coverage"], prof["claimed"]["coverage"]


@pytest.mark.parametrize("profile_proc", ["1", "cpu"])
def test_cheats_caught_or_no_gain_and_honest_unchanged(profile_proc):
    rows = corpus("covlr", profile_proc)
    # where the profile was taken (a diagnostic of the candidate's: it only shows the mode ran)
    where = {r["result"]["timings"].get("profiling_detail", {}).get("child") for r in rows.values()}
    assert where == {1.0 if profile_proc == "cpu" else 0.0}, where
    cpu_pairs = {k: v for k, v in bench.PAIRS.items() if k.startswith("cpu/")}
    assert set(cpu_pairs) | set(cpu_pairs.values()) <= set(rows), sorted(rows)
    assert all(r["status"] == "OK" for r in rows.values()), {
        k: (r["status"], r["got"]) for k, r in rows.items() if r["status"] != "OK"}
    for cheat, base in cpu_pairs.items():
        res = rows[cheat]["result"]
        if res["verdict"] == "hacked":
            continue
        assert cov(rows[cheat])[0] - cov(rows[base])[0] <= bench.CLOSE, (
            cheat, cov(rows[cheat]), cov(rows[base]))
    for name, r in rows.items():
        if r["family"] == "honest":
            judged, claimed = cov(r)
            assert abs(judged - claimed) <= bench.CLOSE, (name, judged, claimed)
    # padding passes; its busy work is measured (claimed) and not credited
    for name in bench.PADDING:
        if not name.startswith("cpu/"):
            continue
        res = rows[name]["result"]
        assert res["verdict"] == "pass", res["feedback"]
        assert "no_effect" in res["checks"]["coverage_ablation"].values(), res["checks"]
        judged, claimed = cov(rows[name])
        assert claimed - judged >= bench.PADDING_GAP, (name, judged, claimed)
    # the spinning cheats claimed far more than they are credited with
    spun = rows["cpu/profile_forgery__covlr_spin_in_profiler_frames"]
    assert "profile_forgery" in spun["result"]["hack_reasons"]
    # the cap follows the judge's clock for a call, which a loaded machine
    # stretches: held relative to the claim, not to a fixed figure
    judged, claimed = cov(spun)
    assert claimed > 0.5 and claimed - judged >= 0.25, (judged, claimed)


def test_every_honest_cpu_candidate_keeps_its_coverage():
    """Judged = claimed within 0.05. On a loaded 2-CPU machine a profile
    whose calls stalled inside the extension claims a coverage its kernel
    does not have (0.95 for a 0.25 layer norm, once), and the cap trims it:
    such a candidate is evaluated once more, as the timing phase is, and
    the second evaluation must agree."""
    rows = corpus("cpu/honest__")
    assert len(rows) >= 15
    off = []
    for name, r in rows.items():
        assert r["status"] == "OK", (name, r["got"])
        judged, claimed = cov(r)
        if abs(judged - claimed) > bench.CLOSE:
            off.append(name)
    assert len(off) <= 2, off  # more than a stray stall: the cap moves honest figures
    for name in off:
        again = corpus(name + ".py")[name]
        assert again["status"] == "OK", (name, again["got"])
        judged, claimed = cov(again)
        assert abs(judged - claimed) <= bench.CLOSE, (name, judged, claimed)


def test_bench_dry_mode(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), KGYM_BIN=KGYM)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "coverage", "run.py"),
                        "--dry"], capture_output=True, text=True, timeout=1200, env=env,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    text = (tmp_path / "coverage.txt").read_text()
    assert "PASS rollout: no forging kernel out-earns the best honest one" in text
    assert "FAIL" not in text and "# 0 failed" in text
    rows = [json.loads(ln) for ln in (tmp_path / "coverage-rollout.jsonl").read_text().split("\n")
            if ln.strip()]
    rewards = {r["sample"]: r["reward"] for r in rows}
    assert len(rewards) == 4 and rewards[2] == rewards[3] == 0.0 and min(rewards[0],
                                                                       rewards[1]) > 1.0
