#!/usr/bin/env python3
"""GPU suite (make test-gpu): checks and measurements that need a CUDA GPU.

Runs `build/kgym eval` (the real worker path: zygote, sandbox, judge and
candidate children) on the GPU example problems and prints PASS/FAIL lines
and the figures the issues ask for:

  honest      every GPU problem's honest triton/cuda solutions pass
  decoy       a Triton kernel defined but never launched -> hacked
  illegal     an illegal memory access -> runtime_error, next task passes
  side_stream work left on a side stream is timed at its true cost
  self        reference-vs-itself speedup in [0.98, 1.02] (timing_repeat)
  repeat      10 evaluations of one candidate: speedup std/mean <= 2%
  overhead    fixed cost per evaluation, zygote vs fresh interpreter
  e2e         Linear+ReLU 4096^3 fp32, 5 trials, 100 timed, profiling and
              hack checks on, several candidates in one run: wall per eval
  concurrency 16 mixed triton tasks on a warm engine (after 16 as warm-up,
              with 16 more keeping the queue full), --concurrency 4 vs 1:
              steady-state throughput and kernel medians, on repeated
              candidates (all cached) and on distinct ones (each compiles,
              as a policy's samples do)
  redteam     the red-team corpus (kgym redteam --backend all): every cheat
              caught as labelled, no honest candidate flagged
  pytest      the CUDA paths' own tests: tests/harness/*_gpu.py (timing
              lead, IPC channel, device digests and guards)
  ahead       only with --only: the concurrency step on distinct candidates
              with compile ahead (KGYM_COMPILE_AHEAD) off, then on
  ab          only with --only, and --ab VAR=A,B (one or more): the same
              once per value of the engines' environment variable VAR (or
              of a kgym eval option, --prewarm=5,7, or with a switch,
              --no-sandbox); distinct candidates, or --ab-kinds
              repeated,distinct

Writes every result object to OUTDIR/gpu_results.jsonl and the summary to
OUTDIR/gpu_summary.txt. Exit status 1 if any check failed.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGYM = os.path.join(ROOT, "build", "kgym")
GPU = os.path.join(ROOT, "problems", "gpu")
CANDS = os.path.join(ROOT, "tests", "gpu", "candidates")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import variants  # noqa: E402  (bench/variants.py)
import lock_timeline  # noqa: E402  (bench/lock_timeline.py)
import sched_report  # noqa: E402  (bench/sched_report.py)

lines: list[str] = []
failures: list[str] = []
all_results: list[dict] = []


def say(s: str = "") -> None:
    print(s, flush=True)
    lines.append(s)


def check(name: str, ok: bool, detail: str) -> None:
    say(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    if not ok:
        failures.append(name)


def _cpu_now() -> tuple[int, int, int]:
    """(busy jiffies, all jiffies, runnable tasks) of the machine (/proc/stat)."""
    busy = total = running = 0
    with open("/proc/stat") as f:
        for ln in f:
            if ln.startswith("cpu "):
                v = [int(x) for x in ln.split()[1:]]
                total = sum(v[:8])
                busy = total - v[3] - v[4]  # all but idle and iowait
            elif ln.startswith("procs_running"):
                running = int(ln.split()[1])
    return busy, total, running


def cpu_use(trace: list, t0: float, t1: float) -> str:
    """The machine's CPU use between t0 and t1 (seconds since the eval
    began) from kgym_eval's samples: busy share of all CPUs and the mean
    number of runnable tasks (procs_running), against the CPU count."""
    pts = [p for p in trace if t0 <= p[0] <= t1]
    if len(pts) < 2:
        return "cpu: too few samples"
    d_busy, d_all = pts[-1][1] - pts[0][1], pts[-1][2] - pts[0][2]
    run = statistics.mean(p[3] for p in pts)
    return (f"cpu: {100 * d_busy / max(d_all, 1):.0f}% of {os.cpu_count()} CPUs busy, "
            f"runnable tasks mean {run:.1f} (max {max(p[3] for p in pts)})")


def gpu_use(trace: list, t0: float, t1: float) -> tuple[str, float | None]:
    """The device's use between t0 and t1 (seconds since the eval began)
    from kgym_eval's gpu_trace: the mean of NVML's utilization.gpu (share
    of its sample period in which a kernel ran; the timing loop's lead
    sleeps and L2 flushes count) and utilization.memory (share in which
    device memory was read or written). (line, mean kernel share 0-1)."""
    pts = [p for p in trace if t0 <= p[0] <= t1]
    if len(pts) < 2:
        return "gpu: too few samples (nvidia-smi)", None
    busy = statistics.mean(p[1] for p in pts) / 100
    mem = statistics.mean(p[2] for p in pts) / 100
    return (f"gpu: a kernel running {100 * busy:.0f}% of the time, memory busy "
            f"{100 * mem:.0f}% (NVML, {len(pts)} samples)"), busy


def _nvml_sampler(t0: float, into: list) -> subprocess.Popen | None:
    """nvidia-smi printing utilization.gpu and .memory every 100 ms, each
    line put into `into` as (seconds since t0, gpu %, memory %) by a reader
    thread; None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    proc = subprocess.Popen([exe, "--query-gpu=utilization.gpu,utilization.memory",
                             "--format=csv,noheader,nounits", "-lms", "100", "-i", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read() -> None:
        for ln in proc.stdout:  # type: ignore[union-attr]
            try:
                g, m = (float(x) for x in ln.split(","))
            except ValueError:
                continue
            into.append((time.perf_counter() - t0, g, m))
    threading.Thread(target=read, daemon=True).start()
    return proc


def kgym_eval(ref: str, cands: list[str], backend: str, *extra: str, fresh: bool = False,
              concurrency: int = 1, timeout: int = 900, env: dict | None = None,
              cpu_trace: list | None = None,
              gpu_trace: list | None = None) -> tuple[list[dict], float]:
    """Runs kgym eval, results as they arrive (each with _t: seconds since
    the start); cpu_trace, when given, gets (t, busy, all, runnable) from
    /proc/stat every 0.2 s while it runs, gpu_trace (t, gpu %, memory %)
    from nvidia-smi every 0.1 s (_nvml_sampler)."""
    cmd = [KGYM, "eval", "--ref", ref, "--backend", backend, "--json", "--device", "cuda:0",
           "--concurrency", str(concurrency)]
    if fresh:
        cmd.append("--fresh")
    for c in cands:
        cmd += ["--cand", c]
    cmd += list(extra)
    t0 = time.perf_counter()
    arrivals = []  # (seconds since start, line): results come as they finish
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            cpu_trace.append((time.perf_counter() - t0, *_cpu_now()))  # type: ignore[union-attr]
            done.wait(0.2)
    sampler = threading.Thread(target=sample, daemon=True)
    if cpu_trace is not None:
        sampler.start()
    nvml = _nvml_sampler(t0, gpu_trace) if gpu_trace is not None else None
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, **(env or {}))) as proc:
        err_lines: list[str] = []
        drain = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
        drain.start()
        for ln in proc.stdout:
            arrivals.append((time.perf_counter() - t0, ln))
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        drain.join(timeout=5)
    done.set()
    if cpu_trace is not None:
        sampler.join()
    if nvml is not None:
        nvml.terminate()
        nvml.wait()
    wall = time.perf_counter() - t0
    p = subprocess.CompletedProcess(cmd, proc.returncode, "", "".join(err_lines))
    out = []
    for at, ln in arrivals:
        if ln.startswith("{"):
            r = json.loads(ln)
            r["_t"] = at
            r["_cand"] = os.path.relpath(r.get("candidate") or "?", ROOT)
            out.append(r)
            all_results.append(r)
    want = len(cands) + list(extra).count("--cand")
    if p.returncode != 0 or len(out) != want:
        say(f"  kgym eval rc={p.returncode}, {len(out)}/{want} results; stderr tail:")
        say("  " + p.stderr[-2000:].replace("\n", "\n  "))
    return out, wall


