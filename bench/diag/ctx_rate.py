#!/usr/bin/env python3
"""How many CUDA contexts a device makes and tears down per second (issue 4).

A worker task is two fresh processes, each with its own CUDA context, so
context making and teardown bound a worker's task rate. At --concurrency 4
on the H200 a spare's judge took 2.5-2.7 s to make its context against
0.4 s alone, and 32 contexts were made in the 13.4 s that 16 tasks took
(bench/results/2026-12-01-gpu-h200-s12.txt).

This keeps K children in flight for SECS seconds: each is forked from a
parent that imported torch without CUDA (as the zygote does), sets the
variant's environment, makes a context, writes its step times and exits;
the parent forks the next one when one is reaped. Prints per variant and K
the contexts per second and the median/largest time of each step:

  init     cuInit (the driver path) or torch.cuda.init (the torch path)
  context  the primary context retained and made current (driver path), or
           torch.cuda.set_device (torch path)
  alloc    one 1 MiB allocation and a synchronize
  exit     from the child's line to its reaping (the teardown)

    bench/diag/ctx_rate.py [--k 1,2,4,8] [--secs 4] [--path driver|torch]
                           [--variant NAME=V[;NAME=V]]... ('base' is none)
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctx_create import fork_child, read_line  # noqa: E402


def parse_variant(spec: str) -> dict[str, str]:
    """'base' is no change; otherwise NAME=V pairs joined by ';'."""
    if spec == "base":
        return {}
    out = {}
    for part in spec.split(";"):
        name, eq, value = part.partition("=")
        if not eq or not name:
            raise ValueError(f"variant {spec!r}: want NAME=V[;NAME=V] or base")
        out[name] = value
    return out


def _ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1e3, 2)


def _driver_steps() -> dict:
    cu = ctypes.CDLL("libcuda.so.1")
    steps = {}
    t = time.perf_counter()
    if cu.cuInit(0) != 0:
        raise RuntimeError("cuInit failed")
    steps["init"] = _ms(t)
    t = time.perf_counter()
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if (cu.cuDeviceGet(ctypes.byref(dev), 0) or cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
            or cu.cuCtxSetCurrent(ctx)):
        raise RuntimeError("no primary context")
    steps["context"] = _ms(t)
    t = time.perf_counter()
    ptr = ctypes.c_uint64()
    if cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)) or cu.cuCtxSynchronize():
        raise RuntimeError("cuMemAlloc failed")
    steps["alloc"] = _ms(t)
    return steps


def _torch_steps() -> dict:
    import torch
    steps = {}
    t = time.perf_counter()
    torch.cuda.init()
    steps["init"] = _ms(t)
    t = time.perf_counter()
    torch.cuda.set_device(0)
    steps["context"] = _ms(t)
    t = time.perf_counter()
    torch.empty(1 << 20, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    steps["alloc"] = _ms(t)
    return steps


def _child(w: int, env: dict, path: str) -> None:
    os.environ.update(env)
    try:
        row = _driver_steps() if path == "driver" else _torch_steps()
    except Exception as e:  # noqa: BLE001  reported, the run goes on
        row = {"error": str(e)[:200]}
    os.write(w, (json.dumps(row) + "\n").encode())


def _has_libcuda() -> bool:
    """Whether the driver's library loads (loading it starts nothing)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def run(k: int, secs: float, env: dict, path: str) -> dict:
    """K children in flight for SECS; the rows of those reaped in time."""
    rows: list[dict] = []
    live: dict[int, int] = {}  # read end -> pid
    end = time.monotonic() + secs
    t0 = time.monotonic()
    while True:
        while len(live) < k and time.monotonic() < end:
            pid, r = fork_child(_child, env, path)
            live[r] = pid
        if not live:
            break
        r = next(iter(live))  # oldest first: children finish about in order
        pid = live.pop(r)
        line = read_line(r)
        t = time.perf_counter()
        os.close(r)
        os.waitpid(pid, 0)
        row = json.loads(line) if line.strip() else {"error": "no line"}
        row["exit"] = _ms(t)
        rows.append(row)
    took = time.monotonic() - t0
    good = [r for r in rows if "error" not in r]
    out = {"k": k, "n": len(good), "secs": round(took, 2),
           "per_s": round(len(good) / took, 2) if took else 0.0,
           "errors": sorted({r["error"] for r in rows if "error" in r})}
    for step in ("init", "context", "alloc", "exit"):
        v = [r[step] for r in good if step in r]
        if v:
            out[step] = (round(statistics.median(v), 1), round(max(v), 1))
    return out


def line(name: str, res: dict) -> str:
    steps = "; ".join(f"{s} {res[s][0]:.0f}/{res[s][1]:.0f}"
                      for s in ("init", "context", "alloc", "exit") if s in res)
    err = f"; errors {res['errors']}" if res["errors"] else ""
    return (f"{name:36s} k={res['k']}: {res['per_s']:.2f} contexts/s "
            f"({res['n']} in {res['secs']:.1f} s); ms median/max: {steps}{err}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", default="1,2,4,8")
    ap.add_argument("--secs", type=float, default=4.0)
    ap.add_argument("--path", choices=("driver", "torch"), default="driver")
    ap.add_argument("--variant", action="append", default=None)
    args = ap.parse_args(argv)
    variants = args.variant or ["base"]
    try:
        envs = [(v, parse_variant(v)) for v in variants]
        ks = [int(x) for x in args.k.split(",")]
    except ValueError as e:
        ap.error(str(e))
    import torch  # the parent imports, never starts CUDA
    if torch.version.cuda is None or not _has_libcuda():
        print("ctx_rate.py needs a CUDA device: torch built with CUDA and the driver's "
              "libcuda.so.1", file=sys.stderr)
        return 2
    for name, env in envs:
        for k in ks:
            print(line(f"{args.path} {name}", run(k, args.secs, env, args.path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
