"""The warm spares' profiler start (spare.spare_profiles): off unless
asked, so that CUPTI is not attached to a candidate through its timing."""
from __future__ import annotations


def test_spares_leave_the_profiler_to_the_profiling_phase(monkeypatch):
    """A warm spare does not start the CUDA profiler in its candidate
    unless asked (KGYM_SPARE_PROFILER=1): CUPTI, once started, stays on the
    candidate's launches through its timing, and not on the judge's."""
    from kgym_harness import spare
    monkeypatch.delenv("KGYM_SPARE_PROFILER", raising=False)
    monkeypatch.setenv("KGYM_WARM_PROFILER", "1")
    assert spare.spare_profiles() is False
    monkeypatch.setenv("KGYM_SPARE_PROFILER", "1")
    assert spare.spare_profiles() is True
