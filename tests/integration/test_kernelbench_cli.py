"""`kgym selfcheck --kernelbench DIR` and `kgym eval --kernelbench DIR
--candidates CANDDIR` (src/cli/cmd_selfcheck.c) on a small fake KernelBench
tree of cpu problems, with the real binary and real workers: the JSONL
lines, the summary, --resume, --problems, bad input; and the sandbox's
limits sized for large tensors (src/worker/engine_spawn.c): an output over
2 GiB crosses the channel, a large elementwise problem passes. Nothing is
fetched from the network."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
FAST = ["--backend", "cpu", "--num-correct-trials", "1", "--num-perf-trials", "3",
        "--num-warmup", "0", "--enable-profiling", "false"]

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn({shape})]


def get_init_inputs():
    return []
'''
BROKEN = "import not_a_module_kgym_test  # the reference fails at import\n" + PROBLEM
SELF = "\n\nclass ModelNew(Model):\n    pass\n"
WRONG = "\n\nclass ModelNew(Model):\n    def forward(self, x):\n        return x * 3.0\n"


def kgym(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.setdefault("TMPDIR", "/tmp")  # must be enterable by the candidate's uid
    return subprocess.run([KGYM, *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture
def tree(tmp_path):
    """Two levels, four problems: two that pass as themselves, one whose
    reference fails at import, one (level 2) more."""
    kb = tmp_path / "kb"
    write(kb / "level1" / "1_Relu.py", PROBLEM.format(expr="torch.relu(x)", shape="64, 64"))
    write(kb / "level1" / "2_Scale.py", PROBLEM.format(expr="x * 2.0", shape="64, 64"))
    write(kb / "level1" / "3_Broken.py", BROKEN.format(expr="x", shape="8"))
    write(kb / "level2" / "10_TanhAdd.py",
          PROBLEM.format(expr="torch.tanh(x) + 1", shape="32, 32"))
    (kb / "level1" / "notes.txt").write_text("not a problem\n")
    return kb


def lines(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {r["problem"]: r for r in rows}


def test_selfcheck_writes_a_line_per_problem_and_a_summary(tree, tmp_path):
    # level4 (models from a hub) is not a published level: not run unless named
    write(tree / "level4" / "1_Hub.py", BROKEN.format(expr="x", shape="8"))
    out = tmp_path / "self.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(tree), "--out", str(out), *FAST)
    assert p.returncode == 1, p.stderr  # a problem did not pass: its reference is broken
    rows = lines(out)
    assert sorted((r["level"], r["problem"]) for r in rows) == [
        (1, "1_Relu"), (1, "2_Scale"), (1, "3_Broken"), (2, "10_TanhAdd")]
    got = by_name(rows)
    for name in ("1_Relu", "2_Scale", "10_TanhAdd"):
        r = got[name]
        assert r["verdict"] == "pass", r
        assert r["speedup"] > 0 and r["kernel_runtime"] > 0 and r["reference_runtime"] > 0
        assert r["error"] is None and r["candidate"] is None
        assert r["file"].endswith(f"{name}.py")
        # why the speedup is what it is: the judge's clock on the claims
        assert r["trusted_clock"]["verdict"] in ("agree", "capped", "noisy", "unresolved"), r
        assert "timing_lead" in r and isinstance(r["warnings"], list)
        assert "rerun" in r and r["rerun"] is None  # run once: no rerun
    broken = got["3_Broken"]
    assert broken["verdict"] == "problem_error" and broken["speedup"] is None
    assert "not_a_module_kgym_test" in broken["error"]
    assert broken["error_code"] == "PROBLEM_ERROR"
    # the summary: a row per level and the total, the self-speedup bands
    assert re.search(r"^1\s+3\s+2\s+0\s+0\s+0\s+0\s+0\s+1\s+0$", p.stdout, re.M), p.stdout
    assert re.search(r"^2\s+1\s+1\s", p.stdout, re.M), p.stdout
    assert re.search(r"^all\s+4\s+3\s", p.stdout, re.M), p.stdout
    assert "self-speedup of 3 passing: min" in p.stdout
    assert "within [0.95, 1.05]: " in p.stdout and "within [0.90, 1.10]: " in p.stdout
    assert "level1/3_Broken=problem_error" in p.stdout
    assert "4 problems in" in p.stderr
    assert "level4: not run" in p.stderr, p.stderr
    assert re.search(r"^throughput: 4 problems in [0-9.]+ s, [0-9.]+ problems per minute$",
                     p.stdout, re.M), p.stdout
    # the device held alone bounds a run on one device: the lines' own figures
    held = [r["phases"]["lock_held"]["exclusive"] / 1e3 for r in rows
            if (r.get("phases") or {}).get("lock_held")]
    calls = sum(r["runtime_stats"][s]["mean"] * r["runtime_stats"][s]["n"] / 1e3
                for r in rows if (r["runtime_stats"] or {}).get("kernel")
                for s in ("kernel", "reference"))
    m = re.search(r"^device held alone \(timing, profiling\): ([0-9.]+) s over (\d+) problems; "
                  r"the timed calls themselves ([0-9.]+) s \(\d+%\); on one device no "
                  r"concurrency runs them faster than ([0-9.]+) problems per minute$",
                  p.stdout, re.M)
    assert m, p.stdout
    assert int(m.group(2)) == len(held) == 3 and abs(float(m.group(1)) - sum(held)) < 0.06
    assert abs(float(m.group(3)) - calls) < 0.06 and calls < sum(held)
    assert abs(float(m.group(4)) - 3 * 60 / sum(held)) <= 0.05 * 3 * 60 / sum(held) + 0.05
    # named, it runs (and fails: its import fails, as a hub's would offline)
    p = kgym("selfcheck", "--kernelbench", str(tree), "--level", "4", *FAST)
    assert p.returncode == 1 and "level4/1_Hub: problem_error" in p.stderr, p.stderr
    assert "not run (not a published level" not in p.stderr, p.stderr  # --level chose


def test_problems_filter_then_resume(tree, tmp_path):
    out = tmp_path / "r.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(tree), "--out", str(out),
             "--problems", "1_*,level2/*", *FAST)
    assert p.returncode == 0, p.stderr
    assert sorted(r["problem"] for r in lines(out)) == ["10_TanhAdd", "1_Relu"]
    # an existing file without --resume is refused, and left as it was
    before = out.read_text()
    p = kgym("selfcheck", "--kernelbench", str(tree), "--out", str(out), *FAST)
    assert p.returncode == 2 and "--resume" in p.stderr, p.stderr
    assert out.read_text() == before
    # a line cut by an interrupt: skipped with a warning, its problem runs
    with open(out, "a") as f:
        f.write('{"problem": "2_Scale", "level": 1, "verd')
    p = kgym("selfcheck", "--kernelbench", str(tree), "--out", str(out), "--resume",
             "--level", "1", *FAST)
    assert p.returncode == 1, p.stderr
    assert "not a result line" in p.stderr and "1 problems done already" in p.stderr
    rows = lines_tolerant(out)
    assert sorted(r["problem"] for r in rows) == ["10_TanhAdd", "1_Relu", "2_Scale", "3_Broken"]
    # the summary covers the selection (level 1), the resumed problem included
    assert re.search(r"^all\s+3\s+2\s", p.stdout, re.M), p.stdout
    # all done: nothing runs, no engine starts
    p = kgym("selfcheck", "--kernelbench", str(tree), "--out", str(out), "--resume", *FAST)
    assert "0 to run" in p.stderr, p.stderr
    assert len(lines_tolerant(out)) == 4


def lines_tolerant(path) -> list[dict]:
    """The JSONL's whole lines (a cut one is not)."""
    rows = []
    for x in open(path):
        try:
            rows.append(json.loads(x))
        except ValueError:
            pass
    return rows


