#!/usr/bin/env python3
"""bench/hack_checks: what the hacking checks cost on the example problems.

Evaluates every problem of problems/<set>/level*/ with its project solution
(solutions/<name>.<backend>.py) through the harness (warm spawner: torch
imported once, roles forked), alternating run_hack_checks true and false,
and prints per problem the median of timings.total (judge clock, ms) and of
the correctness + recheck phases for both settings, and the overhead.

usage: PYTHONPATH=harness bench/hack_checks/run.py [--set cpu] [--backend cpu]
           [--device cpu] [--n 5] [--json out.jsonl]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "harness"))

from kgym_harness.launcher import evaluate  # noqa: E402
from kgym_harness.warm import WarmSpawner  # noqa: E402


def problems(pset: str, backend: str) -> list[tuple[str, str]]:
    out = []
    for ref in sorted(glob.glob(os.path.join(ROOT, "problems", pset, "level*", "*.py"))):
        name = os.path.splitext(os.path.basename(ref))[0]
        sol = os.path.join(os.path.dirname(ref), "solutions", f"{name}.{backend}.py")
        if os.path.exists(sol):
            out.append((ref, sol))
    return out


def phase_ms(r: dict, names: tuple[str, ...]) -> float:
    return sum(float(r["timings"].get(n) or 0.0) for n in names)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="cpu")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--device", default=None)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print(f"# bench/hack_checks set={a.set} backend={a.backend} device={a.device} n={a.n} "
          f"date={time.strftime('%Y-%m-%d %H:%M:%S')} host={os.uname().nodename} "
          f"cpus={os.cpu_count()}")
    print(f"{'problem':34s} {'total on':>9s} {'total off':>9s} {'overhead':>8s} "
          f"{'chk on':>8s} {'chk off':>8s}  verdicts")
    spawner = WarmSpawner()
    sink = open(a.json, "w") if a.json else None
    ratios = []
    try:
        for ref, sol in problems(a.set, a.backend):
            task = {"reference_code": open(ref).read(), "kernel_code": open(sol).read(),
                    "backend": a.backend, "enable_profiling": True, "timeout": 600}
            if a.device:
                task["device"] = a.device
            evaluate(dict(task, seed=1), spawner=spawner)  # builds the extension once
            res: dict[bool, list[dict]] = {True: [], False: []}
            for i in range(a.n):
                for on in (True, False) if i % 2 == 0 else (False, True):
                    r = evaluate(dict(task, run_hack_checks=on, seed=100 + i), spawner=spawner)
                    res[on].append(r)
                    if sink:
                        sink.write(json.dumps({"problem": os.path.relpath(ref, ROOT),
                                               "run_hack_checks": on, "verdict": r["verdict"],
                                               "hack_reasons": r["hack_reasons"],
                                               "timings": r["timings"],
                                               "checks": {k: v for k, v in r["checks"].items()
                                                          if k in ("quiet", "degenerate",
                                                                   "speedup_rechecked")}})
                                   + "\n")
            tot = {on: statistics.median(phase_ms(r, ("total",)) for r in res[on])
                   for on in res}
            chk = {on: statistics.median(phase_ms(r, ("correctness", "recheck",
                                                      "speedup_recheck")) for r in res[on])
                   for on in res}
            verdicts = sorted({r["verdict"] for on in res for r in res[on]})
            ratios.append(tot[True] / tot[False])
            name = os.path.relpath(ref, os.path.join(ROOT, "problems"))
            print(f"{name:34s} {tot[True]:9.1f} {tot[False]:9.1f} "
                  f"{100 * (tot[True] / tot[False] - 1):7.1f}% {chk[True]:8.1f} "
                  f"{chk[False]:8.1f}  {','.join(verdicts)}", flush=True)
    finally:
        spawner.close()
        if sink:
            sink.close()
    if ratios:
        print(f"median overhead of run_hack_checks: "
              f"{100 * (statistics.median(ratios) - 1):.1f}% of timings.total")


if __name__ == "__main__":
    main()
