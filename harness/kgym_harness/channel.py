"""The judge <-> candidate channel and the result frame.

Channel message: 4-byte big-endian header length, a UTF-8 JSON header, then
the raw bytes of every tensor the header lists under "tensors"
([{dtype, shape, nbytes}], contiguous, in order). Nothing is ever pickled:
the trusted side receives each tensor's bytes with recv_into straight into a
fresh uint8 tensor (one buffer per tensor, no chunks joined) and views it
as the dtype, after checking the dtype against an allow-list and the sizes
against limits.

Large messages (SHM_MIN_BYTES of tensor data or more) carry no tensor bytes
on the socket: the sender writes them into its own shared-memory region (a
sealed memfd: it can neither shrink nor grow, and the receiver can only map
it read-only) and the specs say where ("offset"); the header says which
region ("shm": {"id", "size"}). A region's fd travels once, by SCM_RIGHTS
with the length prefix of the first message that uses it. The receiver
checks the seals and the size before mapping, and copies every tensor out
into a fresh one (on Channel.device when set: CUDA tensors are copied
straight from the mapping, which both sides register with CUDA once, so a
256 MiB tensor crosses in milliseconds instead of a quarter second). The
protocol is strict request/reply, so a sender reuses its region for its
next message only after the peer has answered (and copied out).

On a GPU, messages whose tensors all live on the channel's CUDA device
cross through a device region instead (devregion.py: CUDA IPC, two
device-to-device copies). Each side announces its region once
("dev_region": {id, size, handle}, the first one with the first message
it sends once its device is known and offer_region allows); the peer opens
it (if it knows its own device by then) and says whether that worked
("dev_ok" in its next message). Both roles settle this before a task's
first tensor crosses (the judge announces with the load command, a warm
spare's pair under its device lock), so even the first inputs cross on
the device (through shared memory, a first 256 MiB message once made and
page-locked a region on both sides for itself). Only a side whose region the
peer could open sends tensors that way ("dev": {id, size}); every other
message uses shared memory as above, so a device or sandbox that refuses
CUDA IPC costs nothing but speed. A region grown above DEV_FINE_REGION
carries one message only (announced with it, freed by its sender at the
answer, unmapped by the receiver once copied out), as a large shared one
does.
"""

from __future__ import annotations

import array
import fcntl
import json
import math
import mmap
import os
import socket
import time
import warnings
from typing import Any

import torch

from .devregion import DevRegion

MAX_HEADER = 1 << 20
MAX_TENSORS = 256
MAX_NDIM = 8
MAX_MESSAGE_BYTES = 16 << 30
SOCKET_BUFFER = 4 << 20
SHM_MIN_BYTES = int(os.environ.get("KGYM_SHM_MIN_BYTES", str(1 << 20)))
SHM_MIN_REGION = 16 << 20
SHM_ALIGN = 256
F_SEAL_FUTURE_WRITE = 0x0010  # Linux 5.1: no new writable mappings
_SEALS_NEEDED = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64,
    "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class ProtocolError(Exception):
    """The peer sent something that is not a valid message."""


class PeerClosed(ProtocolError):
    """The peer closed the channel (usually: it died)."""


class ChannelTimeout(Exception):
    """No complete message arrived before the deadline."""


def dtype_name(dt: torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dt]
    except KeyError:
        raise ProtocolError(f"dtype {dt} cannot cross the channel") from None


def _tensor_bytes(t: torch.Tensor) -> memoryview:
    """Bytes of t (detached, contiguous, on the CPU), without another copy."""
    flat = t.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    flat = flat.contiguous()
    if flat.numel() == 0:
        return memoryview(b"")
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def describe(t: torch.Tensor) -> dict:
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
            "nbytes": t.numel() * t.element_size()}


def _cuda_register(ptr: int, size: int, readonly: bool) -> bool:
    """Page-lock a mapping for fast device copies; False when not possible
    (no CUDA in this process yet, or the driver refuses)."""
    try:
        if not torch.cuda.is_initialized():
            return False
        rt = torch.cuda.cudart()
        rc = rt.cudaHostRegister(ptr, size, 8 if readonly else 0)  # 8: ReadOnly
        return int(getattr(rc, "value", rc)) == 0
    except Exception:
        return False


