"""kgym_agent on verl's legacy trainer path with a local Ray, in verl's
venv (tests/verl/verl_legacy_case.py: KgymAgentLoopManager and its worker
actors); the v1 path is test_verl_v1.py's. A stand-in kgym serve passes
every evaluation (1 + min(2, 3) + 0.5 = 3.5); the real server's scoring
is test_verl_agent_loop.py's. Skips without verl's venv, unless
KGYM_REQUIRE_VERL=1 (CI)."""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "verl"))
import verl_serve as V  # noqa: E402

V.require_verl()


def test_agent_loop_on_verl_legacy_trainer_path(tmp_path):
    """trainer.use_v1=false with rollout.agent.agent_loop_manager_class:
    kgym.verl.agent_loop.KgymAgentLoopManager; per-turn rm_scores from its
    worker actors, TRLOO by verl's compute_advantage."""
    out = V.ray_case("verl_legacy_case.py", tmp_path)
    assert {x["manager"] for x in out["samples"]} == {"KgymAgentLoopManager"}
    V.check_two_turns(out)

