#!/bin/sh
# bench/pipeline/run.sh [--mode toy|gpu|bandit] [--out DIR] [--bandit] [pipeline.py options]
# The miniature Dr. Kernel pipeline (bench/pipeline/pipeline.py; docs/training.md,
# "The pipeline"): --mode toy on a CPU, --mode gpu on one GPU (about 6 minutes).
# --bandit also runs the kernel bandit on the GPU kernels after it (about 4 more
# minutes); --mode bandit runs the bandit alone. Results go to --out, default
# $OUT (the device's) else bench/results, in pipeline-<mode>/ and bandit-triton.*.
# Uses scripts/find-python's Python (the .venv, else a python3 that has torch).
set -e
here=$(cd "$(dirname "$0")/../.." && pwd)
mode=toy; out=; bandit=0; rest=
while [ $# -gt 0 ]; do
    case "$1" in
        --mode) mode=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --bandit) bandit=1; shift ;;
        *) rest="$rest $1"; shift ;;
    esac
done
[ -n "$out" ] || out=${OUT:-$here/bench/results}
py=$("$here/scripts/find-python")
mkdir -p "$out"
{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC') bench/pipeline/run.sh --mode $mode$rest$([ $bandit = 1 ] && echo ' --bandit')"
    echo "# commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
         "$(git -C "$here" status --porcelain 2>/dev/null | grep -q . && echo '(+ local changes)')"
    echo "# python $("$py" -c 'import sys, torch, transformers, tokenizers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)')"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# gpu /'
    echo "# kgym ${KGYM_BIN:-$here/build/kgym}"
} > "$out/run-info-$mode.txt"
cat "$out/run-info-$mode.txt"
rc=0
if [ "$mode" != bandit ]; then
    # shellcheck disable=SC2086
    "$py" "$here/bench/pipeline/pipeline.py" --mode "$mode" --out "$out/pipeline-$mode" $rest || rc=$?
    [ -f "$out/pipeline-$mode/rounds.txt" ] && cat "$out/pipeline-$mode/rounds.txt"
fi
if [ "$bandit" = 1 ] || [ "$mode" = bandit ]; then
    # TRLOO vs GRPO, PR and PRS on real GPU rewards; the forged arm starts as
    # favoured as the lazy one and must never be preferred to fused
    "$py" "$here/bench/bandit/bandit.py" --backend triton --evals step \
        --init lazy=1.5,forged=1.5,hacked=1.0 --max-seconds "${BANDIT_MAX_S:-200}" \
        --out "$out/bandit-triton" || rc=$?
fi
exit $rc
