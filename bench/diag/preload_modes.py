"""A spare's preload two ways, in this process (session 11, issue 4):
"run" (what prewarm.preload does since session 11: each unit once on the
table's zeroed tensors) against "capture" (what it did before: each unit
captured into a CUDA graph that is never launched). Prints one JSON line:
the context's and the preload's time, the segments the caching allocator
took from the driver meanwhile, and two first uses afterwards. Start
several at once to see them contend:

    for i in 1 2 3 4 5 6 7 8; do python bench/diag/preload_modes.py run & done; wait

Needs a CUDA device (says so and exits 2 without one)."""
from __future__ import annotations

import json
import sys
import time

import torch

from kgym_harness import compare, guards, prewarm


def _capture(stream, fn) -> None:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        g.capture_begin(capture_error_mode="relaxed")
        try:
            fn()
        finally:
            g.capture_end()
    g.reset()


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "run"
    if mode not in ("run", "capture"):
        print("usage: preload_modes.py run|capture", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("preload_modes.py needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda:0")
    t = time.perf_counter()
    torch.zeros(1, device=dev)
    ctx = time.perf_counter() - t
    s0 = torch.cuda.memory_stats(dev)
    t = time.perf_counter()
    if mode == "run":
        prewarm.preload_setup("cuda:0")
        errors = prewarm.preload("cuda:0", list(prewarm.units()))
    else:
        torch.cuda.current_blas_handle()
        stream = torch.cuda.Stream(dev)
        table = prewarm._harness_ops(dev)
        errors = {}
        for name in prewarm.SPARE_FAMILIES:
            for k, fn in enumerate(table[name]):
                try:
                    _capture(stream, fn)
                except Exception as e:  # noqa: BLE001
                    errors[f"{name}/{k}"] = str(e)[:80]
    took = time.perf_counter() - t
    s1 = torch.cuda.memory_stats(dev)
    a = torch.arange(1 << 20, device=dev, dtype=torch.float32)

    def first(fn) -> float:
        torch.cuda.synchronize(dev)
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize(dev)
        return round((time.perf_counter() - t) * 1e3, 2)
    after = {"digests": first(lambda: guards.digests([a])),
             "compare": first(lambda: compare.compare_outputs(a, a + 1.0, 1e-3, 1e-3))}
    seg = "segment.all.allocated"
    print(json.dumps({"mode": mode, "ctx_ms": round(ctx * 1e3), "preload_ms": round(took * 1e3),
                      "segments": s1.get(seg, 0) - s0.get(seg, 0), "first_use_after_ms": after,
                      "errors": errors}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
