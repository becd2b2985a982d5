"""bench/kernelbench/run.py: --cap PHASE=S stops a phase at S seconds and
its report says how many problems it reached; results run again alone
after an out of memory beside others (the selfcheck line's rerun) are
counted and named. The report on made-up lines, and a --dry run on the
CPU of a small tree with a problem too slow for its cap."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "kernelbench"))  # run.py's own imports
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
# by path, under its own name: bench/coverage/run.py is a "run" too
_spec = importlib.util.spec_from_file_location(
    "kgym_bench_kernelbench", os.path.join(ROOT, "bench", "kernelbench", "run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

PROBLEM = '''import time

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        time.sleep({sleep})
        return x * 2.0


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
'''


def line(verdict: str, speedup: float | None = None, rerun: dict | None = None) -> dict:
    return {"verdict": verdict, "speedup": speedup, "rerun": rerun,
            "trusted_clock": {"verdict": "agree"}, "memory": None}


def test_kernelbench_eval_runs_the_smallest_footprints_first(tmp_path):
    """Its eval draws inputs on the host: the huge problems go last under
    its cap (by the judge's footprints of this run), the unmeasured after."""
    lines = [{"level": 1, "problem": "38_L1Norm_", "memory": {"footprint_bytes": 24e9}},
             {"level": 1, "problem": "1_Small", "memory": {"footprint_bytes": 1e6}},
             {"level": 3, "problem": "39_GRU", "memory": {"footprint_bytes": 2e8}}]
    (tmp_path / "selfcheck_c1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "selfcheck_c4.jsonl").write_text(json.dumps(
        {"level": 1, "problem": "1_Small", "memory": {"footprint_bytes": 3e8}}) + "\n")
    got = run.smallest_first(["level1/38_L1Norm_", "level2/9_Unseen", "level1/1_Small",
                              "level3/39_GRU"], str(tmp_path))
    assert got == ["level3/39_GRU", "level1/1_Small", "level1/38_L1Norm_", "level2/9_Unseen"]


def test_report_counts_and_names_reruns_and_caps():
    problems = ["level1/1_A", "level1/2_B", "level2/3_C"]
    note = {"reason": "device out of memory beside 3 other pairs on the device",
            "others": 3, "alone": True}
    runs = {"c1": {"level1/1_A": line("pass", 1.0)},
            "c4": {"level1/1_A": line("pass", 1.01, rerun=note),
                   "level1/2_B": line("infra_error", rerun=note),
                   "level2/3_C": line("pass", 0.99)},
            "kb": {}, "ab": {}}
    f = io.StringIO()
    run.report(problems, runs, {"c1": 60.0, "c4": 30.0}, f, {"c1": 60.0})
    out = f.getvalue()
    table = {ln.split()[0]: ln for ln in out.splitlines()[2:5]}
    assert "1.010 R" in table["level1/1_A"] and "infra_error R" in table["level1/2_B"], out
    assert " R" not in table["level2/3_C"], out
    c1, c4 = out.split("kgym selfcheck concurrency 1:")[1], out.split(
        "kgym selfcheck concurrency 4:")[1]
    assert ("rerun alone after an out of memory beside others (R): 2 "
            "(level1/1_A, level1/2_B)") in c4.split("kernelbench eval")[0], out
    assert "(R): 0\n" in c1.split("kgym selfcheck concurrency 4")[0], out
    assert "capped at 60 s: reached 1 of 3 problems" in c1.split("concurrency 4")[0], out
    assert "capped at" not in c4, out
    assert "1 problems in 60 s = 1.0 per minute" in c1, out


@pytest.mark.parametrize("items,want", [
    (["c4=330"], {"c4": 330.0}),
    (["c1=12.5", "kb=7"], {"c1": 12.5, "kb": 7.0}),
])
def test_cap_parses(items, want):
    assert run.parse_caps(items, {}) == want


