#!/usr/bin/env python3
"""bench/speed/cupti_probe.py: what the CUDA profiler's first start costs a
process, and what it leaves behind (docs/worker.md, "the spares' profiler
switch"). GPU only; each variant runs in a fresh process:

  control        no profiler: the host-bound loop timed twice (the noise)
  default        start+stop the profiler (CPU+CUDA activities), twice, then
                 one profiled run of the loop; the loop timed before and
                 after each step
  teardown0/1    the same with TEARDOWN_CUPTI=0 / 1 in the environment
  cuda_only      the same with the CUDA activity alone

The loop: 64x64 matmul + bias + relu (3 launches) and one tiny Triton
kernel, 1000 iterations, median of 5 repeats, us per iteration. A step
"leaves callbacks behind" when the loop after it is slower than before.

usage: bench/speed/cupti_probe.py [--variants a,b] [--child NAME]
Prints one table; writes cupti_probe.json to $OUT when set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "control": {},
    "default": {},
    "teardown0": {"TEARDOWN_CUPTI": "0"},
    "teardown1": {"TEARDOWN_CUPTI": "1"},
    "cuda_only": {},
}


def child(name: str) -> dict:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add1(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1.0, mask=m)

    dev = torch.device("cuda:0")
    t0 = time.perf_counter()
    torch.cuda.init()
    x = torch.randn(64, 64, device=dev)
    w = torch.randn(64, 64, device=dev)
    b = torch.randn(64, device=dev)
    z = torch.zeros(256, device=dev)
    torch.cuda.synchronize()
    out = {"variant": name, "cuda_init_s": round(time.perf_counter() - t0, 3)}

    def step() -> None:
        torch.relu(x @ w + b)
        add1[(1,)](z, 256, BLOCK=256)

    def loop_us() -> float:
        reps = []
        for _ in range(5):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(1000):
                step()
            torch.cuda.synchronize()
            reps.append((time.perf_counter() - t) * 1e6 / 1000)
        return round(statistics.median(reps), 2)

    for _ in range(200):  # compile and warm
        step()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    if name != "cuda_only":
        acts.insert(0, torch.profiler.ProfilerActivity.CPU)

    def start_stop() -> float:
        t = time.perf_counter()
        p = torch.profiler.profile(activities=acts)
        p.__enter__()
        p.__exit__(None, None, None)
        return round(time.perf_counter() - t, 3)

    out["loop_before_us"] = loop_us()
    if name == "control":
        time.sleep(1.0)
        out["loop_again_us"] = loop_us()
        return out
    out["first_start_stop_s"] = start_stop()
    out["loop_after_first_us"] = loop_us()
    out["second_start_stop_s"] = start_stop()
    out["loop_after_second_us"] = loop_us()
    t = time.perf_counter()
    with torch.profiler.profile(activities=acts) as p:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    n = sum(1 for e in p.events() if getattr(e, "device_type", None) is not None
            and "CUDA" in str(e.device_type))
    out["profiled_run_s"] = round(time.perf_counter() - t, 3)
    out["profiled_device_events"] = n
    out["loop_after_profiled_us"] = loop_us()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return 0
    rows = []
    for name in a.variants.split(","):
        env = dict(os.environ, **VARIANTS[name])
        t = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--child", name], env=env,
                           capture_output=True, text=True, timeout=240)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        row = json.loads(line[-1]) if line else {"variant": name, "error": r.stderr[-800:]}
        row["process_s"] = round(time.perf_counter() - t, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = ["loop_before_us", "first_start_stop_s", "loop_after_first_us",
            "second_start_stop_s", "loop_after_second_us", "profiled_run_s",
            "loop_after_profiled_us", "loop_again_us"]
    print("\n%-10s " % "variant" + " ".join("%22s" % k for k in keys))
    for row in rows:
        print("%-10s " % row["variant"] + " ".join("%22s" % row.get(k, "-") for k in keys))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "cupti_probe.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
