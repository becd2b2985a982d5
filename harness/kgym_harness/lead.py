"""The lead of a timed call (CUDA): a device-side busy wait queued after the
L2 flush and before each sample's start event, so the host has launched
the timed call, or enough of it, before the device reaches the start. The
sample is then device time, not the host's launch latency, which differs
between the judge's process and the candidate's (up to 30 % on 0.15 ms
kernels on the H200). Anything beyond what the launch needs is idle device
time inside the exclusive section.

Two sizes (Lead.ns):
- safe: LEAD_FACTOR x the slowest host time of the last LEAD_WINDOW calls
  whose launch it measured + LEAD_PAD_NS, within [LEAD_MIN_NS,
  LEAD_MAX_NS]. The host is done before the device starts: nothing to
  guess, but a host-bound model idles the device for twice its launch.
- fitted (calls whose launch takes FIT_MIN_NS or more): after FIT_PROBE
  calls at the safe lead, the lead that would leave the device a backlog
  of FIT_MARGIN_SHARE of the call's host time when the host returns. The
  backlog is measured after every call (the host's wait for the end event
  it just recorded), and a call with backlog b under lead L needed about
  L - b: the device runs what is queued while the host queues the rest.
  What a backlog cannot see, the device waiting for the host earlier in
  the call (Python before the first launch), shows in the sample itself:
  FIT_MISSES samples in a row past the probe samples' median by FIT_TOL
  put the safe lead back for good (state SAFE). One such sample is a
  host that fell behind once (another task's CPU phase): the backlog it
  left (none) raises the next lead by the margin, and a phase's median
  does not move for a few such samples, which a level-3 RNN has at any
  lead.

Private torch API (torch.cuda._sleep): absent, no lead is added."""

from __future__ import annotations

import os
import statistics

import torch

_gpu_sleep = getattr(torch.cuda, "_sleep", None)
_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize
_current_stream = torch.cuda.current_stream

RATE_CYCLES = 200_000      # the busy wait that measures the cycle rate (~0.1 ms)
LEAD_FACTOR = 2.0          # the safe lead: this many times the host time of a call,
LEAD_PAD_NS = 20_000       # plus this,
LEAD_MIN_NS = 20_000       # at least this (the L2 flush before it adds ~30 us on the H200)
LEAD_WINDOW = 4            # the calls whose slowest launch (or need) sizes the lead
LEAD_MAX_NS = 40_000_000   # the longest lead: a level-3 model's launches on a loaded host
FIT_MIN_NS = 1_000_000     # fitted leads only for calls launched in this much host time or more
FIT_PROBE = 3              # calls at the safe lead first: their samples are the yardstick
FIT_MARGIN_SHARE = 0.25    # the backlog a fitted lead keeps: this share of the call's host time
FIT_FLOOR_NS = 500_000     # a fitted lead is at least this (the call's Python before its first launch)
FIT_TOL = 0.01             # a fitted sample past the yardstick's median by this share
FIT_TOL_MS = 0.02          # or by this, whichever is larger, is a miss;
FIT_MISSES = 3             # this many in a row and the safe lead is back for good

# the fit's states (Lead.state)
PROBE = "probe"            # safe lead; host-heavy calls' samples and needs collected
FITTED = "fitted"          # the fitted lead (never more than the safe one)
SAFE = "safe"              # the fit missed: the safe lead from then on
STATES = (PROBE, FITTED, SAFE)


def fit_on() -> bool:
    """Whether leads are fitted: unless KGYM_LEAD_FIT=0 (the safe lead only,
    an A/B switch for the bench)."""
    return os.environ.get("KGYM_LEAD_FIT") != "0"