SLOW = '''import os
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1


def get_inputs():
    while os.path.exists({flag!r}):  # slow while the test wants it
        time.sleep(0.2)
    return [torch.randn(16)]


def get_init_inputs():
    return []
'''


def test_interrupt_keeps_finished_lines_and_resume_runs_the_rest(tmp_path):
    """SIGINT mid-run: the lines of the problems that finished are in the
    file, whole; the summary covers them; --resume runs only the rest."""
    flag = tmp_path / "slow"
    flag.write_text("")
    kb = tmp_path / "kb"
    write(kb / "level1" / "1_Fast.py", PROBLEM.format(expr="x * 2.0", shape="16"))
    write(kb / "level1" / "2_Slow.py", SLOW.format(flag=str(flag)))
    out = tmp_path / "i.jsonl"
    e = dict(os.environ)
    e.setdefault("TMPDIR", "/tmp")
    proc = subprocess.Popen([KGYM, "selfcheck", "--kernelbench", str(kb), "--out", str(out),
                             *FAST], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=e)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n")):
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert [r["problem"] for r in lines(out)] == ["1_Fast"]
    assert re.search(r"^all\s+1\s+1\s", stdout, re.M), stdout
    assert "--resume continues" in stderr
    flag.unlink()
    p = kgym("selfcheck", "--kernelbench", str(kb), "--out", str(out), "--resume", *FAST)
    assert p.returncode == 0, p.stderr
    assert [r["problem"] for r in lines(out)] == ["1_Fast", "2_Slow"]
    assert "1 to run" in p.stderr and re.search(r"^all\s+2\s+2\s", p.stdout, re.M), p.stdout


