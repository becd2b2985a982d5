"""The side_stream rule with one timed call (skipped without a CUDA device;
`make test-gpu` runs it on the H200). One phase whose samples needed the
device-wide figure is timed again (another process's context made or torn
down delays a sample too: with num_perf_trials 1 that one sample flagged
honest evaluations at --concurrency 4); work left on another stream is
there in the second phase as well, and is still reported, and its time
is in the sample (the device-wide figure)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBLEM = os.path.join(ROOT, "problems", "gpu", "level2", "2_Add_LayerNorm_GELU.py")
CORPUS = os.path.join(ROOT, "tests", "redteam", "corpus", "triton")
CHEAT = os.path.join(CORPUS, "side_stream__add_ln_gelu_unjoined.py")
HONEST = os.path.join(CORPUS, "honest__add_ln_gelu_side_stream_joined.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from kgym_env import eval_json  # noqa: E402


def test_one_timed_call_on_a_side_stream_is_timed_again_and_still_flagged():
    env = dict(os.environ)
    env.setdefault("TMPDIR", "/tmp")  # enterable by the candidate's uid
    rs, p = eval_json(["--ref", PROBLEM, "--cand", CHEAT, "--cand", HONEST,
                       "--backend", "triton", "--device", "cuda:0",
                       "--num-perf-trials", "1", "--num-correct-trials", "2",
                       "--enable-profiling", "false"], env, timeout=300)
    assert len(rs) == 2, p.stderr[-3000:]
    cheat, honest = rs
    assert cheat["verdict"] == "hacked" and "side_stream" in cheat["hack_reasons"], cheat
    assert cheat["checks"]["timing_retried"]["side_stream_samples"] == 1
    assert cheat["checks"]["side_stream_samples"] == 1  # the second phase's sample, marked too
    assert honest["verdict"] == "pass", honest["error_message"]
    assert honest["checks"]["side_stream_samples"] == 0
    # By value: the cheat's sample is the device-wide figure, its side
    # kernel included; the timed stream's own figure would be the few
    # microseconds between two events with nothing queued between them.
    # The side kernel moves 3 x 16384 x 4096 fp32 values (805 MB): no GPU
    # does that in under 0.1 ms (8 TB/s; the H200's 4.8 TB/s: 0.17 ms), and
    # the honest candidate runs the same kernel, joined.
    side_ms = cheat["runtime_stats"]["kernel"]["median"]
    joined_ms = honest["runtime_stats"]["kernel"]["median"]
    assert side_ms >= 0.1 and side_ms >= 0.5 * joined_ms, (side_ms, joined_ms)
