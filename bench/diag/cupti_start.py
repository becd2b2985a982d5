#!/usr/bin/env python3
"""The first torch.profiler start in a process (CUPTI): wall and CPU time,
started after the CUDA context (as a warm spare does now) or before it.

    bench/diag/cupti_start.py after|before|cuda_only
"""
import json
import resource
import sys
import time

import torch


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def start_stop(acts) -> tuple[float, float]:
    w, c = time.perf_counter(), cpu_s()
    p = torch.profiler.profile(activities=acts)
    p.__enter__()
    p.__exit__(None, None, None)
    return (time.perf_counter() - w) * 1e3, (cpu_s() - c) * 1e3


def ctx() -> float:
    w = time.perf_counter()
    a = torch.ones(64, 64, device="cuda:0")
    (a @ a).sum().item()
    return (time.perf_counter() - w) * 1e3


mode = sys.argv[1]
PA = torch.profiler.ProfilerActivity
acts = [PA.CUDA] if mode == "cuda_only" else [PA.CPU, PA.CUDA]
out: dict = {"mode": mode}
if mode == "before":
    out["first_start_ms"], out["first_start_cpu_ms"] = start_stop(acts)
    out["ctx_ms"] = ctx()
else:
    out["ctx_ms"] = ctx()
    out["first_start_ms"], out["first_start_cpu_ms"] = start_stop(acts)
out["second_start_ms"], out["second_start_cpu_ms"] = start_stop(acts)
# does a profile after a "before" start still see kernels?
p = torch.profiler.profile(activities=acts)
with p:
    a = torch.randn(256, 256, device="cuda:0")
    (a @ a).sum().item()
    torch.cuda.synchronize()
out["kernels_seen"] = sum(1 for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA)
print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}))
