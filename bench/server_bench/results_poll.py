#!/usr/bin/env python3
"""bench/server_bench/results_poll.py - what one POST /results/batch costs
against GET /results/{id}, on both stores.

    bench/server_bench/results_poll.py [--ids 1000] [--rounds 20]

A real kgym serve (no workers, so every task stays pending) over SQLite
and over a real redis-server: IDS tasks are submitted, then ROUNDS times
one POST /results/batch of all of them with wait_s 0 and ROUNDS x 10
GET /results/{id} of single tasks. Prints the median wall time of each, as
the client sees it. KGYM_BIN picks the build (default build/kgym).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from kgym_env import Env, cheap_task, uid  # noqa: E402


def one_store(store: str, n: int, rounds: int) -> tuple[float, float]:
    env = Env(store)
    try:
        env.start_server()
        c = env.client()
        ids = [uid("rp") for _ in range(n)]
        for i in range(0, n, 100):
            res = c.batch([cheap_task(t) for t in ids[i:i + 100]])
            assert all(r.get("task_id") for r in res["tasks"]), res
        batch_ms, get_ms = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            out = c.results(ids, wait_s=0)
            batch_ms.append((time.perf_counter() - t0) * 1e3)
            assert len(out["pending"]) == n, {k: len(v) for k, v in out.items()}
            for t in ids[:10]:
                t0 = time.perf_counter()
                c.request("GET", f"/results/{t}")
                get_ms.append((time.perf_counter() - t0) * 1e3)
        c.close()
        return statistics.median(batch_ms), statistics.median(get_ms)
    finally:
        env.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    print(f"store   ids  POST /results/batch ms (median)  GET /results/{{id}} ms (median)")
    for store in ("sqlite", "redis"):
        b, g = one_store(store, a.ids, a.rounds)
        print(f"{store:<6} {a.ids:>4}  {b:>31.2f}  {g:>30.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
