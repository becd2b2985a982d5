"""How often the judge times a phase again (stages/timing.py
_timed_phases): once for any disturbance, a third time only while the
side_stream rule repeats, and the last phase's figures count. The phases
here are stubs: only the decision is under test."""
from __future__ import annotations

import pytest

from kgym_harness import trustclock
from kgym_harness.stages.timing import SIDE_STREAM_PHASES, Timing


class Stub(Timing):
    def __init__(self, sides: list[int], n: int = 10, unexplained: list[float] | None = None):
        self.req = {"num_perf_trials": n}
        self.result = {"checks": {}}
        self.sides = list(sides)
        self.gaps = list(unexplained or [0.0] * len(sides))
        self.timed = 0

    def _time_blocks(self, plan, ref_call, cached):
        i = self.timed
        self.timed += 1
        return {"side": list(range(self.sides[i])), "wall_ms": 10.0 + i, "l2_found": None,
                "phase": i}

    def _unexplained(self, run, plan):
        return self.gaps[run["phase"]]


@pytest.fixture(autouse=True)
def calm_clock(monkeypatch):
    monkeypatch.setattr(trustclock, "check_phase",
                        lambda judge, run, wall: {"verdict": "agree", "mismatch": None})


def _phases(stub: Stub) -> dict:
    run, _, _ = stub._timed_phases([], None, None, None)
    return run


def test_a_clean_phase_is_timed_once():
    stub = Stub([0, 9, 9])
    assert _phases(stub)["phase"] == 0 and stub.timed == 1
    assert "timing_retried" not in stub.result["checks"]


def test_one_disturbed_phase_is_timed_again_and_the_second_counts():
    stub = Stub([8, 0, 9])
    assert _phases(stub)["phase"] == 1 and stub.timed == 2
    assert stub.result["checks"]["timing_retried"]["side_stream_samples"] == 8
    assert "timing_retried_side_stream" not in stub.result["checks"]


def test_side_stream_in_two_phases_in_a_row_is_timed_a_third_time():
    stub = Stub([7, 6, 0])
    run = _phases(stub)
    assert run["phase"] == 2 and run["side"] == [] and stub.timed == SIDE_STREAM_PHASES
    assert [r["side_stream_samples"] for r in stub.result["checks"]["timing_retried_side_stream"]] == [6]


def test_a_kernels_own_side_stream_is_in_every_phase_and_stays():
    stub = Stub([10, 10, 10, 10])
    run = _phases(stub)
    assert stub.timed == SIDE_STREAM_PHASES and len(run["side"]) == 10


def test_only_side_stream_earns_the_third_phase():
    # the second phase unexplained but no side stream: no third phase
    stub = Stub([0, 0, 0], unexplained=[5.0, 5.0, 0.0])
    assert _phases(stub)["phase"] == 1 and stub.timed == 2
