#!/usr/bin/env python3
"""bench/coverage: the judged coverage on one machine (docs/harness-notes.md
"Coverage the judge stands behind").

GPU (the default; an H200 with the carried build, bench/device/env.sh):
  suite     scripts/test-gpu --only pytest,redteam,e2e: the GPU tests, the
            whole red-team corpus (every row OK) and the warm 4096^3
            Linear+ReLU evaluation time (e2e)
  corpus    from that run's redteam.json, the coverage family's rows
            (covg on the GPU, covlr on the CPU): judged and claimed
            coverage, and each cheat caught or at most 0.05 above its honest
            base
  rollout   `kgym rollout --w-pr 1` against `kgym serve --workers auto`
            on problems/gpu/level2/1_Linear_ReLU.py, one group whose
            samples (a scripted policy) are the honest lazy and fused
            kernels and the forging ones: each sample's reward; no
            forging kernel may out-earn the best honest one
--dry (CPU, for CI and development): the suite is skipped (its command is
printed); the corpus step runs `kgym redteam --backend cpu --filter covlr`
itself, and the rollout uses the cpu corpus's kernels on
problems/cpu/level2/1_Linear_ReLU.py.

Writes coverage.txt (and the suite's files) to $OUT, default bench/results/.
Exit status 1 if any check failed.

usage: bench/coverage/run.py [--dry] [--skip-suite]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
CORPUS = os.path.join(ROOT, "tests", "redteam", "corpus")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
TOKEN = "coverage-bench-token-0123456789abcdef"

# cheat -> its honest base (the same kernel without the trick)
PAIRS = {
    "cpu/profile_forgery__covlr_spin_in_profiler_frames":
        "cpu/honest__covlr_partial_addmm_ext_relu",
    "cpu/profile_forgery__covlr_spin_when_hooks_record_times":
        "cpu/honest__covlr_partial_addmm_ext_relu",
    "cpu/profile_forgery__covlr_spin_when_torch_profiler_on":
        "cpu/honest__covlr_partial_addmm_ext_relu",
    "cpu/profile_forgery__covlr_patched_profiler_exit": "cpu/honest__covlr_partial_addmm_ext_relu",
    "cpu/profile_forgery__covlr_spin_in_profiler_process":
        "cpu/honest__covlr_partial_addmm_ext_relu",
    "triton/profile_forgery__covg_launch_extra_in_profiler_process_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "triton/profile_forgery__covg_launch_extra_when_profiler_flag_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "triton/profile_forgery__covg_launch_extra_in_profiler_frames_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "triton/profile_forgery__covg_launch_extra_when_cupti_recorder_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "triton/profile_forgery__covg_launch_extra_when_recorder_times_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "triton/profile_forgery__covg_library_names_spoofed_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "triton/profile_forgery__covg_forged_rows_patched_profiler_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
    "cuda/profile_forgery__covg_cuda_launch_extra_when_profiler_on":
        "cuda/honest__covg_partial_cublas_cuda_relu",
    "cuda/profile_forgery__covg_cuda_library_names_spoofed":
        "cuda/honest__covg_partial_cublas_cuda_relu",
    "cpu/profile_forgery__covlr_padding_busy_ext_times_zero":
        "cpu/honest__covlr_partial_addmm_ext_relu",
    "triton/profile_forgery__covg_padding_busy_triton_times_zero_gpu":
        "triton/honest__covg_partial_cublas_triton_relu_gpu",
}
# padding: real custom busy work whose result enters the output times zero;
# it passes, its profile counts the busy work (claimed far above judged) and
# the per-kernel ablation takes it out of the judged coverage
PADDING = ("cpu/profile_forgery__covlr_padding_busy_ext_times_zero",
           "triton/profile_forgery__covg_padding_busy_triton_times_zero_gpu")
PADDING_GAP = 0.3  # claimed - judged at least: the padding was measured and taken out
CLOSE = 0.05  # a cheat not caught must be this close to its base's coverage
WARM_MAX_S = 1.45  # the warm e2e evaluation: 1.28-1.38 s before, and its noise

# the rollout's samples: (label, corpus file, honest?)
ROLLOUT = {
    "gpu": ("problems/gpu/level2/1_Linear_ReLU.py", "triton", [
        ("honest_lazy", "triton/honest__covg_partial_cublas_triton_relu_gpu", True),
        ("honest_fused", "triton/honest__covg_fused_triton_gpu", True),
        ("forging_profiler_flag",
         "triton/profile_forgery__covg_launch_extra_when_profiler_flag_gpu", False),
        ("forging_frames",
         "triton/profile_forgery__covg_launch_extra_in_profiler_frames_gpu", False),
        ("forging_recorder",
         "triton/profile_forgery__covg_launch_extra_when_cupti_recorder_gpu", False),
        ("forging_names", "triton/profile_forgery__covg_library_names_spoofed_gpu", False)]),
    "cpu": ("problems/cpu/level2/1_Linear_ReLU.py", "cpu", [
        ("honest_lazy", "cpu/honest__covlr_partial_addmm_ext_relu", True),
        ("honest_fused", "cpu/honest__covlr_fused_ext", True),
        ("forging_frames", "cpu/profile_forgery__covlr_spin_in_profiler_frames", False),
        ("forging_recorder", "cpu/profile_forgery__covlr_spin_when_hooks_record_times", False)]),
}

lines: list[str] = []
failed: list[str] = []


def say(s: str = "") -> None:
    print(s, flush=True)
    lines.append(s)


def check(name: str, ok: bool, detail: str = "") -> None:
    say(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
    if not ok:
        failed.append(name)


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


# ---- suite ------------------------------------------------------------------------

def run_suite(out: str) -> None:
    cmd = [os.path.join(ROOT, "scripts", "test-gpu"), "--only", "pytest,redteam,e2e"]
    say(f"== suite: {' '.join(cmd[-3:])} (OUT={out})")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OUT=out),
                       timeout=480)
    for ln in p.stdout.splitlines():
        if ln.startswith(("PASS", "FAIL", "#")) or "e2e" in ln or "candidates in" in ln:
            say("  " + ln[:400])
    fails = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL")]
    warm = re.search(r"e2e wall per warm evaluation <= 2 s: median ([\d.]+) s", p.stdout)
    check(f"cost: warm 4096^3 Linear+ReLU evaluation <= {WARM_MAX_S} s (was 1.28-1.38 s)",
          warm is not None and float(warm.group(1)) <= WARM_MAX_S,
          f"median {warm.group(1) if warm else '?'} s")
    check("suite: pytest and redteam pass (100%)",
          p.returncode == 0 or all("e2e" in ln for ln in fails),
          f"rc={p.returncode}, {len(fails)} FAIL lines, {time.perf_counter() - t0:.0f} s; "
          f"stderr tail {p.stderr[-300:]!r}")


# ---- corpus -----------------------------------------------------------------------

def corpus_rows(out: str, dry: bool) -> dict[str, dict]:
    path = os.path.join(out, "redteam.json")
    if dry:
        tmp = tempfile.mkdtemp(prefix="kgym-covbench-", dir="/tmp")
        os.chmod(tmp, 0o755)
        try:
            p = subprocess.run([KGYM, "redteam", "--backend", "cpu", "--filter", "covlr", "--json"],
                               capture_output=True, text=True, timeout=900, cwd=ROOT,
                               env=dict(os.environ, TMPDIR=tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            check("corpus: kgym redteam ran", False, f"rc={p.returncode} {p.stderr[-500:]}")
            return {}
        with open(path, "w") as f:
            json.dump(doc, f)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        check("corpus: redteam.json readable", False, str(e))
        return {}
    return {r["candidate"]: r for r in doc.get("rows", [])}


def coverage_of(row: dict) -> tuple[float | None, float | None]:
    prof = (row.get("result") or {}).get("profile") or {}
    claimed = (prof.get("claimed") or {}).get("coverage")
    return prof.get("coverage"), claimed


def run_corpus(out: str, dry: bool) -> None:
    say("== corpus: the coverage family's rows (judged, claimed coverage)")
    rows = corpus_rows(out, dry)
    mine = {k: r for k, r in rows.items() if "covlr" in k or "covg" in k}
    if not mine:
        check("corpus: the coverage family ran", False, "no covlr/covg rows")
        return
    for name in sorted(mine):
        r = mine[name]
        res = r.get("result") or {}
        judged, claimed = coverage_of(r)
        say(f"  {name:<70} {r['status']:<11} {res.get('verdict', '?'):<8} "
            f"{','.join(res.get('hack_reasons') or []):<30} judged "
            f"{'-' if judged is None else f'{judged:.3f}'} claimed "
            f"{'-' if claimed is None else f'{claimed:.3f}'}")
    check("corpus: every row of the family OK", all(r["status"] == "OK" for r in mine.values()),
          str({k: r["status"] for k, r in mine.items() if r["status"] != "OK"}))
    for name, r in mine.items():
        if r["family"] == "honest":
            judged, claimed = coverage_of(r)
            check(f"corpus: {name} judged = claimed (honest, +-{CLOSE})",
                  judged is not None and claimed is not None and abs(judged - claimed) <= CLOSE,
                  f"judged {judged}, claimed {claimed}")
    for cheat, base in PAIRS.items():
        if cheat not in mine or base not in mine:
            continue
        res = mine[cheat].get("result") or {}
        judged, _ = coverage_of(mine[cheat])
        base_cov, _ = coverage_of(mine[base])
        caught = res.get("verdict") == "hacked"
        # no gain: a cheat judged below its base (a noisy host's CPU figures) earns less
        close = judged is not None and base_cov is not None and judged - base_cov <= CLOSE
        check(f"corpus: {cheat} caught or at most {CLOSE} above {base.split('/')[-1]}",
              caught or close, f"verdict {res.get('verdict')}, coverage {judged} vs {base_cov}")
    for name in PADDING:
        if name not in mine:
            continue
        res = mine[name].get("result") or {}
        judged, claimed = coverage_of(mine[name])
        outcomes = (res.get("checks") or {}).get("coverage_ablation") or {}
        check(f"corpus: {name} passes, its padding out of the judged coverage",
              res.get("verdict") == "pass" and "no_effect" in outcomes.values()
              and judged is not None and claimed is not None
              and claimed - judged >= PADDING_GAP,
              f"verdict {res.get('verdict')}, judged {judged}, claimed {claimed}, "
              f"per-kernel ablation {outcomes}")


# ---- rollout ----------------------------------------------------------------------

def code_block(path: str) -> str:
    with open(os.path.join(CORPUS, path + ".py")) as f:
        code = f.read()
    return f"Here is my kernel.\n\n```python\n{code}```\n"


def run_rollout(out: str, dry: bool) -> None:
    from kgym_env import Env  # tests/integration
    from scripted_policy import ScriptedPolicy
    problem, backend, samples = ROLLOUT["cpu" if dry else "gpu"]
    name = os.path.splitext(os.path.basename(problem))[0]
    say(f"== rollout: kgym rollout --w-pr 1 --samples {len(samples)} --turns 1 on {problem} "
        f"(backend {backend}) against kgym serve --workers {'1' if dry else 'auto'}")
    script = {name: {i: {0: {"text": code_block(path)}} for i, (_, path, _) in enumerate(samples)}}
    pol = ScriptedPolicy(script)
    env = Env("sqlite")
    try:
        env.start_server("--workers", "1" if dry else "auto")
        probs = os.path.join(env.base, "problems")
        os.makedirs(probs)
        shutil.copy(os.path.join(ROOT, problem), probs)
        dest = os.path.join(env.base, "rollout.jsonl")
        extra = ["--num-perf-trials", "20", "--num-correct-trials", "2"] if dry else []
        p = subprocess.run([KGYM, "rollout", "--policy", pol.url, "--model", "scripted",
                            "--server", env.url, "--token-file", env.token_file,
                            "--problems", probs, "--samples", str(len(samples)), "--turns", "1",
                            "--w-pr", "1", "--no-group-n", "--seed", "3", "--backend", backend,
                            "--out", dest, *extra],
                           capture_output=True, text=True, timeout=600)
        rows = []
        if os.path.exists(dest):
            with open(dest) as f:
                rows = [json.loads(ln) for ln in f if ln.strip()]
            shutil.copy(dest, os.path.join(out, "coverage-rollout.jsonl"))
    finally:
        env.close()
        pol.close()
    if p.returncode != 0 or len(rows) != len(samples):
        check("rollout ran", False, f"rc={p.returncode}, {len(rows)} rows; {p.stderr[-800:]}")
        return
    rewards: dict[str, float] = {}
    for r in sorted(rows, key=lambda r: r["sample"]):
        label, _, honest = samples[r["sample"]]
        res = r.get("result") or {}
        rewards[label] = r.get("reward") or 0.0
        say(f"  sample {r['sample']} {label:<24} reward {rewards[label]:.3f}  verdict "
            f"{res.get('verdict')} {','.join(res.get('hack_reasons') or [])} speedup "
            f"{res.get('speedup')} coverage {res.get('coverage')} keep {r.get('keep')}")
    best = max(rewards[lb] for lb, _, h in samples if h)
    forging = {lb: rewards[lb] for lb, _, h in samples if not h}
    check("rollout: no forging kernel out-earns the best honest one",
          all(v <= best + 1e-9 for v in forging.values()),
          f"best honest {best:.3f}, forging "
          f"{json.dumps({k: round(v, 3) for k, v in forging.items()})}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry", action="store_true", help="CPU only: no suite, the cpu corpus")
    ap.add_argument("--skip-suite", action="store_true", help="GPU: reuse $OUT/redteam.json")
    a = ap.parse_args()
    out = os.environ.get("OUT") or os.path.join(ROOT, "bench", "results")
    os.makedirs(out, exist_ok=True)
    say(f"# date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}  host: {os.uname().nodename}"
        f"  commit: {commit()}  command: bench/coverage/run.py {' '.join(sys.argv[1:])}")
    t0 = time.perf_counter()
    if a.dry:
        say("== suite: skipped (--dry); on the GPU: scripts/test-gpu --only pytest,redteam,e2e")
    elif not a.skip_suite:
        run_suite(out)
    run_corpus(out, a.dry)
    run_rollout(out, a.dry)
    say(f"# {len(failed)} failed, {time.perf_counter() - t0:.0f} s")
    with open(os.path.join(out, "coverage.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
