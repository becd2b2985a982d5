"""The judge <-> candidate channel and the result frame.

Channel message: 4-byte big-endian header length, a UTF-8 JSON header, then
the raw bytes of every tensor the header lists under "tensors"
([{dtype, shape, nbytes}], contiguous, in order). Nothing is ever pickled:
the trusted side receives each tensor's bytes with recv_into straight into a
fresh uint8 tensor (one buffer per tensor, no chunks joined) and views it
as the dtype, after checking the dtype against an allow-list and the sizes
against limits.
"""

from __future__ import annotations

import json
import math
import socket
import time
from typing import Any

import torch

MAX_HEADER = 1 << 20
MAX_TENSORS = 256
MAX_NDIM = 8
MAX_MESSAGE_BYTES = 16 << 30
SOCKET_BUFFER = 4 << 20

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


class Channel:
    """One end of the stream socket; owns the socket object (not the fd's peer)."""

    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self.deadline: float | None = None
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # fewer wake-ups per tensor
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

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
        header["tensors"] = [describe(t) for t in tensors]
        body = json.dumps(header, allow_nan=False).encode()
        if len(body) > MAX_HEADER:
            raise ProtocolError(f"header of {len(body)} bytes is too large")
        self._send_all(len(body).to_bytes(4, "big") + body)
        for t in tensors:
            data = _tensor_bytes(t)
            if len(data):
                self._send_all(data)

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

    def recv(self) -> tuple[dict, list[torch.Tensor]]:
        """Receive one message, validating everything before allocating."""
        n = int.from_bytes(self._recv_exact(4), "big")
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
        tensors = [self._recv_tensor(*p) for p in plan]
        return header, tensors

    def _recv_tensor(self, dtype: torch.dtype, shape: list[int], nbytes: int) -> torch.Tensor:
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        raw = torch.empty(nbytes, dtype=torch.uint8)  # uninitialised: no memset of 64 MB
        self._recv_into(memoryview(raw.numpy()).cast("B"))
        if dtype == torch.bool:
            return raw.to(torch.bool).reshape(shape)
        return raw.view(dtype).reshape(shape)


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