@pytest.mark.parametrize("item", ["c4", "c9=3", "c4=0", "c4=-1", "c4=x", "=5"])
def test_a_bad_cap_is_refused(item):
    with pytest.raises(ValueError, match="--cap"):
        run.parse_caps([item], {})
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernelbench", "run.py"),
                        "--cap", item], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--cap" in p.stderr, p.stderr


@pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")
def test_a_capped_dry_phase_reports_what_it_reached(tmp_path):
    """Three problems at concurrency 1 under a cap of 15 s: the first
    passes, the second sleeps 5 s per forward (far past the cap) and is
    stopped in flight, the third never starts; the report says the phase
    was capped and reached 1 of 3."""
    kb = tmp_path / "kb"
    lvl = kb / "KernelBench" / "level1"
    lvl.mkdir(parents=True)
    for name, sleep in (("1_Fast", 0), ("2_Slow", 5), ("3_Fast", 0)):
        (lvl / f"{name}.py").write_text(PROBLEM.format(sleep=sleep))
    os.chmod(tmp_path, 0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), KGYM_BIN=KGYM, TMPDIR="/tmp")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernelbench", "run.py"),
                        "--dry", "--kb", str(kb), "--problems", "level1/*", "--only", "c1",
                        "--cap", "c1=15"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "cap of 15 s reached" in p.stdout, p.stdout
    (res,) = list(out.iterdir())
    lines = [json.loads(x) for x in open(res / "selfcheck_c1.jsonl") if x.strip()]
    assert [x["problem"] for x in lines] == ["1_Fast"], lines
    # each line says where its time went, and the report sums it by stage
    assert lines[0]["phases"]["correctness"] > 0 and lines[0]["phases"]["total"] > 0, lines
    report = (res / "report.txt").read_text()
    assert "capped at 15 s: reached 1 of 3 problems" in report, report
    assert "rerun alone after an out of memory beside others (R): 0" in report, report
    assert "level1/2_Slow" in report and "not run" in report, report
    assert "phases, s summed over problems:" in report, report


def test_report_lists_each_problems_lead_and_clock():
    r = dict(line("pass", 0.93), timing_lead={
        "kernel": {"us": 17000.0, "late": 28, "fit": "fitted"},
        "reference": {"us": 40000.0, "late": 100, "fit": "safe"}},
        trusted_clock={"verdict": "capped", "wall_speedup": 0.72})
    runs = {"c1": {"level3/34_V": r}, "c4": {}, "kb": {}, "ab": {"level3/34_V": line("pass", 1.0)}}
    f = io.StringIO()
    run.report(["level3/34_V"], runs, {"c1": 10.0}, f)
    out = f.getvalue()
    got = [ln for ln in out.splitlines() if ln.startswith("  c1 ")]
    assert got and ("lead 17000.0/40000.0 fit fitted/safe late 28/100; clock capped wall 0.72"
                    in got[0]), out
    ab = [ln for ln in out.splitlines() if ln.startswith("  ab ")]
    assert ab and "lead -/- fit -/- late -/-; clock agree wall -" in ab[0], out
    # a clock that looked twice: the first look beside the one that counts
    r["trusted_clock_retried"] = {"verdict": "capped", "wall_speedup": 0.8}
    r["trusted_clock"] = {"verdict": "agree", "wall_speedup": 0.99}
    assert run.lead_line(r).endswith("clock agree wall 0.99 (first look capped wall 0.8)")


def test_phase_seconds_sums_each_stage_and_the_timing_share():
    rows = {"a": {"phases": {"setup": 1000, "correctness": 2000, "timing": 6000, "total": 9000,
                             "lock_held": {"shared": 500, "exclusive": 5000}}},
            "b": {"phases": {"setup": 1000, "timing": 2000, "engine_start": {"x": 1},
                             "lock_held": {"exclusive": 1000}}},
            "c": {"phases": None}}
    got = run.phase_seconds(rows)
    assert got.startswith("phases, s summed over problems: setup 2 correctness 2 timing 8;"), got
    # the exclusive holds bound a run on one device: 2 problems in 6 s
    assert got.endswith("timing stage 67% of 12; device held alone 6 s over 2 problems: "
                        "at most 20.0 per minute on one device"), got
    assert "device held alone" not in run.phase_seconds({"a": {"phases": {"timing": 1000}}})
    assert run.phase_seconds({"c": {}}) == "phases: none recorded"


