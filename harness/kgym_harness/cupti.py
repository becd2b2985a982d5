"""Kernel activity straight from CUPTI (ctypes), without torch's profiler.

torch.profiler's first start in a process costs 4.7-5.5 s of CPU on an H100
whatever it is asked to record (bench/results/2026-12-05-h100-cupti.txt);
most of that is kineto's, not CUPTI's activity API, which records only what
is enabled. This module enables one kind, CONCURRENT_KERNEL (kernels keep
running concurrently), reads each record's name, start and end, and
demangles C++ names as kineto does, so rows read the same either way.

Only used in the candidate's processes: every row is a claim the judge
bounds (stages/profile.py), exactly as torch.profiler's rows were.
On the H100 (bench/results/2026-12-05-h100-probe.txt): the library's load
13 ms, a start 0.1 ms, a stop and flush 0.3-0.9 ms, the same 11 kernels
and names as torch.profiler, whose first start took 3.2-3.6 s there; no
host-bound loop slower after it. Tested on a GPU by bench/speed/cupti_direct.py
and the GPU red team; on the CPU only find_library and demangle run
(tests/harness/test_cupti.py).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading

KIND_CONCURRENT_KERNEL = 10
FLUSH_FORCED = 1
SUCCESS = 0
MAX_LIMIT_REACHED = 12  # cuptiActivityGetNextRecord: no more records in this buffer
BUF_BYTES = 8 << 20
ALIGN = 8
# CUpti_ActivityKernel4..9 share this prefix (cupti_activity.h)
OFF_START, OFF_END, OFF_STREAM, OFF_CORR, OFF_NAME = 16, 24, 48, 92, 104

_REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                        ctypes.POINTER(ctypes.c_size_t))
_DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                         ctypes.c_size_t, ctypes.c_size_t)


class CuptiError(RuntimeError):
    pass


def find_library() -> str | None:
    """The libcupti this process should use: one already mapped (torch's
    kineto may have loaded it), else the wheel's (nvidia-cuda-cupti),
    else a system CUDA's."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ")[-1]
                if "/libcupti.so" in path:
                    return path
    except OSError:
        pass
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    pats = []
    for r in roots:
        pats += [os.path.join(r, "nvidia", "cuda_cupti", "lib", "libcupti.so*"),
                 os.path.join(r, "nvidia", "cu*", "lib", "libcupti.so*"),
                 os.path.join(r, "torch", "lib", "libcupti*.so*")]
    pats += ["/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*",
             "/usr/local/cuda/lib64/libcupti.so*", "/usr/lib/x86_64-linux-gnu/libcupti.so*"]
    for pat in pats:
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[0]
    return None


_demangler = None


def demangle(name: str) -> str:
    """A C++ symbol's readable name (as kineto shows it); others unchanged."""
    global _demangler
    if not name.startswith("_Z"):
        return name
    if _demangler is None:
        try:
            lib = ctypes.CDLL("libstdc++.so.6")
            fn = lib.__cxa_demangle
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_int)]
            libc = ctypes.CDLL(None)
            libc.free.argtypes = [ctypes.c_void_p]
            _demangler = (fn, libc.free)
        except (OSError, AttributeError):
            _demangler = False
    if not _demangler:
        return name
    fn, free = _demangler
    status = ctypes.c_int(0)
    p = fn(name.encode(errors="replace"), None, None, ctypes.byref(status))
    if not p or status.value != 0:
        return name
    try:
        return ctypes.string_at(p).decode(errors="replace")
    finally:
        free(p)


class KernelTrace:
    """One process's recorder: start(), the work, stop() -> its kernels as
    (name, device us). CUPTI's callbacks stay registered for the process;
    the kind is enabled only between start and stop."""

    def __init__(self, path: str | None = None) -> None:
        path = path or find_library()
        if not path:
            raise CuptiError("no libcupti found")
        self.lib = ctypes.CDLL(path)
        self.path = path
        for fn in ("cuptiActivityEnable", "cuptiActivityDisable"):
            getattr(self.lib, fn).argtypes = [ctypes.c_int]
        self.lib.cuptiActivityFlushAll.argtypes = [ctypes.c_uint32]
        self.lib.cuptiActivityGetNextRecord.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        self.lib.cuptiGetResultString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self._bufs: dict[int, ctypes.Array] = {}
        self._rows: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()
        self._req = _REQ(self._on_request)
        self._done = _DONE(self._on_complete)
        self._register()

    def _register(self) -> None:
        """Ours are the process's buffer callbacks (torch.profiler, started
        in this process since, registers its own in their place)."""
        self._check(self.lib.cuptiActivityRegisterCallbacks(self._req, self._done),
                    "register callbacks")

    def _check(self, rc: int, what: str) -> None:
        if rc != SUCCESS:
            msg = ctypes.c_char_p()
            self.lib.cuptiGetResultString(rc, ctypes.byref(msg))
            raise CuptiError(f"CUPTI {what}: {rc} {(msg.value or b'').decode(errors='replace')}")

    def _on_request(self, pbuf, psize, pmax) -> None:
        raw = ctypes.create_string_buffer(BUF_BYTES + ALIGN)
        addr = ctypes.addressof(raw)
        addr += (-addr) % ALIGN
        with self._lock:
            self._bufs[addr] = raw
        pbuf[0] = addr
        psize[0] = BUF_BYTES
        pmax[0] = 0

    def _on_complete(self, ctx, stream, buf, size, valid) -> None:
        rec = ctypes.c_void_p()
        rows = []
        while self.lib.cuptiActivityGetNextRecord(buf, valid, ctypes.byref(rec)) == SUCCESS:
            a = rec.value
            if ctypes.c_uint32.from_address(a).value != KIND_CONCURRENT_KERNEL:
                continue
            start = ctypes.c_uint64.from_address(a + OFF_START).value
            end = ctypes.c_uint64.from_address(a + OFF_END).value
            name = ctypes.c_char_p.from_address(a + OFF_NAME).value or b"?"
            rows.append((name.decode(errors="replace"), start, end))
        with self._lock:
            self._rows += rows
            self._bufs.pop(buf, None)

    def start(self) -> None:
        with self._lock:
            self._rows = []
        self._register()
        self._check(self.lib.cuptiActivityEnable(KIND_CONCURRENT_KERNEL), "enable")

    def stop(self) -> list[tuple[str, float]]:
        """Call after the device is synchronised: every kernel since start."""
        try:
            self._check(self.lib.cuptiActivityFlushAll(FLUSH_FORCED), "flush")
        finally:
            self.lib.cuptiActivityDisable(KIND_CONCURRENT_KERNEL)
        with self._lock:
            rows, self._rows = self._rows, []
        return [(demangle(n), max(e - s, 0) / 1e3) for n, s, e in rows]


_TRACE: KernelTrace | None = None


def trace() -> KernelTrace:
    """This process's recorder (made once)."""
    global _TRACE
    if _TRACE is None:
        _TRACE = KernelTrace()
    return _TRACE
