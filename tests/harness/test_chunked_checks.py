"""The harness's whole-tensor checks in chunks (chunked.py): with a tiny
CHUNK standing for a device with little memory, sums, comparisons and the
inputs' fingerprints give the whole-tensor answers while no temporary is
larger than a chunk, and torch's float64 sum is never asked for a copy of
a whole tensor."""
from __future__ import annotations

import torch

from kgym_harness import chunked, compare, loader


def test_sum64_is_the_whole_sum_in_chunks(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK", 7)
    torch.manual_seed(0)
    x = torch.randn(1000)
    assert abs(chunked.sum64(x) - float(x.double().sum())) < 1e-9
    assert abs(chunked.sum64(x.reshape(10, 100).t()) - float(x.double().sum())) < 1e-9
    assert chunked.sum64(torch.zeros(0)) == 0.0
    assert list(chunked.spans(15)) == [(0, 7), (7, 14), (14, 15)]


def _largest_sum_input(monkeypatch) -> list[int]:
    """Records the size of every tensor summed with dtype=float64."""
    seen: list[int] = []
    real = torch.Tensor.sum

    def spy(self, *a, **k):
        if k.get("dtype") is torch.float64:
            seen.append(self.numel())
        return real(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "sum", spy)
    return seen


def test_fingerprint_sums_chunk_by_chunk(monkeypatch):
    """The inputs' fingerprint (both sides of the timing inputs' check) sums
    at most a chunk at a time: torch's CPU sum(dtype=float64) of a float32
    tensor makes a float64 copy first (6 GiB for a 3.2 GB input)."""
    monkeypatch.setattr(chunked, "CHUNK", 64)
    x = torch.randn(1000)
    seen = _largest_sum_input(monkeypatch)
    fp = loader.fingerprint([x, 3])
    assert seen and max(seen) <= 64, seen
    assert abs(fp[0]["sum"] - float(x.double().sum())) < 1e-9
    assert loader.fingerprints_match(fp, loader.fingerprint([x.clone(), 3]))


def test_comparison_in_chunks_decides_as_a_whole(monkeypatch):
    """compare_outputs with a tiny CHUNK: an element out of tolerance in
    the last chunk, a NaN in the middle, an fp16 output (widened chunk by
    chunk) all decide as the whole-tensor comparison does."""
    monkeypatch.setattr(chunked, "CHUNK", 16)
    torch.manual_seed(0)
    e = torch.randn(1000)
    assert compare.compare_outputs(e, e + 1e-4, 1e-2, 1e-2) is None
    bad = e.clone()
    bad[999] += 1.0
    f = compare.compare_outputs(e, bad, 1e-2, 1e-2)
    assert f is not None and f["code"] == "VALUE_MISMATCH" and f["bad_count"] == 1
    nan = e.clone()
    nan[500] = float("nan")
    assert compare.compare_outputs(e, nan, 1e-2, 1e-2)["code"] == "NONFINITE_OUTPUT"
    h = e.half()
    assert compare.compare_outputs(h, h.clone(), 1e-3, 1e-3) is None
    assert compare.outputs_match(e, e.clone(), 1e-3, 1e-3)


def test_the_fast_comparison_holds_one_chunk_at_a_time(monkeypatch):
    """The fast path's temporaries are a chunk's: every elementwise
    temporary it makes has at most CHUNK elements."""
    monkeypatch.setattr(chunked, "CHUNK", 32)
    e = torch.randn(4096)
    sizes: list[int] = []
    real_abs = torch.Tensor.abs

    def spy(self):
        sizes.append(self.numel())
        return real_abs(self)

    monkeypatch.setattr(torch.Tensor, "abs", spy)
    assert compare._all_within(e, e.clone(), 1e-3, 1e-3, torch.float32)
    assert sizes and max(sizes) <= 32, max(sizes)