def test_eval_kernelbench_pairs_candidates_by_name(tree, tmp_path):
    cand = tmp_path / "cand"
    write(cand / "level1" / "1_Relu.py", (tree / "level1" / "1_Relu.py").read_text() + SELF)
    write(cand / "2_Scale.py", (tree / "level1" / "2_Scale.py").read_text() + WRONG)  # flat
    p = kgym("eval", "--kernelbench", str(tree), "--candidates", str(cand), "--json",
             "--run-hack-checks", "false", "--concurrency", "2", *FAST)
    assert p.returncode == 0, p.stderr
    rows = by_name([json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")])
    assert set(rows) == {"1_Relu", "2_Scale"}
    assert rows["1_Relu"]["verdict"] == "pass"
    assert rows["1_Relu"]["candidate"] == str(cand / "level1" / "1_Relu.py")
    assert rows["2_Scale"]["verdict"] == "mismatch"
    assert rows["2_Scale"]["candidate"] == str(cand / "2_Scale.py")
    assert "2 of 4 problems have no candidate" in p.stderr
    # without --out the JSONL is on stdout and the summary on stderr
    assert re.search(r"^all\s+2\s+1\s+1\s", p.stderr, re.M), p.stderr


def test_a_problem_that_cannot_be_read_is_named_and_the_rest_run(tree, tmp_path):
    os.mkfifo(tree / "level2" / "11_Fifo.py")  # not a regular file: refused, never read
    out = tmp_path / "f.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(tree), "--out", str(out), "--level", "2", *FAST)
    assert p.returncode == 1, p.stderr
    assert "level2/11_Fifo: not run:" in p.stderr and "regular file" in p.stderr
    assert [r["problem"] for r in lines(out)] == ["10_TanhAdd"]
    assert "not run (unreadable or refused, see above): 1" in p.stdout


@pytest.mark.parametrize("args,words", [
    (["selfcheck", "--kernelbench", "/nonexistent/kb"], ["/nonexistent/kb", "No such file"]),
    (["selfcheck", "--kernelbench", "{tmp}"], ["no level1"]),
    (["selfcheck", "--kernelbench", "{kb}", "--problems", "99_*"], ["no problem matched", "99_*"]),
    (["selfcheck", "--kernelbench", "{kb}", "--level", "3"], ["--level 3", "no folder"]),
    (["selfcheck", "--kernelbench", "{kb}", "--level", "one"], ["--level"]),
    (["selfcheck", "--kernelbench", "{kb}", "--concurrency", "0"], ["--concurrency"]),
    (["selfcheck", "--kernelbench", "{kb}", "--num-perf-trials", "0"], ["num_perf_trials"]),
    (["selfcheck", "--kernelbench", "{kb}", "--resume"], ["--out"]),
    (["selfcheck", "--kernelbench", "{kb}", "--candidates", "{tmp}"], ["--candidates"]),
    (["eval", "--kernelbench", "{kb}"], ["--candidates"]),
    (["eval", "--kernelbench", "{kb}", "--candidates", "{tmp}"], ["no file named like a problem"]),
    (["selfcheck"], ["--kernelbench"]),
])
def test_bad_input_is_refused_before_anything_runs(tree, tmp_path, args, words):
    args = [a.replace("{kb}", str(tree)).replace("{tmp}", str(tmp_path)) for a in args]
    p = kgym(*args, timeout=20)
    assert p.returncode == 2, (p.returncode, p.stderr)
    for w in words:
        assert w in p.stderr, (w, p.stderr)


# ---- the sandbox's limits, sized for large tensors ------------------------

def test_file_size_limit_is_the_channels_largest_region():
    """RLIMIT_FSIZE also bounds ftruncate of the channel's memfd regions:
    it must be the channel's MAX_MESSAGE_BYTES (a region is never larger)."""
    from kgym_harness import channel
    src = open(os.path.join(ROOT, "src", "worker", "engine_spawn.c")).read()
    m = re.search(r"#define FSIZE_BYTES \(\(json_int_t\)(\d+) << (\d+)\)", src)
    assert m, "FSIZE_BYTES not found in engine_spawn.c"
    assert int(m.group(1)) << int(m.group(2)) == channel.MAX_MESSAGE_BYTES


def mem_total_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1 << 20)
    return 0.0


BIG_OUT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat({rep})  # {what}


def get_inputs():
    return [torch.randn({n})]


def get_init_inputs():
    return []
'''
ELEMENTWISE = PROBLEM.format(expr="torch.relu(x)", shape="{rows}, 1 << 20")


def test_large_tensors_pass_under_the_sandbox_limits(tmp_path):
    """A 2.16 GB output (over the old fixed 2 GiB RLIMIT_FSIZE: the
    candidate's region failed with [Errno 27] File too large, exit status 70)
    crosses the channel, and a 1 GiB elementwise problem passes as its own
    candidate, both under the sandbox's limits (half the RAM per candidate,
    all of it for the judge). Needs about 16 GiB of RAM."""
    if mem_total_gib() < 15:
        pytest.skip(f"needs 16 GiB of RAM for a 2.16 GB output crossing the channel "
                    f"(judge and candidate copies); this machine has {mem_total_gib():.1f}")
    kb = tmp_path / "kb"
    write(kb / "level1" / "1_BigOut.py",
          BIG_OUT.format(rep=540, n="1_000_000", what="540M float32: 2.16 GB, over 2 GiB"))
    write(kb / "level1" / "2_BigRelu.py", ELEMENTWISE.format(rows=256))  # 1 GiB in, 1 GiB out
    out = tmp_path / "big.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(kb), "--out", str(out), "--backend", "cpu",
             "--num-correct-trials", "1", "--num-perf-trials", "1", "--num-warmup", "0",
             "--enable-profiling", "false", "--timeout", "900", timeout=1200)
    rows = by_name(lines(out))
    assert rows["1_BigOut"]["verdict"] == "pass", (rows["1_BigOut"], p.stderr[-3000:])
    assert rows["2_BigRelu"]["verdict"] == "pass", (rows["2_BigRelu"], p.stderr[-3000:])
    assert p.returncode == 0, p.stderr[-3000:]


OVER_2GIB = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=1)  # a small output: the input is the cost


def get_inputs():
    # 576M float32: 2.25 GiB, written at memory speed (randn takes seconds)
    return [torch.arange(9 << 26, dtype=torch.float32).reshape(9 << 6, 1 << 20)]


def get_init_inputs():
    return []
'''


def test_an_input_over_2_gib_passes_on_the_cpu(tmp_path):
    """A 2.25 GiB input (over 2^31 bytes), the reference as its own
    candidate, on the CPU under the sandbox's limits: the channel's region
    over 1 GiB serves one message, the judge's fingerprints and comparisons
    run in chunks (a whole-tensor float64 sum copied 4.5 GiB; the same
    problem at 3.2 GB failed with exit status 70). Its memory figures are
    in the line. Needs about 12 GiB of RAM."""
    if mem_total_gib() < 12:
        pytest.skip(f"needs 12 GiB of RAM for a 2.25 GiB input (judge and candidate "
                    f"copies); this machine has {mem_total_gib():.1f}")
    kb = tmp_path / "kb"
    write(kb / "level1" / "1_Over2GiB.py", OVER_2GIB)
    out = tmp_path / "over.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(kb), "--out", str(out), "--backend", "cpu",
             "--num-correct-trials", "1", "--num-perf-trials", "1", "--num-warmup", "0",
             "--enable-profiling", "false", "--timeout", "600", timeout=900)
    row = by_name(lines(out))["1_Over2GiB"]
    assert row["verdict"] == "pass", (row, p.stderr[-3000:])
    mem = row["memory"]
    assert mem["judge"]["host_peak_bytes"] > 9 << 28  # it held the input
    assert mem["candidate"]["claim"] is True and mem["candidate"]["host_peak_bytes"] > 9 << 28


