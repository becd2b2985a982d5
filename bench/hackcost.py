#!/usr/bin/env python3
"""What the hacking checks cost: evaluation time with run_hack_checks on vs off.

The bar: the hacking checks add at most 25% to the evaluation time of
the GPU example problems. This runs every example problem's honest
solution(s) of one set through the real worker engine, each evaluation
once with run_hack_checks=true and once with false, in one run of
`kgym redteam` (one warm engine; the request fields per task come from the
generated candidates' headers). The order is interleaved, ABBA per repeat
(on, off, off, on, ...), so drift cancels, after one unrecorded warm-up
round per solution (builds and first-call costs). Everything else is the
request's defaults: 5 correctness trials, 100 timed iterations, profiling.

Reported per solution: the median of the judge's total time per mode, the
median over rounds of the ratio on/off of the two back-to-back evaluations
of a round, and where the difference goes (median per phase); overall, the
geometric mean of the ratios. Time is the judge's timings.total (from
setup to the result), which is what a worker spends per task apart from
spawning the two children.

    bench/hackcost.py --set gpu --backend triton --repeats 3    # on a GPU machine
    bench/hackcost.py --set cpu --backend cpu --repeats 3       # anywhere

Options: --set cpu|gpu (problems/<set>), --backend (solutions of that
backend: cpu, triton, cuda; several with commas), --repeats N, --filter
SUBSTR (problem path), --out FILE (the report, also printed), --jobs N
(tasks in flight; keep 1 for clean timings). Needs build/kgym; as root,
TMPDIR must be enterable by the sandbox user (a private one is made).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
PHASES = ("setup", "compile", "correctness", "timing", "profiling", "timing_checks", "recheck",
          "quiescence", "ablation")
SHORT = {"timing_checks": "tchks"}  # column heads: five letters each


def solutions(problem_set: str, backends: list[str], filt: str) -> list[tuple[str, str, str]]:
    """(problem, solution, backend) for every example problem of the set."""
    out = []
    for prob in sorted(glob.glob(os.path.join(ROOT, "problems", problem_set, "level*", "*.py"))):
        if filt and filt not in prob:
            continue
        stem = os.path.splitext(os.path.basename(prob))[0]
        for b in backends:
            sol = os.path.join(os.path.dirname(prob), "solutions", f"{stem}.{b}.py")
            if os.path.exists(sol):
                out.append((prob, sol, b))
    return out


def write_candidates(d: str, sols: list[tuple[str, str, str]], repeats: int) -> dict[str, dict]:
    """One candidate file per (repeat, solution, mode), named so that sorted
    order is the run order: round 0 is the warm-up; each later round visits
    every solution with both modes, ABBA across rounds. Returns file stem ->
    what it is."""
    meta = {}
    for r in range(repeats + 1):
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        for i, (prob, sol, backend) in enumerate(sols):
            with open(sol, encoding="utf-8") as f:
                code = f.read()
            rel = os.path.relpath(prob, ROOT)
            for j, mode in enumerate(order):
                stem = f"r{r:02d}_s{i:02d}_{j}_{mode}"
                hdr = (f"# redteam: family=honest problem={rel} backend={backend} expect=pass "
                       f"fields=run_hack_checks:{'true' if mode == 'on' else 'false'}\n")
                sub = os.path.join(d, backend)
                os.makedirs(sub, exist_ok=True)
                with open(os.path.join(sub, stem + ".py"), "w", encoding="utf-8") as f:
                    f.write(hdr + code)
                meta[f"{backend}/{stem}"] = {"round": r, "solution": os.path.relpath(sol, ROOT),
                                             "mode": mode}
    return meta


def machine() -> str:
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        smi = ""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for ln in f:
                if ln.startswith("model name"):
                    cpu = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = f", GPU {smi.splitlines()[0]}" if smi else ""
    return f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}){gpu}"


def source_state() -> str:
    """The commit measured, and whether the harness had uncommitted changes."""
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True,
                                  timeout=20).stdout.rstrip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "harness", "src/worker")
    return head + (f" + uncommitted changes in {', '.join(ln[3:] for ln in dirty.splitlines())}"
                   if dirty else "")


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="gpu", choices=("cpu", "gpu"))
    ap.add_argument("--backend", default=None,
                    help="solutions' backend(s), comma-separated (default: triton for gpu, cpu "
                         "for cpu)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--filter", default="")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    backends = (args.backend or ("triton" if args.set == "gpu" else "cpu")).split(",")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if not os.access(KGYM, os.X_OK):
        ap.error(f"{KGYM} is not built (make)")
    sols = solutions(args.set, backends, args.filter)
    if not sols:
        ap.error(f"no {','.join(backends)} solutions in problems/{args.set} matching "
                 f"{args.filter!r}")

    work = tempfile.mkdtemp(prefix="kgym-hackcost-")
    os.chmod(work, 0o755)  # the sandboxed candidate enters its work dir below
    try:
        corpus = os.path.join(work, "corpus")
        meta = write_candidates(corpus, sols, args.repeats)
        cmd = [KGYM, "redteam", "--dir", corpus, "--json", "--jobs", str(args.jobs),
               "--backend", ",".join(sorted(set(backends)))]
        load0 = os.getloadavg()[0]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TMPDIR=work))
        wall = time.time() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        print(f"kgym redteam failed (rc {p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
        return 1

    # solution -> round -> mode -> timings (recorded rounds only)
    runs: dict[str, dict[int, dict[str, dict]]] = {}
    bad = []
    for row in doc["rows"]:
        m = meta[row["candidate"]]
        res = row["result"]
        if res.get("verdict") != "pass":
            bad.append(f"{row['candidate']} ({m['solution']}, {m['mode']}): {res.get('verdict')} "
                       f"{res.get('error_message')}")
            continue
        if m["round"] == 0:
            continue
        runs.setdefault(m["solution"], {}).setdefault(m["round"], {})[m["mode"]] = res["timings"]

    lines = [f"# bench/hackcost.py: evaluation time with run_hack_checks on vs off",
             f"# date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  machine: {machine()}",
             f"# command: {' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}  "
             f"(kgym redteam --jobs {args.jobs}, {args.repeats} recorded rounds after one warm-up "
             f"round, ABBA order, request defaults: 5 correctness trials, 100 timed, profiling on)",
             f"# source: {source_state()}",
             f"# load average (1 min) {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
             f"end; whole run {wall:.0f} s; ratio = median over rounds of on/off of the same round "
             f"(the two evaluations ran back to back)",
             "",
             f"{'solution':<62} {'n':>2} {'on_s':>7} {'off_s':>7} {'ratio':>6}  "
             + " ".join(f"{SHORT.get(ph, ph[:5]) + '+ms':>10}" for ph in PHASES)]
    ratios = []
    for sol, rounds in sorted(runs.items()):
        pairs = [r for r in rounds.values() if "on" in r and "off" in r]
        if not pairs:
            continue
        on = statistics.median(r["on"]["total"] for r in pairs) / 1e3
        off = statistics.median(r["off"]["total"] for r in pairs) / 1e3
        ratio = statistics.median(r["on"]["total"] / r["off"]["total"] for r in pairs
                                  if r["off"]["total"] > 0)
        ratios.append(ratio)
        deltas = [f"{statistics.median((r['on'].get(ph) or 0.0) - (r['off'].get(ph) or 0.0) for r in pairs):>+10.1f}"
                  for ph in PHASES]
        lines.append(f"{sol:<62} {len(pairs):>2} {on:>7.3f} {off:>7.3f} {ratio:>6.3f}  "
                     + " ".join(deltas))
    g = geomean(ratios)
    lines += ["", f"geometric mean of the ratios: {g:.3f} over {len(ratios)} solutions "
                  f"({100 * (g - 1):+.1f}%; the bar: at most +25% on the GPU problems); "
                  f"worst {max(ratios) if ratios else float('nan'):.3f}",
              "(phase columns: median over rounds of on minus off, ms: where the checks' time "
              "goes; timing and profiling do the same work either way, so their columns are "
              "noise)"]
    if bad:
        lines += ["", "not passing (excluded):"] + [f"  {b}" for b in bad]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0 if ratios and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