def brief(r: dict) -> str:
    sp = r.get("speedup")
    cov = (r.get("profile") or {}).get("coverage")
    return (f"{r.get('verdict')} speedup={sp if sp is None else round(sp, 3)} "
            f"kernel_ms={r.get('kernel_runtime')} ref_ms={r.get('reference_runtime')} "
            f"coverage={cov if cov is None else round(cov, 3)} hacks={r.get('hack_reasons')} "
            f"err={(r.get('error_message') or '')[:160]!r}")


def problems() -> list[str]:
    return sorted(glob.glob(os.path.join(GPU, "level*", "*.py")))


def solutions(prob: str, backend: str) -> list[str]:
    d = os.path.join(os.path.dirname(prob), "solutions")
    stem = os.path.splitext(os.path.basename(prob))[0]
    return sorted(glob.glob(os.path.join(d, f"{stem}.{backend}.py")))


def run_honest() -> None:
    say("== honest solutions")
    for prob in problems():
        for backend in ("triton", "cuda"):
            sols = solutions(prob, backend)
            if not sols:
                continue
            res, _ = kgym_eval(prob, sols, backend)
            for s, r in zip(sols, res):
                check(f"honest {os.path.relpath(s, GPU)}", r.get("verdict") == "pass", brief(r))
                prof = r.get("profile") or {}
                if prof.get("summary"):
                    say(f"  {prof['summary']}")