def test_a_problem_that_cannot_fit_the_device_is_refused_naming_sizes(tree, tmp_path):
    """Admission by memory: a problem whose remembered footprint (here from
    an earlier run's JSONL, --footprints) is more than the device has
    usable even alone is not started: problem_error (not the candidate's
    fault), naming both sizes; the other problems run."""
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps({
        "problem": "1_Relu", "level": 1,
        "memory": {"footprint_bytes": 60 * 2**30, "device_total_bytes": 64 * 2**30}}) + "\n")
    out = tmp_path / "fit.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(tree), "--problems", "1_Relu,2_Scale",
             "--out", str(out), "--footprints", str(earlier), *FAST)
    assert "1 problems' memory known" in p.stderr, p.stderr
    rows = by_name(lines(out))
    r = rows["1_Relu"]
    assert r["verdict"] == "problem_error" and r["error_code"] == "PROBLEM_ERROR", r
    assert "60.0 GiB" in r["error"] and "64.0 GiB" in r["error"], r["error"]
    assert rows["2_Scale"]["verdict"] == "pass", rows["2_Scale"]
    mem = rows["2_Scale"]["memory"]
    assert mem["footprint_bytes"] is not None and mem["device_total_bytes"] > 0, mem
    p = kgym("selfcheck", "--kernelbench", str(tree), "--footprints", str(tmp_path / "none"),
             *FAST, timeout=20)
    assert p.returncode == 2 and "--footprints" in p.stderr, p.stderr


