"""Device-memory regions for the channel: CUDA tensors cross by CUDA IPC.

On a GPU the judge and the candidate exchange tensors of hundreds of MB
per call (inputs one way, outputs the other). Through the shared-memory
region each crossing is a device-to-host and a host-to-device copy (about
5 ms each for 256 MiB on an H200, and the copy engines and host memory are
shared by every evaluation in flight). A device region moves the same
bytes with two device-to-device copies (about 0.1 ms each).

A DevRegion is one dedicated cudaMalloc allocation, never the caching
allocator's (whose segments hold other tensors), sized in whole 2 MiB
pages, so the IPC handle exposes that allocation and nothing else of its
owner. Its owner only writes it (the message it sends) and never reads it
back; the peer maps it (cudaIpcOpenMemHandle) and copies each tensor out
into a fresh tensor of its own before it answers. A peer that writes into
our region can only spoil what it receives itself. A mapped region is
checked against the driver's own account of the allocation
(cuMemGetAddressRange) before anything is read from it, so a peer cannot
make us read past what it exported; the mapping stays valid when the
exporter frees or dies (the driver counts references: seen on the H200,
docs/harness-notes.md, "The channel", has the run).

Every call returns None/False on failure instead of raising: the channel
then keeps using shared memory (channel.py negotiates before use).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

PAGE = 2 << 20                  # whole pages: the handle covers no one else's data
MIN_REGION = 32 << 20
IPC_LAZY_ENABLE_PEER_ACCESS = 1
HANDLE_BYTES = 64
ENABLED = os.environ.get("KGYM_CUDA_IPC", "1") != "0"


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * HANDLE_BYTES)]


_LIBS: dict[str, Any] = {}


def _load(key: str, names: list[str]) -> Any:
    """The library this process already has mapped whose file name holds
    key (/proc/self/maps), else the first of names that loads; None if
    none does (not remembered: CUDA may load it later)."""
    if _LIBS.get(key) is not None:
        return _LIBS[key]
    lib = None
    found: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if key in os.path.basename(path) and path not in found:
                    found.append(path)
    except OSError:
        pass
    for name in found + names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    _LIBS[key] = lib
    return lib


def cudart() -> Any:
    """The libcudart this process already uses (found in /proc/self/maps),
    else one found by name; None without one. Shared with the L2 guard
    (timing.CudartL2)."""
    return _load("libcudart.so", ["libcudart.so", "libcudart.so.12", "libcudart.so.13",
                                  "libcudart.so.11.0"])


def _libcuda() -> Any:
    return _load("libcuda.so", ["libcuda.so.1", "libcuda.so"])


class _View:
    """A device pointer as __cuda_array_interface__, for torch.as_tensor."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3}


def device_bytes(ptr: int, nbytes: int, device: str) -> torch.Tensor:
    """nbytes of device memory at ptr as a uint8 tensor (a view: it owns
    nothing, and must not outlive the memory)."""
    return torch.as_tensor(_View(ptr, nbytes), device=device)


# Above FINE_REGION a region grows by an eighth of the next power of two,
# not to it: a 6 GiB message maps 6 GiB, not 8 GiB, on a device where
# every GiB is another task's (the same rule as channel.region_size).
FINE_REGION = 1 << 30

# Bytes of regions of ours alive now, and the most at once: memstat adds the
# latter to torch's peak, since a region is no allocator block.
owned_bytes = 0
owned_peak = 0


