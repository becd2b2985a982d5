"""timing.time_forward's CUDA path on the CPU, through stand-ins for the
device's clock: which figure becomes each sample.

pick_sample alone is tested in test_timing_lock.py and the real thing on a
GPU in test_side_stream_gpu.py / test_timing_gpu.py (skipped here). This
drives the timed loop itself with a fake device whose events read a
simulated clock: a call queues STREAM_MS of work on the timed stream and
side_ms on another stream that nothing joins; the device-wide
synchronize waits for both. A sample must be the device-wide figure
whenever the side work outlasts the stream's (and be marked side_stream),
the stream's own figure otherwise: a loop that always took the stream's
figure would time side-stream work as free.
"""

from __future__ import annotations

import pytest
import torch

from kgym_harness import timing

STREAM_MS = 0.2   # the timed stream's work per call
LAT_MS = 0.03     # what the device-wide synchronize and a record add


class FakeDevice:
    """One device clock (ms). `stream`: where the timed stream's queue
    ends; `busy`: where all queued work ends, side streams included."""

    def __init__(self, side_ms: float):
        self.side_ms = side_ms
        self.stream = 0.0
        self.busy = 0.0
        self.calls = 0
        self.syncs = 0

    def call(self, args):
        """A forward: STREAM_MS on the timed stream, side_ms on another
        stream from the same start, not joined."""
        start = self.stream
        self.stream += STREAM_MS
        self.busy = max(self.busy, self.stream, start + self.side_ms)
        self.calls += 1
        return args[0] * 2

    def sync(self, dev=None):
        """torch.cuda.synchronize: the host waits for all work; the next
        record on the stream lands after it, plus the latency."""
        self.syncs += 1
        self.stream = max(self.stream, self.busy) + LAT_MS
        self.busy = self.stream


class FakeEvent:
    def __init__(self, enable_timing: bool = False):
        self.t: float | None = None


class NoFlush:
    def flush(self) -> None:
        pass


@pytest.fixture
def fake_cuda(monkeypatch):
    """Installs the stand-ins in timing for one FakeDevice (set .side_ms)."""
    dev = FakeDevice(0.0)

    def record(ev, stream=None):
        ev.t = dev.stream

    monkeypatch.setattr(timing, "is_cuda", lambda device: True)
    monkeypatch.setattr(timing, "_Event", FakeEvent)
    monkeypatch.setattr(timing, "_record", record)
    monkeypatch.setattr(timing, "_elapsed", lambda a, b: b.t - a.t)
    monkeypatch.setattr(timing, "_event_sync", lambda ev: None)
    monkeypatch.setattr(timing, "_event_query", lambda ev: True)
    monkeypatch.setattr(timing, "_cuda_sync", dev.sync)
    monkeypatch.setattr(timing, "_current_stream", lambda d=None: "stream")
    monkeypatch.setattr(timing, "_gpu_sleep", None)  # no lead
    monkeypatch.setattr(timing, "flusher_for", lambda device: NoFlush())
    monkeypatch.setattr(timing, "l2_guard_for", lambda device: None)
    monkeypatch.setattr(timing, "_CALIBRATION", {})
    return dev


def timed(dev: FakeDevice, n: int = 6) -> dict:
    return timing.time_forward(dev.call, lambda i: [torch.ones(4)], 2, n, "cuda:0")


def test_calibration_through_the_stand_ins(fake_cuda):
    # an empty body: the device-wide end is the latency alone, no spread
    assert timing.calibrate_sync("cuda:0", 5) == (pytest.approx(LAT_MS),
                                                  timing.SIDE_SLACK_MS)


@pytest.mark.parametrize("side_ms", [1.5, 10.0])
def test_side_stream_work_is_in_the_sample(fake_cuda, side_ms):
    fake_cuda.side_ms = side_ms
    res = timed(fake_cuda)
    assert fake_cuda.calls == 2 + 6 and fake_cuda.syncs > 6  # the CUDA loop ran
    assert res["side_stream"] == list(range(6))
    # the device-wide figure (minus the latency): the side work, not the
    # timed stream's STREAM_MS
    assert res["samples_ms"] == [pytest.approx(side_ms)] * 6, res["samples_ms"]
    assert res["sync_excess_ms"] == pytest.approx(side_ms - STREAM_MS)


@pytest.mark.parametrize("side_ms", [0.0, STREAM_MS, STREAM_MS + 0.05])
def test_joined_or_short_side_work_keeps_the_stream_figure(fake_cuda, side_ms):
    # within the slack (0.1 ms or 10%) of the stream's end: an honest call
    fake_cuda.side_ms = side_ms
    res = timed(fake_cuda)
    assert res["side_stream"] == []
    assert res["samples_ms"] == [pytest.approx(STREAM_MS)] * 6, res["samples_ms"]