class Region:
    """One shared-memory region: a memfd mapped here, as a uint8 tensor."""

    def __init__(self, fd: int, size: int, rid: int, writable: bool):
        self.fd, self.size, self.id = fd, size, rid
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=prot)
        with warnings.catch_warnings():  # a read-only buffer: we only read it
            warnings.simplefilter("ignore")
            self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.registered = _cuda_register(self.bytes.data_ptr(), size, not writable)

    def view(self, offset: int, dtype: torch.dtype, shape: list[int], nbytes: int) -> torch.Tensor:
        raw = self.bytes[offset:offset + nbytes]
        if dtype == torch.bool:
            return raw.view(torch.bool).reshape(shape)
        return raw.view(dtype).reshape(shape)

    def close(self) -> None:
        if self.registered:
            try:
                torch.cuda.cudart().cudaHostUnregister(self.bytes.data_ptr())
            except Exception:
                pass
            self.registered = False
        self.bytes = None  # type: ignore[assignment]
        try:
            self.map.close()
        except (BufferError, ValueError):
            pass  # a view still alive: the mapping goes with it
        try:
            os.close(self.fd)
        except OSError:
            pass


# Above this, a region grows in steps of an eighth of the next power of two
# rather than to it: a 3.2 GB message then maps 3 GiB, not 4 GiB, in
# each process (the candidate's address space is capped at half the RAM on
# a cpu worker, and its inputs and outputs are mapped in it as well). A
# region this large is also used for one message only: both ends drop it
# once it is sent and copied out, so that neither holds a copy of its
# largest message while it works (same rule on both sides).
SHM_FINE_REGION = 1 << 30
# The same rule for device regions (devregion.py): one above this carries
# one message, then its sender frees it and its receiver unmaps it, so that
# neither process keeps a device copy of its largest message while it works.
DEV_FINE_REGION = 1 << 30


def region_size(need: int) -> int:
    """The size of a new region for need bytes: the next power of two from
    SHM_MIN_REGION up to SHM_FINE_REGION, then the next eighth of one."""
    size = SHM_MIN_REGION
    while size < need:
        size *= 2
    if size > SHM_FINE_REGION:
        step = size // 8
        size = -(-need // step) * step
    return size


def _new_out_region(need: int, rid: int) -> Region:
    size = region_size(need)
    fd = os.memfd_create("kgym-chan", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        region = Region(fd, size, rid, writable=True)
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS_NEEDED | F_SEAL_FUTURE_WRITE)
        except OSError:  # an older kernel: the peer could write, we never read back
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS_NEEDED)
    except BaseException:
        os.close(fd)
        raise
    return region


