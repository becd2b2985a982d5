"""bench/gpu_suite.py's lock-trace report (the concurrency step's drain
attribution), on a made-up trace: which shared hold a timing phase's
exclusive hold waited for last, and for how long it alone held it."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_suite  # noqa: E402


def test_the_last_shared_hold_before_an_exclusive_one_is_named():
    res = [{"timings": {"lock_trace": [["timing", "e", 90.0, 100.0, 200.0]]}},
           {"timings": {"lock_trace": [["trial:2/checks", "s", 40.0, 50.0, 95.0],
                                       ["trial:3/candidate", "s", 150.0, 201.0, 230.0]]}},
           {"timings": {"warm_spare": {"lock_trace": [["spare", "s", 55.0, 60.0, 99.0]]}}},
           {"timings": {}}]
    rows = {ln.split()[0]: ln.split() for ln in gpu_suite.lock_trace_report(res)[1:]}
    assert set(rows) == {"timing", "trial/checks", "trial/candidate", "spare"}
    # the spare ended last (99 ms), alone since the checks ended (95 ms)
    assert rows["spare"][2:] == ["1", "39.0", "0.04", "1", "4"]
    assert rows["trial/checks"][5] == "0" and rows["timing"][3] == "100.0"
    assert "no lock trace" in gpu_suite.lock_trace_report([{"timings": {}}])[0]


def test_lock_timeline_splits_the_steady_state_by_what_the_lock_was_doing():
    """bench/lock_timeline.py on a made-up engine of 2 tasks (the
    second is the steady state): its exclusive hold 100-200 ms, asked at
    80 while a shared hold ran 50-90 and a spare's 85-95; another shared
    hold 150-300 overlaps the exclusive one, then runs alone to the end."""
    import lock_timeline
    res = [{"task_id": "a", "_t": 1.0,
            "timings": {"lock_trace": [["trial:0/checks", "s", 40.0, 50.0, 90.0]]}},
           {"task_id": "b", "_t": 2.0,
            "timings": {"lock_trace": [["timing", "e", 80.0, 100.0, 200.0]],
                        "warm_spare": {"lock_trace": [["spare", "s", 85.0, 85.0, 95.0]]}}}]
    shares = lock_timeline.timeline(res)
    assert shares.pop("window_ms") == 100.0  # the steady state: b's exclusive hold
    assert shares == {"exclusive held": 1.0}
    res[0]["timings"]["lock_trace"].append(["trial:1/checks", "s", 150.0, 150.0, 300.0])
    res[1]["timings"]["lock_trace"].append(["timing", "e", 250.0, 300.0, 320.0])
    shares = lock_timeline.timeline(res)
    assert shares.pop("window_ms") == 220.0  # 100 to 320
    assert shares == {"exclusive held": 120 / 220, "exclusive waiting, 1 shared": 50 / 220,
                      "free, 1 shared": 50 / 220}


def test_sched_report_gives_each_part_its_own_cpu_and_run_queue():
    """bench/sched_report.py: cumulative samples turned into each
    part's own CPU, run-queue time and modules (the later half of an
    engine's results counted), and the judge's task from its start."""
    import sched_report  # bench/, on the path through gpu_suite
    warm = {"prep_ms": 900.0, "preload_ms": 500.0, "device_ms": 100.0, "idle_ms": 5.0,
            "sched": {"prep": {"judge": [300.0, 10.0, 1.0], "candidate": [800.0, 20.0, 150.0]},
                      "preload": {"judge": [500.0, 15.0, 1.0],
                                  "candidate": [1000.0, 30.0, 150.0]},
                      "device": {"judge": [550.0, 15.0, 1.0], "candidate": [1100.0, 30.0, 151.0]},
                      "task": {"judge": [551.0, 15.0, 1.0]}}}
    early = {"_t": 1.0, "timings": {}}
    late = {"_t": 2.0, "timings": {"warm_spare": warm, "total": 1200.0,
                                   "sched_judge": [951.0, 65.0, 17.0]}}
    lines = {ln.split()[0]: ln for ln in sched_report.report([early, late])}
    assert "wall 500 ms; judge cpu 200 runq 5 mods 0; candidate cpu 200 runq 10 mods 0" \
        in lines["preload"]
    assert "candidate cpu 800 runq 20 mods 150" in lines["prep"]
    assert lines["task"].endswith("wall 1200 ms; judge cpu 400 runq 50 mods 16")
    assert "steps" not in lines  # no step times in these results
    # the prep's steps, both sides, medians over the window's spares
    steps = []
    for judge_ms, cand_ms in ((300.0, 250.0), (500.0, 350.0), (400.0, 300.0)):
        w = dict(warm, prep_judge_ms=judge_ms + 100.0,
                 prep_judge_parts_ms={"context": judge_ms, "setup": 100.0},
                 prep_candidate_ms={"cuda_init": cand_ms, "prep": 40.0, "setup": True})
        steps.append({"_t": 2.0, "timings": {"warm_spare": w, "total": 1200.0}})
    out = sched_report.report(steps, steps)
    assert out[0].startswith("prep ") and out[1] == (
        "steps of prep (ms): judge own 500, context 400, setup 100; candidate cuda_init 300, prep 40"), out


def test_cpu_use_is_the_busy_share_between_two_times():
    trace = [(0.0, 100, 1000, 2), (1.0, 400, 2000, 6), (2.0, 900, 3000, 4), (3.0, 900, 4000, 1)]
    line = gpu_suite.cpu_use(trace, 0.5, 2.5)
    assert line.startswith("cpu: 50% of") and "runnable tasks mean 5.0 (max 6)" in line
    assert gpu_suite.cpu_use(trace[:1], 0, 1) == "cpu: too few samples"


def test_gpu_use_and_the_device_time_bound():
    """NVML samples (t, utilization.gpu %, utilization.memory %) averaged
    over a window; the bound: the 4-way window cannot be shorter than the
    kernel time its 16 tasks put on the device."""
    trace = [(0.0, 10, 5), (1.0, 60, 20), (2.0, 80, 40), (3.0, 100, 90)]
    line, busy = gpu_suite.gpu_use(trace, 0.5, 2.5)
    assert busy == 0.7 and line.startswith("gpu: a kernel running 70% of the time, memory busy 30%")
    assert gpu_suite.gpu_use(trace[:1], 0, 1) == ("gpu: too few samples (nvidia-smi)", None)
    line = gpu_suite.busy_bound(12.0, 0.5, 9.0, 0.8)  # 6.0 s serial, 7.2 s at 4-way
    assert "serial 6.0 s (50% of 12.0 s), 4-way 7.2 s (80% of 9.0 s)" in line
    assert "x1.67 at most with the 4-way engine's device work, x2.00 with the serial one's" in line


def test_nvml_sampler_reads_nvidia_smi_lines(tmp_path, monkeypatch):
    """_nvml_sampler runs nvidia-smi and keeps each "gpu, memory" line with
    its time; a line it cannot read is skipped. A stand-in nvidia-smi on
    PATH prints three lines (this machine has none)."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '37, 12'\necho '[N/A], 3'\necho '90, 55'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    got: list = []
    proc = gpu_suite._nvml_sampler(gpu_suite.time.perf_counter(), got)
    assert proc is not None and proc.wait(timeout=10) == 0
    for _ in range(100):
        if len(got) == 2:
            break
        gpu_suite.time.sleep(0.02)
    assert [(g, m) for _, g, m in got] == [(37.0, 12.0), (90.0, 55.0)]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert gpu_suite._nvml_sampler(0.0, []) is None


