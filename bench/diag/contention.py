#!/usr/bin/env python3
"""How much a trial-like loop slows when other processes use the GPU too
(issue 4: shared work under --concurrency ran 1.6-2x slower per task).

Each of P processes (P = 1, 2, 4; its own CUDA context, as the worker's
children have) runs for --seconds a loop of K elementwise ops on a tensor
of --mb megabytes followed by one read back, the shape of a correctness
trial's checks. Prints loops per second per process and in total, and the
same for a loop that only uses the CPU (a check of the host itself).

    bench/diag/contention.py [--mb 64] [--ops 10] [--seconds 4]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def _worker(kind: str, mb: int, ops: int, seconds: float, ready, q,
            threads: int) -> None:
    import torch
    if threads > 0:
        torch.set_num_threads(threads)
    if kind == "gpu":
        x = torch.randn(mb * (1 << 20) // 4, device="cuda")
        float(x.sum())
    else:
        x = torch.randn(1 << 16)
    ready.wait()  # every process has made its context
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        y = x
        for _ in range(ops):
            y = y * 1.0001
        float(y.sum())
        n += 1
    q.put(n / (time.perf_counter() - t0))


def run(kind: str, procs: int, args) -> list[float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ready = ctx.Barrier(procs)
    ps = [ctx.Process(target=_worker, args=(kind, args.mb, args.ops, args.seconds, ready, q,
                                                     args.threads))
          for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--ops", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--kinds", default="gpu,cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads per process "
                    "(0: torch's default, one per CPU)")
    args = ap.parse_args()
    for kind in args.kinds.split(","):
        base = None
        for procs in (1, 2, 4):
            rates = run(kind, procs, args)
            per = sum(rates) / len(rates)
            base = base or per
            what = f"{args.mb} MB" if kind == "gpu" else "64K-element"
            print(f"{kind} threads={args.threads or 'default'} {what} x {args.ops} ops + "
                  f"read back, {procs} process(es): "
                  f"{per:8.1f} loops/s each ({base / per:.2f}x slower), {sum(rates):8.1f} in all",
                  flush=True)


if __name__ == "__main__":
    main()
