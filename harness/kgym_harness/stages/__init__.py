"""The judge's stages, one job each, run in this order by Judge.run (judge.py):

    correctness   trials on secret inputs, other modes, degenerate warning
    precision     fp32 problems computed in less (run within correctness)
    timing        ABBA blocks, the trusted clock, spot checks
    profiling     the coverage the judge stands behind
    recheck       fresh trials after timing (correctness), speedup recheck
    integrity     quiescence, ablation, replaced functions; hack() for all

Each module holds one mixin of Judge; they share its state (self.req,
self.result, self.remote, self.ref_model), documented on each class.
"""

from __future__ import annotations

import time


class Stop(Exception):
    """Evaluation is over; the result already says why."""


def now() -> float:
    """The judge's clock for the durations it reports (perf_counter)."""
    return time.perf_counter()
