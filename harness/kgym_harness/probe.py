"""Device health probe: a tiny child the worker runs after a CUDA error.

Exit status 0 means the device initialises, runs a kernel and synchronises;
anything else means the worker must not hand it more work yet.
"""
from __future__ import annotations

import sys


def run_probe(device: str) -> int:
    import torch

    if not device.startswith("cuda"):
        x = torch.arange(1024, dtype=torch.float32)
        return 0 if float((x * 2).sum()) == 1023 * 1024 else 1
    try:
        torch.cuda.init()
        x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        y = (x * 2).sum()
        torch.cuda.synchronize()
        ok = float(y) == float((1 << 20) - 1) * (1 << 20)
    except Exception as e:  # noqa: BLE001 - any failure is an unhealthy device
        print(f"probe: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0 if ok else 1
