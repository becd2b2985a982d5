#!/bin/bash
# Issue 37's GPU checks in one device call (about 7 minutes): the timing
# GPU tests (the lead, a side stream timed again on new inputs), then the
# issue's proof set (run.py's GPU_PROBLEMS: the 19 problems that were off
# in the 250-problem selfcheck and the first 20 of level 2), kgym selfcheck
# at concurrency 1 and 4 beside KernelBench's own eval, every defence on.
# Each selfcheck's summary says how long the device was held alone (the
# bound on any concurrency). Results: $OUT/kernelbench-*/ (report.txt).
# Builds nothing. CAP_C1, CAP_C4, CAP_KB: each phase's seconds.
set -u
cd "$(dirname "$0")/../.." || exit 2
if [ -z "${KGYM_BIN:-}" ] && [ -f bench/device/env.sh ]; then . bench/device/env.sh; fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
echo "# GPU tests: tests/harness/test_timing_gpu.py test_side_stream_gpu.py"
(cd tests/harness && timeout 100 "$PY" -m pytest -q -rs -p no:cacheprovider \
    test_timing_gpu.py test_side_stream_gpu.py 2>&1 | tail -25)
bash bench/kernelbench/run.sh --only c1,c4,kb \
    --cap "c1=${CAP_C1:-170}" --cap "c4=${CAP_C4:-120}" --cap "kb=${CAP_KB:-60}" "$@"
for f in "${OUT:-bench/results}"/kernelbench-*/selfcheck_c*.log; do
    [ -f "$f" ] && { echo "# $f"; grep -E "^(device held alone|throughput)" "$f"; }
done
