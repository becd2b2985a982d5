#!/usr/bin/env python3
"""How fast warm spares can be made, several at once (issue 4).

Four at a time on the H200 a spare's start-up took 2-3x as long as alone
(prep 3.3 s against 1.4 s, its judge's CUDA context and preload set-up
2.3 s against 0.4 s, the preload 3.1-3.4 s against 1.0 s:
bench/results/2026-12-01-gpu-h200-s8.txt) and tasks waited for spares.
This forks N children at once from a parent that imported torch, triton
and the harness without touching CUDA (as the zygote does); each does a
spare's start-up without the device lock and without a judge, phase by
phase: the CUDA context (torch.cuda.set_device), prewarm.preload_setup,
prewarm.warm_prep, every preload unit, prewarm.warm_device. Prints each
phase's median and largest time over the children, for N = 1, 2, 4, 8
(or --n), and the wall of the whole batch: a phase whose time grows with
N while the CPUs are not all busy is one the driver serialises.

    bench/diag/spare_supply.py [--n 1,2,4,8]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness"))
from ctx_create import fork_child  # noqa: E402  (bench/diag/ctx_create.py, next to this one)


def _child(w: int) -> None:
    import torch
    from kgym_harness import cpustat, prewarm
    cpustat.mark_fork()
    ms: dict[str, float] = {}

    def phase(name: str, fn) -> None:  # wall, then CPU and run-queue ms, modules imported
        t, s0 = time.perf_counter(), cpustat.sample()
        fn()
        ms[name] = (time.perf_counter() - t) * 1e3
        s1 = cpustat.sample()
        ms[name + "_cpu"], ms[name + "_runq"] = s1[0] - s0[0], s1[1] - s0[1]
        ms[name + "_mods"] = s1[2] - s0[2]

    phase("context", lambda: torch.cuda.set_device(0))
    phase("preload_setup", lambda: prewarm.preload_setup("cuda:0"))
    phase("warm_prep", lambda: prewarm.warm_prep("cuda:0"))
    phase("preload", lambda: prewarm.preload("cuda:0", list(prewarm.units())))
    phase("warm_device", lambda: prewarm.warm_device("cuda:0"))
    os.write(w, (json.dumps(ms) + "\n").encode())


def batch(n: int) -> tuple[float, list[dict]]:
    t0 = time.perf_counter()
    kids = [fork_child(_child) for _ in range(n)]
    out = []
    for pid, r in kids:
        with os.fdopen(r) as f:
            line = f.read().strip()
        os.waitpid(pid, 0)
        if line:
            out.append(json.loads(line))
    return (time.perf_counter() - t0) * 1e3, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="1,2,4,8")
    args = ap.parse_args()
    import torch  # noqa: F401  the parent imports, never starts CUDA
    import triton  # noqa: F401
    from kgym_harness import prewarm  # noqa: F401
    for n in (int(x) for x in args.n.split(",")):
        wall, rows = batch(n)
        if not rows:
            print(f"n={n}: no child reported (no CUDA device?)", flush=True)
            continue
        parts = ", ".join(
            f"{k} {statistics.median(r[k] for r in rows):.0f}/{max(r[k] for r in rows):.0f}"
            for k in rows[0])
        print(f"n={n}: batch {wall:.0f} ms; per phase median/max ms: {parts}", flush=True)


if __name__ == "__main__":
    main()