def run_cheats() -> None:
    say("== cheats and faults")
    gelu = os.path.join(GPU, "level1", "1_GELU.py")
    honest = solutions(gelu, "triton")[0]
    res, _ = kgym_eval(gelu, [os.path.join(CANDS, "decoy_triton.py"), honest], "triton")
    if len(res) == 2:
        check("decoy triton kernel", res[0].get("verdict") == "hacked"
              and res[0].get("decoy_kernel") is True, brief(res[0]))
    res, _ = kgym_eval(gelu, [os.path.join(CANDS, "illegal_address.py"), honest], "triton",
                       "--enable-profiling", "false")
    if len(res) == 2:
        msg = (res[0].get("error_message") or "") + json.dumps(res[0].get("error"))
        check("illegal address -> runtime_error", res[0].get("verdict") == "runtime_error"
              and ("illegal" in msg.lower() or "cuda" in msg.lower()), brief(res[0]))
        check("task after the illegal address passes", res[1].get("verdict") == "pass", brief(res[1]))
    # device hang: a kernel that never ends; the worker's timeout ends the task
    t0 = time.perf_counter()
    res, _ = kgym_eval(gelu, [os.path.join(CANDS, "device_hang.py"), honest], "triton",
                       "--enable-profiling", "false", "--timeout", "30")
    if len(res) == 2:
        check("device hang -> timeout", res[0].get("verdict") == "timeout", brief(res[0]))
        check("task after the device hang passes", res[1].get("verdict") == "pass",
              brief(res[1]) + f" (both in {time.perf_counter() - t0:.1f} s)")
    # side stream: the same GELU plus ~20 matmuls on an unjoined side stream
    res, _ = kgym_eval(gelu, [honest, os.path.join(CANDS, "side_stream_junk.py")], "triton",
                       "--run-hack-checks", "false", "--enable-profiling", "false")
    if len(res) == 2:
        junk_ms = measure_junk()
        extra = (res[1].get("kernel_runtime") or 0) - (res[0].get("kernel_runtime") or 0)
        check("side-stream work is timed", extra >= 0.8 * junk_ms,
              f"honest {res[0].get('kernel_runtime')} ms, side-stream {res[1].get('kernel_runtime')} ms, "
              f"difference {extra:.3f} ms vs side work alone {junk_ms:.3f} ms")