def _open_in_region(fd: int, rid: int, size: int) -> Region:
    """Maps a region the peer sent, after checking it cannot shrink under us."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise ProtocolError(f"shared region is not a sealed memfd: {e}") from None
    if seals & _SEALS_NEEDED != _SEALS_NEEDED or st.st_size != size or size > MAX_MESSAGE_BYTES:
        os.close(fd)
        raise ProtocolError("shared region is not sealed, or not the announced size")
    return Region(fd, size, rid, writable=False)


class Channel:
    """One end of the stream socket; owns the socket object (not the fd's peer)."""

    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self.deadline: float | None = None
        self.device: str | None = None  # where received shm tensors are materialised
        self._out: Region | None = None
        self._in: Region | None = None
        self._next_id = 1
        self._dev_out: DevRegion | None = None
        self._dev_in: DevRegion | None = None
        self._dev_spent = False  # _dev_out carried a large message: freed at the reply
        self._dev_announced = False        # our first device region was offered
        self.dev_peer_ok = False           # the peer mapped it: we may send through it
        self._dev_answer: bool | None = None  # to tell the peer about its region
        self._dev_seen = False             # the peer announced a region before
        self.offer_region = True  # our first send may make and announce our region
        self._dev_pending: Any = None  # an announcement that came before our device
        # where the channel's own time went (ms, summed; diagnostics): device
        # regions made and opened, shared-memory regions made and opened,
        # tensors copied into outgoing regions and out of incoming ones
        self.ms = dict.fromkeys(("dev_create", "dev_open", "shm_create", "shm_open",
                                 "place", "take"), 0.0)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # fewer wake-ups per tensor
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            except OSError:
                pass

    def close(self) -> None:
        for r in (self._out, self._in, self._dev_out, self._dev_in):
            if r is not None:
                r.close()
        self._out = self._in = None
        self._dev_out = self._dev_in = None
        try:
            self.sock.close()
        except OSError:
            pass

    def use_device(self, device: str | None, offer: bool = True) -> None:
        """Receive large tensors on device (None: on the CPU) and open the
        peer's device regions there, one announced before included. offer:
        our next send may make and announce our own region; a side that
        knows its device before it may touch it (the candidate, until its
        first command under the device lock) opens the peer's meanwhile."""
        self.device = device
        self.offer_region = offer
        if device and self._dev_pending is not None:
            ann, self._dev_pending = self._dev_pending, None
            self._open_announced(ann)

    def _lap(self, what: str, t0: float) -> None:
        self.ms[what] += (time.perf_counter() - t0) * 1e3

    def _remaining(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ChannelTimeout("deadline passed")
        return left

    def send(self, header: dict, tensors: list[torch.Tensor] = ()) -> None:
        """Send one message; header["tensors"] is filled in from tensors."""
        header = dict(header)
        specs = [describe(t) for t in tensors]
        total = sum(sp["nbytes"] for sp in specs)
        new_fd = -1
        if self._dev_answer is not None:
            header["dev_ok"], self._dev_answer = self._dev_answer, None
        big = bool(tensors) and total >= SHM_MIN_BYTES
        if big and not (self._on_device(tensors) and self._place_on_device(tensors, specs, header)):
            new_fd = self._place_in_shm(tensors, specs, header)
        if not self._dev_announced and self.device and self.offer_region:
            self._dev_announced = True  # once: None on the CPU, or where IPC is off
            t0 = time.perf_counter()
            self._dev_out = DevRegion.create(0, self._next_id, self.device)
            self._lap("dev_create", t0)
            self._next_id += 1
            if self._dev_out is not None:
                header["dev_region"] = self._announce(self._dev_out)
        header["tensors"] = specs
        body = json.dumps(header, allow_nan=False).encode()
        if len(body) > MAX_HEADER:
            raise ProtocolError(f"header of {len(body)} bytes is too large")
        prefix = len(body).to_bytes(4, "big")
        if new_fd >= 0:
            self._send_fd(prefix, new_fd)
            self._send_all(body)
        else:
            self._send_all(prefix + body)
        if "shm" in header and self._out is not None and self._out.size > SHM_FINE_REGION:
            # a large region is not kept for the next message (the peer holds
            # it until it has copied out, then drops it too: _drop_large_in)
            self._out.close()
            self._out = None
        if "dev" in header and self._dev_out is not None and self._dev_out.size > DEV_FINE_REGION:
            self._dev_spent = True  # freed once the peer answers (it has copied out)
        if "shm" in header or "dev" in header:
            return  # the bytes are in a region: none follow on the socket
        for t in tensors:
            data = _tensor_bytes(t)
            if len(data):
                self._send_all(data)

    def _place_in_shm(self, tensors: list[torch.Tensor], specs: list[dict], header: dict) -> int:
        """Copies tensors into our region (a new, larger one if needed) and
        notes offsets in specs; returns the fd to send when the region is new."""
        offsets, need = _layout(specs)
        new_fd = -1
        if self._out is None or self._out.size < need:
            t0 = time.perf_counter()
            if self._out is not None:
                self._out.close()
            self._out = _new_out_region(need, self._next_id)
            self._lap("shm_create", t0)
            self._next_id += 1
            new_fd = self._out.fd
        t0 = time.perf_counter()
        for t, sp, off in zip(tensors, specs, offsets):
            sp["offset"] = off
            if sp["nbytes"]:
                src = t.detach()
                dst = self._out.view(off, src.dtype, list(src.shape), sp["nbytes"])
                dst.copy_(src)
        self._lap("place", t0)
        header["shm"] = {"id": self._out.id, "size": self._out.size}
        return new_fd

    def _on_device(self, tensors: list[torch.Tensor]) -> bool:
        """Whether these tensors may cross through our device region: the
        peer mapped it, and every one lives on the region's device."""
        region = self._dev_out
        return self.dev_peer_ok and region is not None and all(region.holds(t) for t in tensors)

    @staticmethod
    def _announce(region: DevRegion) -> dict:
        return {"id": region.id, "size": region.size, "handle": region.handle.hex()}

    def _place_on_device(self, tensors: list[torch.Tensor], specs: list[dict],
                         header: dict) -> bool:
        """Copies tensors into our device region (a new, larger one if
        needed, announced in this message) and waits until the copies are
        done, so the peer reads complete data. False, with nothing done,
        when a larger region cannot be had (the device is full): this
        message then goes through shared memory."""
        offsets, need = _layout(specs)
        assert self._dev_out is not None  # _on_device said so
        if self._dev_out.size < need or self._dev_out.bytes is None:  # small, or spent
            t0 = time.perf_counter()
            grown = self._dev_out.grown(need, self._next_id)
            if grown is None:
                return False
            self._next_id += 1
            self._dev_out.close()
            self._dev_out = grown
            self._lap("dev_create", t0)
            header["dev_region"] = self._announce(grown)
        t0 = time.perf_counter()
        for t, sp, off in zip(tensors, specs, offsets):
            sp["offset"] = off
            if sp["nbytes"]:
                src = t.detach()
                self._dev_out.view(off, src.dtype, list(src.shape), sp["nbytes"]).copy_(src)
        self._dev_out.sync()
        self._lap("place", t0)
        header["dev"] = {"id": self._dev_out.id, "size": self._dev_out.size}
        return True

    def _send_fd(self, prefix: bytes, fd: int) -> None:
        self.sock.settimeout(self._remaining())
        try:
            sent = self.sock.sendmsg([prefix], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                 array.array("i", [fd]))])
        except socket.timeout:
            raise ChannelTimeout("deadline passed") from None
        except (BrokenPipeError, ConnectionResetError) as e:
            raise PeerClosed(str(e)) from None
        if sent < len(prefix):
            self._send_all(prefix[sent:])

    def _send_all(self, data: bytes | memoryview) -> None:
        """sendall under the deadline (a peer that stops reading cannot hang us)."""
        self.sock.settimeout(self._remaining())
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise ChannelTimeout("deadline passed") from None
        except (BrokenPipeError, ConnectionResetError) as e:
            raise PeerClosed(str(e)) from None

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        self._recv_into(memoryview(buf))
        return buf

    def _recv_into(self, view: memoryview) -> None:
        """Fill view from the socket (recv_into straight into it, no chunks
        joined in Python)."""
        n = len(view)
        got = 0
        while got < n:
            self.sock.settimeout(self._remaining())
            try:
                k = self.sock.recv_into(view[got:])
            except socket.timeout:
                raise ChannelTimeout("deadline passed") from None
            except (ConnectionResetError, BrokenPipeError) as e:
                raise PeerClosed(str(e)) from None
            if k == 0:
                raise PeerClosed("peer closed the channel")
            got += k

    def _recv_prefix(self) -> tuple[int, list[int]]:
        """The 4-byte length, and any fds that came with it (at most one is
        ever expected; extra ones are closed by the caller)."""
        buf = bytearray()
        fds: list[int] = []
        space = socket.CMSG_SPACE(4 * 4)
        while len(buf) < 4:
            self.sock.settimeout(self._remaining())
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(4 - len(buf), space)
            except socket.timeout:
                for fd in fds:
                    os.close(fd)
                raise ChannelTimeout("deadline passed") from None
            except (ConnectionResetError, BrokenPipeError) as e:
                for fd in fds:
                    os.close(fd)
                raise PeerClosed(str(e)) from None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    arr = array.array("i")
                    arr.frombytes(payload[:len(payload) - len(payload) % 4])
                    fds.extend(arr)
            if not data:
                for fd in fds:
                    os.close(fd)
                raise PeerClosed("peer closed the channel")
            buf += data
        return int.from_bytes(buf, "big"), fds

    def recv(self) -> tuple[dict, list[torch.Tensor]]:
        """Receive one message, validating everything before allocating."""
        n, fds = self._recv_prefix()
        if self._dev_spent and self._dev_out is not None:  # the peer copied it out
            self._dev_spent = False
            self._dev_out.close()
        new_fd = fds.pop(0) if fds else -1
        for fd in fds:
            os.close(fd)
        try:
            return self._recv_body(n, new_fd)
        except BaseException:
            if new_fd >= 0 and (self._in is None or self._in.fd != new_fd):
                try:
                    os.close(new_fd)
                except OSError:
                    pass
            raise

    def _recv_body(self, n: int, new_fd: int) -> tuple[dict, list[torch.Tensor]]:
        if n == 0 or n > MAX_HEADER:
            raise ProtocolError(f"bad header length {n}")
        try:
            header = json.loads(self._recv_exact(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ProtocolError(f"header is not JSON: {e}") from None
        if not isinstance(header, dict):
            raise ProtocolError("header is not an object")
        specs = header.get("tensors", [])
        if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
            raise ProtocolError("bad tensor list")
        plan = [_check_spec(s) for s in specs]
        if sum(p[2] for p in plan) > MAX_MESSAGE_BYTES:
            raise ProtocolError("message too large")
        self._dev_header(header)
        if header.get("dev") is not None:
            if new_fd >= 0 or "shm" in header:
                raise ProtocolError("a message uses a device region and shared memory at once")
            return header, self._copy_from_device(header["dev"], specs, plan)
        shm = header.get("shm")
        if shm is None:
            if new_fd >= 0:
                raise ProtocolError("a shared region came with a message that does not use it")
            return header, [self._recv_tensor(*p) for p in plan]
        region = self._in_region(shm, new_fd)
        t0 = time.perf_counter()
        tensors = []
        for spec, (dtype, shape, nbytes) in zip(specs, plan):
            off = _offset(spec, nbytes, region.size, "shared-memory")
            tensors.append(self._copy_out(region, off, dtype, shape, nbytes))
        self._lap("take", t0)
        if region.size > SHM_FINE_REGION:  # copied out; its sender dropped it too
            region.close()
            self._in = None
        return header, tensors

    def _dev_header(self, header: dict) -> None:
        """The device-region fields of a received header: the peer's answer
        about our region, and a region it announces (opened here; the
        answer goes with our next message when it was the first)."""
        if header.get("dev_ok") is True and self._dev_out is not None:
            self.dev_peer_ok = True
        ann = header.get("dev_region")
        if ann is None:
            return
        if not self.device:  # opened (and answered) once we know our device
            self._dev_pending = ann
            return
        self._open_announced(ann)

    def _open_announced(self, ann: Any) -> None:
        """Map the peer's announced region (replacing its last one); the
        answer to its first goes with our next message."""
        first = not self._dev_seen
        self._dev_seen = True
        rid = ann.get("id") if isinstance(ann, dict) else None
        region = None
        t0 = time.perf_counter()
        if isinstance(rid, int) and not isinstance(rid, bool) and self.device:
            region = DevRegion.open(ann.get("handle"), ann.get("size"), rid, self.device)
        if self._dev_in is not None:
            self._dev_in.close()
        self._lap("dev_open", t0)
        self._dev_in = region
        if first:
            self._dev_answer = region is not None

    def _copy_from_device(self, dev: Any, specs: list, plan: list) -> list[torch.Tensor]:
        """Fresh tensors on our device holding what the peer's device
        region holds for this message; done before we answer (the peer
        reuses its region for its next message)."""
        region = self._dev_in
        if (not isinstance(dev, dict) or region is None or dev.get("id") != region.id
                or dev.get("size") != region.size):
            raise ProtocolError(f"message names device region {dev!r}, which we do not hold")
        t0 = time.perf_counter()
        tensors = []
        try:
            for spec, (dtype, shape, nbytes) in zip(specs, plan):
                off = _offset(spec, nbytes, region.size, "device-region")
                out = torch.empty(shape, dtype=dtype, device=region.device)
                if nbytes:
                    out.copy_(region.view(off, dtype, shape, nbytes))
                tensors.append(out)
            region.sync()
        finally:
            # copied out, or failed to (a full device): a large one is let go
            # either way; its sender frees it at our answer
            if region.size > DEV_FINE_REGION:
                region.close()
                self._dev_in = None
        self._lap("take", t0)
        return tensors

    def _in_region(self, shm: Any, new_fd: int) -> Region:
        if not isinstance(shm, dict):
            raise ProtocolError("bad shm field")
        rid, size = shm.get("id"), shm.get("size")
        if (isinstance(rid, bool) or not isinstance(rid, int) or isinstance(size, bool)
                or not isinstance(size, int) or not 0 < size <= MAX_MESSAGE_BYTES):
            raise ProtocolError("bad shm field")
        if new_fd >= 0:
            t0 = time.perf_counter()
            if self._in is not None:
                self._in.close()
                self._in = None
            self._in = _open_in_region(new_fd, rid, size)
            self._lap("shm_open", t0)
        if self._in is None or self._in.id != rid or self._in.size != size:
            raise ProtocolError(f"message names shared region {rid!r}, which we do not hold")
        return self._in

    def _copy_out(self, region: Region, off: int, dtype: torch.dtype, shape: list[int],
                  nbytes: int) -> torch.Tensor:
        """A fresh tensor (on self.device when set) holding the region's bytes."""
        dev = self.device if self.device and self.device != "cpu" else "cpu"
        out = torch.empty(shape, dtype=dtype, device=dev)
        if nbytes:
            out.copy_(region.view(off, dtype, shape, nbytes))
        return out

    def _recv_tensor(self, dtype: torch.dtype, shape: list[int], nbytes: int) -> torch.Tensor:
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        raw = torch.empty(nbytes, dtype=torch.uint8)  # uninitialised: no memset of 64 MB
        self._recv_into(memoryview(raw.numpy()).cast("B"))
        if dtype == torch.bool:
            return raw.to(torch.bool).reshape(shape)
        return raw.view(dtype).reshape(shape)


def _offset(spec: dict, nbytes: int, size: int, what: str) -> int:
    """A received tensor's offset in a region of size bytes, checked."""
    off = spec.get("offset")
    if (isinstance(off, bool) or not isinstance(off, int) or off < 0
            or off % SHM_ALIGN or off + nbytes > size):
        raise ProtocolError(f"bad {what} offset {off!r}")
    return off


def _layout(specs: list[dict]) -> tuple[list[int], int]:
    """Offsets (SHM_ALIGN-aligned, in order) of the tensors of a message in
    a region, and the bytes it needs."""
    offsets, need = [], 0
    for sp in specs:
        offsets.append(need)
        need += -(-sp["nbytes"] // SHM_ALIGN) * SHM_ALIGN
    return offsets, need


def _check_spec(spec: Any) -> tuple[torch.dtype, list[int], int]:
    if not isinstance(spec, dict):
        raise ProtocolError("tensor spec is not an object")
    dtype = DTYPES.get(spec.get("dtype")) if isinstance(spec.get("dtype"), str) else None
    if dtype is None:
        raise ProtocolError(f"dtype {spec.get('dtype')!r} is not allowed")
    shape = spec.get("shape")
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**40
                       for s in shape)):
        raise ProtocolError(f"bad shape {shape!r}")
    nbytes = spec.get("nbytes")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if nbytes != math.prod(shape) * itemsize:
        raise ProtocolError(f"nbytes {nbytes!r} does not match shape {shape} of {spec['dtype']}")
    return dtype, shape, nbytes


# ---- structures of tensors and plain values --------------------------------

def pack(value: Any, tensors: list[torch.Tensor]) -> Any:
    """JSON-able description of value; tensors are appended to `tensors`.

    Raises TypeError for values that cannot cross (the caller reports it).
    """
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"__tensor__": len(tensors) - 1}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"__float__": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [pack(v, tensors) for v in value]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    raise TypeError(f"cannot send a value of type {type(value).__name__}")


def unpack(desc: Any, tensors: list[torch.Tensor], depth: int = 0) -> Any:
    """Inverse of pack; validates indices and nesting."""
    if depth > 32:
        raise ProtocolError("structure nested too deeply")
    if isinstance(desc, list):
        return [unpack(v, tensors, depth + 1) for v in desc]
    if isinstance(desc, dict):
        if "__tensor__" in desc:
            i = desc["__tensor__"]
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(tensors):
                raise ProtocolError("bad tensor index")
            return tensors[i]
        if "__tuple__" in desc and isinstance(desc["__tuple__"], list):
            return tuple(unpack(v, tensors, depth + 1) for v in desc["__tuple__"])
        if desc.get("__float__") in ("inf", "-inf", "nan"):
            return float(desc["__float__"])
        raise ProtocolError("unknown structure")
    if desc is None or isinstance(desc, (bool, int, float, str)):
        return desc
    raise ProtocolError("unknown structure")
