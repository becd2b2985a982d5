#!/bin/sh
# Honest CPU kernels against the CPU trusted clock beside busy processes:
# N evaluations each of the bandit's fused and lazy swish kernels (5 timed
# trials, as tests/python/test_bandit.py asks) in one kgym eval, with H
# processes spinning on the CPUs. Prints how many were not a pass and the
# least margin of the CPU-time bound (trustclock.decide: named below 1).
#
#   bench/trustclock_honest.sh [N] [H] [TREE]    (default 20 2 this tree)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
n=${1:-20}; hogs=${2:-2}; tree=${3:-$root}
py=${PYTHON:-$root/.venv/bin/python}
k=$root/bench/bandit/kernels/cpu/swish_residual
out=$(mktemp)
pids=""
for _ in $(seq 1 "$hogs"); do
    "$py" -c "while True: pass" & pids="$pids $!"
done
trap 'kill $pids 2>/dev/null; rm -f "$out"' EXIT
set --
for _ in $(seq 1 "$n"); do set -- "$@" --cand "$k/fused.py" --cand "$k/lazy.py"; done
"$tree/build/kgym" eval --backend cpu --device cpu --ref "$k/ref.py" "$@" \
    --num-correct-trials 1 --num-perf-trials 5 --num-warmup 1 --json >"$out"
PYTHONPATH="$root/harness" "$py" - "$out" "$tree" "$hogs" <<'PY'
import json, sys
from kgym_harness.trustclock import CPU_TOL
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
bad, margins = [], []
for i, r in enumerate(rows):
    c = r["checks"].get("trusted_clock") or {}
    if r["verdict"] != "pass":
        bad.append(f"{('fused', 'lazy')[i % 2]}: {r['verdict']} {r.get('hack_reasons')}")
    if c.get("cpu_work_ms"):
        med_floor = c["cpu_work_ms"] / (1 + CPU_TOL) - c.get("cpu_slack_ms", 0.0)
        m = [c["claimed_mean_ms"] / c["cpu_floor_ms"] if c.get("cpu_floor_ms") else 9e9,
             c["claimed_ms"] / med_floor if med_floor > 0 else 9e9]
        margins.append(min(m))
least = (f"least margin of the CPU-time bound {min(margins):.2f} over {len(margins)} with a "
         "bound" if margins else "no CPU-time bound")
print(f"tree {sys.argv[2]}, {sys.argv[3]} busy processes: {len(rows) - len(bad)} of "
      f"{len(rows)} pass; {least}")
for b in bad:
    print("  not a pass:", b)
PY
