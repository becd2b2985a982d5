#!/usr/bin/env python3
"""Where one timed iteration's time goes (GPU diagnosis for issue 4).

The exclusive timing section is what limits a worker's concurrency: on the
H200 a GELU of 8192x8192 fp32 (a 0.13 ms kernel) spends ~1.3 ms per timed
call and ~345 ms per evaluation holding the device while it is mostly idle
(bench/results/2026-12-01-gpu-h200-s4-*.txt). This times, in one plain
process on a problem's real inputs, each step of timing.time_forward's
loop on its own (input draw, L2 flush, lead sleep, events and syncs) and
then the whole loop under cProfile, so the host overhead per iteration can
be told from the device work it waits for.

    bench/diag/timing_loop.py PROBLEM [--device cuda:0] [--iters 100]

On a CPU device only the draw and the loop are timed (no flush, no events).
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "harness"))

from kgym_harness import loader, timing  # noqa: E402


def per_call_ms(fn, k: int, device: str) -> float:
    fn()
    timing.sync(device)
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
        timing.sync(device)
    return (time.perf_counter() - t0) / k * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    dev = args.device
    module = loader.import_file(os.path.abspath(args.problem), "kgym_reference")
    init = loader.init_inputs(module, 1)
    model = loader.build_model(module.Model, init, 1, dev)
    seed = loader.derive_seed(12345, "timing")

    def make_args(i: int) -> list:
        return loader.draw_inputs(module, loader.derive_seed(seed, f"iter:{i}"), dev)

    def call(a: list):
        with torch.no_grad():
            return model(*a)

    k = 50
    fixed = make_args(0)
    print(f"# {args.problem} on {dev}: inputs "
          + ", ".join(f"{list(t.shape)} {t.dtype}" for t in fixed if isinstance(t, torch.Tensor)))
    print(f"draw inputs + sync           {per_call_ms(lambda: make_args(1), k, dev):8.3f} ms")
    print(f"forward (same inputs) + sync {per_call_ms(lambda: call(fixed), k, dev):8.3f} ms")
    print(f"sync alone                   {per_call_ms(lambda: None, k, dev):8.3f} ms")
    if timing.is_cuda(dev):
        flusher = timing.flusher_for(dev)
        print(f"L2 flush + sync              {per_call_ms(flusher.flush, k, dev):8.3f} ms")
        if timing._gpu_sleep is not None:
            lead = per_call_ms(lambda: timing._gpu_sleep(timing.LEAD_CYCLES), k, dev)
            print(f"lead sleep + sync            {lead:8.3f} ms")
        t0 = time.perf_counter()
        timing.calibrate_sync(dev)
        print(f"calibrate_sync (per block)   {(time.perf_counter() - t0) * 1e3:8.3f} ms")
    # the lead sized from the calls (timing.Lead) against the fixed 0.2 ms
    # ceiling, alternated, same inputs: the medians must agree, the loop
    # gets shorter by what the lead no longer idles
    for rnd in range(3):
        for label, floor in (("fixed lead", 10**9), ("sized lead", timing.LEAD_MIN_NS)):
            timing.LEAD_MIN_NS = floor
            timing._LEADS.clear()
            t0 = time.perf_counter()
            r = timing.time_forward(call, make_args, 5, args.iters, dev,
                                    warmup_ms=timing.WARMUP_MIN_MS)
            wall = (time.perf_counter() - t0) * 1e3
            med = sorted(r["samples_ms"])[len(r["samples_ms"]) // 2]
            print(f"round {rnd} {label:12s} median sample {med:.4f} ms; "
                  f"{(wall - r['warmup_ms']) / args.iters:.3f} ms per timed iteration "
                  f"(prep {r['prep_ms']:.1f} ms, lead {r['lead_us']} us, "
                  f"{r['lead_short']} late)")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    r = timing.time_forward(call, make_args, 5, args.iters, dev, warmup_ms=timing.WARMUP_MIN_MS,
                            spots=timing.SpotSampler(timing.SPOT_CHECKS))
    prof.disable()
    wall = (time.perf_counter() - t0) * 1e3
    med = sorted(r["samples_ms"])[len(r["samples_ms"]) // 2]
    print(f"time_forward: {args.iters} timed + {r['warmup_iters']} warm-up calls in {wall:.1f} ms"
          f" (warm-up {r['warmup_ms']:.1f} ms, prep {r['prep_ms']:.1f} ms); median sample "
          f"{med:.4f} ms; {(wall - r['warmup_ms']) / args.iters:.3f} ms per timed iteration")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    print("\n".join(line for line in s.getvalue().splitlines()[6:] if line.strip()))


if __name__ == "__main__":
    main()
