#!/usr/bin/env python3
"""bench/speed/cupti_direct.py: CUPTI's activity API called directly
(harness/kgym_harness/cupti.py) against torch.profiler, each variant in a
fresh process. GPU only.

  direct   KernelTrace: its first start+stop, a second, the rows of 5
           calls of a 2048^2 matmul + relu (names, device us), the launch
           loop before and after
  torch    torch.profiler's first start+stop (the figure to beat)
  both     direct first, then torch.profiler in the same process: does
           kineto still work beside our callbacks

usage: bench/speed/cupti_direct.py [--variants a,b]; prints JSON lines and
a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def loop_us(torch, n: int = 500) -> float:
    a = torch.randn(64, 64, device="cuda")
    reps = []
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            torch.relu(a @ a + 1.0)
        torch.cuda.synchronize()
        reps.append((time.perf_counter() - t) / n * 1e6)
    return round(statistics.median(reps), 2)


def work(torch):
    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(5):
        torch.relu(x @ x)
    torch.cuda.synchronize()


def child(name: str) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "harness"))
    t0 = time.perf_counter()
    import torch
    torch.cuda.init()
    work(torch)
    out: dict = {"variant": name, "init_s": round(time.perf_counter() - t0, 3)}
    out["loop_before_us"] = loop_us(torch)
    if name in ("direct", "both"):
        from kgym_harness import cupti
        t = time.perf_counter()
        tr = cupti.trace()
        out["lib"] = tr.path
        out["load_s"] = round(time.perf_counter() - t, 4)
        for k in ("first", "second"):
            t = time.perf_counter()
            tr.start()
            out[f"{k}_start_s"] = round(time.perf_counter() - t, 4)
            work(torch)
            t = time.perf_counter()
            rows = tr.stop()
            out[f"{k}_stop_s"] = round(time.perf_counter() - t, 4)
            out[f"{k}_rows"] = len(rows)
        names: dict = {}
        for n, us in rows:
            names[n[:90]] = round(names.get(n[:90], 0.0) + us, 1)
        out["names_us"] = names
        out["loop_after_us"] = loop_us(torch)
    if name in ("torch", "both"):
        t = time.perf_counter()
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        prof.__enter__()
        prof.__exit__(None, None, None)
        out["torch_first_s"] = round(time.perf_counter() - t, 3)
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        prof.__enter__()
        work(torch)
        prof.__exit__(None, None, None)
        out["torch_events"] = sum(1 for e in prof.events()
                                  if str(getattr(e, "device_type", "")).endswith("CUDA"))
        out["loop_after_torch_us"] = loop_us(torch)
    if name == "both":
        t = time.perf_counter()
        tr.start()
        work(torch)
        out["direct_after_torch_rows"] = len(tr.stop())
        out["direct_after_torch_s"] = round(time.perf_counter() - t, 4)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="direct,torch,both")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)), flush=True)
        return 0
    for v in a.variants.split(","):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--child", v], capture_output=True,
                           text=True, timeout=240)
        line = (p.stdout.strip().splitlines() or ["{}"])[-1]
        try:
            res = json.loads(line)
        except ValueError:
            res = {"variant": v, "error": (p.stderr or p.stdout)[-1500:]}
        res["process_s"] = round(time.perf_counter() - t, 2)
        if p.returncode:
            res["rc"] = p.returncode
            res.setdefault("stderr", p.stderr[-1500:])
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
