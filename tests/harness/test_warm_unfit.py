"""A warm spare whose warm-up failed is never handed a task as if it were
fit (spare.run_warm_judge): with no task yet it ends, so the worker drops
it and forks another; a task already handed to it gets infra_error, never
a verdict against the candidate. And a part of our own that fails mid-way
still reads the candidate's reply, so no stale reply is left to answer the
task's first command. (On a GPU worker a spare that warmed while another
task filled the device's memory failed its context or allocation and
then failed the honest task handed to it.)"""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from kgym_harness import spare
from kgym_harness.channel import Channel
from kgym_harness.frame import decode_result


def _pair() -> tuple[Channel, Channel]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Channel(a.detach()), Channel(b.detach())


def test_a_failing_part_of_ours_still_reads_the_reply() -> None:
    ours, theirs = _pair()
    try:
        def candidate() -> None:
            msg, _ = theirs.recv()
            theirs.send({"ok": True, "part": msg["part"], "n": 1})
            msg, _ = theirs.recv()
            theirs.send({"ok": True, "part": msg["part"], "n": 2})
        th = threading.Thread(target=candidate, daemon=True)
        th.start()
        out: dict = {}

        def boom() -> None:
            raise RuntimeError("CUDA error: out of memory")
        with pytest.raises(RuntimeError, match="out of memory"):
            spare._warm_part(ours, out, "prep", boom)
        # the next exchange gets its own reply, not the one left from prep
        ours.send({"cmd": "warm", "part": "device"})
        reply, _ = ours.recv()
        assert reply["n"] == 2 and reply["part"] == "device", reply
        th.join(5)
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("warm,unfit", [
    ({"error": "RuntimeError: CUDA error: out of memory"}, True),
    ({"error": "ChannelTimeout: deadline passed"}, True),
    ({"device_error": "CUDA error: an illegal memory access"}, True),
    ({"prep_error": "torch.OutOfMemoryError: CUDA out of memory"}, True),
    ({"prep_error": "No module named 'triton'"}, False),
    ({"device_ms": 3.0}, False),
])
def test_which_warm_ups_leave_a_spare_unfit(warm: dict, unfit: bool) -> None:
    assert (spare.spare_unfit(warm) is not None) == unfit


def _run_spare(monkeypatch, hand_over: bool) -> tuple[bytes, bool]:
    """run_warm_judge with a warm-up that failed; returns what it wrote on
    the result pipe and whether it left the task's go byte unread."""
    monkeypatch.setattr(spare, "_warm_pair",
                        lambda chan, lock, task_fd=None: {"error": "RuntimeError: CUDA error: out of memory"})
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    tr, tw = os.pipe()
    rr, rw = os.pipe()
    if hand_over:
        os.write(tw, b"T")
    done = threading.Event()

    def run() -> None:
        spare.run_warm_judge(tr, ours.detach(), rw, None)
        done.set()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(10)
    assert done.is_set(), "the unfit spare waited for a task instead of ending"
    if not hand_over:
        os.close(rw)  # it never took the task: the result fd is still ours
    data = b""
    while chunk := os.read(rr, 1 << 16):
        data += chunk
    os.close(rr)
    left = False
    try:
        os.set_blocking(tw, False)
        os.write(tw, b"x")  # the read end was closed by the judge: EPIPE
        left = True
    except BrokenPipeError:
        pass
    os.close(tw)
    theirs.close()
    return data, left


def test_an_unfit_spare_without_a_task_ends(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    data, _ = _run_spare(monkeypatch, hand_over=False)
    assert data == b"", data  # no result: the worker sees a spare that died


def test_a_task_handed_to_an_unfit_spare_is_infra_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    (tmp_path / "task.json").write_text(json.dumps({"task_id": "t1", "backend": "cpu"}))
    data, _ = _run_spare(monkeypatch, hand_over=True)
    r = decode_result(data)
    assert r["verdict"] == "infra_error", r
    assert "warm pair failed" in r["error_message"] and "out of memory" in r["error_message"], r
    assert r["task_id"] == "t1"


def test_a_spare_whose_task_came_cuts_its_preload() -> None:
    """The preload only makes the task's first checked call cheaper: once
    the task waits for the spare, no further unit is loaded (and nothing
    is sent to the candidate), the rest loads lazily in the task."""
    from kgym_harness import prewarm
    from kgym_harness.devlock import DeviceLock
    ours, theirs = _pair()
    try:
        out: dict = {}
        asked = []
        ours.deadline = time.monotonic() + 3  # a unit sent would wait for no reply

        def waits() -> bool:
            asked.append(1)
            return True
        spare._preload_pair(ours, out, DeviceLock(None), "cpu", waits)
        assert out["preload_cut"] == prewarm.units()[0] and asked == [1], out
        theirs.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.sock.recv(1)  # nothing was sent
    finally:
        ours.close()
        theirs.close()