def test_concurrency_rounds_and_windows():
    """The concurrency step's engines: 3 rounds of 16 tasks (the
    solutions, then each round's own candidates), the steady window from
    the 16th result to the 32nd while the third round keeps the queue
    full, and the third round's window, which ends with the queue dry."""
    tasks = [(f"p{i}.py", f"s{i}.py") for i in range(4)]
    own = [f"c{j}.py" for j in range(16)]
    args = gpu_suite._concurrency_args(tasks, [None, own, None])
    cands = [args[i + 1] for i, a in enumerate(args) if a == "--cand"]
    assert len(cands) == 48 and args.count("--ref") == 12
    assert cands[:4] == ["s0.py"] * 4 and cands[16:20] == own[:4] and cands[-1] == "s3.py"
    assert args[args.index("c4.py") - 3:args.index("c4.py")] == ["--ref", "p1.py", "--cand"]
    arrivals = [float(i * i) for i in range(48)]  # given in any order
    steady, dry = gpu_suite.concurrency_windows(arrivals[::2] + arrivals[1::2])
    assert (steady, dry) == (31 ** 2 - 15 ** 2, 47 ** 2 - 31 ** 2)
    assert gpu_suite.concurrency_windows(arrivals[:32]) == (float("inf"), float("inf"))


def test_lock_timeline_window_is_the_results_given():
    """timeline(results, window): the steady state is that of the window's
    results, not the later half's."""
    import lock_timeline
    res = [{"task_id": "a", "_t": 1.0, "timings": {"lock_trace": [["timing", "e", 0.0, 10.0, 30.0]]}},
           {"task_id": "b", "_t": 2.0, "timings": {"lock_trace": [["timing", "e", 40.0, 50.0, 60.0]]}}]
    assert lock_timeline.timeline(res)["window_ms"] == 10.0  # b's hold
    shares = lock_timeline.timeline(res, res[:1])
    assert shares.pop("window_ms") == 20.0 and shares == {"exclusive held": 1.0}


