"""kgym_agent on verl's v1 trainer path (the 0.9.1 default,
trainer.use_v1) with a local Ray and TransferQueue, in verl's venv
(tests/verl/verl_v1_case.py: verl's AgentLoopWorkerTQ actor). TransferQueue
is verl's verl-core extra, which scripts/verl-venv installs: without it
the test skips and says so, or fails under KGYM_REQUIRE_VERL=1 (packages
kept outside the venv can be put on its path with $KGYM_VERL_EXTRA_PATH). A stand-in kgym serve
passes every evaluation (3.5). Skips without verl's venv, unless
KGYM_REQUIRE_VERL=1 (CI)."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "verl"))
import verl_serve as V  # noqa: E402

V.require_verl()


def test_agent_loop_on_verl_v1_trainer_path(tmp_path):
    """verl's v1 trainer path (the 0.9.1 default): the loop in verl's
    AgentLoopWorkerTQ Ray actor, its outputs through as_dict into
    TransferQueue, advantages by verl's v1 compute_advantage_for_multi_
    trajectories with trloo."""
    if not V.verl_imports("transfer_queue"):
        why = "TransferQueue (verl's verl-core extra) is not installed in .venv-verl"
        if os.environ.get("KGYM_REQUIRE_VERL") == "1":
            pytest.fail(why + " (scripts/verl-venv installs it)")
        pytest.skip(why)
    V.check_two_turns(V.ray_case("verl_v1_case.py", tmp_path))
