#!/usr/bin/env bash
# One honest GPU evaluation through the real worker path, its verdict and
# error printed; then again with the host's tree (KGYM_NEW_ROOT=0) when the
# first did not pass. For a device where something new breaks every task.
cd "$(dirname "$0")/../.." || exit 2
ref=problems/gpu/level2/1_Linear_ReLU.py
cand=problems/gpu/level2/solutions/1_Linear_ReLU.triton.py
show='import json,sys
for ln in sys.stdin:
    if ln.startswith("{"):
        r=json.loads(ln); e=r.get("error") or {}
        print("verdict", r.get("verdict"), r.get("error_code"), "speedup", r.get("speedup"))
        print("message", (r.get("error_message") or "")[:1500])
        print("traceback", (e.get("traceback") or "")[-2500:])
        print("candidate_exit", r.get("candidate_exit"), "timings", r.get("timings"))'
ls -la /dev/nvidia* 2>&1 | head
for nr in 1 0; do
    echo "== KGYM_NEW_ROOT=$nr"
    out=$(KGYM_NEW_ROOT=$nr timeout 120 build/kgym eval --ref $ref --cand $cand --backend triton --json 2>/tmp/diag-$nr.err)
    echo "$out" | python3 -c "$show"
    tail -5 /tmp/diag-$nr.err
    echo "$out" | grep -q '"verdict": *"pass"' && break
done
