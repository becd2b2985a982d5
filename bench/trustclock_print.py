"""The CPU trusted clock's work figure on the bandit's honest swish kernels,
whose output's print costs about as much as the call: per evaluation the
claimed median, the CPU work per call the clock derived (print taken off),
their ratio (timer_tamper above 1 + CPU_TOL), the judge's print CPU per
call, and whether the first timing phase was already named.

usage: PYTHONPATH=harness:python:tests/harness .venv/bin/python \
           bench/trustclock_print.py HOGS REPS
HOGS busy processes run beside it (test_trusted_clock._Hogs).
"""
from __future__ import annotations

import pathlib
import sys

import kit
import test_trusted_clock as t
from kgym_harness import trustclock

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARMS = ROOT / "bench/bandit/kernels/cpu/swish_residual"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    hogs, reps = int(argv[0]), int(argv[1])
    ref = (ARMS / "ref.py").read_text()
    named = 0
    with t._Hogs(hogs):
        for rep in range(reps):
            for arm in ("fused", "lazy"):
                r = kit.run((ARMS / f"{arm}.py").read_text(), reference_code=ref,
                            num_correct_trials=1, num_perf_trials=5, num_warmup=1,
                            run_hack_checks=True, timeout=300)
                c = r["checks"].get("trusted_clock") or {}
                claim, work = c.get("claimed_ms") or 0.0, c.get("cpu_work_ms") or 0.0
                first = (r["checks"].get("timing_retried") or {}).get("trusted_clock", "-")
                named += r["verdict"] != "pass"
                print(f"{rep} {arm:5s} {r['verdict']:7s} {','.join(r['hack_reasons']) or '-':14s} "
                      f"claim={claim:.4g} work={work:.4g} "
                      f"ratio={work / claim if claim else 0.0:.3f} "
                      f"print_cpu={(c.get('cpu_blocks_ms') or {}).get('print')} "
                      f"clock={c.get('verdict')} first={first}", flush=True)
    print(f"# named or failed: {named} of {2 * reps}; ratio limit {1 + trustclock.CPU_TOL:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