def measure_junk() -> float:
    code = (
        "import torch,sys;sys.path.insert(0,%r);import side_stream_junk as s\n"
        "s.junk_work();torch.cuda.synchronize()\n"
        "ts=[]\n"
        "for _ in range(10):\n"
        "  a=torch.cuda.Event(enable_timing=True);b=torch.cuda.Event(enable_timing=True)\n"
        "  a.record(s._side);s.junk_work();b.record(s._side);torch.cuda.synchronize();ts.append(a.elapsed_time(b))\n"
        "ts.sort();print(ts[len(ts)//2])\n" % CANDS)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        return float(p.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001
        say("  junk measure failed: " + p.stderr[-500:])
        return float("inf")


def self_candidate(prob: str, tmp: str) -> str:
    src = open(prob).read().replace("class Model(", "class ModelNew(")
    path = os.path.join(tmp, "self_" + os.path.basename(prob))
    with open(path, "w") as f:
        f.write(src)
    return path


def run_self_and_repeat() -> None:
    say("== timing_repeat")
    with tempfile.TemporaryDirectory() as tmp:
        for prob in problems():
            res, _ = kgym_eval(prob, [self_candidate(prob, tmp)], "triton",
                               "--run-hack-checks", "false", "--enable-profiling", "false")
            if res:
                sp = res[0].get("speedup") or 0
                check(f"self speedup {os.path.relpath(prob, GPU)}", 0.98 <= sp <= 1.02, brief(res[0]))
    gelu = os.path.join(GPU, "level1", "1_GELU.py")
    sol = solutions(gelu, "triton")[0]
    res, _ = kgym_eval(gelu, [sol] * 10, "triton", "--enable-profiling", "false")
    sps = [r.get("speedup") or 0 for r in res]
    if len(sps) >= 2:
        spread = statistics.pstdev(sps) / statistics.mean(sps)
        check("repeat spread (10 evaluations)", spread <= 0.02,
              f"speedups {[round(s, 4) for s in sps]} std/mean {100 * spread:.2f}%")


def run_overhead() -> None:
    say("== overhead (bench/overhead: trivial problem, 1 trial, 1 timed iteration, no profiling)")
    sys.path.insert(0, os.path.join(ROOT, "bench", "overhead"))
    import run as overhead  # bench/overhead/run.py
    meds = {}
    for mode in ("warm", "zygote", "fresh"):
        fixed, wall = overhead.measure("cuda:0", 6, mode == "fresh", mode == "warm")
        meds[mode] = statistics.median(fixed)
        say(f"  {mode}: fixed cost median {meds[mode]:.3f} s (per-eval "
            f"{[round(f, 3) for f in fixed]}), whole run {wall:.1f} s ({wall / 6:.2f} s per eval)")
    check("overhead (warm spares) <= 0.5 s", meds["warm"] <= 0.5, f"{meds['warm']:.3f} s "
          f"(zygote alone {meds['zygote']:.3f} s, fresh {meds['fresh']:.3f} s)")


def run_e2e() -> None:
    say("== end to end: Linear+ReLU 4096^3 fp32, 5 correctness trials, 100 timed, profiling+hacks")
    prob = os.path.join(GPU, "level2", "1_Linear_ReLU.py")
    sol = solutions(prob, "triton")[0]
    res, wall = kgym_eval(prob, [sol] * 8, "triton", "--num-correct-trials", "5",
                          "--num-perf-trials", "100")
    for r in res:
        say(f"  {brief(r)}")
        say(f"  timings {json.dumps(r.get('timings'))}")
    check("e2e: every evaluation passes", len(res) == 8 and all(r.get("verdict") == "pass"
                                                                for r in res),
          str([r.get("verdict") for r in res]))
    warm_errs = [w for r in res for k, w in ((r.get("timings") or {}).get("warm_spare") or {}).items()
                 if k.endswith("_error")]
    check("e2e: warm spares warmed without error", not warm_errs, str(warm_errs)[:600])
    prof = [r.get("profile") or {} for r in res]
    check("e2e: every evaluation has a profile summary", all(p.get("summary") for p in prof),
          str([(p.get("summary") or "")[:90] for p in prof[:2]]))
    if len(res) >= 2 and all(r.get("verdict") == "pass" for r in res):
        walls = [(r.get("timings") or {}).get("total", 0) / 1e3 for r in res[1:]]
        check("e2e wall per warm evaluation <= 2 s", statistics.median(walls) <= 2.0,
              f"median {statistics.median(walls):.3f} s, each {[round(w, 3) for w in walls]} s "
              f"(first, with Triton compile: "
              f"{(res[0].get('timings') or {}).get('total', 0) / 1e3:.3f} s; whole run {wall:.1f} s "
              f"= {wall / len(res):.2f} s per evaluation incl. start-up)")


def lock_use(res: list[dict], window_s: float) -> str:
    """How the device lock was used by these results (timings.lock_held,
    lock_wait): the exclusive hold summed over them against the window
    they finished in, i.e. the share of the time the device was being
    measured; the rest is what shared work and gaps had."""
    excl = sum(((r.get("timings") or {}).get("lock_held") or {}).get("exclusive", 0)
               for r in res) / 1e3
    shared = sum(((r.get("timings") or {}).get("lock_held") or {}).get("shared", 0)
                 for r in res) / 1e3
    wait = sum((r.get("timings") or {}).get("lock_wait") or 0 for r in res) / 1e3
    share = f"{100 * excl / window_s:.0f}%" if window_s and window_s != float("inf") else "-"
    return (f"lock over these {len(res)} tasks: held exclusive {excl:.1f} s ({share} of "
            f"{window_s:.1f} s), shared {shared:.1f} s (summed over tasks), waited {wait:.1f} s")


def _trace_label(label: str) -> str:
    """trial:3/candidate -> trial/candidate: holds grouped by kind."""
    head, _, tail = label.partition("/")
    return head.split(":")[0] + ("/" + tail if tail else "")


def lock_trace_report(res: list[dict]) -> list[str]:
    """From timings.lock_trace (KGYM_LOCK_TRACE=1; warm spares' in
    timings.warm_spare.lock_trace), per kind of hold: how many, mean and
    summed length, and how often it was the last shared hold to end before
    an exclusive one began (what the timing phase's drain waited for), with
    the drain time that it alone was left holding."""
    holds = []  # (task, label, mode, asked, got, released)
    for i, r in enumerate(res):
        t = r.get("timings") or {}
        for h in (t.get("lock_trace") or []) + ((t.get("warm_spare") or {}).get("lock_trace")
                                                 or []):
            holds.append((i, _trace_label(h[0]), h[1], h[2], h[3], h[4]))
    if not holds:
        return ["no lock trace (KGYM_LOCK_TRACE=1 not seen by the judges)"]
    kinds: dict = {}
    for task, label, mode, asked, got, rel in holds:
        k = kinds.setdefault((label, mode), {"n": 0, "ms": 0.0, "last": 0, "alone_ms": 0.0})
        k["n"] += 1
        k["ms"] += rel - got
    for task, label, mode, asked, got, rel in holds:
        if mode != "e":
            continue
        before = [h for h in holds if h[0] != task and h[2] == "s" and h[4] < got
                  and h[5] > asked and h[5] <= got + 2.0]
        if not before:
            continue
        last = max(before, key=lambda h: h[5])
        others = [h for h in before if h is not last]
        alone_from = max([asked] + [h[5] for h in others])
        k = kinds[(last[1], "s")]
        k["last"] += 1
        k["alone_ms"] += max(0.0, last[5] - alone_from)
    out = [f"{'hold':28s} {'mode':4s} {'n':>4s} {'mean ms':>8s} {'sum s':>6s} "
           f"{'last before excl':>16s} {'alone ms':>9s}"]
    for (label, mode), k in sorted(kinds.items(), key=lambda kv: -kv[1]["ms"]):
        out.append(f"{label:28s} {mode:4s} {k['n']:4d} {k['ms'] / k['n']:8.1f} "
                   f"{k['ms'] / 1e3:6.2f} {k['last']:16d} {k['alone_ms']:9.0f}")
    return out


ROUNDS = 3  # the concurrency step's rounds of 16 tasks per engine


def _concurrency_args(tasks: list[tuple[str, str]], rounds: list[list[str] | None]) -> list[str]:
    """kgym eval arguments for 16 tasks per round: each of the 4 problems
    with 4 candidates, the problem's solution 4 times for a round of None,
    else that round's candidate paths (one per task, in the same order)."""
    args: list[str] = []
    for cands_of_round in rounds:
        for i, (prob, sol) in enumerate(tasks):
            cands = [sol] * 4 if cands_of_round is None else cands_of_round[4 * i:4 * i + 4]
            args += ["--ref", prob]
            for c in cands:
                args += ["--cand", c]
    return args


def concurrency_windows(arrivals: list[float]) -> tuple[float, float]:
    """(steady, draining) walls of one engine's 48 results (arrival times,
    seconds): from the 16th result to the 32nd, while the third round keeps
    the queue full (the worker's steady state: no slot waits for work),
    and from the 32nd to the 48th, which ends with the queue running dry
    (the slots empty one by one; a batch's tail). inf when results are
    missing."""
    ts = sorted(arrivals)
    if len(ts) != 16 * ROUNDS:
        return float("inf"), float("inf")
    return ts[31] - ts[15], ts[47] - ts[31]


def per_problem_time(res: list[dict]) -> dict[str, float]:
    """A serial engine's time per task by problem (s): the mean gap before
    each result of the steady window (one task at a time, so the gap is
    that task's cost, start-up of the next spare overlapped as it is)."""
    by_arrival = sorted(res, key=lambda r: r["_t"])
    gaps: dict[str, list[float]] = {}
    for k in range(16, min(32, len(by_arrival))):
        r = by_arrival[k]
        gaps.setdefault(str(r.get("reference")), []).append(r["_t"] - by_arrival[k - 1]["_t"])
    return {p: statistics.mean(v) for p, v in gaps.items()}


def matched_ratio(serial_per_problem: dict[str, float], window: list[dict],
                  wall: float) -> float | None:
    """The 4-way engine's steady window against the serial engine's time for
    the same tasks: which 16 results arrive in a 4-way window varies (a
    long Linear task more or fewer moves it by ~0.6 s), where the serial
    window always holds four of each problem. None when a problem's serial
    time is unknown."""
    if not window or not wall or wall == float("inf"):
        return None
    try:
        return sum(serial_per_problem[str(r.get("reference"))] for r in window) / wall
    except KeyError:
        return None


def run_concurrency(kinds: tuple[str, ...] = ("repeated", "distinct"),
                    env: dict[str, str] | None = None, label: str = "",
                    flags: tuple[str, ...] = (), serial: dict | None = None,
                    serial_only: bool = False) -> dict:
    """Throughput of a warm worker at --concurrency 4 against 1, twice:
    repeated candidates (16 tasks, every kernel already in Triton's cache:
    the worst case for overlap, nothing is left but the evaluation itself)
    and distinct candidates (16 different sources, each compiled when it
    is evaluated, as a policy's samples are; bench/variants.py). Each
    engine runs 3 rounds of 16 tasks: the mixed solutions (warm-up:
    zygote, spares, caches), the 16 measured, and 16 more of the same
    kind that keep the queue full while the measured ones finish. The
    throughput is that of the steady window, the 16th result to the 32nd
    (concurrency_windows); the third round's own window, which ends with
    the queue running dry, is printed beside it. The targets (>= 2x,
    kernel medians within 2%) are checked on each kind. env: for every
    engine (the lock trace is always on); label: in each line's name;
    flags: kgym eval options for every engine; serial: the serial engine's
    figures from an earlier call (its return value) to compare with instead
    of running one again; serial_only: run the serial engine alone (no
    comparison). Returns the last kind's serial figures."""
    tasks = []
    for prob in problems()[:4]:
        s = solutions(prob, "triton")
        if s:
            tasks.append((prob, s[0]))
    tmp = tempfile.mkdtemp(prefix="kgym-variants-")
    nonce = f"{os.getpid()}-{int(time.time())}"
    for kind in kinds:
        kind_l = kind + label
        say(f"== concurrency ({kind_l} candidates): 16 mixed triton tasks on a warm engine, "
            "--concurrency 4 vs 1")
        walls: dict[int, float] = {}
        drains: dict[int, float] = {}
        per_problem: dict[str, float] = {}
        window4: list[dict] = []
        med: dict[int, list[float]] = {}
        busy: dict[int, float | None] = {}
        if serial is not None:
            walls[1], drains[1], med[1] = serial["wall"], serial["drain"], serial["med"]
            busy[1] = serial.get("busy")
            per_problem = serial["per_problem"]
        for conc in (1,) if serial_only else (1, 4) if serial is None else (4,):
            rounds: list[list[str] | None] = [None] * ROUNDS
            if kind == "distinct":  # fresh sources for each engine and round: nothing cached
                for rnd in range(1, ROUNDS):
                    paths = []
                    for i, (prob, sol) in enumerate(tasks):
                        with open(sol) as f:
                            src = f.read()
                        for k in range(4):
                            tag = f"c{conc}_r{rnd}_{i}_{k}"
                            path = os.path.join(tmp, f"{tag}_{os.path.basename(sol)}")
                            with open(path, "w") as f:
                                f.write(variants.distinct(src, f"{nonce}-{tag}"))
                            paths.append(path)
                    rounds[rnd] = paths
            args = _concurrency_args(tasks, rounds)
            trace: list = []
            gtrace: list = []
            res, wall = kgym_eval(args[1], [], "triton", *args[2:], "--enable-profiling",
                                  "false", *flags, concurrency=conc,
                                  env=dict(env or {}, KGYM_LOCK_TRACE="1"), cpu_trace=trace,
                                  gpu_trace=gtrace)
            ts = sorted(r["_t"] for r in res)
            walls[conc], drains[conc] = concurrency_windows(ts)
            window = lock_timeline.steady_window(res)  # the steady window's 16 results
            if conc == 1:
                per_problem = per_problem_time(res)
            else:
                window4 = window
            if walls[conc] != float("inf"):
                say(f"  concurrency {conc}, steady window: " + cpu_use(trace, ts[15], ts[31]))
                line, busy[conc] = gpu_use(gtrace, ts[15], ts[31])
                say(f"  concurrency {conc}, steady window: " + line)
            by_task: dict = {}
            for r in res:
                by_task.setdefault(r.get("reference"), []).append(r.get("kernel_runtime") or 0)
            med[conc] = [statistics.median(v) for k, v in sorted(by_task.items())]
            say(f"  concurrency {conc}: {len(res)} results in {wall:.1f} s, steady 16 in "
                f"{walls[conc]:.1f} s, last 16 (queue running dry) in {drains[conc]:.1f} s; "
                f"verdicts {sorted(set(r.get('verdict') for r in res))}; per-task total (s) "
                f"{[round((r.get('timings') or {}).get('total', 0) / 1e3, 2) for r in res]}")
            say("  " + lock_use(window, walls[conc]))
            shares = lock_timeline.timeline(res, window) if len(window) == 16 else {}
            if shares.pop("window_ms", None):  # what the lock was doing, steady state
                say("  lock timeline: " + ", ".join(f"{k} {100 * v:.0f}%"
                                                    for k, v in shares.items() if v >= 0.005))
            if conc > 1:
                for ln in lock_trace_report(window):
                    say("    " + ln)
            for ln in sched_report.report(res, window):  # spares' and tasks' CPU, run queue
                say("    " + ln)
            say(f"  compile (s) of the steady 16: "
                f"{[round((r.get('timings') or {}).get('compile', 0) / 1e3, 2) for r in window]}")
            say("  " + spare_memory(res))
            say("  " + unaccounted(window))
        if serial_only:
            continue
        ratio = walls[1] / walls[4] if walls[4] else 0
        dry = drains[1] / drains[4] if drains[4] else 0
        matched = matched_ratio(per_problem, window4, walls[4])
        if matched is not None:
            mix = sorted(os.path.basename(str(r.get("reference")))[:12] for r in window4)
            say(f"  steady window, same tasks: the serial engine's time for the 4-way window's "
                f"16 tasks {matched * walls[4]:.1f} s, x{matched:.2f} "
                f"({', '.join(f'{mix.count(m)} {m}' for m in sorted(set(mix)))})")
        diffs = [abs(a - b) / a for a, b in zip(med[1], med[4]) if a]
        say(f"  steady 16: serial {walls[1]:.1f} s, concurrency 4 {walls[4]:.1f} s, throughput "
            f"x{ratio:.2f}; last 16, queue running dry: serial {drains[1]:.1f} s, concurrency 4 "
            f"{drains[4]:.1f} s, x{dry:.2f}; max difference of the problems' kernel medians "
            f"{100 * max(diffs or [0]):.2f}%")
        if busy.get(1) and busy.get(4):
            say("  " + busy_bound(walls[1], busy[1], walls[4], busy[4]))
        check(f"concurrency ({kind_l}) throughput >= 2x", ratio >= 2.0, f"x{ratio:.2f}")
        within = sum(d <= 0.02 for d in diffs)
        check(f"concurrency ({kind_l}): kernel medians within 2% of the serial run",
              bool(diffs) and within == len(diffs),
              f"{within}/{len(diffs)} problems within 2%; differences "
              f"{[round(100 * d, 2) for d in diffs]} %")
    shutil.rmtree(tmp, ignore_errors=True)
    return {"wall": walls[1], "drain": drains[1], "med": med[1], "per_problem": per_problem,
            "busy": busy.get(1)}


def busy_bound(wall1: float, busy1: float, wall4: float, busy4: float) -> str:
    """The device's kernel time of the 16 tasks serial and at 4-way (NVML
    share x window), and the most throughput that allows: a window cannot
    be shorter than its kernel time, since the device runs the kernels of
    separate processes one at a time (no MPS)."""
    k1, k4 = busy1 * wall1, busy4 * wall4
    return (f"device kernel time of the 16 tasks: serial {k1:.1f} s ({100 * busy1:.0f}% of "
            f"{wall1:.1f} s), 4-way {k4:.1f} s ({100 * busy4:.0f}% of {wall4:.1f} s): "
            f"x{wall1 / k4:.2f} at most with the 4-way engine's device work, x{wall1 / k1:.2f} "
            "with the serial one's")


PHASES = ("setup", "compile", "gate", "correctness", "timing", "profiling", "timing_checks",
          "recheck", "speedup_recheck", "quiescence", "ablation", "close")


def unaccounted(res: list[dict]) -> str:
    """What of each task's timings.total (the engine's clock, from hand-over
    to result) no judge phase accounts for: the hand-over, the judge's start
    and end, a task's wait for a spare still warming up (its judge starts
    when the warm-up ends: most of it at 4-way on the H200)
    and, before finish_early, the wait for the pair's exits (CUDA context
    teardown: ~100 ms a task serial, 200-580 ms at 4-way); and
    a staged task's wait at its gate."""
    gaps, gates = [], []
    for r in res:
        t = r.get("timings") or {}
        if not isinstance(t.get("total"), (int, float)):
            continue
        gaps.append(t["total"] - sum(float(t.get(k) or 0) for k in PHASES))
        if isinstance(t.get("gate"), (int, float)):
            gates.append(t["gate"])
    if not gaps:
        return "unaccounted: no timings"
    out = (f"unaccounted per task (total - phases, ms): median {statistics.median(gaps):.0f}, "
           f"mean {statistics.mean(gaps):.0f}")
    if gates:
        out += (f"; staged {len(gates)} of {len(gaps)}, gate wait median "
                f"{statistics.median(gates):.0f} ms")
    return out


def spare_memory(res: list[dict]) -> str:
    """The least free device memory a warm spare's judge saw
    (timings.warm_spare.mem_mib), against the engine's floor."""
    seen = [m for m in (((r.get("timings") or {}).get("warm_spare") or {}).get("mem_mib")
                        for r in res) if isinstance(m, list) and len(m) == 2 and m[1]]
    if not seen:
        return "spare memory: not reported"
    free, total = min(seen, key=lambda m: m[0] / m[1])
    floor = os.environ.get("KGYM_SPARE_MEM_FLOOR", "0.25")
    return (f"spare memory: least free {free:.0f} of {total:.0f} MiB ({100 * free / total:.0f}%; "
            f"floor {floor}) over {len(seen)} spares")


# ---- redteam (tests/redteam, docs/redteam.md) ---------------------------------

def run_redteam() -> None:
    """The whole red-team corpus on this machine: `kgym redteam --backend all
    --json` (cpu candidates on the CPU engine, triton and cuda ones on the GPU
    engine). Writes redteam.json and redteam_table.txt to the output dir;
    every row must be OK (no MISS, FALSE_ALARM or ERROR)."""
    out_dir = os.environ.get("OUT") or os.path.join(ROOT, "bench", "results")
    jobs = os.environ.get("KGYM_REDTEAM_JOBS", "2")
    say(f"== redteam: kgym redteam --backend all --json --jobs {jobs}")
    tmp = tempfile.mkdtemp(prefix="kgym-redteam-")
    os.chmod(tmp, 0o755)  # the sandboxed candidate (nobody) enters its work dir below
    t0 = time.perf_counter()
    try:
        p = subprocess.run([KGYM, "redteam", "--backend", "all", "--json", "--jobs", jobs],
                           capture_output=True, text=True,
                           timeout=float(os.environ.get("KGYM_REDTEAM_TIMEOUT", "540")),
                           env=dict(os.environ, TMPDIR=tmp))
    finally:
        subprocess.run(["rm", "-rf", tmp])
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        check("redteam ran", False, f"rc={p.returncode}, no JSON; stderr: {p.stderr[-2000:]}")
        return
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "redteam.json"), "w") as f:
        json.dump(doc, f, indent=1)
    rows = doc.get("rows", [])
    table = [f"{'family':<22} {'candidate':<58} {'expected':<44} {'got':<40} {'time_s':>6}  status"]
    for r in rows:
        exp = r["expect"] + (f"[{r['reasons']}]" if r.get("reasons") else "") + \
            (f" {r['code']}" if r.get("code") else "") + (f" +{r['warn']}" if r.get("warn") else "")
        g = r["got"]
        got = g["verdict"] + (f"[{','.join(g['hack_reasons'])}]" if g.get("hack_reasons") else
                              (f" {g['error_code']}" if g.get("error_code") else ""))
        secs = ((r.get("result") or {}).get("timings") or {}).get("total") or 0
        table.append(f"{r['family']:<22} {r['candidate']:<58} {exp:<44} {got:<40} "
                     f"{secs / 1e3:6.1f}  {r['status']}")
        if r["status"] != "OK":
            table.append(f"    {r['status']}: {(g.get('error_message') or '')[:300]} "
                         f"(speedup {g.get('speedup')})")
    c = doc.get("counts", {})
    table.append(f"{len(rows)} candidates in {wall:.0f} s: {c.get('ok')} OK, {c.get('miss')} MISS, "
                 f"{c.get('false_alarm')} FALSE_ALARM, {c.get('error')} ERROR, "
                 f"{c.get('skipped_need_gpu')} skipped")
    with open(os.path.join(out_dir, "redteam_table.txt"), "w") as f:
        f.write("\n".join(table) + "\n")
    for ln in table:
        say("  " + ln)
    check("redteam: every cheat caught as labelled, no honest candidate flagged",
          p.returncode == 0 and doc.get("gpu") is True and rows and
          all(r["status"] == "OK" for r in rows),
          f"rc={p.returncode}, counts {c}; stderr tail: {p.stderr[-500:]!r}")


