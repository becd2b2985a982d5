"""The C heap's policy in each role's process: memory freed stays mapped
(glibc's malloc neither trims its heap nor maps blocks below
MMAP_BYTES on their own), so a call that allocates what an earlier one
freed reuses pages already touched.

Why: with glibc's defaults whether a block comes back as fresh pages
depends on the heap's history (the top trimmed after a large free, the
mmap threshold moving with each free), so the same call paid page faults
in the judge's wall blocks and not in its timed loop, and the CPU-time
bound (trustclock.decide) compares the two. Both sides, the judge's
reference and the candidate, run under the same policy (figures:
bench/results/2026-12-07-cpu-heap-policy.txt).
Blocks of MMAP_BYTES and more are still mapped and unmapped each time,
in every loop alike."""
from __future__ import annotations

import ctypes
from typing import Any

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20  # glibc's largest mmap threshold on 64 bits
TOP_PAD_BYTES = 16 << 20  # the heap grows by at least this much at a time

_applied = False


def libc_mallopt() -> Any:
    """glibc's mallopt(param, value) through ctypes; None without it."""
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def keep_freed() -> bool:
    """Set the policy in this process; whether glibc took every setting
    (False without glibc's mallopt: the defaults stand)."""
    global _applied
    fn = libc_mallopt()
    if fn is None:
        return False
    # -1: never trim (mallopt(3)); 1 is success
    ok = fn(M_TRIM_THRESHOLD, -1) == 1
    ok = fn(M_MMAP_THRESHOLD, MMAP_BYTES) == 1 and ok
    ok = fn(M_TOP_PAD, TOP_PAD_BYTES) == 1 and ok
    _applied = ok
    return ok


def applied() -> bool:
    """Whether keep_freed() took effect in this process."""
    return _applied
