"""Micro-measurements behind the worker's fixed costs on a GPU.

Each experiment runs in a fresh interpreter (python3 bench/gpu_micro.py EXP)
and prints one JSON line; `all` runs every experiment in its own process.

  ctx        import torch, CUDA init, first allocation, first cuBLAS matmul
  prof       torch.profiler start/stop: first, second, CUDA-only activity
  profthread the profiler's first start in a background thread while the
             main thread keeps launching work (does it block the main thread?)
  xfer       moving 256 MiB between two processes: socket vs a pinned
             (cudaHostRegister'ed) memfd mapping, with device copies
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import subprocess
import sys
import threading
import time

T0 = time.perf_counter()


def ms(t: float) -> float:
    return round((time.perf_counter() - t) * 1e3, 2)


def exp_ctx() -> dict:
    out = {}
    t = time.perf_counter()
    import torch
    out["import_torch_ms"] = ms(t)
    t = time.perf_counter()
    torch.cuda.init()
    torch.cuda.set_device(0)
    out["cuda_init_ms"] = ms(t)
    t = time.perf_counter()
    x = torch.empty(1 << 20, device="cuda")
    torch.cuda.synchronize()
    out["first_alloc_ms"] = ms(t)
    t = time.perf_counter()
    a = torch.randn(512, 512, device="cuda")
    (a @ a).sum().item()
    out["first_matmul_ms"] = ms(t)
    t = time.perf_counter()
    import triton  # noqa: F401
    import triton.language as tl

    @triton.jit
    def k(p, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(p + i, tl.load(p + i, mask=i < n) * 2, mask=i < n)
    out["import_triton_ms"] = ms(t)
    t = time.perf_counter()
    k[(1024,)](x, x.numel(), B=1024)
    torch.cuda.synchronize()
    out["first_triton_launch_ms"] = ms(t)
    t = time.perf_counter()
    k[(1024,)](x, x.numel(), B=1024)
    torch.cuda.synchronize()
    out["second_triton_launch_ms"] = ms(t)
    return out


def _prof_once(torch, acts) -> tuple[float, float]:
    t = time.perf_counter()
    p = torch.profiler.profile(activities=acts)
    p.__enter__()
    start = ms(t)
    a = torch.randn(256, 256, device="cuda")
    (a @ a).sum().item()
    t = time.perf_counter()
    p.__exit__(None, None, None)
    return start, ms(t)


def exp_prof() -> dict:
    import torch
    torch.cuda.init()
    a = torch.randn(256, 256, device="cuda")
    (a @ a).sum().item()
    P = torch.profiler.ProfilerActivity
    out = {"env_CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "")}
    only = os.environ.get("PROF_ACTS", "cpu,cuda")
    acts = [P.CUDA] if only == "cuda" else [P.CPU, P.CUDA]
    out["acts"] = only
    out["first_start_ms"], out["first_stop_ms"] = _prof_once(torch, acts)
    out["second_start_ms"], out["second_stop_ms"] = _prof_once(torch, acts)
    out["third_start_ms"], out["third_stop_ms"] = _prof_once(torch, acts)
    return out


def exp_profthread() -> dict:
    import torch
    torch.cuda.init()
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    P = torch.profiler.ProfilerActivity
    box: dict = {}

    def warm() -> None:
        t = time.perf_counter()
        p = torch.profiler.profile(activities=[P.CPU, P.CUDA])
        p.__enter__()
        box["start_ms"] = ms(t)
        t = time.perf_counter()
        p.__exit__(None, None, None)
        box["stop_ms"] = ms(t)
    th = threading.Thread(target=warm)
    t = time.perf_counter()
    th.start()
    gaps = []
    n = 0
    while th.is_alive():
        t1 = time.perf_counter()
        (a @ a).sum().item()
        gaps.append((time.perf_counter() - t1) * 1e3)
        n += 1
    th.join()
    gaps.sort()
    out = {"thread_total_ms": ms(t), "main_iters": n,
           "main_iter_median_ms": round(gaps[len(gaps) // 2], 3) if gaps else None,
           "main_iter_max_ms": round(gaps[-1], 2) if gaps else None, **box}
    out["after_start_ms"], out["after_stop_ms"] = _prof_once(torch, [P.CPU, P.CUDA])
    return out


def exp_xfer() -> dict:
    import torch
    torch.cuda.init()
    nbytes = 256 << 20
    src = torch.randn(nbytes // 4, device="cuda")
    torch.cuda.synchronize()
    out = {}
    # pageable host copy
    host = torch.empty(nbytes // 4)
    for i in range(2):
        t = time.perf_counter()
        host.copy_(src)
        out[f"d2h_pageable_ms_{i}"] = ms(t)
    t = time.perf_counter()
    back = host.to("cuda")
    torch.cuda.synchronize()
    out["h2d_pageable_ms"] = ms(t)
    # memfd mapping, registered with CUDA
    fd = os.memfd_create("kgym-xfer", 0)
    os.ftruncate(fd, nbytes)
    t = time.perf_counter()
    mm = mmap.mmap(fd, nbytes)
    shm = torch.frombuffer(mm, dtype=torch.uint8)
    rc = torch.cuda.cudart().cudaHostRegister(shm.data_ptr(), nbytes, 0)
    out["register_ms"] = ms(t)
    out["register_rc"] = int(rc) if not hasattr(rc, "value") else int(rc.value)
    out["is_pinned"] = bool(shm.is_pinned())
    f = shm.view(torch.float32)
    for i in range(2):
        t = time.perf_counter()
        f.copy_(src)
        out[f"d2h_registered_ms_{i}"] = ms(t)
    for i in range(2):
        t = time.perf_counter()
        back.copy_(f)
        torch.cuda.synchronize()
        out[f"h2d_registered_ms_{i}"] = ms(t)
    out["roundtrip_equal"] = bool(torch.equal(back, src))
    # socket: 256 MiB to a child process and back
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    pid = os.fork()
    if pid == 0:
        a.close()
        buf = bytearray(nbytes)
        view = memoryview(buf)
        got = 0
        while got < nbytes:
            got += b.recv_into(view[got:], nbytes - got)
        b.sendall(b"k")
        os._exit(0)
    b.close()
    hb = host.view(torch.uint8).numpy()
    t = time.perf_counter()
    a.sendall(memoryview(hb))
    a.recv(1)
    out["socket_send_256MiB_ms"] = ms(t)
    os.waitpid(pid, 0)
    return out


EXPS = {"ctx": exp_ctx, "prof": exp_prof, "profthread": exp_profthread, "xfer": exp_xfer}


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what == "all":
        runs = [("ctx", {}), ("ctx", {}), ("prof", {}), ("prof", {"PROF_ACTS": "cuda"}),
                ("prof", {"CUDA_MODULE_LOADING": "EAGER"}), ("profthread", {}), ("xfer", {})]
        for name, env in runs:
            t = time.perf_counter()
            p = subprocess.run([sys.executable, __file__, name], env={**os.environ, **env},
                               capture_output=True, text=True, timeout=300)
            line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            print(json.dumps({"exp": name, "env": env, "wall_ms": ms(t), "rc": p.returncode,
                              "out": json.loads(line) if line.startswith("{") else line,
                              "err": p.stderr[-400:] if p.returncode else ""}), flush=True)
        return
    print(json.dumps(EXPS[what]()), flush=True)


if __name__ == "__main__":
    main()