def test_a_problem_whose_bound_is_above_the_device_runs_alone(tree, tmp_path):
    """A footprint within the device's usable memory but its 3x bound
    above it: the task runs, alone, and passes; it is no problem_error."""
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps({
        "problem": "1_Relu", "level": 1,
        "memory": {"footprint_bytes": 30 * 2**30, "device_total_bytes": 64 * 2**30}}) + "\n")
    out = tmp_path / "alone.jsonl"
    kgym("selfcheck", "--kernelbench", str(tree), "--problems", "1_Relu,2_Scale",
         "--out", str(out), "--footprints", str(earlier), "--concurrency", "2", *FAST)
    rows = by_name(lines(out))
    assert rows["1_Relu"]["verdict"] == "pass", rows["1_Relu"]
    assert rows["2_Scale"]["verdict"] == "pass", rows["2_Scale"]


def test_tasks_that_do_not_fit_together_run_one_after_the_other(tree, tmp_path):
    """Admission by memory at --concurrency 2: two problems whose known
    footprints (0.2 of the RAM each, so 3x is 0.6: one fits, two do not)
    never run at once; the second waits in the queue for the first's
    memory. Without the gate both start at once."""
    ram = mem_total_gib() * 2**30
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text("".join(json.dumps({
        "problem": n, "level": 1,
        "memory": {"footprint_bytes": 0.2 * ram, "device_total_bytes": ram}}) + "\n"
        for n in ("1_Relu", "2_Scale")))
    out = tmp_path / "wait.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(tree), "--problems", "1_Relu,2_Scale",
             "--out", str(out), "--footprints", str(earlier), "--concurrency", "2", *FAST)
    assert p.returncode == 0, p.stderr
    rows = sorted(lines(out), key=lambda r: r["queued_seconds"])
    first, second = rows
    assert first["queued_seconds"] < 1.0, rows
    assert second["queued_seconds"] >= 0.8 * first["seconds"], rows


def test_a_first_task_waits_beside_a_known_large_one(tree, tmp_path):
    """A problem not seen yet needs an equal share of the device
    (docs/worker.md, "Admission by memory"): at --concurrency 2 that is 0.45
    of the RAM, which does not fit beside a known problem needing 0.6 (a
    footprint of 0.2), so the first task of 2_Scale waits for 1_Relu's
    memory instead of starting beside it ungated."""
    ram = mem_total_gib() * 2**30
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps({
        "problem": "1_Relu", "level": 1,
        "memory": {"footprint_bytes": 0.2 * ram, "device_total_bytes": ram}}) + "\n")
    out = tmp_path / "share.jsonl"
    p = kgym("selfcheck", "--kernelbench", str(tree), "--problems", "1_Relu,2_Scale",
             "--out", str(out), "--footprints", str(earlier), "--concurrency", "2", *FAST)
    assert p.returncode == 0, p.stderr
    rows = by_name(lines(out))
    first, second = rows["1_Relu"], rows["2_Scale"]
    assert first["verdict"] == second["verdict"] == "pass", rows
    assert second["queued_seconds"] >= 0.8 * first["seconds"], rows
