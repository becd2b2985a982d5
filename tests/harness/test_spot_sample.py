"""Spot checks compare sampled elements of timed outputs (compare.sample_output):
both processes draw the same positions from the judge's seed, small outputs
go whole, and shapes/dtypes are checked against the reference's."""

from __future__ import annotations

import torch

from kgym_harness import compare


def test_both_sides_draw_the_same_positions_from_the_seed():
    x = torch.randn(300, 400)
    a, meta = compare.sample_output(x, 1234, 1000)
    b, _ = compare.sample_output(x.clone(), 1234, 1000)
    c, _ = compare.sample_output(x, 4321, 1000)
    assert len(a) == 1 and a[0].shape == (1000,) and torch.equal(a[0], b[0])
    assert not torch.equal(a[0], c[0])
    assert meta == [{"shape": [300, 400], "dtype": "float32"}]


def test_small_outputs_go_whole_and_tuples_sample_each_tensor():
    out = (torch.arange(10.0), torch.ones(2, 3, dtype=torch.float64))
    s, meta = compare.sample_output(out, 7, 100)
    assert torch.equal(s[0], torch.arange(10.0)) and s[1].shape == (6,)
    assert [m["dtype"] for m in meta] == ["float32", "float64"]


def test_sampled_compare_finds_skipped_rows_and_wrong_shapes():
    exp = torch.randn(1024, 1024)
    seed = 99
    good = compare.sample_output(exp.clone(), seed)
    assert compare.compare_sampled(exp, good, seed, 1e-5, 1e-5) is None
    bad = exp.clone()
    bad[8:] = 0.0  # a kernel that computed only the first rows when timed
    fail = compare.compare_sampled(exp, compare.sample_output(bad, seed), seed, 1e-5, 1e-5)
    assert fail is not None and fail["code"] == "VALUE_MISMATCH"
    other = compare.sample_output(exp.reshape(512, 2048), seed)
    fail = compare.compare_sampled(exp, other, seed, 1e-5, 1e-5)
    assert fail is not None and fail["code"] == "SHAPE_MISMATCH"
    half = compare.sample_output(exp.to(torch.float16), seed)
    fail = compare.compare_sampled(exp, half, seed, 1e-5, 1e-5)
    assert fail is not None and fail["code"] == "DTYPE_MISMATCH"
