"""The C heap's policy in the role processes (heap.py): what a process
freed stays mapped, so allocating it again costs no page faults; with
glibc's defaults the same allocations fault afresh (the mmap threshold
and the trim move with the heap's history)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(__file__), "..", "..", "harness")

# one block of 24 MiB touched and freed, then blocks of 1..20 MiB: the
# page faults of the second part, by the kernel's account
PROBE = r"""
import ctypes, json, resource, sys
if sys.argv[1] == "keep":
    from kgym_harness import heap
    assert heap.keep_freed() and heap.applied()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def touch(n):
    p = libc.malloc(n)
    libc.memset(p, 1, n)
    libc.free(p)

touch(24 << 20)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for mb in range(1, 21):
    touch(mb << 20)
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0))
"""


def _faults(mode: str) -> int:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS))
    p = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return int(json.loads(p.stdout.strip().splitlines()[-1]))


def test_memory_freed_is_reused_without_page_faults():
    # 20 MiB of growth in 1 MiB steps is 5120 pages under the defaults
    assert _faults("default") >= 2560
    assert _faults("keep") <= 64


def test_the_policy_is_set_before_a_role_starts(monkeypatch):
    from kgym_harness import heap, role
    calls = []
    monkeypatch.setattr(heap, "keep_freed", lambda: calls.append(1) or True)
    monkeypatch.setattr(role, "apply_cpu_threads", lambda: None)
    monkeypatch.setattr(role, "apply_precision_defaults", lambda: None)
    role.prepare_process()
    assert calls == [1]