def run_pytest() -> None:
    """tests/harness/*_gpu.py under pytest (they skip without a GPU, so a
    skip here is a failure)."""
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "harness", "*_gpu.py")))
    say(f"== pytest: {' '.join(os.path.basename(f) for f in files)}")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                        *files], cwd=os.path.join(ROOT, "tests", "harness"),
                       capture_output=True, text=True, timeout=600)
    tail = p.stdout.strip().splitlines()[-12:]
    for ln in tail:
        say("  " + ln)
    check("pytest: the GPU tests pass, none skipped",
          p.returncode == 0 and " skipped" not in (tail[-1] if tail else ""),
          f"rc={p.returncode}; {tail[-1] if tail else p.stderr[-300:]!r}")


def run_ahead_ab() -> None:
    """Compile ahead (harness/kgym_harness/ahead.py, KGYM_COMPILE_AHEAD)
    off, then on, on distinct candidates (the ones that compile): one run
    of each, side by side. Not part of the default steps' figures: it is
    an opt-in under evaluation."""
    for on in ("0", "1"):
        run_concurrency(("distinct",), {"KGYM_COMPILE_AHEAD": on}, f", compile ahead {on}")


def ab_engines(specs: list[str]) -> list[tuple[str, dict[str, str], tuple[str, ...]]]:
    """The 4-way engines of --ab specs, as (label, env, kgym eval flags):
    VAR=A,B,... one per value of the environment variable VAR; --FLAG=A,B
    one per value of a kgym eval option; --FLAG alone (no "="), one engine
    with that switch (--no-sandbox)."""
    out: list[tuple[str, dict[str, str], tuple[str, ...]]] = []
    for spec in specs:
        var, eq, values = spec.partition("=")
        if var.startswith("--") and not eq:
            out.append((f", {var}", {}, (var,)))
            continue
        if not var or not values:
            raise SystemExit("--ab wants VAR=VALUE,VALUE,..., --FLAG=VALUE,... or --FLAG")
        for v in values.split(","):
            if var.startswith("--"):
                out.append((f", {var}={v}", {}, (var, v)))
            else:
                out.append((f", {var}={v}", {var: v}, ()))
    return out


