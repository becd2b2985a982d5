#!/usr/bin/env python3
"""How the concurrency step's ratio moves when one thing changes for both
engines (issue 4: which part of an evaluation keeps 4-way below 2x).

Each CONFIG runs gpu_suite's concurrency step on one kind of candidate with
its own serial engine (unlike `--only ab --ab-serial-once`, whose serial
engine keeps the defaults): a change that makes every evaluation cheaper
or dearer shows as the ratio it leaves, not as a faster 4-way engine.
A CONFIG is LABEL=ITEM,ITEM,... where an ITEM is VAR:VALUE (the engines'
environment) or --flag:value (a kgym eval option), e.g.

    bench/diag/scaling.py --kind repeated defaults= one_trial=--num-perf-trials:1 \
        one_trial_nopreload=--num-perf-trials:1,KGYM_SPARE_PRELOAD:0

With --num-perf-trials 1 the exclusive timing phase is a few ms, so the
ratio is that of the shared work alone (correctness, checks, spares).
Writes the result objects to OUT/scaling.jsonl (OUT: --out, else $OUT, else
bench/results) and prints gpu_suite's report of each step.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpu_suite  # noqa: E402  (bench/gpu_suite.py)


def parse_config(spec: str) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """(label, env, kgym eval flags) of LABEL=ITEM,ITEM,..."""
    label, eq, items = spec.partition("=")
    if not label or not eq:
        raise SystemExit(f"config {spec!r}: want LABEL=ITEM,... (ITEM: VAR:VALUE or --flag:value)")
    env: dict[str, str] = {}
    flags: list[str] = []
    for item in filter(None, items.split(",")):
        key, colon, value = item.partition(":")
        if not key or not colon:
            raise SystemExit(f"config {spec!r}: item {item!r} is not VAR:VALUE or --flag:value")
        if key.startswith("--"):
            flags += [key, value]
        else:
            env[key] = value
    return label, env, tuple(flags)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="repeated", choices=("repeated", "distinct"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(
        gpu_suite.ROOT, "bench", "results"))
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    configs = [parse_config(c) for c in args.configs]
    for label, env, flags in configs:
        gpu_suite.run_concurrency((args.kind,), env, f", {label}", flags)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "scaling.jsonl"), "w") as f:
        for r in gpu_suite.all_results:
            f.write(json.dumps(r) + "\n")
    gpu_suite.say(f"# checks that failed: {gpu_suite.failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
