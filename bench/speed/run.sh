#!/bin/sh
# kgym's speed, the previous build beside this one (bench/speed/speed.py):
# cold kgym eval, warm (six in one engine), a group of 16 distinct candidates
# through kgym serve --workers auto and through kgym serve + kgym worker
# --concurrency 4, the rollout benchmark (bench/rollout/run.py), and the
# fault kinds back to back then two honest tasks in one kgym eval.
#
#   bench/speed/run.sh PREV [CUR] [--dry] [speed.py flags...]
#
# PREV, CUR: a kgym tree with its build (DIR/build/kgym, DIR/harness), or a
# build dir (DIR/kgym; then this tree's harness is used). CUR defaults to
# this tree. On the H200 (bench/device/env.sh sourced first), e.g. with the
# previous commit's tree carried as .device/prev:
#   bench/speed/run.sh .device/prev
# about 6 minutes (--only STEP,... runs some: cold,warm,group,rollout,faults);
# the results go to $OUT (else bench/results), line by line. --dry runs
# the same on the CPU, small (its test: no figure claimed).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 PREV [CUR] [--dry] [flags]" >&2; exit 2; }
prev=$1; shift
cur=$root
if [ $# -ge 1 ] && [ "${1#--}" = "$1" ]; then cur=$1; shift; fi
py=${PYTHON:-}
if [ -z "$py" ]; then
    if [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python; else py=python3; fi
fi
exec "$py" "$here/speed.py" --prev "$prev" --cur "$cur" "$@"
