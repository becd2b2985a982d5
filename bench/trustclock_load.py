"""The CPU trusted clock's CPU-time bound on red-team cpu cases beside n
busy processes (the loaded machine CI and developers share).

usage: PYTHONPATH=harness:python:tests/harness .venv/bin/python \
           bench/trustclock_load.py N CASE...
CASE: a file name under tests/redteam/corpus/cpu without .py. One line per
case: verdict, hack reasons, the claims' mean and median, the CPU work per
call, the load factor and the two ratios the clock decides on
(trustclock.decide: timer_tamper below 1 / (1 + CPU_TOL) on either).
"""
from __future__ import annotations

import sys

import kit
import test_trusted_clock as t
from kgym_harness import trustclock


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    hogs = int(argv[0])
    for name in argv[1:]:
        code, problem = t._corpus(name)
        with t._Hogs(hogs):
            r = kit.run(code, reference_code=problem, num_perf_trials=40, run_hack_checks=True,
                        timeout=900)
        c = r["checks"].get("trusted_clock") or {}
        work, load = c.get("cpu_work_ms") or 0.0, c.get("load") or 1.0
        mean, med = c.get("claimed_mean_ms") or 0.0, c.get("claimed_ms") or 0.0
        ratio = f"{mean / (work * load):.3f}" if work > 0 else "-"
        mratio = f"{med / work:.3f}" if work > 0 else "-"
        first = (r["checks"].get("timing_retried") or {}).get("trusted_clock", "-")
        print(f"{name:48s} {r['verdict']:7s} {','.join(r.get('hack_reasons') or []) or '-':22s} "
              f"mean={mean:.4g} median={med:.4g} work={work:.4g} load={load:.3g} "
              f"ratio={ratio} med={mratio} clock={c.get('verdict')} first={first}", flush=True)
    print(f"# threshold: {1 / (1 + trustclock.CPU_TOL):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
