"""The result frame: how the judge hands its one result to the worker/launcher.

b"KGYMRES1" | 8-byte big-endian length | UTF-8 JSON | b"KGYMEND1".
A frame without its trailer is incomplete and never a pass. Standard library
only, so readers need not import torch.
"""

from __future__ import annotations

import json
import os

RESULT_MAGIC = b"KGYMRES1"
RESULT_TRAILER = b"KGYMEND1"
MAX_RESULT = 64 << 20
# Before the frame, when its task says result_notes (the worker's engine),
# a judge may write notes: b"KGYMNOTE" | 8-byte big-endian length | a JSON
# object of at most MAX_NOTE bytes (src/worker/frame.h).
NOTE_MAGIC = b"KGYMNOTE"
MAX_NOTE = 4096


def encode_result(obj: dict) -> bytes:
    body = json.dumps(obj, allow_nan=False, default=str).encode("utf-8")
    return RESULT_MAGIC + len(body).to_bytes(8, "big") + body + RESULT_TRAILER


def write_result(fd: int, obj: dict) -> None:
    """Write the one result frame to fd (all of it, retrying short writes)."""
    data = memoryview(encode_result(obj))
    while data:
        n = os.write(fd, data)
        data = data[n:]


def write_note(fd: int, obj: dict) -> None:
    """Write one note to fd, whole (a pipe write of this size is atomic)."""
    body = json.dumps(obj, allow_nan=False).encode("utf-8")
    if len(body) > MAX_NOTE:
        raise ValueError(f"note of {len(body)} bytes is too large")
    data = memoryview(NOTE_MAGIC + len(body).to_bytes(8, "big") + body)
    while data:
        n = os.write(fd, data)
        data = data[n:]


class FrameError(Exception):
    """The result bytes are not exactly one complete frame."""


def decode_result(data: bytes) -> dict:
    """Parse exactly one complete result frame; raise FrameError otherwise."""
    head = len(RESULT_MAGIC) + 8
    if len(data) < head + len(RESULT_TRAILER):
        raise FrameError(f"result frame truncated ({len(data)} bytes)")
    if data[:len(RESULT_MAGIC)] != RESULT_MAGIC:
        raise FrameError("result frame has a bad magic")
    n = int.from_bytes(data[len(RESULT_MAGIC):head], "big")
    if n > MAX_RESULT:
        raise FrameError("result frame too large")
    if len(data) != head + n + len(RESULT_TRAILER):
        raise FrameError(f"result frame length {len(data)} != {head + n + len(RESULT_TRAILER)}")
    if data[head + n:] != RESULT_TRAILER:
        raise FrameError("result frame has no trailer")
    try:
        obj = json.loads(data[head:head + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FrameError(f"result body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise FrameError("result body is not an object")
    return obj


# The judge's phase marker (problem.Marker writes it): the phase of reference
# code the judge is running, in MARK_FILE of its TMPDIR, one MARK_SIZE record,
# NUL-padded (all NUL: none). A reader that finds the judge dead without a
# frame (the launcher; src/worker/engine_result.c reads the same file) blames the
# reference for a death in such a phase.
MARK_FILE = "kgym-phase"
MARK_SIZE = 64


def read_mark(directory: str) -> str | None:
    """The phase a judge left in directory's marker (None: none)."""
    try:
        with open(os.path.join(directory, MARK_FILE), "rb") as f:
            rec = f.read(MARK_SIZE)
    except OSError:
        return None
    text = rec.split(b"\0", 1)[0].decode("ascii", "replace")
    return text if text.startswith("reference:") and text.isprintable() else None
