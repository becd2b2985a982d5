#!/usr/bin/env python3
"""Where a concurrency run's exclusive sections waited (issue 4).

Reads the result objects of a `make test-gpu` concurrency or A/B step (32
results per engine before session 10, 48 since: --per-engine; run with
KGYM_LOCK_TRACE=1) and prints per engine:
the warm spares' first preload hold and their device part (median and
largest, ms); the drains before the exclusive holds of the steady
window's tasks (lock_timeline.steady_window: the time an exclusive taker
waited for shared holders once no other exclusive hold was ahead of it), with the label of the shared hold that
ended last; the exclusive holds; and where each side's timing wall went
(checks.timing_host_ms, medians over the problems other than Linear+ReLU,
whose timed calls are long).

    bench/diag/drain_report.py FILE.jsonl[.gz] NAME,NAME,... [--per-engine 32|48]
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lock_timeline import holds_of, read_results, steady_window  # noqa: E402  (next to it)

PER_ENGINE = 32


def _family(label: str) -> str:
    """'trial:3/checks' -> 'trial:checks', 'spare/preload' -> 'spare/preload'."""
    head = label.split(":")[0]
    return head + (":" + label.split("/")[-1] if "/" in label and ":" in label else "")


def _spare_holds(results: list[dict], index: int) -> list[float]:
    """Duration of each spare's index-th hold (0: the first preload unit)."""
    out = []
    for r in results:
        trace = (r["timings"].get("warm_spare") or {}).get("lock_trace") or []
        if trace and (index < 0 or index < len(trace)):
            h = trace[index]
            out.append(h[4] - h[3])
    return out


def drains(results: list[dict]) -> tuple[list[float], collections.Counter]:
    late = {r["task_id"] for r in steady_window(results)}
    holds = holds_of(results)
    exclusive = sorted((h for h in holds if h[2] == "e"), key=lambda h: h[4])
    waits, blame = [], collections.Counter()
    prev_end = 0.0
    for owner, _, _, asked, got, released in exclusive:
        start, prev_end = max(asked, prev_end), released
        if owner not in late:
            continue
        waits.append(got - start)
        in_flight = [(rel, label) for _, label, mode, _, g, rel in holds
                     if mode == "s" and g <= start + 0.5 and rel > start]
        if got - start > 5 and in_flight:
            blame[_family(max(in_flight)[1])] += got - start
    return waits, blame


def host_parts(results: list[dict]) -> dict[str, dict[str, float]]:
    parts: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in steady_window(results):
        if "Linear" in (r.get("_cand") or ""):
            continue
        for side, got in (r["checks"].get("timing_host_ms") or {}).items():
            for k, v in got.items():
                parts[side][k].append(v)
    return {side: {k: round(statistics.median(v), 1) for k, v in got.items()}
            for side, got in parts.items()}


def _med_max(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f}/{max(xs):.0f}" if xs else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("names", help="comma-separated, one per engine")
    ap.add_argument("--per-engine", type=int, default=PER_ENGINE,
                    help="results per engine: 32 (files before session 10), 48 since")
    args = ap.parse_args()
    per = args.per_engine
    results = read_results(args.file)
    for i, name in enumerate(args.names.split(",")):
        eng = results[i * per:(i + 1) * per]
        if not eng:
            break
        waits, blame = drains(eng)
        late = {r["task_id"] for r in steady_window(eng)}
        excl = [h[5] - h[4] for h in holds_of(eng) if h[2] == "e" and h[0] in late]
        print(f"{name}: spare first preload hold (median/max ms) {_med_max(_spare_holds(eng, 0))}, "
              f"device part {_med_max(_spare_holds(eng, -1))}")
        print(f"  drains {sum(waits):.0f} ms in all, largest "
              f"{[round(w) for w in sorted(waits)[-4:]]}, by the hold that ended last: "
              f"{[(k, round(v)) for k, v in blame.most_common(4)]}")
        print(f"  exclusive holds {sum(excl):.0f} ms in all, median {statistics.median(excl):.0f}"
              if excl else "  no exclusive holds")
        for side, parts in host_parts(eng).items():
            print(f"  timing {side}: {parts}")


if __name__ == "__main__":
    main()