def test_spare_memory_names_the_least_free_share():
    res = [{"timings": {"warm_spare": {"mem_mib": [100000.0, 143771.0]}}},
           {"timings": {"warm_spare": {"mem_mib": [60000.0, 143771.0]}}},
           {"timings": {"warm_spare": {"mem_mib": None}}}, {"timings": {}}]
    line = gpu_suite.spare_memory(res)
    assert line.startswith("spare memory: least free 60000 of 143771 MiB (42%") and "2 spares" in line
    assert gpu_suite.spare_memory([{"timings": {}}]) == "spare memory: not reported"


def test_ab_specs_become_engines():
    """--ab specs: an environment variable's values, an option's values,
    a switch alone; anything else is refused."""
    got = gpu_suite.ab_engines(["KGYM_CUDA_IPC=1,0", "--prewarm=5", "--no-sandbox"])
    assert got == [(", KGYM_CUDA_IPC=1", {"KGYM_CUDA_IPC": "1"}, ()),
                   (", KGYM_CUDA_IPC=0", {"KGYM_CUDA_IPC": "0"}, ()),
                   (", --prewarm=5", {}, ("--prewarm", "5")),
                   (", --no-sandbox", {}, ("--no-sandbox",))]
    for bad in ("KGYM_X", "=1", "KGYM_X="):
        try:
            gpu_suite.ab_engines([bad])
        except SystemExit as e:
            assert "--ab wants" in str(e)
        else:
            raise AssertionError(f"{bad!r} accepted")


def test_unaccounted_is_total_less_the_phases():
    """gpu_suite.unaccounted: what of timings.total no phase accounts for,
    and a staged task's gate wait (a phase, counted apart)."""
    res = [{"timings": {"total": 1000.0, "setup": 100.0, "compile": 200.0,
                        "correctness": 300.0, "timing": 250.0, "close": 10.0}},
           {"timings": {"total": 900.0, "setup": 50.0, "gate": 400.0, "correctness": 300.0,
                        "timing": 100.0, "profiling": None}},
           {"timings": {}}]
    line = gpu_suite.unaccounted(res)
    assert "median 95, mean 95" in line and "staged 1 of 2, gate wait median 400" in line
    assert gpu_suite.unaccounted([{}]) == "unaccounted: no timings"


def test_steady_window_is_the_second_round_of_three():
    """lock_timeline.steady_window: of 48 results the 17th to the 32nd by
    arrival (what gpu_suite measures and sched_report counts), of other
    counts the later half."""
    import lock_timeline  # bench/, on the path through gpu_suite
    res = [{"_t": float(47 - i), "k": 47 - i} for i in range(48)]
    assert [r["k"] for r in lock_timeline.steady_window(res)] == list(range(16, 32))
    assert [r["k"] for r in lock_timeline.steady_window(res[:32])] == list(range(32, 48))


def test_matched_ratio_weighs_the_4_way_window_by_the_serial_time_of_its_tasks():
    """gpu_suite.per_problem_time (a serial engine's mean gap before each
    steady-window result, by problem) and matched_ratio: a 4-way window
    that happens to hold 5 long tasks and 3 short ones is set against the
    serial time of those same 8 tasks, not of the serial window's mix."""
    serial = []
    t = 0.0
    for k in range(48):  # rounds of 8 short (0.5 s) then 8 long (1.5 s) tasks
        long = (k % 16) >= 8
        t += 1.5 if long else 0.5
        serial.append({"reference": "long.py" if long else "short.py", "_t": t})
    per = gpu_suite.per_problem_time(serial)
    assert per == {"short.py": 0.5, "long.py": 1.5}
    window = [{"reference": "long.py"}] * 10 + [{"reference": "short.py"}] * 6
    assert gpu_suite.matched_ratio(per, window, 9.0) == (10 * 1.5 + 6 * 0.5) / 9.0
    assert gpu_suite.matched_ratio(per, [{"reference": "other.py"}], 9.0) is None
    assert gpu_suite.matched_ratio(per, window, float("inf")) is None


def test_the_readers_take_the_kept_gzipped_results_and_plain_ones(tmp_path):
    """bench/results keeps a run's result objects as FILE.jsonl.gz;
    lock_timeline.read_results (which sched_report uses too) reads those
    and a device run's plain gpu_results.jsonl alike, skipping lines that
    are not objects."""
    import gzip
    import json
    import lock_timeline
    rows = [{"task_id": "a", "timings": {}}, {"task_id": "b", "timings": {"total": 1.0}}]
    text = "# header\n" + "".join(json.dumps(r) + "\n" for r in rows) + "\n"
    plain = tmp_path / "gpu_results.jsonl"
    plain.write_text(text)
    packed = tmp_path / "kept.jsonl.gz"
    with gzip.open(packed, "wt") as f:
        f.write(text)
    assert lock_timeline.read_results(str(plain)) == rows
    assert lock_timeline.read_results(str(packed)) == rows
