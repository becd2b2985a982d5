"""bench/gpu_suite.py's lock-trace report (the concurrency step's drain
attribution), on a made-up trace: which shared hold a timing phase's
exclusive hold waited for last, and for how long it alone held it."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_suite  # noqa: E402


def test_the_last_shared_hold_before_an_exclusive_one_is_named():
    res = [{"timings": {"lock_trace": [["timing", "e", 90.0, 100.0, 200.0]]}},
           {"timings": {"lock_trace": [["trial:2/checks", "s", 40.0, 50.0, 95.0],
                                       ["trial:3/candidate", "s", 150.0, 201.0, 230.0]]}},
           {"timings": {"warm_spare": {"lock_trace": [["spare", "s", 55.0, 60.0, 99.0]]}}},
           {"timings": {}}]
    rows = {ln.split()[0]: ln.split() for ln in gpu_suite.lock_trace_report(res)[1:]}
    assert set(rows) == {"timing", "trial/checks", "trial/candidate", "spare"}
    # the spare ended last (99 ms), alone since the checks ended (95 ms)
    assert rows["spare"][2:] == ["1", "39.0", "0.04", "1", "4"]
    assert rows["trial/checks"][5] == "0" and rows["timing"][3] == "100.0"
    assert "no lock trace" in gpu_suite.lock_trace_report([{"timings": {}}])[0]


def test_lock_timeline_splits_the_steady_state_by_what_the_lock_was_doing():
    """bench/diag/lock_timeline.py on a made-up engine of 2 tasks (the
    second is the steady state): its exclusive hold 100-200 ms, asked at
    80 while a shared hold ran 50-90 and a spare's 85-95; another shared
    hold 150-300 overlaps the exclusive one, then runs alone to the end."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "diag"))
    import lock_timeline
    res = [{"task_id": "a", "_t": 1.0,
            "timings": {"lock_trace": [["trial:0/checks", "s", 40.0, 50.0, 90.0]]}},
           {"task_id": "b", "_t": 2.0,
            "timings": {"lock_trace": [["timing", "e", 80.0, 100.0, 200.0]],
                        "warm_spare": {"lock_trace": [["spare", "s", 85.0, 85.0, 95.0]]}}}]
    shares = lock_timeline.timeline(res)
    assert shares.pop("window_ms") == 100.0  # the steady state: b's exclusive hold
    assert shares == {"exclusive held": 1.0}
    res[0]["timings"]["lock_trace"].append(["trial:1/checks", "s", 150.0, 150.0, 300.0])
    res[1]["timings"]["lock_trace"].append(["timing", "e", 250.0, 300.0, 320.0])
    shares = lock_timeline.timeline(res)
    assert shares.pop("window_ms") == 220.0  # 100 to 320
    assert shares == {"exclusive held": 120 / 220, "exclusive waiting, 1 shared": 50 / 220,
                      "free, 1 shared": 50 / 220}
