#!/usr/bin/env python3
"""Where ahead.compile_ahead's dry run spends its time (issue 4: on the
H200 it took 2.8-3.3 s per load even for a kernel already in the cache).

In one process set up as a warm candidate is (CUDA context, the launch
hooks, the tiny Triton kernel compiled), loads a reference and a
candidate, forks, and in the child times each step of the dry run
(entering the meta device, get_inputs, ModelNew on meta, the forward with
launches compiled) under cProfile; prints the steps and the costliest
functions.

    bench/diag/ahead_phases.py --ref R.py --cand C.py [--top 20] [--warm-meta]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "harness"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--cand", required=True)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--warm-meta", action="store_true",
                    help="run ahead.warm_meta() first, as the zygote does with compile ahead on")
    a = ap.parse_args()
    import torch
    from kgym_harness import ahead, hooks, loader, prewarm
    if a.warm_meta:
        ahead.warm_meta()  # before CUDA, as in the zygote
    torch.zeros(1, device="cuda")
    hooks.install_triton_hooks()
    prewarm.warm_prep("cuda:0")
    ref = loader.import_file(a.ref, "kgym_reference")
    mod = loader.import_file(a.cand, "kgym_kernel")
    init = loader.init_inputs(ref, 0)
    info = ahead.driver_info()
    print("driver info", info)
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        print("parent: compile_ahead as the candidate runs it:",
              ahead.compile_ahead(mod.ModelNew, init, ref, 60.0, info))
        return
    try:
        from triton.runtime import driver
        driver.set_active(ahead._Driver(driver.active, *info))
        hooks.RECORDER.compile_only = True
        prof = cProfile.Profile()
        prof.enable()  # the whole dry run (its laps include the profiler's cost)
        t = time.perf_counter()

        def lap(what: str) -> None:
            nonlocal t
            now = time.perf_counter()
            print(f"  child {what:28s} {1e3 * (now - t):8.1f} ms", flush=True)
            t = now
        with torch.device("meta"), torch.no_grad():
            torch.empty(4)
            lap("enter meta, one empty")
            inputs = ahead._meta(list(ref.get_inputs()))
            lap("get_inputs on meta")
            model = mod.ModelNew(*ahead._meta(list(init))).to("meta")
            lap("ModelNew on meta")
            model(*inputs)
            lap("forward, launches compiled")
            prof.disable()
            model(*inputs)
            lap("forward again (compiled)")
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(a.top)
        print(s.getvalue()[-6000:])
    finally:
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