class Lead:
    """The lead of one process on one device.

    A call's host time is its launch time when the device had not reached
    the call's start when it returned (observe); a call that returned
    after (late: a slow call, a preempted thread, or a call that waits for
    the device inside) doubles the safe lead's floor instead, up to
    LEAD_FACTOR x the slowest call seen without a lead (observe_bare, the
    warm-up's: for a call that synchronises inside, launch and device time
    together), so a synchronising call costs at most about three times its
    own time per sample rather than the ceiling. Under a fitted lead a
    call is late by design and raises nothing. The busy wait takes cycles:
    their rate is measured once with events (sleep_rate)."""

    def __init__(self, device: str):
        self.device = device
        self.rate = 0.0        # busy-wait cycles per ns (sleep_rate), measured once
        self.recent: list[float] = []  # host times of the last LEAD_WINDOW launches
        self.bare: list[float] = []    # of the last LEAD_WINDOW calls without a lead
        self.floor_ns = 0.0    # raised by late calls
        self.short = 0         # late calls
        self.state = PROBE if fit_on() else SAFE
        self.yard: list[float] = []    # samples (ms) of host-heavy calls at the safe lead
        self.needs: list[float] = []   # the leads the last calls needed (ns)
        self.misses = 0        # fitted samples in a row past the yardstick

    def _measure_rate(self, k: int = 3) -> float:
        """sleep_rate of k busy waits of RATE_CYCLES, timed with events."""
        dev = torch.device(self.device)
        stream = _current_stream(dev)
        a, b = _Event(enable_timing=True), _Event(enable_timing=True)
        samples = []
        for _ in range(k):
            _gpu_sleep(1000)
            _record(a, stream)
            _gpu_sleep(RATE_CYCLES)
            _record(b, stream)
            _event_sync(b)
            samples.append(float(_elapsed(a, b)))
        return sleep_rate(RATE_CYCLES, samples)

    @staticmethod
    def _push(window: list[float], ns: float) -> None:
        # a first call's compile is no launch time: at most the ceiling counts
        window.append(min(float(ns), LEAD_MAX_NS))
        del window[:-LEAD_WINDOW]

    def observe(self, host_ns: float) -> None:
        """A call launched within its lead (or the warm-up's, see observe_bare)."""
        self._push(self.recent, host_ns)

    def observe_bare(self, host_ns: float) -> None:
        """A call on an idle device without a lead (warm-up)."""
        self._push(self.recent, host_ns)
        self._push(self.bare, host_ns)

    def late(self) -> None:
        self.short += 1
        # the bare calls' median, not their slowest: one preempted warm-up
        # call must not size the lead of a call that waits inside
        typical = statistics.median(self.bare) if self.bare else 0.0
        top = LEAD_FACTOR * typical + LEAD_PAD_NS
        self.floor_ns = min(self.max_ns(), max(self.floor_ns, min(2.0 * self.safe_ns(), top)))
        if self.bare:
            # the window's launches no longer size a lead the call outlived
            self.recent = [min(h, typical) for h in self.recent]

    def max_ns(self) -> float:
        return LEAD_MAX_NS

    def safe_ns(self) -> float:
        want = max(LEAD_FACTOR * max(self.recent, default=0.0) + LEAD_PAD_NS, LEAD_MIN_NS,
                   self.floor_ns)
        return min(want, self.max_ns())

    def ns(self) -> float:
        safe = self.safe_ns()
        if self.state != FITTED:
            return safe
        return min(safe, max(FIT_FLOOR_NS, max(self.needs)))

    def cycles(self, ns: float | None = None) -> int:
        return max(1, int((self.ns() if ns is None else ns) * (self.rate or 2.0)))

    def wants_backlog(self, host_ns: float) -> bool:
        """Whether the call just returned (after host_ns) should have its
        backlog measured for settle: while the fit may still use it."""
        return self.state == FITTED or (self.state == PROBE and host_ns >= FIT_MIN_NS)

    def settle(self, lead_ns: float, host_ns: float, late: bool,
               backlog_ns: float | None, sample_ms: float) -> None:
        """One timed call: it ran behind a lead of lead_ns, returned after
        host_ns, late if the device had reached its start by then, and the
        device had backlog_ns of it left when the host recorded its end
        (None: not measured, wants_backlog said no); sample_ms is its sample."""
        if not late:
            self.observe(host_ns)
        elif self.state == FITTED:
            self.short += 1
        else:
            self.late()
        if backlog_ns is None or self.state == SAFE:
            return
        self._push(self.needs, lead_ns - backlog_ns + max(LEAD_PAD_NS, FIT_MARGIN_SHARE * host_ns))
        if self.state == PROBE:  # a host-heavy call (wants_backlog)
            self.yard.append(sample_ms)
            if len(self.yard) >= FIT_PROBE:
                self.state = FITTED
            return
        ref = statistics.median(self.yard)
        if sample_ms <= ref + max(FIT_TOL * ref, FIT_TOL_MS):
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= FIT_MISSES:
            self.state = SAFE


def sleep_rate(cycles: int, samples_ms: list[float]) -> float:
    """Busy-wait cycles per ns from the times of waits of `cycles`: the
    fastest (time-slicing with another process's work only ever lengthens
    a wait: one timed alone under 4-way concurrency on the H200 made the
    rate 20x too low, and every lead 20x shorter than meant), 2.0 when
    none was measurable."""
    ok = [ms for ms in samples_ms if ms > 0.01]
    return cycles / (min(ok) * 1e6) if ok else 2.0
