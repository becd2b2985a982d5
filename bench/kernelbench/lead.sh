#!/bin/bash
# Issue 37's GPU checks in one device call (about 9 minutes): the lead's
# GPU tests, then the 14
# level-3 problems of the 250-problem selfcheck that were off or host-bound
# (GPU_NAMED in run.py), kgym selfcheck at concurrency 1 and 4 beside
# KernelBench's own eval, with an A/B of the fitted lead (KGYM_LEAD_FIT=0:
# the safe lead only, lead.py) on six of them, each problem's timing-stage
# seconds side by side; then VanillaRNNHidden alone with CUDA's default
# launch queue (CUDA_SCALE_LAUNCH_QUEUES=1x) against the worker's 4x.
# Results: $OUT/kernelbench-*/ (report.txt each). Builds nothing.
set -u
cd "$(dirname "$0")/../.." || exit 2
L3="level3/10_ResNet101,level3/19_MobileNetV1,level3/20_MobileNetV2,level3/28_VisionTransformer"
L3="$L3,level3/29_SwinMLP,level3/34_VanillaRNNHidden,level3/35_LSTM,level3/36_LSTMHn"
L3="$L3,level3/37_LSTMCn,level3/38_LSTMBidirectional,level3/39_GRU,level3/40_GRUHidden"
L3="$L3,level3/41_GRUBidirectional,level3/42_GRUBidirectionalHidden"
AB="level3/10_ResNet101,level3/20_MobileNetV2,level3/28_VisionTransformer"
AB="$AB,level3/29_SwinMLP,level3/34_VanillaRNNHidden,level3/35_LSTM"
# the lead's GPU tests (safe and fitted lead on a host-bound call; the
# children's CUDA queues); the device env is sourced by run.sh below
if [ -z "${KGYM_BIN:-}" ] && [ -f bench/device/env.sh ]; then . bench/device/env.sh; fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
echo "# GPU tests: tests/harness/test_timing_gpu.py tests/harness/test_worker_env_gpu.py"
(cd tests/harness && timeout 90 "$PY" -m pytest -q -rs -p no:cacheprovider \
    test_timing_gpu.py "test_worker_env_gpu.py::test_children_get_cuda_queues_unless_the_worker_says" \
    -k "SCALE or timing" 2>&1 | tail -25)
bash bench/kernelbench/run.sh --only c1,c4,ab,kb --problems "$L3" \
    --ab-env KGYM_LEAD_FIT=0 --ab-problems "$AB" \
    --cap "c1=${CAP_C1:-130}" --cap "c4=${CAP_C4:-100}" --cap "ab=${CAP_AB:-80}" \
    --cap "kb=${CAP_KB:-60}" "$@"
echo "# VanillaRNNHidden: CUDA's default launch queue (CUDA_SCALE_LAUNCH_QUEUES=1x) against 4x"
bash bench/kernelbench/run.sh --only c1,ab --problems level3/34_VanillaRNNHidden \
    --ab-env CUDA_SCALE_LAUNCH_QUEUES=1x --ab-problems level3/34_VanillaRNNHidden \
    --cap c1=40 --cap ab=40
