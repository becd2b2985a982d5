#!/usr/bin/env python3
"""What the first use of each device operation costs in a fresh process,
with CUDA's module loading lazy (the default) or eager (issue 4).

A task's first checked call held the device lock for 250-400 ms on the
H200 where later ones take 10-17 ms (bench/results/2026-12-01-*-s6-*):
the harness's own torch operations (digests, poison, comparisons) paying
a one-time cost at first use. This runs, in a child process per mode
(CUDA_MODULE_LOADING=LAZY, EAGER), the CUDA context, the cuBLAS handle,
then each operation twice on small tensors, and prints the first call's
time against the second's, the totals and the device memory in use.

    bench/diag/first_use.py [--device cuda:0] [--modes LAZY,EAGER,LAZY+preload]

LAZY+preload runs prewarm.preload (what a warm spare does before its task:
each unit run once on small zeroed tensors; captured into a never-launched CUDA graph until session 11) before the ops.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child(device: str) -> None:
    t0 = time.perf_counter()
    import torch
    sys.path.insert(0, os.path.join(ROOT, "harness"))
    from kgym_harness import compare, guards
    t_import = time.perf_counter() - t0
    dev = torch.device(device)
    out: dict = {"import_s": round(t_import, 3)}

    def timed(fn) -> float:
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize(dev)
        return (time.perf_counter() - t) * 1e3
    out["context_ms"] = round(timed(lambda: torch.zeros(1, device=dev)), 1)
    out["blas_handle_ms"] = round(timed(lambda: torch.cuda.current_blas_handle()), 1)
    if os.environ.get("KGYM_DIAG_PRELOAD") == "1":  # mode LAZY+preload
        from kgym_harness import prewarm
        took: dict = {}
        out["preload_errors"] = prewarm.preload(device,
                                                took=took)
        out["preload_ms"] = took.get("preload")
    x = torch.randn(4096, device=dev)
    y = x + 1e-3
    h = x.to(torch.float16)
    b = x.to(torch.bfloat16)
    i = torch.arange(4096, device=dev)
    ops = {
        "matmul 64": lambda: torch.ones(64, 64, device=dev) @ torch.ones(64, 64, device=dev),
        "randn": lambda: torch.randn(4096, device=dev),
        "remainder": lambda: torch.remainder(i, 7),
        "sum": lambda: x.sum(),
        "all": lambda: (x > -100).all(),
        "equal": lambda: torch.equal(x, y),
        "add": lambda: x + y,
        "mul": lambda: x * y,
        "cat": lambda: torch.cat([x, y]),
        "fill_": lambda: torch.empty(4096, device=dev).fill_(3.0),
        "abs max": lambda: (x - y).abs().max(),
        "isfinite": lambda: torch.isfinite(x).all(),
        "to fp16/bf16": lambda: (x.to(torch.float16), x.to(torch.bfloat16)),
        "where": lambda: torch.where(x > 0, x, y),
        "digests": lambda: guards.digests([x, i]),
        "compare f32 pass": lambda: compare.compare_outputs(x, x.clone(), 1e-2, 1e-2),
        "compare f32 fail": lambda: compare.compare_outputs(x, x + 1.0, 1e-2, 1e-2),
        "compare f16/bf16": lambda: (compare.compare_outputs(h, h.clone(), 1e-2, 1e-2),
                                     compare.compare_outputs(b, b.clone(), 1e-2, 1e-2)),
    }
    rows = {}
    for name, fn in ops.items():
        first = timed(fn)
        second = timed(fn)
        rows[name] = [round(first, 2), round(second, 2)]
    out["ops"] = rows
    free, total = torch.cuda.mem_get_info(dev)
    out["device_mem_used_mb"] = round((total - free) / 2**20)
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--modes", default="LAZY,EAGER,LAZY+preload")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.device)
        return
    for mode in args.modes.split(","):
        env = dict(os.environ, CUDA_MODULE_LOADING=mode.split("+")[0],
                   KGYM_DIAG_PRELOAD="1" if mode.endswith("+preload") else "0")
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--child", "--device", args.device],
                           env=env, capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            print(f"{mode}: rc={p.returncode} {p.stderr[-800:]}")
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        firsts = sum(v[0] for v in r["ops"].values())
        seconds = sum(v[1] for v in r["ops"].values())
        print(f"== CUDA_MODULE_LOADING={mode}: process {wall:.2f} s, import {r['import_s']} s, "
              f"context {r['context_ms']} ms, cuBLAS handle {r['blas_handle_ms']} ms, "
              f"device memory in use {r['device_mem_used_mb']} MB")
        if "preload_ms" in r:
            print(f"   prewarm.preload: {r['preload_ms']} ms, failed: {r['preload_errors']}")
        print(f"   ops: first calls {firsts:.1f} ms in all, second calls {seconds:.1f} ms")
        for name, (a, b) in r["ops"].items():
            print(f"   {name:18s} first {a:8.2f} ms  second {b:7.2f} ms")


if __name__ == "__main__":
    main()
