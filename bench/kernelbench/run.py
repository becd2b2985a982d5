"""KernelBench side by side: `kgym selfcheck` (every defence on, the trusted
clock on, default trials) at concurrency 1 and 4, and KernelBench's own
same-process eval (bench/kernelbench/kb_eval.py), on the same problems,
each reference as its own candidate. Prints per problem both
self-speedups, and per run the pass count, the shares within +-5 % and
+-10 %, peak memory (judge measured, candidate claimed) and problems per
minute; and an A/B at concurrency 1 on six host-bound level-3 problems
with the environment --ab-env gives (default KGYM_PROFILER=torch: torch's
profiler in the profiler's own process, harness/kgym_harness/profproc.py,
against CUPTI's activity API in the candidate after its timing;
KGYM_LEAD_FIT=0: the safe lead against the fitted one, lead.py), each
problem's timing-stage seconds beside c1's. Results (the JSONL
of each run, their logs, report.txt) go to
$OUT/kernelbench-<time>/ ($OUT: bench/results when unset).

GPU (default): the problems named in GPU_PROBLEMS plus the first 20 of
level 2, about 6 minutes on one H200 (each phase capped, see CAPS, or
--cap PHASE=S: at its cap a phase starts no more problems, its tasks in
flight are stopped, and the report says how many it reached). Results
that were run again alone after an out of memory beside other tasks
(checks.rerun, docs/worker.md) are counted and named per phase. --dry:
the CPU, a few small level-1 problems, tiny trials (tested on the CPU:
tests/python/test_bench_kernelbench.py)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The problems that failed or timed off in the 250-problem selfcheck on one
# H200 (judge memory, reductions over 2^31 elements, level 3 fairness).
GPU_NAMED = [
    "level1/38_L1Norm_", "level1/39_L2Norm_", "level1/87_conv_pointwise_2D",
    "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__",
    "level1/7_Matmul_with_small_K_dimension_",
    "level3/34_VanillaRNNHidden", "level3/19_MobileNetV1", "level3/28_VisionTransformer",
    "level3/39_GRU", "level3/40_GRUHidden", "level3/20_MobileNetV2",
    "level3/41_GRUBidirectional", "level3/35_LSTM", "level3/36_LSTMHn", "level3/29_SwinMLP",
    "level3/37_LSTMCn", "level3/10_ResNet101", "level3/42_GRUBidirectionalHidden",
    "level3/38_LSTMBidirectional",
]
GPU_PROBLEMS = GPU_NAMED + [f"level2/{n}_*" for n in range(1, 21)]
DRY_PROBLEMS = ["level1/12_Matmul_with_diagonal_matrices_", "level1/40_LayerNorm"]
# The A/B (--ab-env, default AB_ENV), concurrency 1.
AB_ENV = ["KGYM_PROFILER=torch"]
AB_PROBLEMS = ["level3/34_VanillaRNNHidden", "level3/19_MobileNetV1", "level3/39_GRU",
               "level3/35_LSTM", "level3/28_VisionTransformer", "level3/10_ResNet101"]
# seconds per phase: selfcheck at concurrency 1, at 4, KernelBench's eval,
# the A/B
CAPS = {"c1": 140, "c4": 90, "kb": 55, "ab": 45}
DRY_FIELDS = ["--device", "cpu", "--backend", "cpu", "--num-correct-trials", "1",
              "--num-perf-trials", "3", "--num-warmup", "0", "--enable-profiling", "false"]


def resolve(kbroot: str, globs: list[str]) -> list[str]:
    """levelN/name of every problem file the globs match, in glob order."""
    import fnmatch
    out = []
    for g in globs:
        level, pat = g.split("/", 1)
        d = os.path.join(kbroot, "KernelBench", level)
        if not os.path.isdir(d):
            continue  # a tree without that level
        for f in sorted(os.listdir(d), key=lambda x: (len(x), x)):
            if f.endswith(".py") and fnmatch.fnmatch(f[:-3], pat):
                name = f"{level}/{f[:-3]}"
                if name not in out:
                    out.append(name)
    return out


def parse_caps(items: list[str], caps: dict) -> dict:
    """caps with each PHASE=SECONDS of items (--cap) put in; ValueError
    naming what is wrong."""
    out = dict(caps)
    for item in items:
        phase, eq, sec = item.partition("=")
        if phase not in CAPS or not eq:
            raise ValueError(f"--cap {item!r}: PHASE=SECONDS with PHASE one of "
                             f"{', '.join(CAPS)}")
        try:
            v = float(sec)
        except ValueError:
            v = -1.0
        if not 0 < v < 1e6:
            raise ValueError(f"--cap {item!r}: seconds must be a number above 0")
        out[phase] = v
    return out


def run_phase(name: str, cmd: list[str], cap: float, outdir: str,
              env: dict | None = None) -> tuple[float, bool]:
    """Runs cmd (in env, default this process's) with its output in
    outdir/<name>.log; SIGINT at cap (a selfcheck starts nothing more,
    stops its tasks in flight and keeps its finished lines), SIGKILL 15 s
    later. Seconds taken, and whether the cap stopped it."""
    t0 = time.monotonic()
    hit = False
    with open(os.path.join(outdir, f"{name}.log"), "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                             start_new_session=True, env=env)
        try:
            p.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            print(f"[{name}] cap of {cap:.0f} s reached: interrupted", flush=True)
            hit = True
            os.killpg(p.pid, signal.SIGINT)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    el = time.monotonic() - t0
    print(f"[{name}] exit {p.returncode} after {el:.0f} s", flush=True)
    return el, hit


def load(path: str) -> dict[str, dict]:
    rows = {}
    if os.path.exists(path):
        for line in open(path):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            rows[f"level{r['level']}/{r['problem']}"] = r
    return rows


def mib(x) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{x / 2**20:.0f}"


def peaks(r: dict) -> tuple:
    """(judge's device or host peak, candidate's claimed one), bytes."""
    m = r.get("memory") or {}
    j, c = m.get("judge") or {}, m.get("candidate") or {}
    pick = lambda d: d.get("device_peak_bytes") or d.get("host_peak_bytes")  # noqa: E731
    return pick(j), pick(c)


def shares(speeds: list[float]) -> str:
    n = len(speeds)
    if not n:
        return "no self-speedup"
    in5 = sum(0.95 <= s <= 1.05 for s in speeds)
    in10 = sum(0.90 <= s <= 1.10 for s in speeds)
    return (f"within 5%: {in5}/{n} ({100 * in5 / n:.1f}%), within 10%: {in10}/{n} "
            f"({100 * in10 / n:.1f}%), median {statistics.median(speeds):.3f}")


def reruns(rows: dict) -> list[str]:
    """The problems whose result was run again alone after an out of memory
    beside other tasks (the selfcheck line's rerun: checks.rerun)."""
    return sorted(p for p, r in rows.items() if r.get("rerun"))


# the judge's stages in pipeline order (harness judge.PIPELINE); timing
# holds the device alone, so its sum bounds a run at any concurrency
PHASES = ("setup", "compile", "gate", "correctness", "timing", "profiling",
          "timing_checks", "recheck")


def phase_seconds(rows: dict) -> str:
    """Each stage's seconds summed over rows (the selfcheck lines' phases),
    with the timing stage's share: where a run's time went."""
    tot = {k: 0.0 for k in PHASES}
    for r in rows.values():
        ph = r.get("phases") or {}
        for k in PHASES:
            if isinstance(ph.get(k), (int, float)):
                tot[k] += ph[k] / 1e3
    s = sum(tot.values())
    if not s:
        return "phases: none recorded"
    held = [((r.get("phases") or {}).get("lock_held") or {}).get("exclusive")
            for r in rows.values()]
    held = [h / 1e3 for h in held if isinstance(h, (int, float))]
    # the holds one task at a time at any concurrency: a bound on one device
    bound = (f"; device held alone {sum(held):.0f} s over {len(held)} problems: at most "
             f"{60 * len(held) / sum(held):.1f} per minute on one device" if held else "")
    return ("phases, s summed over problems: "
            + " ".join(f"{k} {v:.0f}" for k, v in tot.items() if v >= 0.5)
            + f"; timing stage {100 * tot['timing'] / s:.0f}% of {s:.0f}" + bound)


def timing_s(r: dict | None) -> str:
    """The timing stage's seconds of a selfcheck line ("" when none)."""
    t = ((r or {}).get("phases") or {}).get("timing")
    return f"{t / 1e3:.1f}" if isinstance(t, (int, float)) else ""


def lead_line(r: dict) -> str:
    """A selfcheck line's checks.timing_lead and trusted clock, short."""
    tl = r.get("timing_lead") or {}
    k, ref = tl.get("kernel") or {}, tl.get("reference") or {}
    tc = r.get("trusted_clock") or {}
    # the clock's first look, when only it disagreed and it looked again
    first = r.get("trusted_clock_retried") or {}
    again = (f" (first look {first.get('verdict')} wall {first.get('wall_speedup', '-')})"
             if first else "")
    return (f"lead {k.get('us', '-')}/{ref.get('us', '-')} fit {k.get('fit', '-')}/"
            f"{ref.get('fit', '-')} late {k.get('late', '-')}/{ref.get('late', '-')}"
            f"; clock {tc.get('verdict', '-')} wall {tc.get('wall_speedup', '-')}{again}")


def report(problems: list[str], runs: dict, elapsed: dict, f,
           capped: dict | None = None, ab_env: list[str] | None = None) -> None:
    """capped: phase -> its cap in seconds, for the phases stopped at it;
    ab_env: the A/B's environment."""
    capped = capped or {}
    ab_name = " ".join(ab_env or AB_ENV)
    cols = ["c1", "c4", "kb", "ab"]
    w = max(len(p) for p in problems) + 1
    f.write(f"# A/B: concurrency 1 with {ab_name}; timing s: the timing stage (device"
            " held alone)\n")
    f.write(f"{'problem':<{w}} {'kgym c1':>16} {'kgym c4':>16} {'kernelbench':>16}"
            f" {'c1 A/B':>16} {'judge MiB':>10} {'cand MiB':>9} {'c1 timing s':>12}"
            f" {'A/B timing s':>12}\n")
    for p in problems:
        cells = []
        for c in cols:
            r = runs[c].get(p)
            if r is None:
                cells.append("not run")
            elif c == "kb":
                s = r.get("speedup")
                cells.append(f"{s:.3f}" + ("" if r.get("correct") else " WRONG")
                             if s else ("error" if r.get("error") else "wrong"))
            else:
                s = r.get("speedup")
                cell = (f"{s:.3f}" if r.get("verdict") == "pass" and s
                        else str(r.get("verdict"))[:14])
                cells.append(cell + (" R" if r.get("rerun") else ""))
        j, c = peaks(runs["c1"].get(p) or runs["c4"].get(p) or {})
        if p not in runs["ab"]:
            cells[3] = ""
        f.write(f"{p:<{w}} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}"
                f" {mib(j):>10} {mib(c):>9} {timing_s(runs['c1'].get(p)):>12}"
                f" {timing_s(runs['ab'].get(p)):>12}\n")
    f.write("\n")
    for c in cols:
        rows = runs[c]
        el = elapsed.get(c)
        if el is None and not rows:
            continue  # a phase not run (--only)
        per_min = (f"; {len(rows)} problems in {el:.0f} s = {60 * len(rows) / el:.1f} per minute"
                   if el else "")
        notes = []
        if c == "kb":
            ok = [r for r in rows.values() if r.get("correct")]
            sp = [r["speedup"] for r in ok if r.get("speedup")]
            meth = {r.get("method") for r in rows.values()}
            f.write(f"kernelbench eval ({', '.join(sorted(m for m in meth if m))}): "
                    f"{len(ok)}/{len(rows)} correct; {shares(sp)}{per_min}")
        else:
            ok = [r for r in rows.values() if r.get("verdict") == "pass"]
            sp = [r["speedup"] for r in ok if r.get("speedup")]
            bad = {p: r.get("verdict") for p, r in rows.items() if r.get("verdict") != "pass"}
            clock = {}
            for r in ok:
                v = (r.get("trusted_clock") or {}).get("verdict")
                clock[v] = clock.get(v, 0) + 1
            jm = [peaks(r)[0] for r in rows.values() if peaks(r)[0]]
            what = (f"kgym selfcheck concurrency 1, {ab_name}" if c == "ab"
                    else f"kgym selfcheck concurrency {c[1]}")
            f.write(f"{what}: {len(ok)}/{len(rows)} pass; {shares(sp)};"
                    f" clock {clock}; judge peak max {mib(max(jm) if jm else None)} MiB"
                    f"{per_min}")
            if bad:
                notes.append(f"not pass: {bad}")
            notes.append(phase_seconds(rows))
            again = reruns(rows)
            notes.append(f"rerun alone after an out of memory beside others (R): {len(again)}"
                         + (f" ({', '.join(again)})" if again else ""))
        if c in capped:
            notes.append(f"capped at {capped[c]:.0f} s: reached {len(rows)} of {len(problems)}"
                         " problems (the rest not started or stopped in flight)")
        for n in notes:
            f.write(f"\n  {n}")
        f.write("\n")
    leads = [(c, p, r) for c in ("c1", "c4", "ab") for p, r in runs[c].items()
             if (r.get("timing_lead") or r.get("trusted_clock"))]
    if leads:
        f.write("\nper problem: the lead at the phase's end (us, kernel/reference), its fit"
                " state and late calls (lead.Lead); the trusted clock's verdict and wall"
                " speedup\n")
        for c, p, r in leads:
            f.write(f"  {c:<3} {p:<{w}} {lead_line(r)}\n")


def smallest_first(problems: list[str], out: str) -> list[str]:
    """problems in the order KernelBench's eval runs them: by the footprint
    kgym's judge measured (memory.footprint_bytes of this run's selfcheck
    lines), smallest first, those not measured after them. Its eval draws
    each input on the host and copies it over (a 16 GiB input: a minute),
    so under its cap the few huge problems come last and cut the fewest."""
    foot: dict[str, float] = {}
    for c in ("c1", "c4"):
        for p, r in load(os.path.join(out, f"selfcheck_{c}.jsonl")).items():
            b = (r.get("memory") or {}).get("footprint_bytes")
            if isinstance(b, (int, float)):
                foot[p] = max(foot.get(p, 0.0), float(b))
    known = sorted((p for p in problems if p in foot), key=lambda p: foot[p])
    return known + [p for p in problems if p not in foot]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry", action="store_true", help="the CPU, a few small problems, tiny trials")
    ap.add_argument("--kb", default=os.path.join(ROOT, ".device", "kernelbench"),
                    help="KernelBench's checkout (src/ and KernelBench/level*)")
    ap.add_argument("--problems", help="comma-separated levelN/glob (default: the set above)")
    ap.add_argument("--only", default="c1,c4,ab,kb", help="phases to run (c1, c4, ab, kb)")
    ap.add_argument("--cap", action="append", default=[], metavar="PHASE=S",
                    help="seconds a phase may take (e.g. c4=330; default CAPS, x3 with "
                    "--dry); at its cap it starts no more problems and the report says "
                    "how many it reached")
    ap.add_argument("--ab-env", action="append", default=[], metavar="VAR=VALUE",
                    help=f"the A/B's environment (default {' '.join(AB_ENV)})")
    ap.add_argument("--ab-problems", help="comma-separated levelN/glob: the A/B's problems "
                    "(default: those of AB_PROBLEMS in the selection)")
    ap.add_argument("--from", dest="from_dir", metavar="DIR",
                    help="an earlier run's folder: its selfcheck lines are copied in and "
                    "reported beside this run's phases (and order KernelBench's eval)")
    a = ap.parse_args()
    try:
        given = parse_caps(a.cap, {})
    except ValueError as e:
        ap.error(str(e))
    ab_env = a.ab_env or AB_ENV
    for item in ab_env:
        if "=" not in item or not item.split("=", 1)[0]:
            ap.error(f"--ab-env {item!r}: VAR=VALUE")
    out = os.path.join(os.environ.get("OUT") or os.path.join(ROOT, "bench", "results"),
                       time.strftime("kernelbench-%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    kgym = os.environ.get("KGYM_BIN") or shutil.which("kgym") or os.path.join(ROOT, "build", "kgym")
    globs = a.problems.split(",") if a.problems else (DRY_PROBLEMS if a.dry else GPU_PROBLEMS)
    problems = resolve(a.kb, globs)
    if not problems:
        print(f"no problem of {a.kb} matches {globs}", file=sys.stderr)
        return 2
    plist = os.path.join(out, "problems.txt")
    with open(plist, "w") as f:
        f.write("\n".join(problems) + "\n")
    print(f"{len(problems)} problems; results in {out}", flush=True)
    if a.from_dir:
        for c in ("c1", "c4", "ab"):
            src = os.path.join(a.from_dir, f"selfcheck_{c}.jsonl")
            if c not in a.only.split(",") and os.path.exists(src):
                shutil.copy(src, out)
    caps = {k: v * (3 if a.dry else 1) for k, v in CAPS.items()}
    caps.update(given)  # as given, --dry or not
    elapsed: dict[str, float] = {}
    capped: dict[str, float] = {}  # phase -> its cap, for those it stopped
    phases = a.only.split(",")
    for c in ("c1", "c4"):
        if c not in phases:
            continue
        jl = os.path.join(out, f"selfcheck_{c}.jsonl")
        if os.path.exists(jl):
            os.unlink(jl)
        cmd = [kgym, "selfcheck", "--kernelbench", a.kb, "--out", jl, "--concurrency", c[1],
               "--no-progress"] + (DRY_FIELDS if a.dry else [])
        first = os.path.join(out, "selfcheck_c1.jsonl")
        if c == "c4" and os.path.exists(first):
            cmd += ["--footprints", first]  # admission by memory from the first task on
        # the named problems first (selfcheck runs a selection in level
        # order: level 3 would come last and be cut by the cap), then the
        # rest of the selection (--resume skips what is done)
        named = [p for p in problems if p in resolve(a.kb, GPU_NAMED)]
        el = 0.0
        if named and len(named) < len(problems):
            el = run_phase(f"selfcheck_{c}_named", cmd + ["--problems", ",".join(named)],
                           caps[c] * 0.6, out)[0]
        rest, hit = run_phase(f"selfcheck_{c}", cmd + ["--problems", ",".join(problems)]
                              + (["--resume"] if os.path.exists(jl) else []),
                              max(10.0, caps[c] - el), out)
        elapsed[c] = el + rest
        if hit:
            capped[c] = caps[c]
    if "ab" in phases:
        ab = (resolve(a.kb, a.ab_problems.split(",")) if a.ab_problems
              else [p for p in resolve(a.kb, AB_PROBLEMS) if p in problems] or problems[:2])
        jl = os.path.join(out, "selfcheck_ab.jsonl")
        if os.path.exists(jl):
            os.unlink(jl)
        cmd = [kgym, "selfcheck", "--kernelbench", a.kb, "--problems", ",".join(ab),
               "--out", jl, "--concurrency", "1", "--no-progress"]
        env = dict(os.environ, **dict(item.split("=", 1) for item in ab_env))
        elapsed["ab"], hit = run_phase("selfcheck_ab", cmd + (DRY_FIELDS if a.dry else []),
                                       caps["ab"], out, env)
        if hit:
            capped["ab"] = caps["ab"]
    if "kb" in phases:
        jl = os.path.join(out, "kernelbench_eval.jsonl")
        if os.path.exists(jl):
            os.unlink(jl)
        kb_list = os.path.join(out, "kb_problems.txt")
        with open(kb_list, "w") as f:
            f.write("\n".join(smallest_first(problems, out)) + "\n")
        cmd = [sys.executable, os.path.join(ROOT, "bench", "kernelbench", "kb_eval.py"),
               "--kb", a.kb, "--problems", kb_list, "--out", jl]
        cmd += ["--cpu", "--trials", "3", "--warmup", "1"] if a.dry else []
        elapsed["kb"], hit = run_phase("kernelbench_eval", cmd, caps["kb"], out)
        if hit:
            capped["kb"] = caps["kb"]
    runs = {"c1": load(os.path.join(out, "selfcheck_c1.jsonl")),
            "c4": load(os.path.join(out, "selfcheck_c4.jsonl")),
            "kb": load(os.path.join(out, "kernelbench_eval.jsonl")),
            "ab": load(os.path.join(out, "selfcheck_ab.jsonl"))}
    with open(os.path.join(out, "report.txt"), "w") as f:
        report(problems, runs, elapsed, f, capped, ab_env)
    sys.stdout.write(open(os.path.join(out, "report.txt")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
