"""How often the judge times a phase again (stages/timing.py
_timed_phases): once for any disturbance, a third time only while the
side_stream rule repeats, and the last phase's figures count; when only
the clock disagreed, its wall blocks once more first. Every phase and
wall-block run after the first draws inputs no earlier one drew. The
phases here are stubs: only the decision is under test."""
from __future__ import annotations

import pytest

from kgym_harness import trustclock
from kgym_harness.stages.timing import SIDE_STREAM_PHASES, Timing


class Stub(Timing):
    def __init__(self, sides: list[int], n: int = 10, unexplained: list[float] | None = None,
                 clock: list[str] | None = None):
        self.req = {"num_perf_trials": n}
        self.result = {"checks": {}}
        self.sides = list(sides)
        self.gaps = list(unexplained or [0.0] * len(sides))
        self.verdicts = list(clock or [])  # the clock's verdicts in turn, then "agree"
        self.timing_seed = 77
        self.timed = 0
        self.phase_seeds: list[int] = []  # the timing seed of each phase
        self.wall_seeds: list[int] = []   # the phase's timing seed at each run of the clock

    def _time_blocks(self, plan, ref_call, cached):
        i = self.timed
        self.timed += 1
        self.phase_seeds.append(self.timing_seed)
        return {"side": list(range(self.sides[i])), "wall_ms": 10.0 + i, "l2_found": None,
                "phase": i}

    def _unexplained(self, run, plan):
        return self.gaps[run["phase"]]


@pytest.fixture(autouse=True)
def stub_clock(monkeypatch):
    def check_phase(judge, run, wall):
        judge.wall_seeds.append(judge.timing_seed)  # the seed of the phase it looked at
        verdict = judge.verdicts.pop(0) if judge.verdicts else "agree"
        return {"verdict": verdict, "mismatch": None, "phase": run["phase"]}
    monkeypatch.setattr(trustclock, "check_phase", check_phase)


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


def test_a_clock_off_once_looks_again_without_timing_the_phase_again():
    stub = Stub([0, 0], clock=["capped"])
    assert _phases(stub)["phase"] == 0 and stub.timed == 1
    checks = stub.result["checks"]
    assert checks["trusted_clock_retried"]["verdict"] == "capped"
    assert "timing_retried" not in checks
    assert len(stub.wall_seeds) == 2  # two looks at the one phase


def test_a_clock_off_twice_times_the_phase_again_on_new_inputs():
    stub = Stub([0, 0, 0], clock=["timer_tamper", "capped"])
    run, _, clock = stub._timed_phases([], None, None, None)
    assert run["phase"] == 1 and stub.timed == 2 and clock["phase"] == 1
    assert stub.result["checks"]["timing_retried"]["trusted_clock"] == "capped"
    assert len(set(stub.phase_seeds)) == 2 and len(stub.wall_seeds) == 3
    # the last phase's seed stays: its claims and spot checks are checked on it
    assert stub.timing_seed == stub.phase_seeds[-1] == stub.wall_seeds[-1]


def test_a_clock_off_beside_unexplained_time_times_the_phase_again_at_once():
    stub = Stub([0, 0], unexplained=[5.0, 0.0], clock=["capped"])
    assert _phases(stub)["phase"] == 1 and stub.timed == 2
    assert "trusted_clock_retried" not in stub.result["checks"]
    assert len(stub.wall_seeds) == 2


def test_every_phase_timed_again_draws_new_inputs():
    stub = Stub([7, 6, 0])
    _phases(stub)
    assert len(set(stub.phase_seeds)) == SIDE_STREAM_PHASES
    assert stub.wall_seeds == stub.phase_seeds


def test_a_reference_probe_that_disagrees_times_it_all_again_on_new_inputs(monkeypatch):
    stub = Stub([0, 0])
    monkeypatch.setattr(Stub, "_probe_agrees", lambda self, cached, run: False, raising=False)
    run, _, _, cached = stub._probed_phases([], lambda args: None, {"samples_ms": [1.0]}, None)
    assert cached is None and run["phase"] == 1 and stub.timed == 2
    assert len(set(stub.phase_seeds)) == 2 and stub.timing_seed == stub.phase_seeds[-1]