def run_ab(specs: list[str], serial_once: bool = False,
           kinds: tuple[str, ...] = ("distinct",)) -> None:
    """--ab (one or more, ab_engines): the concurrency step on each kind of
    candidates (--ab-kinds; distinct by default) once per engine, side by
    side (an A/B of a switch under evaluation). serial_once: per kind, one
    serial engine with the defaults, and each 4-way engine (of every spec)
    compared with it (for a switch meant for 4-way engines)."""
    engines = ab_engines(specs)
    for kind in kinds:
        serial = run_concurrency((kind,), label=", defaults",
                                 serial_only=True) if serial_once else None
        for label, env, flags in engines:
            run_concurrency((kind,), env, label, flags, serial)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--only", default="")
    ap.add_argument("--ab", action="append", default=[], help="VAR=A,B: with --only ab, "
                    "the distinct concurrency step once per value of the engines' variable "
                    "VAR (or kgym eval option: --ab=--prewarm=7,12, or switch: --ab=--no-sandbox; "
                    "with the = sign: argparse takes a value that starts with -- for an "
                    "option); may be given several times")
    ap.add_argument("--ab-serial-once", action="store_true", help="with --ab: one serial "
                    "engine (the defaults), each value's 4-way engine compared with it")
    ap.add_argument("--ab-kinds", default="distinct", help="with --ab: the kinds of "
                    "candidates, repeated,distinct (default distinct)")
    args = ap.parse_args()
    steps = {"honest": run_honest, "cheats": run_cheats, "repeat": run_self_and_repeat,
             "overhead": run_overhead, "e2e": run_e2e, "concurrency": run_concurrency}
    steps["redteam"] = run_redteam  # the red-team corpus, docs/redteam.md
    steps["ahead"] = run_ahead_ab
    kinds = tuple(k for k in args.ab_kinds.split(",") if k)
    if not kinds or set(kinds) - {"repeated", "distinct"}:
        raise SystemExit("--ab-kinds wants repeated, distinct or both")
    steps["ab"] = lambda: run_ab(args.ab, args.ab_serial_once, kinds)
    steps["pytest"] = run_pytest
    chosen = [s for s in args.only.split(",") if s] or [s for s in steps
                                                         if s not in ("ahead", "ab")]
    say(f"# gpu suite {time.strftime('%Y-%m-%d %H:%M:%S')} host={os.uname().nodename}")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        smi = "nvidia-smi not found"
    say(f"# gpu: {smi}")
    for name in chosen:
        t0 = time.perf_counter()
        try:
            steps[name]()
        except Exception as e:  # noqa: BLE001 - report and go on
            check(name, False, f"crashed: {type(e).__name__}: {e}")
        say(f"   ({name}: {time.perf_counter() - t0:.1f} s)")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_results.jsonl"), "w") as f:
        for r in all_results:
            f.write(json.dumps(r) + "\n")
    say(f"# {len(failures)} failed: {failures}")
    with open(os.path.join(args.out, "gpu_summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
