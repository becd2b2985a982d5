#!/usr/bin/env python3
"""Where a warm candidate's load and first kernel call go (GPU diagnosis).

Mimics a warm spare's candidate in one plain process: the zygote's imports,
prewarm.warm_device, then _setup_backend and the first calls of a
solution's kernel, each under cProfile. Run it twice with one
TRITON_CACHE_DIR to see the cache-hit case (what a warm worker sees).

    bench/diag/load_breakdown.py PROBLEM SOLUTION [--device cuda:0]
"""
import cProfile
import io
import os
import pstats
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "harness"))


def top(prof: cProfile.Profile, n: int = 22) -> str:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(n)
    return "\n".join(line for line in s.getvalue().splitlines()[6:] if line.strip())


def main() -> None:
    prob, sol = sys.argv[1], sys.argv[2]
    dev = sys.argv[4] if len(sys.argv) > 4 else "cuda:0"
    t = time.perf_counter()

    import triton  # noqa: F401
    from kgym_harness import candidate, judge, loader, prewarm, zygote  # noqa: F401
    print(f"imports {time.perf_counter() - t:.3f} s")
    t = time.perf_counter()
    errs = prewarm.warm_device(dev)
    print(f"warm_device {time.perf_counter() - t:.3f} s errors={errs}")
    code = open(sol).read()
    p = cProfile.Profile()
    t = time.perf_counter()
    p.enable()
    installed = candidate._setup_backend("triton", dev, code)
    p.disable()
    print(f"_setup_backend {time.perf_counter() - t:.3f} s installed={installed}")
    print(top(p))
    ref = loader.import_file(prob, "kgym_reference")
    t = time.perf_counter()
    mod = loader.import_file(sol, "kgym_kernel")
    init = loader.init_inputs(ref, 0)
    model = loader.build_model(mod.ModelNew, init, 0, dev)
    if "cuda" in dev:
        torch.cuda.synchronize()
    print(f"import+build {time.perf_counter() - t:.3f} s")
    args = loader.draw_inputs(ref, 1, dev)
    for i in range(3):
        p = cProfile.Profile()
        t = time.perf_counter()
        p.enable()
        model(*args)
        if "cuda" in dev:
            torch.cuda.synchronize()
        p.disable()
        print(f"call {i} {time.perf_counter() - t:.3f} s")
        if i == 0:
            print(top(p, 30))


if __name__ == "__main__":
    main()
