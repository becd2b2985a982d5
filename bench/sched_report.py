#!/usr/bin/env python3
"""Where the warm spares' and tasks' time went: on a CPU, waiting for one,
or blocked.

Reads result objects with cpustat samples (timings.warm_spare.sched: both
processes' [CPU ms, run-queue ms, modules imported] at the end of each
warm-up part, cumulative since their fork; timings.sched_judge: the
judge's at the end of its task) and prints, per engine (--per-engine:
32 results each, the last 16 counted; 48, results 17-32, the steady
window), the median of each part's wall, CPU and run-queue
time in each process and the modules each imported. Wall minus CPU minus
run queue is the time the process was blocked (a lock, the driver).

    bench/sched_report.py FILE.jsonl[.gz] [NAME,NAME,...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lock_timeline import read_results, steady_window  # noqa: E402  (bench/lock_timeline.py, next to it)

PER_ENGINE = 32
PARTS = ("prep", "profiler", "preload", "device", "task")
WALL = {"prep": "prep_ms", "profiler": "profiler_ms", "preload": "preload_ms",
        "device": "device_ms", "task": "idle_ms"}


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f}" if xs else "-"


def report(results: list[dict], window: list[dict] | None = None) -> list[str]:
    """Lines for one engine's results: those of `window` counted (default:
    lock_timeline.steady_window)."""
    late = window if window is not None else steady_window(results)
    rows: dict[str, dict[str, list[float]]] = {}
    task_rows: dict[str, list[float]] = {"wall": [], "cpu": [], "runq": [], "mods": []}
    for r in late:
        t = r.get("timings") or {}
        warm = t.get("warm_spare") or {}
        sched = warm.get("sched") or {}
        prev = {"judge": [0.0, 0.0, 0.0], "candidate": [0.0, 0.0, 0.0]}
        for part in PARTS:
            s = sched.get(part)
            if not s:
                continue
            row = rows.setdefault(part, {})
            if isinstance(warm.get(WALL[part]), (int, float)):
                row.setdefault("wall", []).append(warm[WALL[part]])
            for who in ("judge", "candidate"):
                v = s.get(who)
                if not (isinstance(v, list) and len(v) == 3):
                    continue
                p = prev[who]
                row.setdefault(f"{who} cpu", []).append(v[0] - p[0])
                if v[1] >= 0 and p[1] >= 0:
                    row.setdefault(f"{who} runq", []).append(v[1] - p[1])
                row.setdefault(f"{who} mods", []).append(v[2] - p[2])
                prev[who] = v
        end = t.get("sched_judge")
        start = (sched.get("task") or {}).get("judge") or [0.0, 0.0, 0.0]
        if isinstance(end, list) and len(end) == 3:
            task_rows["wall"].append(t.get("total") or 0)
            task_rows["cpu"].append(end[0] - start[0])
            task_rows["runq"].append(end[1] - start[1])
            task_rows["mods"].append(end[2] - start[2])
    out = []
    for part in PARTS:
        if part not in rows:
            continue
        row = rows[part]
        label = "idle" if part == "task" else part
        out.append(f"{label:8s} wall {_med(row.get('wall', []))} ms; " + "; ".join(
            f"{who} cpu {_med(row.get(who + ' cpu', []))} runq {_med(row.get(who + ' runq', []))}"
            f" mods {_med(row.get(who + ' mods', []))}" for who in ("judge", "candidate")
            if row.get(who + " cpu")))
    steps = prep_steps(late)
    if steps:
        out.insert(1 if out and out[0].startswith("prep") else 0, steps)
    if task_rows["wall"]:
        out.append(f"task     wall {_med(task_rows['wall'])} ms; judge cpu "
                   f"{_med(task_rows['cpu'])} runq {_med(task_rows['runq'])} "
                   f"mods {_med(task_rows['mods'])}")
    return out


def prep_steps(results: list[dict]) -> str:
    """The median of each step of the spares' prep part, in ms: the
    judge's own part (timings.warm_spare.prep_judge_ms), its CUDA context
    and preload set-up in it (prep_judge_parts_ms), the
    candidate's CUDA start (made before the part began), warm prep and
    set-up (prep_candidate_ms, its claim). "" when no result has them."""
    found: dict[str, dict[str, list[float]]] = {"judge": {}, "candidate": {}}
    for r in results:
        warm = (r.get("timings") or {}).get("warm_spare") or {}
        own = warm.get("prep_judge_ms")  # the judge's own part, steps or not (all files)
        if isinstance(own, (int, float)) and not isinstance(own, bool):
            found["judge"].setdefault("own", []).append(float(own))
        for who, key in (("judge", "prep_judge_parts_ms"), ("candidate", "prep_candidate_ms")):
            parts = warm.get(key)
            if isinstance(parts, dict):
                for k, v in parts.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        found[who].setdefault(str(k), []).append(float(v))
    sides = [f"{who} " + ", ".join(f"{k} {_med(v)}" for k, v in found[who].items())
             for who in ("judge", "candidate") if found[who]]
    return "steps of prep (ms): " + "; ".join(sides) if sides else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("names", nargs="?", default="")
    ap.add_argument("--per-engine", type=int, default=PER_ENGINE,
                    help="results per engine: 48 (the concurrency step's), 32 (older files in bench/results)")
    args = ap.parse_args()
    results = read_results(args.file)
    names = args.names.split(",") if args.names else []
    per = args.per_engine
    for i in range(0, len(results) - per + 1, per):
        name = names[i // per] if i // per < len(names) else f"engine {i // per}"
        print(f"{name}:")
        for ln in report(results[i:i + per]):
            print("  " + ln)


if __name__ == "__main__":
    main()
