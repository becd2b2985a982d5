#!/usr/bin/env python3
"""Where a concurrency run's time went, by the device lock.

Reads the result objects a `make test-gpu` concurrency step wrote (its
gpu_results.jsonl, or a gzipped copy in bench/results/: 4 engines,
repeated c1, repeated c4, distinct c1, distinct c4, each run with
KGYM_LOCK_TRACE=1) and splits each engine's steady state (from the first
exclusive hold of its last 16 tasks to the last one's end) into: an
exclusive hold running; an exclusive taker waiting (for other exclusive
takers or for shared holders to drain), with how many shared holds were
in progress; and free (no exclusive taker), with how many shared holds.
Holds of the tasks and of their warm spares both count.

    bench/lock_timeline.py FILE.jsonl[.gz] [--per-engine 32|48] [--names A,B,...]

(--per-engine 48: the concurrency step's engines, three rounds of 16,
the steady window from the 17th result to the 32nd; 32: the older files
in bench/results, the later half counted.)
(--names: the engines' names in order, for the files of an A/B step,
whose engines are distinct c1, c4 of one value, then of the next.)
"""
from __future__ import annotations

import argparse
import gzip
import json

NAMES = ("repeated c1", "repeated c4", "distinct c1", "distinct c4")


def read_results(path: str) -> list[dict]:
    """The result objects of a gpu_results.jsonl, or of its kept copy in
    bench/results/, which is gzipped (FILE.jsonl.gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(ln) for ln in f if ln.startswith("{")]


def _owner(r: dict) -> str:
    """The result's task id (one the worker wrote itself may have none)."""
    return str(r.get("task_id") or id(r))


def holds_of(results: list[dict]) -> list[tuple[str, str, str, float, float, float]]:
    """(owner, label, mode, asked, got, released) of every traced hold; a
    spare's holds are owned by its task's id + "/spare"."""
    out = []
    for r in results:
        t = r.get("timings") or {}
        tid = _owner(r)
        for owner, trace in ((tid, t.get("lock_trace")),
                             (tid + "/spare", (t.get("warm_spare") or {}).get("lock_trace"))):
            for h in trace or []:
                out.append((owner, str(h[0]), h[1], float(h[2]), float(h[3]), float(h[4])))
    return out


def steady_window(results: list[dict]) -> list[dict]:
    """One engine's results of its steady window, by arrival: the 17th to
    the 32nd of 48 (three rounds of 16, the third keeping the queue full:
    bench/gpu_suite.py, concurrency_windows); of any other number, the
    later half (older files in bench/results: 32 per engine)."""
    by_arrival = sorted(results, key=lambda r: r.get("_t", 0))
    return by_arrival[16:32] if len(results) == 48 else by_arrival[len(results) // 2:]


def timeline(results: list[dict], window: list[dict] | None = None) -> dict[str, float]:
    """Share of the steady state (ms) in each state, by a sweep over the
    holds' edges. The steady state runs from the first exclusive hold of
    the `window` results (default: steady_window) to the end of their
    last one; the holds of all results count."""
    late = {_owner(r) for r in (window if window is not None else steady_window(results))}
    holds = holds_of(results)
    late_ex = [h for h in holds if h[2] == "e" and h[0] in late]
    if not late_ex:
        return {}
    t0, t1 = min(h[4] for h in late_ex), max(h[5] for h in late_ex)
    edges: list[tuple[float, str, int]] = []
    for _, _, mode, asked, got, rel in holds:
        if mode == "e":
            edges += [(asked, "wait", 1), (got, "wait", -1), (got, "excl", 1), (rel, "excl", -1)]
        else:
            edges += [(got, "shared", 1), (rel, "shared", -1)]
    edges.sort()
    count = {"wait": 0, "excl": 0, "shared": 0}
    spent: dict[str, float] = {}
    prev = t0
    for at, kind, d in edges:
        lo, hi = max(prev, t0), min(at, t1)
        if hi > lo:
            sh = min(count["shared"], 4)
            state = ("exclusive held" if count["excl"] else
                     f"exclusive waiting, {sh} shared" if count["wait"] else f"free, {sh} shared")
            spent[state] = spent.get(state, 0.0) + hi - lo
        prev = max(prev, at)
        count[kind] += d
    total = t1 - t0
    return {k: v / total for k, v in sorted(spent.items())} | {"window_ms": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jsonl")
    ap.add_argument("--per-engine", type=int, default=32)
    ap.add_argument("--names", default=",".join(NAMES), help="the engines' names, in order")
    a = ap.parse_args()
    names = a.names.split(",")
    rows = read_results(a.jsonl)
    for i in range(0, len(rows), a.per_engine):
        shares = timeline(rows[i:i + a.per_engine])
        k = i // a.per_engine
        name = names[k] if k < len(names) else f"engine {k + 1}"
        if not shares:
            print(f"{name}: no exclusive holds traced")
            continue
        window = shares.pop("window_ms")
        print(f"{name}: {window / 1e3:.1f} s: " + ", ".join(
            f"{k} {100 * v:.0f}%" for k, v in shares.items() if v >= 0.005))


if __name__ == "__main__":
    main()
