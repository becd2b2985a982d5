"""The fitted lead (lead.Lead): host-heavy calls get the lead that leaves
the device a small backlog when the host returns, not twice their launch;
what the backlog cannot see (the device waiting for the host earlier in
the call) shows in the samples and puts the safe lead back. The device is
a model here: a call's launches and the device's run of them, timed."""

from __future__ import annotations

import pytest

from kgym_harness import lead as leadmod
from kgym_harness.lead import FITTED, PROBE, SAFE, Lead

MS = 1_000_000  # ns


def run_call(lead_ns: float, host_ms: float, device_ms: float, preamble_ms: float = 0.0,
             n: int = 200) -> tuple[float, bool, float, float]:
    """One timed call on a model device that is idle when the lead is
    queued: the host spends preamble_ms before its first launch, then
    launches n kernels evenly until host_ms; the device starts at the lead
    and runs each kernel (device_ms / n) once it is launched and the one
    before is done. (host_ns, late, backlog_ns, sample_ms)."""
    start = lead_ns / MS
    t = start
    for k in range(n):
        launched = preamble_ms + (k + 1) * (host_ms - preamble_ms) / n
        t = max(t, launched) + device_ms / n
    late = start < host_ms
    return host_ms * MS, late, max(0.0, t - host_ms) * MS, t - start


def step(lead: Lead, host_ms: float, device_ms: float, preamble_ms: float = 0.0) -> float:
    """What timing.time_forward does around one call; the sample."""
    lead_ns = lead.ns()
    host_ns, late, backlog, sample = run_call(lead_ns, host_ms, device_ms, preamble_ms)
    lead.settle(lead_ns, host_ns, late, backlog if lead.wants_backlog(host_ns) else None, sample)
    return sample


def warmed(host_ms: float) -> Lead:
    lead = Lead("cuda:0")  # nothing touches the device here
    lead.rate = 2.0
    for _ in range(leadmod.LEAD_WINDOW):
        lead.observe_bare(host_ms * MS)
    return lead


def test_a_host_bound_call_gets_the_lead_its_backlog_says():
    # an LSTM on an H100: launched in 30 ms, 23 ms of device time
    lead = warmed(30.0)
    safe = lead.ns()
    assert safe == leadmod.LEAD_MAX_NS
    samples = [step(lead, 30.0, 23.0) for _ in range(30)]
    assert lead.state == FITTED and lead.misses == 0
    # about H - D + 15 % of H, far under the safe 40 ms
    want = (30.0 - 23.0 + leadmod.FIT_MARGIN_SHARE * 30.0) * MS
    assert lead.ns() == pytest.approx(want, rel=0.05)
    assert lead.ns() < 0.4 * safe
    # every sample is still the device's 23 ms
    assert max(samples) == pytest.approx(23.0, rel=1e-3)


def test_a_device_bound_model_keeps_only_the_floor():
    # ResNet101 on an H100: launched in 6.8 ms, 9.6 ms of device time
    lead = warmed(6.8)
    for _ in range(20):
        assert step(lead, 6.8, 9.6) == pytest.approx(9.6, rel=1e-3)
    assert lead.state == FITTED and lead.ns() == leadmod.FIT_FLOOR_NS


def test_a_call_slow_to_start_goes_back_to_the_safe_lead():
    # 5 ms of Python before one long kernel: the backlog at the end is large,
    # but a short lead has the device wait for the launch; the samples show it
    lead = warmed(5.0)
    safe = lead.ns()
    samples = [step(lead, 5.0, 10.0, preamble_ms=4.99) for _ in range(20)]
    assert lead.state == SAFE and lead.misses == leadmod.FIT_MISSES
    assert lead.ns() == safe
    assert samples[-1] == pytest.approx(10.0, rel=1e-3)
    assert sum(s > 10.1 for s in samples) == leadmod.FIT_MISSES  # the misses in a row only


def test_a_host_that_slows_down_raises_a_fitted_lead_at_once():
    lead = warmed(30.0)
    for _ in range(10):
        step(lead, 30.0, 23.0)
    before = lead.ns()
    # the host is 12 ms slower (another task's CPU phase), past the margin:
    # the device starves at the end (no backlog), and the next call's lead
    # grows past the gap
    assert step(lead, 42.0, 23.0) > 23.5
    assert lead.ns() > before + 4.0 * MS
    assert step(lead, 42.0, 23.0) == pytest.approx(23.0, rel=1e-3)
    assert lead.state == FITTED and lead.misses == 0  # one miss is not the end of the fit


def test_misses_apart_keep_the_fit():
    # an RNN's occasional starved sample (a loaded host), never twice in a row
    lead = warmed(30.0)
    for i in range(40):
        step(lead, 42.0 if i % 5 == 4 else 30.0, 23.0)
    assert lead.state == FITTED


def test_short_calls_keep_the_safe_lead():
    # launched in 0.5 ms (below FIT_MIN_NS), 2 ms of device time: no fit
    lead = warmed(0.5)
    safe = lead.ns()
    for _ in range(20):
        assert step(lead, 0.5, 2.0) == pytest.approx(2.0, rel=1e-3)
    assert lead.state == PROBE and lead.ns() == safe
    assert not lead.wants_backlog(0.5 * MS)


def test_late_calls_under_a_fitted_lead_raise_no_floor():
    lead = warmed(30.0)
    for _ in range(10):
        step(lead, 30.0, 23.0)
    assert lead.floor_ns == 0.0 and lead.short >= 7  # late by design, counted
