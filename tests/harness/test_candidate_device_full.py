"""A candidate whose device has no room for the judge's tensors answers with
a failure of that call (runtime_error OUT_OF_MEMORY, which the engine may
run again alone when the device was shared) instead of dying with status
70, which the judge can only report as CHILD_DIED (seen on the H100:
KernelBench's 8 GiB reductions at concurrency 4)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from kgym_harness.channel import Channel

HARNESS = os.path.join(os.path.dirname(__file__), "..", "..", "harness")

# the candidate's channel: its first message is read whole, then the copy
# onto the device fails as a full device fails
PATCHED = """
import sys, torch
from kgym_harness import candidate, channel
class Full(channel.Channel):
    n = 0
    def recv(self):
        got = super().recv()
        Full.n += 1
        if Full.n == 1:
            raise {exc}
        return got
candidate.Channel = Full
candidate.run_candidate(int(sys.argv[1]))
"""


def _serve(tmp_path, exc: str):
    a, b = socket.socketpair()
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS), TMPDIR=str(tmp_path))
    env.pop("KGYM_DEVICE", None)
    cand = subprocess.Popen([sys.executable, "-c", PATCHED.format(exc=exc), str(b.fileno())],
                            pass_fds=[b.fileno()], env=env)
    b.close()
    return Channel(a.detach()), cand


def _first_reply(tmp_path, exc: str):
    chan, cand = _serve(tmp_path, exc)
    try:
        chan.send({"cmd": "run"})
        reply = chan.recv()[0]
        chan.send({"cmd": "exit"})
        assert chan.recv()[0]["ok"] is True  # still serving
        chan.close()
        assert cand.wait(timeout=60) == 0
        return reply
    finally:
        if cand.poll() is None:
            cand.kill()


def test_a_full_device_on_receipt_is_a_failure_of_the_call(tmp_path):
    reply = _first_reply(tmp_path, "torch.OutOfMemoryError('CUDA out of memory. "
                                   "Tried to allocate 8.00 GiB')")
    assert reply["ok"] is False
    f = reply["failure"]
    assert (f["verdict"], f["code"], f["phase"]) == ("runtime_error", "OUT_OF_MEMORY", "run")
    assert "out of memory" in f["message"]


def test_the_runtimes_out_of_memory_is_one_too(tmp_path):
    reply = _first_reply(tmp_path, "RuntimeError('CUDA error: out of memory')")
    assert reply["ok"] is False and "out of memory" in reply["failure"]["message"]


def test_any_other_error_on_receipt_still_ends_the_candidate(tmp_path):
    chan, cand = _serve(tmp_path, "ValueError('not a device failure')")
    try:
        chan.send({"cmd": "run"})
        assert cand.wait(timeout=60) != 0  # (70 under the zygote)
    finally:
        chan.close()
        if cand.poll() is None:
            cand.kill()
