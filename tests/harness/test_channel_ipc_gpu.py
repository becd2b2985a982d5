"""The channel's device regions (CUDA IPC) between two real processes on a GPU.

Skipped without CUDA (CI); run on the H200 with make test-gpu's pytest
step. The peer is a second Python process (CUDA IPC cannot open a handle in
the process that made it) that echoes every tensor it receives, doubled.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch

from kgym_harness import devregion
from kgym_harness.channel import Channel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PEER = r'''
import os, sys, torch
from kgym_harness.channel import Channel
if os.environ.get("LIE_SIZE"):  # announce twice the region it made
    real = Channel._announce
    Channel._announce = staticmethod(lambda r: dict(real(r), size=2 * r.size))
chan = Channel(int(sys.argv[1]))
chan.device = "cuda:0"
torch.cuda.set_device(0)
while True:
    header, tensors = chan.recv()
    if header.get("cmd") == "exit":
        chan.send({"ok": True})
        break
    chan.send({"ok": True, "got_dev": "dev" in header}, [t * 2 for t in tensors])
chan.close()
'''


@pytest.fixture()
def peer(request):
    env = dict(os.environ)
    env.update(getattr(request, "param", {}))
    a, b = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", PEER, str(b.fileno())], pass_fds=[b.fileno()],
                            env=env)
    b.close()
    chan = Channel(a.detach())
    chan.device = "cuda:0"
    chan.deadline = None
    yield chan
    try:
        chan.send({"cmd": "exit"})
        chan.recv()
    finally:
        chan.close()
        proc.wait(timeout=30)


def _echo(chan: Channel, tensors: list) -> tuple[dict, list]:
    chan.send({"cmd": "echo"}, tensors)
    return chan.recv()


def test_tensors_cross_by_device_region_after_both_sides_agree(peer):
    torch.cuda.set_device(0)
    x = torch.randn(16 << 20, device="cuda")  # 64 MiB
    flags = torch.rand(3 << 20, device="cuda") > 0.5
    header, got = _echo(peer, [x, flags])
    assert header["dev_ok"] is True and "dev_region" in header   # it mapped ours, offers its own
    assert "shm" in header and "dev" not in header                # but waits for our answer
    assert torch.equal(got[0], x * 2)
    header, got = _echo(peer, [x, flags])
    assert header["got_dev"] is True and "dev" in header          # both ways on the device now
    assert got[0].is_cuda and torch.equal(got[0], x * 2)
    assert torch.equal(got[1], flags * 2)
    peer._dev_in.bytes.fill_(0)                                    # what we received is ours
    assert torch.equal(got[0], x * 2)


def test_regions_grow_for_larger_messages(peer):
    torch.cuda.set_device(0)
    small = torch.ones(1 << 20, device="cuda")
    _echo(peer, [small])
    _echo(peer, [small])
    first = peer._dev_out.id
    big = torch.arange(40 << 20, device="cuda", dtype=torch.float32)  # 160 MiB > 32 MiB
    header, got = _echo(peer, [big])
    assert peer._dev_out.id != first and header.get("dev_region") and "dev" in header
    assert torch.equal(got[0], big * 2)


@pytest.mark.parametrize("peer", [{"KGYM_CUDA_IPC": "0"}], indirect=True)
def test_a_peer_without_cuda_ipc_keeps_to_shared_memory(peer):
    torch.cuda.set_device(0)
    x = torch.randn(4 << 20, device="cuda")
    for _ in range(3):
        header, got = _echo(peer, [x])
        assert "dev" not in header and "shm" in header and header.get("dev_ok") in (None, False)
        assert torch.equal(got[0], x * 2)
    assert not peer.dev_peer_ok


def test_a_handle_that_maps_nothing_or_less_is_refused():
    torch.cuda.set_device(0)
    assert devregion.DevRegion.open("ab" * 64, 32 << 20, 1, "cuda:0") is None
    assert devregion.DevRegion.open("zz" * 64, 32 << 20, 1, "cuda:0") is None
    assert devregion.DevRegion.open("ab" * 64, 3, 1, "cuda:0") is None  # not whole pages


@pytest.mark.parametrize("peer", [{"LIE_SIZE": "1"}], indirect=True)
def test_a_region_announced_larger_than_it_is_is_not_used(peer):
    torch.cuda.set_device(0)
    x = torch.randn(4 << 20, device="cuda")
    for _ in range(3):
        header, got = _echo(peer, [x])
        assert "dev" not in header and torch.equal(got[0], x * 2)
    assert peer._dev_in is None  # refused by the driver's account of the allocation
    assert peer.dev_peer_ok      # while ours, honestly announced, is used


def test_an_evaluation_moves_every_large_tensor_on_the_device(monkeypatch):
    """A whole evaluation on the GPU (the launcher's judge and candidate):
    with 4 MiB inputs and outputs nothing crosses through shared memory,
    not even the first call's inputs, which once did (a region made and
    page-locked on both sides for that one message). With the compile
    ahead asked for (KGYM_COMPILE_AHEAD=1), its kernel is compiled at load."""
    import kit
    monkeypatch.setenv("KGYM_COMPILE_AHEAD", "1")  # the launcher's judge inherits it
    ref = kit.REF.replace("torch.randn(4, 16)", "torch.randn(1024, 1024)")
    r = kit.run(kit.triton_kernel(), "triton", reference_code=ref, device="cuda:0")
    assert r["verdict"] == "pass", r["feedback"]
    ch = r["timings"]["channel"]
    assert ch["judge"]["shm_create"] == 0.0 and ch["candidate"]["shm_create"] == 0.0, ch
    assert ch["judge"]["dev_create"] > 0.0 and ch["candidate"]["dev_open"] > 0.0, ch
    # and its kernel was compiled at load, before the first call (ahead.py)
    ahead = r["checks"]["compile_ahead"]
    assert ahead["outcome"] == "done" and ahead["kernels"] >= 1, ahead
    print("compile ahead", ahead)  # its time, for the log
