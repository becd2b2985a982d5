"""guards.Poisoned's CUDA path, driven on the CPU: the caching allocator's
free blocks are poisoned where they lie (no empty_cache, no fresh
cudaMallocs), and blocks are allocated only for sizes too few free ones
fit. torch.cuda.memory_snapshot and the device views are stand-ins over
host memory; the real path runs in test_integrity_gpu.py on the H200."""
from __future__ import annotations

import pytest
import torch

from kgym_harness import devregion, guards

MEM = torch.zeros(1 << 16, dtype=torch.uint8)  # the "device": 64 KiB
BASE = 1 << 20                                   # its fake address


def _snapshot(blocks, device=0, expandable=False):
    return [{"device": device, "address": BASE, "is_expandable": expandable,
             "blocks": [{"address": BASE + off, "size": n, "state": st} for off, n, st in blocks]}]


@pytest.fixture()
def fake_cuda(monkeypatch):
    MEM.zero_()
    state = {"snapshot": [], "filled": [], "emptied": 0}
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: state["snapshot"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(devregion, "device_bytes",
                        lambda ptr, n, dev: MEM[ptr - BASE:ptr - BASE + n])
    monkeypatch.setattr(guards, "_fill_blocks", lambda dev, sizes: state["filled"].extend(sizes))

    def empty():
        state["emptied"] += 1
    monkeypatch.setattr(torch.cuda, "empty_cache", empty)
    monkeypatch.setattr(guards, "_MALLOPT", None)
    return state


def test_free_blocks_are_poisoned_in_place_and_live_ones_are_not(fake_cuda):
    fake_cuda["snapshot"] = _snapshot([(0, 4096, "inactive"), (4096, 4096, "active_allocated"),
                                       (8192, 8192, "inactive"),
                                       (16384, 1024, "active_awaiting_free")])
    with guards.Poisoned("cuda:0", [4096, 8192]):
        pass
    words = MEM.view(torch.int16)
    assert bool((words[:2048] == guards.POISON16).all())          # free: poisoned
    assert bool((words[2048:4096] == 0).all())                    # in use: untouched
    assert bool((words[4096:8192] == guards.POISON16).all())
    assert bool((words[8192:8704] == 0).all())                    # awaiting free: untouched
    assert fake_cuda["emptied"] == 0                              # nothing released
    assert fake_cuda["filled"] == [8192]  # two free blocks fit 4096 bytes, one fits 8192


def test_sizes_no_free_block_fits_get_poisoned_blocks_allocated(fake_cuda):
    fake_cuda["snapshot"] = _snapshot([(0, 2048, "inactive")])
    with guards.Poisoned("cuda:0", [1 << 20]):
        pass
    assert fake_cuda["filled"] == [1 << 20] and fake_cuda["emptied"] == 0


def test_other_devices_blocks_are_left_alone(fake_cuda):
    fake_cuda["snapshot"] = _snapshot([(0, 4096, "inactive")], device=1)
    with guards.Poisoned("cuda:0", []):
        pass
    assert bool((MEM == 0).all())


@pytest.mark.parametrize("snapshot", ["expandable", "unlisted"])
def test_allocators_that_cannot_be_poisoned_in_place_get_the_old_way(fake_cuda, monkeypatch,
                                                                     snapshot):
    if snapshot == "expandable":  # a free block may be unmapped memory there
        fake_cuda["snapshot"] = _snapshot([(0, 4096, "inactive")], expandable=True)
    else:
        def refuse():
            raise RuntimeError("memory_snapshot is not supported by this allocator")
        monkeypatch.setattr(torch.cuda, "memory_snapshot", refuse)
    with guards.Poisoned("cuda:0", [4096]):
        pass
    assert fake_cuda["emptied"] == 1 and fake_cuda["filled"] == [4096]
    assert bool((MEM == 0).all())
