"""memstat.py: the peak figures of a result's memory and the problem's
footprint the engine's admission reads (CPU; the CUDA path is the same
arithmetic on the allocator's peak)."""
from __future__ import annotations

import torch

from kgym_harness import memstat


def test_footprint_is_inputs_parameters_and_output():
    model = torch.nn.Linear(64, 32)  # 64*32 + 32 parameters
    x = torch.randn(128, 64)
    y = model(x)
    fp, before = memstat.end_pass("cpu", memstat.begin_pass("cpu"), [x, 3], y, model)
    assert before is None
    assert fp == 4 * (128 * 64 + 64 * 32 + 32 + 128 * 32)
    # nested outputs count every tensor; a model without parameters none
    fp2, _ = memstat.end_pass("cpu", None, [x], (y, [y[:1].clone()]), object())
    assert fp2 == 4 * (128 * 64 + 128 * 32 + 32)


def test_peak_and_claims():
    p = memstat.peak()
    assert p["host_peak_bytes"] > 10 << 20 and p["device_peak_bytes"] is None
    assert memstat.claim({"host_peak_bytes": 5, "device_peak_bytes": True}) == {
        "host_peak_bytes": 5, "device_peak_bytes": None}
    assert memstat.claim({"host_peak_bytes": -1}) == {"host_peak_bytes": None,
                                                      "device_peak_bytes": None}
    assert memstat.claim("x") is None
    assert memstat.device_total("cpu") > 1 << 30



def test_a_pass_without_a_clone_counts_one(monkeypatch):
    # the CUDA arithmetic, on the allocator's figures given here: 1000
    # allocated before the pass, its peak 1000 + 400 (the output, 256 bytes)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev=None: 1400)
    x = torch.empty(64)  # 256 bytes
    y = torch.empty(64)
    fp, before = memstat.end_pass("cuda:0", (1000, 5000), [x], y, object())
    assert (fp, before) == (256 + 400, 5000)
    fp2, _ = memstat.end_pass("cuda:0", (1000, 5000), [x], y, object(), clone_skipped=True)
    assert fp2 == 256 + 400 + 256
