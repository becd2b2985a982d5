"""Warm spares (docs/worker.md): judge+candidate pairs forked ahead of their
task by the real engine, handed a task later, used once, and gone when the
engine stops."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest
from kgym_env import eval_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
REF = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
SOL = os.path.join(ROOT, "problems", "cpu", "level1", "solutions", "1_GELU.cpu.py")
WRONG = os.path.join(ROOT, "tests", "faults", "candidates")
FAST = ["--num-perf-trials", "3", "--num-correct-trials", "2", "--enable-profiling", "false"]


def evaluate(cands: list[str], *extra: str, tmpdir: str | None = None) -> list[dict]:
    env = dict(os.environ)
    env.setdefault("TMPDIR", "/tmp")
    if tmpdir:
        env["TMPDIR"] = tmpdir
    args = ["--ref", REF, "--backend", "cpu", *FAST, *extra]
    for c in cands:
        args += ["--cand", c]
    out, p = eval_json(args, env)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert len(out) == len(cands), p.stderr[-2000:]
    return out


def _harness_processes(marker: str) -> list[int]:
    """Harness processes (zygote, judges, candidates) whose environment names
    marker (the TMPDIR base of one run; needs root to read others' environ)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if b"kgym_harness" in cmd and marker.encode() in env:
            pids.append(int(d))
    return pids


def test_tasks_after_the_first_run_in_warm_pairs():
    res = evaluate([SOL] * 3)
    assert [r["verdict"] for r in res] == ["pass"] * 3
    modes = [r["device"]["mode"] for r in res]
    assert modes[0] == "zygote" and modes[1:] == ["zygote+warm"] * 2, modes
    for r in res[1:]:
        t = r["timings"]
        assert t["spawn"] < 50, t  # no fork at hand-over (a task file and one byte)
        assert isinstance(t["warm_spare"], dict) and "device_ms" in t["warm_spare"], t
        assert "warm_spare" not in res[0]["timings"]
    # ... and each in a pair of its own, fresh: its judge's CPU since its fork
    # (cpustat, cumulative) as its task began is the warm-up's only, well
    # below what a whole task costs; a judge handed a second task would
    # carry the first one's (sched_judge: the judge's at the end of its task)
    whole = min(r["timings"]["sched_judge"][0] for r in res)
    for r in res[1:]:
        sched = r["timings"]["warm_spare"]["sched"]
        prep, began = sched["prep"]["judge"][0], sched["task"]["judge"][0]
        assert prep <= began < whole / 4, (prep, began, whole)
        # the judge that warmed up is the one that ran the task: one process's
        # counters, never going down from its prep to its task's end
        assert began <= r["timings"]["sched_judge"][0], r["timings"]


def test_warm_parts_and_tasks_say_where_their_time_went():
    """cpustat samples (diagnostics): each warm-up part's [CPU ms, run-queue
    ms, modules imported] in both processes, cumulative since their fork,
    and the judge's at the end of its task."""
    res = evaluate([SOL] * 2)
    for r in res:
        end = r["timings"]["sched_judge"]
        assert len(end) == 3 and end[0] > 0 and end[2] >= 0, end
        # and which modules, by package: as many as it counted
        imp = r["timings"]["imported_judge"]
        assert all(isinstance(v, int) and v > 0 for v in imp.values()), imp
        assert sum(imp.values()) <= end[2], (imp, end)
    sched = res[1]["timings"]["warm_spare"]["sched"]
    assert {"prep", "device", "task"} <= set(sched), sched
    for part in ("prep", "device"):
        for who in ("judge", "candidate"):
            cpu, runq, mods = sched[part][who]
            assert cpu > 0 and runq >= 0 and mods >= 0, sched
    # cumulative: the judge's CPU never goes down, and its task's end comes last
    j = [sched[p]["judge"][0] for p in ("prep", "device", "task")]
    assert j == sorted(j) and res[1]["timings"]["sched_judge"][0] >= j[-1], (j, res[1])
    # the prep's own steps, as the candidate timed them (on a GPU also its
    # CUDA start, and the judge's context and set-up: prep_judge_parts_ms)
    steps = res[1]["timings"]["warm_spare"]["prep_candidate_ms"]
    assert steps["prep"] > 0 and steps["prep"] <= res[1]["timings"]["warm_spare"]["prep_ms"], steps
    # the extension machinery (torch.utils.cpp_extension, ~105 modules) was
    # imported in the zygote: the candidate's prep imports next to nothing
    assert sched["prep"]["candidate"][2] < 20, sched


def _eval_stderr(n: int, floor: str, flag: str | None = None) -> tuple[list[dict], str]:
    """n tasks with KGYM_SPARE_MEM_FLOOR=floor (the old variable, read when
    no flag is given) and, when flag is given, --spare-mem-floor flag."""
    args = ["--ref", REF, "--backend", "cpu", *FAST, "--prewarm", "4"]
    if flag is not None:
        args += ["--spare-mem-floor", flag]
    for _ in range(n):
        args += ["--cand", SOL]
    out, p = eval_json(args, dict(os.environ, KGYM_SPARE_MEM_FLOOR=floor))
    assert p.returncode == 0, p.stderr[-2000:]
    return out, p.stderr


def test_fewer_spares_when_their_memory_leaves_too_little_free():
    """A spare's judge reports the free memory its warm-up left (the host's
    on a cpu worker); below --spare-mem-floor free (KGYM_SPARE_MEM_FLOOR
    without the flag) the engine keeps two spares fewer, down to one, and
    tasks still run warm."""
    res, err = _eval_stderr(8, "1")  # nothing counts as enough: every report is low
    assert [r["verdict"] for r in res] == ["pass"] * 8
    for r in res[1:]:
        free, total = r["timings"]["warm_spare"]["mem_mib"]
        assert 0 < free <= total, r["timings"]["warm_spare"]
    lows = [ln for ln in err.splitlines() if "device memory low" in ln]
    assert [ln.rsplit(": ", 1)[1] for ln in lows] == ["at most 2 spare(s) now",
                                                      "at most 1 spare(s) now"], err
    assert all(r["device"]["mode"] == "zygote+warm" for r in res[1:]), res
    res, err = _eval_stderr(3, "1", flag="0")  # no floor (the flag wins): never low
    assert [r["verdict"] for r in res] == ["pass"] * 3 and "memory low" not in err, err
    for bad in ("abc", "1.5", "0.3x"):  # named, and the default used (not read as 0)
        res, err = _eval_stderr(2, bad)
        assert [r["verdict"] for r in res] == ["pass"] * 2, err
        assert f"KGYM_SPARE_MEM_FLOOR must be a share from 0 to 1, not '{bad}'" in err, err


def test_prewarm_zero_forks_per_task():
    res = evaluate([SOL] * 2, "--prewarm", "0")
    assert [r["device"]["mode"] for r in res] == ["zygote", "zygote"]
    assert all(r["verdict"] == "pass" for r in res)


@pytest.mark.parametrize("flag", ["--prewarm", "--stage"])
def test_count_flags_are_checked(flag):
    for bad in ("x", "-1", "33", ""):
        p = subprocess.run([KGYM, "eval", "--ref", REF, "--cand", SOL, flag, bad],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and f"{flag}: a number from 0 to 32" in p.stderr, (bad, p)


def test_a_crashing_task_does_not_spoil_the_next_warm_pair():
    crash = os.path.join(WRONG, "segfault.py")
    if not os.path.exists(crash):
        crash = sorted(os.path.join(WRONG, f) for f in os.listdir(WRONG) if f.endswith(".py"))[0]
    res = evaluate([SOL, crash, SOL, SOL])
    assert res[1]["verdict"] != "pass"
    assert [r["verdict"] for r in (res[0], res[2], res[3])] == ["pass"] * 3
    assert res[2]["device"]["mode"] == "zygote+warm"


@pytest.mark.needs_root("reads other uids' /proc/<pid>/environ")
def test_no_pair_outlives_the_engine():
    base = tempfile.mkdtemp(prefix="kgym-spares-", dir="/tmp")
    os.chmod(base, 0o711)  # the candidate's uid must reach its work dir
    try:
        evaluate([SOL] * 3, "--prewarm", "4", tmpdir=base)  # spares beyond the queue: none kept
        left = _harness_processes(base)
        assert not left, f"processes left behind: {left}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_candidate_without_a_passwd_entry_can_ask_who_it_is(tmp_path):
    """Candidate uids have no passwd entry; libraries that ask for the user
    name (torch.profiler, inductor's cache dir) must still work."""
    src = open(SOL).read() + (
        "\nimport getpass as _gp\n"
        "_orig_init = ModelNew.__init__\n"
        "def _init(self, *a, **k):\n"
        "    assert _gp.getuser()\n"
        "    _orig_init(self, *a, **k)\n"
        "ModelNew.__init__ = _init\n")
    cand = tmp_path / "who.py"
    cand.write_text(src)
    os.chmod(tmp_path, 0o755)
    os.chmod(cand, 0o644)
    res = evaluate([str(cand)])
    assert res[0]["verdict"] == "pass", res[0]["error_message"]


def test_staged_tasks_set_up_ahead_and_wait_for_a_device_slot():
    """--stage 1 at --concurrency 1: a task more starts in a warm pair, sets
    up and compiles while the running one checks and times, then waits at
    its gate (timings.gate) until the engine gives it the slot: from
    correctness on (timings.device_span, CLOCK_MONOTONIC ms) no two tasks
    overlap, and every result is the same pass."""
    res = evaluate([SOL] * 5, "--prewarm", "3", "--stage", "1")
    assert [r["verdict"] for r in res] == ["pass"] * 5, [r["error_message"] for r in res]
    spans = sorted(tuple(r["timings"]["device_span"]) for r in res)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    gated = [r["timings"]["gate"] for r in res if "gate" in r["timings"]]
    assert gated and max(gated) > 50, gated  # waited for the running task's checks


def test_a_staged_task_that_dies_before_its_slot_frees_nothing_it_did_not_take():
    """A staged task whose candidate dies at import (before its gate) ends
    with its own verdict and takes no device slot: the tasks after it are
    staged and run one at a time as before."""
    crash = os.path.join(WRONG, "segfault_import.py")
    res = evaluate([SOL, SOL, crash, SOL, SOL], "--prewarm", "3", "--stage", "1")
    got = sorted((os.path.basename(r["candidate"]), r["verdict"]) for r in res)
    assert got == [("1_GELU.cpu.py", "pass")] * 4 + [("segfault_import.py", "runtime_error")], \
        [r["error_message"] for r in res]
    spans = sorted(tuple(r["timings"]["device_span"]) for r in res
                   if r["timings"].get("device_span"))
    assert len(spans) == 4 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