def region_size(need: int) -> int:
    size = MIN_REGION
    while size < need:
        size *= 2
    if size > FINE_REGION:
        step = size // 8
        size = -(-need // step) * step
    return -(-size // PAGE) * PAGE


def _note_owned(delta: int) -> None:
    global owned_bytes, owned_peak
    owned_bytes += delta
    owned_peak = max(owned_peak, owned_bytes)


def _malloc(rt: Any, ptr: ctypes.c_void_p, size: int) -> bool:
    """cudaMalloc of size bytes into ptr; when the device is full, once more
    after torch's allocator gave back its cached free blocks (they are no
    use to a cudaMalloc of ours, and a large region needs them)."""
    if rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0 and ptr.value:
        return True
    rt.cudaGetLastError()  # an allocation failure is not sticky; clear it
    torch.cuda.empty_cache()
    return rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0 and bool(ptr.value)


class DevRegion:
    """One end of a device region: ours (made by create, written, handle
    sent) or the peer's (opened from its handle, read). bytes is the
    region as a uint8 tensor on the device."""

    def __init__(self, ptr: int, size: int, rid: int, device: str, owned: bool,
                 handle: bytes = b""):
        self.ptr, self.size, self.id, self.owned = ptr, size, rid, owned
        self.device = device
        self.handle = handle
        self.bytes: torch.Tensor | None = device_bytes(ptr, size, device)

    @staticmethod
    def create(need: int, rid: int, device: str) -> "DevRegion | None":
        """A new region of at least need bytes on device (its handle made),
        or None when CUDA IPC is off or unavailable here."""
        if not ENABLED or torch.device(device).type != "cuda":
            return None
        rt = cudart()
        if rt is None:
            return None
        size = region_size(need)
        ptr = ctypes.c_void_p()
        try:
            torch.cuda.set_device(torch.device(device))
            if not _malloc(rt, ptr, size):
                rt.cudaGetLastError()
                return None
            h = _Handle()
            if rt.cudaIpcGetMemHandle(ctypes.byref(h), ptr) != 0:
                rt.cudaFree(ptr)
                return None
            _note_owned(size)
            return DevRegion(ptr.value, size, rid, device, True, bytes(h))
        except (AttributeError, RuntimeError, OSError):
            return None

    @staticmethod
    def open(handle_hex: Any, size: Any, rid: int, device: str) -> "DevRegion | None":
        """The peer's region from its handle, checked to be an allocation
        of at least size bytes starting where the handle maps; None if not."""
        if not ENABLED or torch.device(device).type != "cuda":
            return None
        rt, cu = cudart(), _libcuda()
        if (rt is None or cu is None or not isinstance(handle_hex, str)
                or len(handle_hex) != 2 * HANDLE_BYTES or isinstance(size, bool)
                or not isinstance(size, int) or size <= 0 or size % PAGE):
            return None
        try:
            raw = bytes.fromhex(handle_hex)
        except ValueError:
            return None
        h = _Handle.from_buffer_copy(raw)
        ptr = ctypes.c_void_p()
        try:
            torch.cuda.set_device(torch.device(device))
            if rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), h,
                                       ctypes.c_uint(IPC_LAZY_ENABLE_PEER_ACCESS)) != 0:
                rt.cudaGetLastError()  # not sticky; clear it
                return None
            base, length = ctypes.c_uint64(0), ctypes.c_size_t(0)
            rc = cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(length),
                                            ctypes.c_uint64(ptr.value))
            if rc != 0 or base.value != ptr.value or length.value < size:
                rt.cudaIpcCloseMemHandle(ptr)
                return None
            return DevRegion(ptr.value, size, rid, device, False)
        except (AttributeError, RuntimeError, OSError):
            return None

    def holds(self, t: torch.Tensor) -> bool:
        """t lives on this region's device (it may be copied in)."""
        dev = torch.device(self.device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return t.is_cuda and t.device.index == index

    def grown(self, need: int, rid: int) -> "DevRegion | None":
        """A new region of ours, on the same device, for need bytes."""
        return DevRegion.create(need, rid, self.device)

    def sync(self) -> None:
        """Wait until the device has done every copy into or out of us."""
        torch.cuda.synchronize(torch.device(self.device))

    def view(self, offset: int, dtype: torch.dtype, shape: list[int], nbytes: int) -> torch.Tensor:
        assert self.bytes is not None
        raw = self.bytes[offset:offset + nbytes]
        if dtype == torch.bool:
            return raw.view(torch.bool).reshape(shape)
        return raw.view(dtype).reshape(shape)

    def close(self) -> None:
        """Free ours, unmap the peer's (after the device is done with it)."""
        if self.bytes is None:
            return
        self.bytes = None
        rt = cudart()
        if rt is None:
            return
        try:
            torch.cuda.synchronize(torch.device(self.device))
            if self.owned:
                rt.cudaFree(ctypes.c_void_p(self.ptr))
                _note_owned(-self.size)
            else:
                rt.cudaIpcCloseMemHandle(ctypes.c_void_p(self.ptr))
        except (AttributeError, RuntimeError, OSError):
            pass
