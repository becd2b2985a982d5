#!/bin/bash
# KernelBench side by side on one H200 (bench/kernelbench/run.py): kgym
# selfcheck at concurrency 1 and 4 and KernelBench's own eval on the same
# problems, about 6 minutes; --dry: a CPU run of a few small problems.
# Needs KernelBench's checkout at .device/kernelbench (its src/ and
# KernelBench/level*) and, on the device, bench/device/env.sh sourced.
set -u
cd "$(dirname "$0")/../.." || exit 2
# the device's environment (carried build, libraries, PYTHONPATH, OUT),
# unless the caller sourced it already
if [ -z "${KGYM_BIN:-}" ] && [ -f bench/device/env.sh ]; then
    . bench/device/env.sh
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
exec "$PY" bench/kernelbench/run.py "$@"
