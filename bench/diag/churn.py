#!/usr/bin/env python3
"""What warm spares being made and torn down do to a task's device work
(issue 4).

With the queue kept full (make test-gpu's concurrency step since session
10), every task uses one spare and one more is made: at --concurrency 4
on the H200 a task's input draw took 93 ms against 15 alone, its
reference calls 257 against 37, and 4-way throughput was no better than
serial, while the CPUs were 42% busy and the GPU far from always busy
(bench/results/2026-12-01-gpu-h200-s10.txt). This puts one probe process
(a fresh CUDA context, as a task's judge) next to one kind of background
at a time and times the operations a judge does:

  small     one tiny kernel and a synchronize
  loop64    64 tiny kernels and one synchronize
  draw      torch.randn(8192, 8192) and a synchronize (an input draw)
  malloc    256 MiB from the driver and back (cudaMalloc, cudaFree)
  meminfo   torch.cuda.mem_get_info()

Backgrounds (MODE[:N[:HOLD]]):

  idle          nothing
  live:N        N processes that each made a context and hold 2 GiB, idle
                (spares waiting for their task)
  ctx:N         N processes in flight that each make a context, allocate
                2 GiB and exit (a pair's contexts made and torn down)
  spare:N:HOLD  N processes in flight that each do a spare's whole
                start-up (context, preload set-up, warm prep, every
                preload unit, warm device), hold it HOLD seconds, exit
  gpu:N         N processes that each launch small kernels with a
                synchronize after each, back to back (other tasks'
                checked calls)
  alloc:N       N processes that each allocate 2 GiB from the driver and
                free it, over and over (no context made or torn down)
  ctxsmall:N    N processes in flight that each make a context and exit
                (nothing allocated)
  pair:N:HOLD   N processes in flight that each do a spare's start-up,
                wait HOLD seconds, then a task's share: 3 GiB allocated
                and written, 20 input-sized draws, then exit (a spare
                used by a task and torn down)

  proc:N        N processes without a CUDA context, idle (a control)
  fork:N:HOLD   N processes in flight forked without CUDA, each exiting
                after HOLD seconds (a control: the forks alone)
  ipc:N         N pairs in flight: one process makes a 512 MiB channel
                device region (devregion.DevRegion), the other opens it by
                CUDA IPC and copies it out, both exit (a task's channel)

Backgrounds join with "+" (ctx:2+spare:8:2: both at once).

Prints per background each operation's median and 90th percentile (ms),
and how many background processes finished per second with their
start-up's median.

    bench/diag/churn.py [--modes idle,live:23,...] [--secs 6]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness"))
from ctx_create import fork_child, read_line  # noqa: E402  (bench/diag/ctx_create.py, next to it)

OPS = ("small", "loop64", "draw", "malloc", "meminfo")


def _probe(w: int, secs: float) -> None:
    import torch
    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
    x = torch.ones(4096, device=dev)
    torch.randn(8192, 8192, device=dev)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()

    def small() -> None:
        x.add_(1.0)
        torch.cuda.synchronize()

    def loop64() -> None:
        for _ in range(64):
            x.add_(1.0)
        torch.cuda.synchronize()

    def draw() -> None:
        torch.randn(8192, 8192, device=dev)
        torch.cuda.synchronize()

    def malloc() -> None:
        y = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        del y
        torch.cuda.empty_cache()

    def meminfo() -> None:
        torch.cuda.mem_get_info(dev)

    fns = {"small": small, "loop64": loop64, "draw": draw, "malloc": malloc, "meminfo": meminfo}
    times: dict[str, list[float]] = {k: [] for k in OPS}
    end = time.perf_counter() + secs
    while time.perf_counter() < end:
        for k in OPS:
            t = time.perf_counter()
            fns[k]()
            times[k].append((time.perf_counter() - t) * 1e3)
    os.write(w, (json.dumps(times) + "\n").encode())


def _live(w: int) -> None:
    import torch
    torch.cuda.set_device(0)
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda:0").fill_(1)
    torch.cuda.synchronize()
    os.write(w, b"ready\n")
    while True:
        time.sleep(60)


def _proc(w: int) -> None:
    os.write(w, b"ready\n")
    while True:
        time.sleep(60)


def _gpu(w: int) -> None:
    import torch
    torch.cuda.set_device(0)
    x = torch.ones(1 << 20, device="cuda:0")
    torch.cuda.synchronize()
    os.write(w, b"ready\n")
    while True:
        x.mul_(1.0)
        torch.cuda.synchronize()


def _alloc(w: int) -> None:
    import torch
    torch.cuda.set_device(0)
    os.write(w, b"ready\n")
    while True:
        torch.empty(2 << 30, dtype=torch.uint8, device="cuda:0")
        torch.cuda.empty_cache()


def _ctxsmall_child(log: str) -> None:
    import torch
    t = time.perf_counter()
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda:0")
    torch.cuda.synchronize()
    _note(log, (time.perf_counter() - t) * 1e3)


def _pair_child(log: str, hold: float) -> None:
    import torch
    _spare_child(log, hold)
    dev = torch.device("cuda:0")
    torch.empty(3 << 30, dtype=torch.uint8, device=dev).fill_(1)
    for _ in range(20):
        torch.randn(8192, 8192, device=dev)
    torch.cuda.synchronize()


def _ipc_exporter(w: int, done_r: int) -> None:
    import torch
    from kgym_harness.devregion import DevRegion
    torch.cuda.set_device(0)
    region = DevRegion.create(512 << 20, 0, "cuda:0")
    if region is None:
        os.write(w, b"{}\n")
        return
    region.view(0, torch.uint8, [region.size], region.size).fill_(1)
    region.sync()
    os.write(w, (json.dumps({"handle": region.handle.hex(), "size": region.size}) + "\n").encode())
    os.read(done_r, 1)  # the peer copied it out


def _ipc_importer(log: str, r: int, done_w: int) -> None:
    import torch
    from kgym_harness.devregion import DevRegion
    torch.cuda.set_device(0)
    ann = json.loads(read_line(r) or "{}")
    t = time.perf_counter()
    if ann:
        region = DevRegion.open(ann["handle"], ann["size"], 0, "cuda:0")
        if region is not None:
            region.view(0, torch.uint8, [region.size], region.size).clone()
            region.sync()
            region.close()
            _note(log, (time.perf_counter() - t) * 1e3)
    os.write(done_w, b"x")


def _spawn(fn: Callable[..., Any], *args: Any) -> None:
    """Forks a child that runs fn(*args) and exits (status 1 if it raised)."""
    if os.fork() == 0:
        code = 1
        try:
            fn(*args)
            code = 0
        finally:
            os._exit(code)


def _ipc_pair(log: str) -> int:
    """Forks an exporter and an importer; the number of processes forked.
    Each closes the other's pipe ends, so the other's exit is EOF to it."""
    r, w = os.pipe()
    done_r, done_w = os.pipe()

    def exporter() -> None:
        os.close(r)
        os.close(done_w)
        _ipc_exporter(w, done_r)

    def importer() -> None:
        os.close(w)
        os.close(done_r)
        _ipc_importer(log, r, done_w)
    _spawn(exporter)
    _spawn(importer)
    for fd in (r, w, done_r, done_w):
        os.close(fd)
    return 2


def _ctx_child(log: str) -> None:
    import torch
    t = time.perf_counter()
    torch.cuda.set_device(0)
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda:0").fill_(1)
    torch.cuda.synchronize()
    _note(log, (time.perf_counter() - t) * 1e3)


def _spare_child(log: str, hold: float) -> None:
    import torch
    from kgym_harness import prewarm
    t = time.perf_counter()
    torch.cuda.set_device(0)
    prewarm.preload_setup("cuda:0")
    prewarm.warm_prep("cuda:0")
    prewarm.preload("cuda:0", list(prewarm.units()))
    prewarm.warm_device("cuda:0")
    _note(log, (time.perf_counter() - t) * 1e3)
    time.sleep(hold)


def _note(log: str, ms: float) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.write(fd, f"{ms:.1f}\n".encode())  # one short write: atomic with O_APPEND
    os.close(fd)


def _churn(w: int, n: int, kind: str, hold: float, log: str) -> None:
    """Keeps n children of `kind` in flight until killed (a session of
    its own: killed with all its children)."""
    os.setsid()
    os.write(w, b"ready\n")
    live = 0
    while True:
        while kind == "ipc" and live < 2 * n:
            live += _ipc_pair(log)
        while kind != "ipc" and live < n:
            _spawn(CHURN[kind], log, hold)
            live += 1
        os.wait()
        live -= 1


CHURN = {"ctx": lambda log, hold: _ctx_child(log), "ipc": None,
         "ctxsmall": lambda log, hold: _ctxsmall_child(log),
         "fork": lambda log, hold: time.sleep(hold),
         "spare": _spare_child, "pair": _pair_child}


def _start(spec: str, log: str) -> list[tuple[int, int]]:
    """One background's processes (pid, pipe read end)."""
    parts = spec.split(":")
    mode, n = parts[0], int(parts[1]) if len(parts) > 1 else 1
    hold = float(parts[2]) if len(parts) > 2 else 2.0
    if mode == "live":
        return [fork_child(_live) for _ in range(n)]
    if mode == "gpu":
        return [fork_child(_gpu) for _ in range(n)]
    if mode == "proc":
        return [fork_child(_proc) for _ in range(n)]
    if mode == "alloc":
        return [fork_child(_alloc) for _ in range(n)]
    if mode in CHURN:
        return [fork_child(_churn, n, mode, hold, log)]
    if mode != "idle":
        raise SystemExit(f"unknown background {spec!r}")
    return []


