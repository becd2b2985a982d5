#!/usr/bin/env python3
"""What slows the making of a CUDA context (issue 4).

At --concurrency 4 a warm spare's judge took 3.0 s to make its context and
the preload's set-up, with 0.6 s of CPU and no run-queue wait (alone: 0.4
s), so the spares could not keep up with the tasks
(bench/results/2026-12-01-gpu-h200-s9.txt). This forks fresh children from
a parent that imported torch without CUDA (as the zygote does) and times
each one's context (torch.cuda.init, set_device, one allocation), one
after the other, while other processes do one thing the worker does:

  idle      nothing (the baseline)
  busy      one process keeps the GPU computing (8192^2 fp32 matmuls back
            to back, as a timing phase does)
  teardown  processes that each hold a context and 3 GiB exit one after
            another, 0.3 s apart (tasks ending)
  create    two processes make contexts back to back (other spares)
  alloc     one process allocates and frees 1 GiB from the driver
            (cudaMalloc/cudaFree) over and over

Prints per mode the median and largest wall of a context, and its CPU.

    bench/diag/ctx_create.py [--modes idle,busy,...] [--n 8]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import sys
import time


def _cpu_ms() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e3


def _make_context() -> dict:
    import torch
    t, c = time.perf_counter(), _cpu_ms()
    torch.cuda.init()
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda:0")
    torch.cuda.synchronize()
    return {"wall": (time.perf_counter() - t) * 1e3, "cpu": _cpu_ms() - c}


def fork_child(fn, *args) -> tuple[int, int]:
    """Forks fn(w, *args) in a child with a pipe back; (pid, read end).
    (bench/diag/spare_supply.py forks its children with it too.)"""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 1
        try:
            fn(w, *args)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _measure(w: int) -> None:
    os.write(w, (json.dumps(_make_context()) + "\n").encode())


def _busy(w: int) -> None:
    import torch
    _make_context()
    a = torch.randn(8192, 8192, device="cuda:0")
    os.write(w, b"ready\n")
    while True:
        for _ in range(4):
            a @ a
        torch.cuda.synchronize()


def _holder(w: int, go_r: int) -> None:
    import torch
    _make_context()
    x = torch.empty(3 << 30, dtype=torch.uint8, device="cuda:0")
    x.fill_(1)
    torch.cuda.synchronize()
    os.write(w, b"ready\n")
    os.read(go_r, 1)  # then exit: the context (and its 3 GiB) is torn down


def _creator(w: int) -> None:
    os.write(w, b"ready\n")
    while True:
        pid, r = fork_child(_measure)
        os.read(r, 4096)
        os.close(r)
        os.waitpid(pid, 0)


def _alloc(w: int) -> None:
    import torch
    _make_context()
    os.write(w, b"ready\n")
    while True:
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
        del x
        torch.cuda.empty_cache()


def read_line(r: int) -> str:
    """One line from a pipe, read a byte at a time (nothing past it is
    taken). (bench/diag/churn.py reads its children's with it too.)"""
    out = b""
    while not out.endswith(b"\n"):
        b = os.read(r, 1)
        if not b:
            break
        out += b
    return out.decode()


def run_mode(mode: str, n: int) -> list[dict]:
    bg: list[tuple[int, int]] = []
    gos: list[int] = []
    if mode == "busy":
        bg.append(fork_child(_busy))
    elif mode == "create":
        bg += [fork_child(_creator), fork_child(_creator)]
    elif mode == "alloc":
        bg.append(fork_child(_alloc))
    elif mode == "teardown":
        for _ in range(n):
            go_r, go_w = os.pipe()
            bg.append(fork_child(_holder, go_r))
            os.close(go_r)
            gos.append(go_w)
    for _, r in bg:
        read_line(r)
    out = []
    for k in range(n):
        if gos:  # a holder exits just before this context is made
            os.write(gos[k], b"x")
            time.sleep(0.05)
        pid, r = fork_child(_measure)
        line = read_line(r)
        os.close(r)
        os.waitpid(pid, 0)
        if line.strip():
            out.append(json.loads(line))
        if gos:
            time.sleep(0.25)
    for pid, r in bg:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(r)
    for g in gos:
        os.close(g)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="idle,busy,teardown,create,alloc")
    ap.add_argument("--n", type=int, default=8)
    args = ap.parse_args()
    import torch  # noqa: F401  the parent imports, never starts CUDA
    for mode in args.modes.split(","):
        rows = run_mode(mode, args.n)
        if not rows:
            print(f"{mode}: no context made (no CUDA device?)", flush=True)
            continue
        walls = [r["wall"] for r in rows]
        cpus = [r["cpu"] for r in rows]
        print(f"{mode:9s} context wall median {statistics.median(walls):.0f} ms, max "
              f"{max(walls):.0f}; cpu median {statistics.median(cpus):.0f} ms "
              f"({len(rows)} contexts)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
