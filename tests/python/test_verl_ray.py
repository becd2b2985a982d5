"""kgym_agent on verl's v1 trainer path (the 0.9.1 default,
trainer.use_v1): tests/verl/verl_v1_case.py, in verl's venv with a local
Ray and TransferQueue. TransferQueue is verl's verl-core extra, which
scripts/verl-venv does not install: without it the test skips and says
so (packages kept outside the venv can be put on its path with
$KGYM_VERL_EXTRA_PATH). Skips without verl's venv, unless
KGYM_REQUIRE_VERL=1 (CI)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "verl"))
import verl_serve as V  # noqa: E402

V.require_verl()

NO_CODE = "Let me think about it first."


def test_agent_loop_on_verl_v1_trainer_path(tmp_path):
    """verl's v1 trainer path (the 0.9.1 default): the loop in verl's
    AgentLoopWorkerTQ Ray actor, its outputs through as_dict into
    TransferQueue, advantages by verl's v1 compute_advantage_for_multi_
    trajectories with trloo. TransferQueue is verl's verl-core extra, not
    installed by scripts/verl-venv: the test skips without it (extra
    packages can be put on the path with $KGYM_VERL_EXTRA_PATH). A stand-in
    kgym serve passes every evaluation (1 + min(2, 3) + 0.5 = 3.5): the
    real server's scoring is the test above's."""
    if not V.verl_imports("transfer_queue"):
        pytest.skip("TransferQueue (verl's verl-core extra) is not installed in .venv-verl")
    srv = V.fake("seq", [V.PASS_2X])
    try:
        out = V.run_case("verl_v1_case.py", {
            "server": f"http://127.0.0.1:{srv.server_port}", "model_dir": str(tmp_path / "tiny"),
            "reference": V.read(V.GELU_REF),
            "replies": [[V.honest(), V.honest()], [V.honest(), NO_CODE]]}, timeout=150)
    finally:
        srv.shutdown()
    a, b = out["samples"]
    assert a["extra"]["kgym_turn_rewards"] == [3.5, 3.5]
    assert b["extra"]["kgym_turn_rewards"] == [3.5, 0]
    for x in (a, b):
        ends = x["extra"]["kgym_turn_ends"]
        assert x["extra"]["kgym_turn_index"] == [0, 1]
        assert [e for _, e in x["runs"]] == ends
        assert x["rm_nonzero"] == [[e - 1, r] for e, r in
                                   zip(ends, x["extra"]["kgym_turn_rewards"]) if r]
    # returns 7, 3.5 and 3.5, 0: TRLOO per turn is +-3.5 at both turns
    assert a["run_advantages"] == pytest.approx([3.5, 3.5])
    assert b["run_advantages"] == pytest.approx([-3.5, -3.5])