def test_from_an_earlier_run_reports_its_lines_beside_this_ones(tmp_path):
    """--only kb --from DIR: the earlier selfcheck lines are copied in and
    reported in their column; KernelBench's eval (the CPU's own timing
    under --dry) runs the problems smallest footprint first."""
    kb = tmp_path / "kb"
    lvl = kb / "KernelBench" / "level1"
    lvl.mkdir(parents=True)
    for name in ("1_Big", "2_Small"):
        (lvl / f"{name}.py").write_text(PROBLEM.format(sleep=0))
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "selfcheck_c1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (
        {"level": 1, "problem": "1_Big", "verdict": "pass", "speedup": 1.01,
         "memory": {"footprint_bytes": 9e9}},
        {"level": 1, "problem": "2_Small", "verdict": "pass", "speedup": 0.99,
         "memory": {"footprint_bytes": 1e3}})))
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), KGYM_BIN=KGYM, TMPDIR="/tmp")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernelbench", "run.py"),
                        "--dry", "--kb", str(kb), "--problems", "level1/*", "--only", "kb",
                        "--from", str(earlier)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    (res,) = list(out.iterdir())
    ran = [json.loads(x)["problem"] for x in open(res / "kernelbench_eval.jsonl") if x.strip()]
    assert ran == ["2_Small", "1_Big"], ran
    report = (res / "report.txt").read_text()
    assert "kgym selfcheck concurrency 1: 2/2 pass" in report, report
    assert "kernelbench eval" in report and "2/2 correct" in report, report


@pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")
def test_the_ab_phase_runs_under_the_environment_it_is_given(tmp_path):
    """--ab-env KGYM_LEAD_FIT=0: the A/B's selfcheck children see it (the
    worker passes it to both roles), c1's do not; the report names it and
    gives each problem's timing seconds in both columns."""
    kb = tmp_path / "kb"
    lvl = kb / "KernelBench" / "level1"
    lvl.mkdir(parents=True)
    probe = ("import os\n"
             "if os.environ.get('KGYM_LEAD_FIT') == '0':\n"
             "    raise RuntimeError('LEAD_FIT_OFF')\n")
    (lvl / "1_Probe.py").write_text(probe + PROBLEM.format(sleep=0))
    os.chmod(tmp_path, 0o755)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), KGYM_BIN=KGYM, TMPDIR="/tmp")
    env.pop("KGYM_LEAD_FIT", None)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernelbench", "run.py"),
                        "--dry", "--kb", str(kb), "--problems", "level1/*", "--only", "c1,ab",
                        "--ab-env", "KGYM_LEAD_FIT=0", "--ab-problems", "level1/1_*"],
                       capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    (res,) = list(out.iterdir())
    c1 = [json.loads(x) for x in open(res / "selfcheck_c1.jsonl") if x.strip()]
    ab = [json.loads(x) for x in open(res / "selfcheck_ab.jsonl") if x.strip()]
    assert c1[0]["verdict"] == "pass", c1
    assert ab[0]["verdict"] != "pass" and "LEAD_FIT_OFF" in json.dumps(ab[0]), ab
    report = (res / "report.txt").read_text()
    assert "concurrency 1 with KGYM_LEAD_FIT=0" in report, report
    assert "kgym selfcheck concurrency 1, KGYM_LEAD_FIT=0: 0/1 pass" in report, report
    row = [ln for ln in report.splitlines() if ln.startswith("level1/1_Probe")][0]
    assert row.split()[-1].replace(".", "").isdigit(), row  # c1's timing seconds
    assert "KGYM_LEAD_FIT" not in os.environ


def test_a_bad_ab_env_is_refused():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kernelbench", "run.py"),
                        "--ab-env", "NOVALUE"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--ab-env" in p.stderr, p.stderr
