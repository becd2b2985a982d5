"""Fault: allocate memory without bound inside forward (bytearray growth,
every page touched: bytearray(n) zero-fills).

The worker's limits (RLIMIT_AS, the memory cgroup) must stop it: a
MemoryError here (reported with how much was had), or the kernel killing
the process. Safety: it never asks for more than CAP bytes in all, and it
stops by itself when the machine's available memory runs low, so that a
broken limit fails the test instead of taking the machine down.
"""
import torch.nn as nn

CHUNK = 64 << 20
CAP = 64 << 30
RESERVE = 1 << 30  # leave at least this much of the machine's memory free


def _available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return CAP


class ModelNew(nn.Module):
    def forward(self, x):
        hog = []
        total = 0
        try:
            while total < CAP:
                if _available() < RESERVE:
                    hog.clear()
                    raise RuntimeError(f"ALLOC_UNBOUNDED total={total}: no limit stopped it "
                                       "before the machine ran low (the candidate's own check)")
                hog.append(bytearray(CHUNK))
                total += CHUNK
        except MemoryError:
            hog.clear()
            raise RuntimeError(f"ALLOC_UNBOUNDED total={total} stopped by MemoryError") from None
        raise RuntimeError(f"ALLOC_UNBOUNDED total={total}: reached the candidate's own cap")
