#!/usr/bin/env python3
"""bench/overhead: kgym's fixed cost per evaluation on a trivial problem (1
correctness trial, 1 timed iteration, no profiling, no hack checks), three
ways: warm spares (judge+candidate pairs forked and initialised ahead of
their task, the default), the zygote alone (--prewarm 0: each task forks
its pair when it starts), and a fresh interpreter per child (--fresh).

fixed cost = the engine's wall clock for the task (timings.total) minus the
kernel's own compile and timed runs (timings.compile, timings.timing).
The first evaluation of each run pays the kernel's first compile and is
left out. Prints one line per mode and the ratio; "per eval" is the whole
run's wall clock over the number of evaluations (throughput, start-up of the
first pair included).

usage: bench/overhead/run.py [--device cpu|cuda:0] [--n 8]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KGYM = os.path.join(ROOT, "build", "kgym")


def measure(device: str, n: int, fresh: bool, prewarm: bool = True) -> tuple[list[float], float]:
    cmd = [KGYM, "eval", "--ref", os.path.join(HERE, "tiny_ref.py"), "--backend", "triton",
           "--device", device, "--json", "--num-correct-trials", "1", "--num-perf-trials", "1",
           "--num-warmup", "0", "--enable-profiling", "false", "--run-hack-checks", "false"]
    cmd += ["--cand", os.path.join(HERE, "tiny_triton.py")] * n
    if fresh:
        cmd.append("--fresh")
    elif not prewarm:
        cmd += ["--prewarm", "0"]
    env = dict(os.environ)
    env.setdefault("TMPDIR", "/tmp")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    res = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if len(res) != n or any(r["verdict"] != "pass" for r in res):
        raise SystemExit(f"overhead: evaluations failed: {p.stderr[-2000:]} "
                         f"{[r.get('error_message') for r in res]}")
    fixed = []
    for r in res[1:]:
        t = r["timings"]
        fixed.append((t["total"] - t.get("compile", 0) - t.get("timing", 0)) / 1e3)
    return fixed, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=8)
    a = ap.parse_args()
    print(f"# bench/overhead device={a.device} n={a.n} date={time.strftime('%Y-%m-%d %H:%M:%S')} "
          f"host={os.uname().nodename} cpus={os.cpu_count()}")
    meds = {}
    for mode in ("warm", "zygote", "fresh"):
        fixed, wall = measure(a.device, a.n, mode == "fresh", mode == "warm")
        meds[mode] = statistics.median(fixed)
        print(f"{mode:7s} fixed cost median {meds[mode]:.3f} s  min {min(fixed):.3f}  "
              f"max {max(fixed):.3f}  (n={len(fixed)}; whole run {wall:.1f} s, "
              f"{wall / a.n:.3f} s per eval)")
    print(f"zygote saves {meds['fresh'] - meds['zygote']:.3f} s per evaluation "
          f"(fresh/zygote = {meds['fresh'] / meds['zygote']:.1f}x); warm spares save "
          f"{meds['zygote'] - meds['warm']:.3f} s more (zygote/warm = "
          f"{meds['zygote'] / meds['warm']:.1f}x)")


if __name__ == "__main__":
    main()
