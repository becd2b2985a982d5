#!/usr/bin/env python3
"""What outside the device lock slows a timing phase (issue 4).

At concurrency 4 an exclusive timing hold of a 0.13 ms kernel took 1.5-3x
as long as at concurrency 1, and the holds that overlapped a warm spare's
CUDA start-up were the slow ones (bench/diag/lock_timeline.py data,
bench/results/2026-12-01-gpu-h200-s7-concurrency-rerun.jsonl.gz). This runs
the harness's own timing loop (timing.time_forward, 20 timed calls of a
GELU on 8192 x 8192 fp32) in one process, over and over, while a second
process does one thing the worker does without the lock:

  idle      nothing (the baseline)
  create    forks children that each make a CUDA context (torch.cuda.init,
            one allocation) and stay alive
  teardown  children made beforehand are killed one by one (their
            contexts torn down)
  alloc     one process allocates and frees 256 MiB (cudaMalloc/cudaFree)
  blas      children that each start cuBLAS (context + first matmul) and
            stay alive
  prep      children that each do a warm spare's unlocked start-up: CUDA
            context, then prewarm.warm_prep (imports, a tiny Triton
            kernel's compile), and stay alive
  cpuN      N processes that only burn CPU (a pure Python loop)

A mode written fresh-MODE times loops that draw each call's input (as the
harness's loops do) after giving the cached memory back, so they allocate
from the driver while the second process does MODE.

Prints, per mode, the timing loop's wall per call (median, p90), the
median sample, late calls, and the same for the loops that overlapped a
disturbance window and those that did not.

    bench/diag/disturb.py [--seconds 3] [--modes idle,create,...,cpu14,fresh-create,...]

On the H200 (bench/results/2026-12-01-gpu-h200-s8.txt): another process's
idle context made the loop 15-25% slower and nothing else added to that;
a loop that allocates waited on contexts made or torn down elsewhere (0.78
against 0.60 ms per call), which is why timing.reserve exists.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness"))

N = 8192


def _timer(seconds: float, ready, go, q, fresh: bool = False) -> None:
    import torch
    from kgym_harness import timing
    x = torch.randn(N, N, device="cuda")
    call = lambda a: torch.nn.functional.gelu(a[0])  # noqa: E731
    if fresh:  # each call's input drawn (the harness's timing loops), memory given back per loop
        make = lambda i: [torch.randn(N, N, device="cuda")]  # noqa: E731
    else:
        make = lambda i: [x]  # noqa: E731
    timing.time_forward(call, make, 5, 20, "cuda", warmup_ms=20.0)
    ready.set()
    go.wait()
    loops = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        if fresh:
            torch.cuda.empty_cache()  # the loop's draws allocate from the driver again
        t0 = time.monotonic()
        r = timing.time_forward(call, make, 1, 20, "cuda", start=1)
        t1 = time.monotonic()
        loops.append((t0, t1, statistics.median(r["samples_ms"]), r["lead_short"]))
    q.put(loops)


def _child_context(blas: bool, w: int, prep: bool = False) -> None:
    import torch
    torch.cuda.init()
    if prep:
        from kgym_harness import prewarm
        torch.cuda.set_device(0)
        prewarm.warm_prep("cuda:0")
    a = torch.zeros(1024, device="cuda")
    if blas:
        b = torch.randn(256, 256, device="cuda")
        (b @ b).sum().item()
    torch.cuda.synchronize()
    del a
    os.write(w, b"r")
    while True:
        time.sleep(10)


def _disturber(mode: str, seconds: float, ready, go, q) -> None:
    import torch  # imported, CUDA untouched (as the zygote is)
    windows = []
    kids = []

    def spawn(blas: bool, prep: bool = False) -> tuple[int, int]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _child_context(blas, w, prep)
            finally:
                os._exit(0)
        os.close(w)
        return pid, r

    if mode == "teardown":
        for _ in range(10):
            pid, r = spawn(False)
            os.read(r, 1)
            os.close(r)
            kids.append(pid)
    if mode == "alloc":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    if mode.startswith("cpu"):
        for _ in range(int(mode[3:])):
            pid = os.fork()
            if pid == 0:
                go.wait()
                while True:
                    sum(i * i for i in range(10000))
            kids.append(pid)
    ready.set()
    go.wait()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        if mode in ("create", "blas", "prep"):
            if len(kids) >= 8:
                time.sleep(0.05)
                continue
            pid, r = spawn(mode == "blas", mode == "prep")
            os.read(r, 1)
            os.close(r)
            kids.append(pid)
            windows.append((t0, time.monotonic()))
            time.sleep(0.15)
        elif mode == "teardown":
            if not kids:
                time.sleep(0.05)
                continue
            pid = kids.pop(0)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            windows.append((t0, time.monotonic()))
            time.sleep(0.25)
        elif mode == "alloc":
            y = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            del y
            torch.cuda.empty_cache()
            windows.append((t0, time.monotonic()))
            time.sleep(0.05)
        else:
            time.sleep(0.05)
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    q.put(windows)


def _summary(loops: list) -> str:
    if not loops:
        return "none"
    walls = sorted((b - a) * 1e3 / 21 for a, b, _, _ in loops)
    p90 = walls[min(len(walls) - 1, int(0.9 * len(walls)))]
    return (f"n={len(loops):4d} wall/call median {statistics.median(walls):6.3f} ms "
            f"p90 {p90:6.3f}  sample median {statistics.median(m for _, _, m, _ in loops):.4f} ms  "
            f"late {sum(s for *_, s in loops)}")


def run(mode: str, seconds: float) -> None:
    fresh = mode.startswith("fresh-")
    mode = mode.removeprefix("fresh-")
    ctx = mp.get_context("spawn")
    q1, q2 = ctx.Queue(), ctx.Queue()
    r1, r2, go = ctx.Event(), ctx.Event(), ctx.Event()
    a = ctx.Process(target=_timer, args=(seconds, r1, go, q1, fresh))
    b = ctx.Process(target=_disturber, args=(mode, seconds, r2, go, q2))
    a.start()
    b.start()
    r1.wait()
    r2.wait()
    go.set()
    loops, windows = q1.get(), q2.get()
    a.join()
    b.join()
    hit = [lp for lp in loops if any(w0 < lp[1] and w1 > lp[0] for w0, w1 in windows)]
    clear = [lp for lp in loops if lp not in hit]
    busy = sum(w1 - w0 for w0, w1 in windows)
    mode = ("fresh-" if fresh else "") + mode
    print(f"{mode:9s} all     {_summary(loops)}", flush=True)
    if windows:
        print(f"{'':9s} overlap {_summary(hit)}   ({len(windows)} windows, "
              f"{busy * 1e3 / len(windows):.0f} ms each)", flush=True)
        print(f"{'':9s} clear   {_summary(clear)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--modes", default="idle,create,teardown,alloc,blas,prep,cpu4,cpu8,cpu14")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        run(mode, args.seconds)


if __name__ == "__main__":
    main()