def run_mode(spec: str, secs: float) -> tuple[dict, list[float], float]:
    """(probe times by operation, background start-ups in ms, their wall)."""
    fd, log = tempfile.mkstemp(prefix="kgym-churn-")
    os.close(fd)
    bg = [p for part in spec.split("+") for p in _start(part, log)]
    for _, r in bg:
        read_line(r)
    if any(part.split(":")[0] in CHURN for part in spec.split("+")):
        time.sleep(min(3.0, secs / 2))  # the churn reaches its pace
    t0 = time.perf_counter()
    open(log, "w").close()
    pid, r = fork_child(_probe, secs)
    line = read_line(r)
    os.close(r)
    os.waitpid(pid, 0)
    wall = time.perf_counter() - t0
    with open(log) as f:
        ups = [float(x) for x in f.read().split()]
    for bpid, br in bg:
        for kill in (lambda p: os.killpg(p, signal.SIGKILL), lambda p: os.kill(p, signal.SIGKILL)):
            try:
                kill(bpid)
            except OSError:
                pass
        os.close(br)
    _reap()
    os.unlink(log)
    return (json.loads(line) if line.strip() else {}), ups, wall


def _reap() -> None:
    """Waits for every child (the churn's come back to this subreaper)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="idle,live:23,gpu:4,ctx:4,spare:4:2,spare:12:2")
    ap.add_argument("--secs", type=float, default=6.0)
    args = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the churn's orphans come back here
    import torch
    from kgym_harness import prewarm  # noqa: F401  imported before the forks, as the zygote does
    assert not torch.cuda.is_initialized()
    for spec in args.modes.split(","):
        times, ups, wall = run_mode(spec, args.secs)
        if not times:
            print(f"{spec}: the probe made no context (no CUDA device?)", flush=True)
            continue
        ops = "; ".join(f"{k} {statistics.median(v):.2f}/{_p90(v):.2f}" for k, v in times.items())
        bgs = (f"; background: {len(ups) / wall:.2f}/s done, start-up median "
               f"{statistics.median(ups):.0f} ms" if ups else "")
        if any(part.split(":")[0] in CHURN for part in spec.split("+")) and not ups:
            bgs = "; background: none finished (their start-up failed?)"
        print(f"{spec:16s} ms median/p90: {ops}{bgs}", flush=True)


def _p90(v: list[float]) -> float:
    return sorted(v)[int(0.9 * (len(v) - 1))]


if __name__ == "__main__":
    sys.exit(main())
