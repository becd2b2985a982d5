"""The channel's shared-memory path (large tensors through a sealed memfd).

Both ends live in this process over a socketpair; the peer-side attacks
(unsealed regions, wrong sizes, offsets outside the region, stray fds) are
written as raw messages.
"""
from __future__ import annotations

import array
import json
import os
import socket
import threading

import pytest
import torch

from kgym_harness import channel
from kgym_harness.channel import Channel, ProtocolError


@pytest.fixture()
def pair():
    a, b = socket.socketpair()
    ca, cb = Channel(a.detach()), Channel(b.detach())
    yield ca, cb
    ca.close()
    cb.close()


def _exchange(sender: Channel, receiver: Channel, header: dict, tensors: list):
    box = {}
    t = threading.Thread(target=lambda: box.update(got=receiver.recv()))
    t.start()
    sender.send(header, tensors)
    t.join(30)
    return box["got"]


def test_large_message_goes_through_shared_memory(pair):
    a, b = pair
    big = torch.randn(512, 1024)  # 2 MiB > SHM_MIN_BYTES
    odd = torch.arange(30, dtype=torch.int64).reshape(5, 6).t()  # non-contiguous
    flags = torch.rand(777) > 0.5
    cplx = torch.randn(10, dtype=torch.complex64)
    empty = torch.empty(0, 3)
    header, got = _exchange(a, b, {"cmd": "x"}, [big, odd, flags, cplx, empty])
    assert "shm" in header and header["cmd"] == "x"
    assert [s["offset"] % channel.SHM_ALIGN for s in header["tensors"]] == [0] * 5
    for want, have in zip([big, odd, flags, cplx, empty], got):
        assert have.dtype == want.dtype and have.shape == want.shape
        assert torch.equal(have, want)
    # fresh tensors: the sender may now overwrite its region
    a._out.bytes.fill_(0)
    assert torch.equal(got[0], big)


def test_region_is_reused_then_grown(pair):
    a, b = pair
    first = torch.randn(1 << 19)  # 2 MiB
    _, got = _exchange(a, b, {}, [first])
    rid = a._out.id
    fd_before = b._in.fd
    _, got2 = _exchange(a, b, {}, [first * 2])
    assert a._out.id == rid and b._in.fd == fd_before  # no new fd for a message that fits
    assert torch.equal(got2[0], first * 2)
    huge = torch.randn(6 << 20)  # 24 MiB > the 16 MiB first region
    _, got3 = _exchange(a, b, {}, [huge])
    assert a._out.id != rid and torch.equal(got3[0], huge)


def test_small_messages_stay_on_the_socket(pair):
    a, b = pair
    header, got = _exchange(a, b, {}, [torch.ones(10)])
    assert "shm" not in header and torch.equal(got[0], torch.ones(10))


def test_receiver_cannot_write_the_senders_region(pair):
    a, b = pair
    _exchange(a, b, {}, [torch.randn(1 << 19)])
    import mmap
    with pytest.raises((OSError, PermissionError)):
        mmap.mmap(b._in.fd, b._in.size, flags=mmap.MAP_SHARED,
                  prot=mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(OSError):
        os.ftruncate(b._in.fd, 4096)  # sealed: cannot shrink under the reader


def _raw_send(sock: socket.socket, header: dict, fd: int = -1) -> None:
    body = json.dumps(header).encode()
    prefix = len(body).to_bytes(4, "big")
    if fd >= 0:
        sock.sendmsg([prefix], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    else:
        sock.sendall(prefix)
    sock.sendall(body)


def _spec(n: int, off: int = 0) -> dict:
    return {"dtype": "float32", "shape": [n], "nbytes": 4 * n, "offset": off}


@pytest.fixture()
def raw():
    a, b = socket.socketpair()
    cb = Channel(b.detach())
    yield a, cb
    a.close()
    cb.close()


def _memfd(size: int, seal: bool) -> int:
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def test_unsealed_region_is_refused(raw):
    a, cb = raw
    fd = _memfd(1 << 20, seal=False)
    _raw_send(a, {"tensors": [_spec(16)], "shm": {"id": 1, "size": 1 << 20}}, fd)
    os.close(fd)
    with pytest.raises(ProtocolError, match="sealed"):
        cb.recv()


def test_region_of_the_wrong_size_is_refused(raw):
    a, cb = raw
    fd = _memfd(1 << 20, seal=True)
    _raw_send(a, {"tensors": [_spec(16)], "shm": {"id": 1, "size": 1 << 21}}, fd)
    os.close(fd)
    with pytest.raises(ProtocolError):
        cb.recv()


def test_a_plain_file_is_not_a_region(raw, tmp_path):
    a, cb = raw
    p = tmp_path / "f"
    p.write_bytes(b"\0" * 4096)
    fd = os.open(p, os.O_RDONLY)
    _raw_send(a, {"tensors": [_spec(16)], "shm": {"id": 1, "size": 4096}}, fd)
    os.close(fd)
    with pytest.raises(ProtocolError):
        cb.recv()


def test_offset_outside_the_region_is_refused(raw):
    a, cb = raw
    fd = _memfd(1 << 20, seal=True)
    _raw_send(a, {"tensors": [_spec(1024, (1 << 20) - 256)],
                  "shm": {"id": 1, "size": 1 << 20}}, fd)
    os.close(fd)
    with pytest.raises(ProtocolError, match="offset"):
        cb.recv()


def test_region_never_sent_is_refused(raw):
    a, cb = raw
    _raw_send(a, {"tensors": [_spec(16)], "shm": {"id": 7, "size": 1 << 20}})
    with pytest.raises(ProtocolError, match="do not hold"):
        cb.recv()


def test_stray_fd_with_a_socket_message_is_refused_and_closed(raw):
    a, cb = raw
    fd = _memfd(4096, seal=True)
    before = len(os.listdir("/proc/self/fd"))
    _raw_send(a, {"tensors": []}, fd)
    os.close(fd)
    with pytest.raises(ProtocolError, match="does not use"):
        cb.recv()
    assert len(os.listdir("/proc/self/fd")) <= before - 1  # ours closed, theirs closed
