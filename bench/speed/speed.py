#!/usr/bin/env python3
"""kgym's speed, two builds side by side: cold, warm, a group of 16
through the service (two setups) and the rollout benchmark.

    bench/speed/speed.py --prev PREV --cur CUR [--dry] [--out DIR]

PREV and CUR are each a kgym tree (DIR/build/kgym and DIR/harness: that
tree's own harness is used) or a build dir (DIR/kgym: the harness of this
tree is used, and the line says so). Each measurement runs for PREV, then
CUR, before the next one begins, so drift on the machine falls on both;
each side keeps its own TMPDIR (its caches) for all its measurements.

On the GPU (default): the honest 4096^3 Linear+ReLU (problems/gpu,
Triton; 5 correctness and 100 timed trials, profiling and hack checks on):
 cold    one `kgym eval` of one evaluation, a fresh process and a fresh
         TMPDIR (nothing compiled): its wall and the result's phases
 warm    six evaluations of it in one `kgym eval`: the 2nd to 6th each
 group   16 distinct candidates (bench/variants.py) with one `kgym submit
         --wait` to `kgym serve --workers auto` (the build's defaults), and
         to `kgym serve` plus `kgym worker --concurrency 4`; the wall of
         the submit alone (the workers registered before); then 16 other
         variants on the same service ("again": the next RL step's group,
         workers warm, nothing cached); --group-setups picks the setups
         (workers-cN: serve --worker-concurrency N)
 rollout bench/rollout/run.py, 16 x 3 x --rollout-problems (default 1)
 faults  the fault kinds back to back in one kgym eval (segfault, spin,
         host and device memory bombs, fork bomb, kill-parent, daemon,
         connect-out; 15 s timeout), then two honest GELU tasks: they pass;
         --dry: the quick kinds only
--dry: the same on the CPU with problems/cpu's Linear+ReLU (backend cpu,
1 correctness and 3 timed trials, no profiling) and a 2 x 2 x 1 rollout:
the script's own test, no figure claimed.

Prints one line per measurement with PREV, CUR and CUR/PREV, writes them
to OUT/speed-<stamp>.json and the lines to OUT/speed-<stamp>.txt (OUT:
--out, else $OUT, else bench/results).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from variants import distinct  # noqa: E402

LINES: list[str] = []
LOG: list = []  # the .txt, written line by line (a run cut short keeps its lines)


def say(s: str = "") -> None:
    print(s, flush=True)
    LINES.append(s)
    if LOG:
        LOG[0].write(s + "\n")
        LOG[0].flush()


class Side:
    """One build: its kgym, its tree (KGYM_ROOT, the harness), its TMPDIR."""

    def __init__(self, name: str, path: str):
        path = os.path.abspath(path)
        if os.access(os.path.join(path, "build", "kgym"), os.X_OK):
            self.kgym, self.root, own = os.path.join(path, "build", "kgym"), path, True
        elif os.access(os.path.join(path, "kgym"), os.X_OK):
            self.kgym, self.root, own = os.path.join(path, "kgym"), ROOT, False
        else:
            raise SystemExit(f"{name}: {path} has no build/kgym nor kgym")
        if not os.path.isdir(os.path.join(self.root, "harness", "kgym_harness")):
            raise SystemExit(f"{name}: no harness/kgym_harness under {self.root}")
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix=f"kgym-speed-{name}-")
        os.chmod(self.tmp, 0o755)
        self.desc = (f"{name}: {self.kgym} (" + ("its own tree's harness" if own else
                                                 f"harness of {self.root}") + ")")

    def env(self, tmp: str | None = None) -> dict:
        env = dict(os.environ, KGYM_ROOT=self.root, KGYM_BIN=self.kgym,
                   TMPDIR=tmp or self.tmp)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(self.root, "harness"),
                                             os.path.join(self.root, "python")])
        return env

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def results_of(stdout: str) -> list[dict]:
    return [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]


def task_args(cfg: dict) -> list[str]:
    return ["--backend", cfg["backend"], "--num-correct-trials", str(cfg["correct"]),
            "--num-perf-trials", str(cfg["perf"]), "--enable-profiling",
            "true" if cfg["profiling"] else "false", "--timeout", "300"]


def phases(r: dict) -> str:
    t = r.get("timings") or {}
    keys = ("setup", "compile", "correctness", "profiling", "timing", "total")
    return " ".join(f"{k} {t[k] / 1e3:.2f}" for k in keys if isinstance(t.get(k), (int, float)))


def kgym_eval(side: Side, cfg: dict, cands: list[str], tmp: str | None = None) -> tuple[list, float]:
    cmd = [side.kgym, "eval", "--ref", cfg["ref"], "--json", "--device", cfg["device"],
           *task_args(cfg)]
    for c in cands:
        cmd += ["--cand", c]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=side.env(tmp), timeout=600)
    wall = time.perf_counter() - t0
    res = results_of(p.stdout)
    if len(res) != len(cands):
        say(f"  {side.name}: kgym eval gave {len(res)} results of {len(cands)}; "
            f"stderr: {p.stderr[-1500:]}")
    return res, wall


def verdicts(res: list[dict]) -> str:
    out: dict[str, int] = {}
    for r in res:
        v = r.get("verdict") or (r.get("result") or {}).get("verdict") or r.get("status")
        out[v] = out.get(v, 0) + 1
    return ",".join(f"{k}:{v}" for k, v in sorted(out.items()))


def why_not_pass(res: list[dict]) -> list[str]:
    """For each result that did not pass: its verdict and why (hack reasons
    or the error's message), short."""
    out = []
    for r in res:
        r = r.get("result") or r
        v = r.get("verdict") or r.get("status")
        if v != "pass":
            why = r.get("hack_reasons") or r.get("error_message") or ""
            checks = r.get("checks") or {}
            clock = (checks.get("trusted_clock") or {}).get("verdict")
            out.append(f"{v}: {why} (trusted clock {clock}, unexplained "
                       f"{checks.get('timing_unexplained_ms')} ms; "
                       f"{(r.get('feedback') or '')[:200]})"[:500])
    return out


def cold(side: Side, cfg: dict) -> dict:
    fresh = tempfile.mkdtemp(prefix=f"kgym-speed-cold-{side.name}-")
    os.chmod(fresh, 0o755)
    try:
        res, wall = kgym_eval(side, cfg, [cfg["sol"]], tmp=fresh)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    r = res[0] if res else {}
    t = r.get("timings") or {}
    return {"wall_s": round(wall, 3), "task_s": round((t.get("total") or 0) / 1e3, 3),
            "verdicts": verdicts(res), "phases": phases(r), "start": start_split(t, wall),
            "detail": cold_detail(t)}


def ms_items(d: dict) -> str:
    """A dict of millisecond figures as "name ms name ms ..." (numbers only)."""
    return " ".join(f"{k} {v:.0f}" for k, v in d.items() if isinstance(v, (int, float)))


def cold_detail(t: dict) -> str:
    """Where a cold task's setup and correctness went (ms): the candidate's
    load (timings.load_detail, its claim), the trials (timings.trials_detail,
    the judge's clock; cand_* are the candidate's claims, and its forwards
    hold its first call's compile) and the children's spawn."""
    parts = []
    for key in ("load_detail", "trials_detail"):
        d = t.get(key)
        if isinstance(d, dict):
            parts.append(key.split("_")[0] + " " + ms_items(d))
    if isinstance(t.get("spawn"), (int, float)):
        parts.append(f"spawn {t['spawn']:.0f}")
    return "; ".join(parts) or "(no timings.load_detail or trials_detail)"


def start_split(t: dict, wall: float) -> str:
    """A cold wall beyond its task: the engine's start (timings.engine_start,
    from kg_engine_new: the zygote ready, its imports within it, the task's
    start) and what is left after the task (the process's exit)."""
    st = t.get("engine_start")
    if not isinstance(st, dict):
        return "(no timings.engine_start)"
    parts = [f"{k} {st[k] / 1e3:.2f}" for k in ("zygote_ready", "import_ms", "cpp_extension_ms",
                                                 "task_start") if isinstance(st.get(k), (int, float))]
    begun = st.get("task_start")
    if isinstance(begun, (int, float)) and isinstance(t.get("total"), (int, float)):
        parts.append(f"after the task {wall - (begun + t['total']) / 1e3:.2f}")
    return " ".join(parts)


def warm(side: Side, cfg: dict) -> dict:
    res, wall = kgym_eval(side, cfg, [cfg["sol"]] * 6)
    each = [((r.get("timings") or {}).get("total") or 0) / 1e3 for r in res]
    later = each[1:] or [0.0]
    return {"wall_s": round(wall, 3), "first_s": round(each[0] if each else 0, 3),
            "median_later_s": round(statistics.median(later), 3),
            "later_s": [round(x, 3) for x in later], "verdicts": verdicts(res),
            "phases_last": phases(res[-1]) if res else "",
            "timing_last": timing_split(res[-1]) if res else ""}


def timing_split(r: dict) -> str:
    """Where the timing phase went (timings.timing_detail, ms), and the
    calls' own time: n timed calls a side at the medians."""
    t = r.get("timings") or {}
    d = t.get("timing_detail")
    if not isinstance(d, dict):
        return "(no timings.timing_detail)"
    keys = ("reference_timer", "prewarm", "exclusive_wait", "blocks", "blocks_reference",
            "blocks_kernel", "clock", "after_first")
    out = [f"{k} {d[k]:.0f}" for k in keys if isinstance(d.get(k), (int, float))]
    n = ((r.get("runtime_stats") or {}).get("kernel") or {}).get("n") or 0
    ref, ker = r.get("reference_runtime"), r.get("kernel_runtime")
    if n and isinstance(ref, (int, float)) and isinstance(ker, (int, float)):
        out.append(f"calls {n} x ({ref:.3f} + {ker:.3f}) = {n * (ref + ker):.0f}")
    # each side's timing commands, summed (checks.timing_host_ms): wall,
    # input draws, warm-up, sync calibration, and per timed call the launch
    # (flush, lead, the call), the wait for the device and the clock reads
    host = (r.get("checks") or {}).get("timing_host_ms")
    if isinstance(host, dict):
        for side in ("kernel", "reference"):
            parts = host.get(side)
            if isinstance(parts, dict):
                out.append(f"| {side} " + ms_items(parts))
    return f"timing {t.get('timing', 0):.0f} ms: " + " ".join(out)


FAULTS = ["segfault", "infinite_loop", "alloc_unbounded", "fork_bomb", "kill_parent", "daemon",
          "network"]
GPU_BOMB = (  # the device's memory taken until the allocator refuses, then held
    "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        hog = []\n        try:\n"
    "            while True:\n"
    "                hog.append(torch.empty(1 << 30, dtype=torch.uint8, device=x.device))\n"
    "        except RuntimeError as e:\n"
    "            raise RuntimeError(f'GPU_BOMB took {len(hog)} GiB: {str(e)[:80]}')\n")


def faults(side: Side, cfg: dict, tmp: str) -> dict:
    """The fault kinds back to back in one kgym eval (one engine), on the
    GPU a device-memory bomb among them, then two honest tasks, which must
    pass (tests/faults/test_fault_sequence.py is the CPU's)."""
    fdir = os.path.join(ROOT, "tests", "faults", "candidates")
    # dry: the quick kinds only (the CPU's whole sequence is the test's)
    kinds = [f for f in FAULTS if not cfg["dry"] or f not in
             ("infinite_loop", "alloc_unbounded", "fork_bomb")]
    cands = [os.path.join(fdir, f + ".py") for f in kinds]
    if cfg["dry"]:
        ref, honest, backend = (os.path.join(ROOT, "tests", "faults", "ref.py"),
                                os.path.join(fdir, "honest.py"), "cpu")
    else:
        bomb = os.path.join(tmp, "gpu_bomb.py")
        with open(bomb, "w") as f:
            f.write(GPU_BOMB)
        os.chmod(bomb, 0o644)
        cands.insert(3, bomb)
        ref = os.path.join(ROOT, "problems", "gpu", "level1", "1_GELU.py")
        honest, backend = os.path.join(ROOT, "problems", "gpu", "level1", "solutions",
                                       "1_GELU.triton.py"), "triton"
    cands += [honest, honest]
    cmd = [side.kgym, "eval", "--ref", ref, "--json", "--device", cfg["device"], "--backend",
           backend, "--num-correct-trials", "2", "--num-perf-trials", "10", "--timeout", "15"]
    for c in cands:
        cmd += ["--cand", c]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=side.env(), timeout=600)
    wall = time.perf_counter() - t0
    res = results_of(p.stdout)
    rows = [f"{r.get('verdict')}: {(r.get('error_message') or '')[:110]}" for r in res]
    # kgym eval prints in completion order; the honest ones are the passes
    # or, failing, the results that name no fault
    honest_ok = sum(r.get("verdict") == "pass" for r in res)
    return {"wall_s": round(wall, 1), "results": len(res), "of": len(cands),
            "honest_passed": honest_ok, "rows": rows}


def sixteen(sol: str, stamp: str) -> str:
    """A folder of 16 distinct variants of the solution sol (distinct code:
    no result cache answers them)."""
    cands = tempfile.mkdtemp(prefix="kgym-speed-cands-")
    os.chmod(cands, 0o755)
    src = open(sol).read()
    for i in range(16):
        path = os.path.join(cands, f"c{i:02d}.py")
        try:
            code = distinct(src, f"speed-{stamp}-{secrets.token_hex(3)}-{i}")
        except ValueError:  # a cpu solution: no Triton kernel
            code = f"# kgym variant speed-{secrets.token_hex(3)}-{i}\n{src}"
        with open(path, "w") as f:
            f.write(code)
        os.chmod(path, 0o644)
    return cands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_workers(side: Side, url: str, token: str, proc, log: str, timeout: float = 180) -> None:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from kgym.client import Client
    c = Client(url, token_file=token, timeout=10)
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"kgym serve exited {proc.returncode}: "
                                   f"{open(log).read()[-1500:]}")
            try:
                if c.request("GET", "/workers/status")[1].get("alive", 0) >= 1:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.2)
        raise RuntimeError(f"no worker registered in {timeout} s: {open(log).read()[-1500:]}")
    finally:
        c.close()


def group(side: Side, cfg: dict, setup: str, cands_dirs: list[str]) -> dict:
    """16 distinct candidates, one kgym submit --wait, on a service just
    started; then, on the same service, 16 others (cands_dirs[1]: an RL
    step after the first, its workers warm, no result cached). setup:
    'workers-auto' (kgym serve --workers auto), 'workers-cN' (serve
    --worker-concurrency N) or 'worker-c4' (serve + kgym worker
    --concurrency 4)."""
    data = tempfile.mkdtemp(prefix="kgym-speed-data-", dir=side.tmp)
    token = os.path.join(data, "token")
    with open(token, "w") as f:
        f.write(secrets.token_hex(16) + "\n")
    os.chmod(token, 0o600)
    url = f"http://127.0.0.1:{free_port()}"
    log = os.path.join(data, "serve.log")
    procs = []
    env = side.env()
    try:
        serve_cmd = [side.kgym, "serve", "--listen", url[7:], "--data-dir", data,
                     "--token-file", token]
        if setup.startswith("workers-"):  # workers-auto, workers-cN: N tasks in flight
            serve_cmd += ["--workers", "auto"]
            if setup != "workers-auto":
                serve_cmd += ["--worker-concurrency", setup[len("workers-c"):]]
        procs.append(subprocess.Popen(serve_cmd, stdout=open(log, "w"),
                                      stderr=subprocess.STDOUT, env=env))
        if setup == "worker-c4":
            time.sleep(0.5)
            procs.append(subprocess.Popen(
                [side.kgym, "worker", "--server", url, "--token-file", token, "--device",
                 cfg["device"], "--concurrency", "4"], stdout=subprocess.DEVNULL,
                stderr=open(log + ".worker", "w"), env=env))
        t_up = time.perf_counter()
        _wait_workers(side, url, token, procs[0], log)
        up = time.perf_counter() - t_up
        out: dict = {"startup_s": round(up, 3)}
        for key, cands_dir in zip(("", "again_"), cands_dirs):
            cmd = [side.kgym, "submit", "--server", url, "--token-file", token,
                   "--ref", cfg["ref"], "--cand", cands_dir, "--wait", "--json",
                   *task_args(cfg)]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            wall = time.perf_counter() - t0
            res = results_of(p.stdout)
            if len(res) != 16:
                say(f"  {side.name} {setup} {key or 'first'}: {len(res)} results of 16; "
                    f"{p.stderr[-1000:]}")
            each = sorted((((r.get("result") or r).get("timings") or {}).get("total") or 0)
                          / 1e3 for r in res)
            out.update({f"{key}wall_s": round(wall, 3), f"{key}verdicts": verdicts(res),
                        f"{key}cached": sum(bool(r.get("cached")) for r in res),
                        f"{key}not_pass": why_not_pass(res),
                        f"{key}task_s_min_med_max": [
                            round(each[0], 2), round(statistics.median(each), 2),
                            round(each[-1], 2)] if each else []})
        return out
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def rollout(side: Side, cfg: dict) -> dict:
    out = os.path.join(side.tmp, f"rollout-{secrets.token_hex(3)}.json")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "rollout", "run.py"), "--mode",
           cfg["rollout_mode"], "--samples", str(cfg["ro_samples"]), "--turns",
           str(cfg["ro_turns"]), "--problems", str(cfg["ro_problems"]), "--kgym", side.kgym,
           "--json", out, "--label", side.name, "--log", out + ".serve.log"]
    if cfg["dry"]:
        cmd.append("--fast")
    env = side.env()
    # the bench script and its client are this tree's; the workers run the side's harness
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), env["PYTHONPATH"]])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    for ln in p.stdout.splitlines():
        say("    " + ln)
    if p.returncode != 0 or not os.path.exists(out):
        say(f"  {side.name} rollout: exit {p.returncode}; {p.stderr[-1500:]}")
        return {}
    fig = json.load(open(out))
    t = fig["total"]
    first = fig["per_turn"][0]["env_s"] if fig["per_turn"] else None
    return {"env_s": t["env_s"], "wall_s": t["wall_s"], "env_share": t["env_share"],
            "evals_per_s": t["evals_per_s"], "env_s_per_problem_turn": t["env_s_per_problem_turn"],
            "first_turn_env_s": first, "cached": t["cached"], "incomplete": t["incomplete"]}


def ratio(a, b) -> str:
    return f"x{b / a:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a \
        else "-"


def compare(name: str, key: str, prev: dict, cur: dict, extra: str = "") -> None:
    a, b = prev.get(key), cur.get(key)
    say(f"{name:<34} prev {a!s:>9}  cur {b!s:>9}  cur/prev {ratio(a, b):>6}  {extra}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prev", required=True)
    ap.add_argument("--cur", default=ROOT)
    ap.add_argument("--dry", action="store_true", help="CPU: the script's own test")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "bench",
                                                                          "results"))
    ap.add_argument("--only", default="cold,warm,group,rollout,faults")
    ap.add_argument("--group-setups", default="workers-auto,worker-c4",
                    help="workers-auto, workers-cN (serve --worker-concurrency N), worker-c4")
    ap.add_argument("--rollout-problems", type=int, default=1)
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    gpu = not a.dry
    tree = "problems/gpu/level2" if gpu else "problems/cpu/level2"
    cfg = {"dry": a.dry, "device": "cuda:0" if gpu else "cpu",
           "backend": "triton" if gpu else "cpu",
           "ref": os.path.join(ROOT, tree, "1_Linear_ReLU.py"),
           "sol": os.path.join(ROOT, tree, "solutions",
                               "1_Linear_ReLU." + ("triton" if gpu else "cpu") + ".py"),
           "correct": 5 if gpu else 1, "perf": 100 if gpu else 3, "profiling": gpu,
           "rollout_mode": "gpu" if gpu else "cpu", "ro_samples": 16 if gpu else 2,
           "ro_turns": 3 if gpu else 2, "ro_problems": a.rollout_problems if gpu else 1,
           "group_setups": [g for g in a.group_setups.split(",") if g]}
    os.makedirs(a.out, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime())
    base = os.path.join(a.out, f"speed-{'dry-' if a.dry else ''}{stamp}")
    LOG.append(open(base + ".txt", "w"))
    sides = [Side("prev", a.prev), Side("cur", a.cur)]
    say(f"# speed {'DRY (cpu, no figure claimed)' if a.dry else 'gpu'} {stamp} UTC, "
        f"host {os.uname().nodename}")
    for s in sides:
        say(f"# {s.desc}")
    say(f"# problem {os.path.relpath(cfg['ref'], ROOT)}, candidate "
        f"{os.path.relpath(cfg['sol'], ROOT)}, {cfg['correct']} correctness + {cfg['perf']} "
        f"timed trials, profiling {'on' if cfg['profiling'] else 'off'}")
    figs: dict = {s.name: {} for s in sides}
    cands, cands2 = (sixteen(cfg["sol"], stamp) for _ in range(2))
    t_all = time.perf_counter()
    try:
        if "cold" in only:
            for s in sides:
                figs[s.name]["cold"] = cold(s, cfg)
            p, c = figs["prev"]["cold"], figs["cur"]["cold"]
            compare("cold kgym eval, wall s", "wall_s", p, c, f"[{p['verdicts']} | {c['verdicts']}]")
            compare("cold: its task's total s", "task_s", p, c)
            say(f"    prev phases: {p['phases']}")
            say(f"    cur  phases: {c['phases']}")
            say(f"    prev start (s): {p['start']}")
            say(f"    cur  start (s): {c['start']}")
            say(f"    prev task (ms): {p['detail']}")
            say(f"    cur  task (ms): {c['detail']}")
        if "warm" in only:
            for s in sides:
                figs[s.name]["warm"] = warm(s, cfg)
            p, c = figs["prev"]["warm"], figs["cur"]["warm"]
            compare("warm: median of evals 2-6, s", "median_later_s", p, c,
                    f"[{p['verdicts']} | {c['verdicts']}]")
            compare("warm: six in one engine, wall s", "wall_s", p, c)
            say(f"    prev each {p['later_s']}; last: {p['phases_last']}")
            say(f"    cur  each {c['later_s']}; last: {c['phases_last']}")
            say(f"    prev {p['timing_last']}")
            say(f"    cur  {c['timing_last']}")
        if "group" in only:
            for i, setup in enumerate(cfg["group_setups"]):
                # --dry: the second group on the first setup only (on a CPU
                # the trusted clock's CPU-time floor flags about one honest
                # task in 64 under 4-way load: docs/harness.md, Known limits)
                dirs = [cands] if cfg["dry"] and i > 0 else [cands, cands2]
                for s in sides:
                    figs[s.name][f"group-{setup}"] = group(s, cfg, setup, dirs)
                p, c = figs["prev"][f"group-{setup}"], figs["cur"][f"group-{setup}"]
                compare(f"group of 16, {setup}, s", "wall_s", p, c,
                        f"[{p['verdicts']} | {c['verdicts']}] tasks min/med/max "
                        f"{p['task_s_min_med_max']} | {c['task_s_min_med_max']}")
                for name, figs_side in (("prev", p), ("cur", c)):
                    for row in figs_side["not_pass"] + figs_side.get("again_not_pass", []):
                        say(f"    {name} {setup}, not a pass: {row}")
                if len(dirs) < 2:
                    continue
                compare(f"group of 16 again, {setup}, s", "again_wall_s", p, c,
                        f"[{p['again_verdicts']} | {c['again_verdicts']}] tasks min/med/max "
                        f"{p['again_task_s_min_med_max']} | {c['again_task_s_min_med_max']}; "
                        f"cached {p['again_cached']} | {c['again_cached']}")
        if "rollout" in only:
            for s in sides:
                say(f"  rollout, {s.name}:")
                figs[s.name]["rollout"] = rollout(s, cfg)
            p, c = figs["prev"]["rollout"], figs["cur"]["rollout"]
            compare("rollout: environment s", "env_s", p, c)
            compare("rollout: env s per problem-turn", "env_s_per_problem_turn", p, c)
            compare("rollout: evaluations / s", "evals_per_s", p, c)
            compare("rollout: environment share", "env_share", p, c)
        if "faults" in only:
            for s in sides:
                figs[s.name]["faults"] = f = faults(s, cfg, cands)
                say(f"faults back to back, {s.name}: honest passed {f['honest_passed']} of 2 "
                    f"({f['results']} results of {f['of']}, {f['wall_s']} s)")
                for row in f["rows"]:
                    say(f"    {row}")
    finally:
        for s in sides:
            s.close()
        for d in (cands, cands2):
            shutil.rmtree(d, ignore_errors=True)
    say(f"# whole run {time.perf_counter() - t_all:.0f} s")
    with open(base + ".json", "w") as f:
        json.dump({"cfg": cfg, "figures": figs}, f, indent=1)
    say(f"# written {base}.txt and .json")
    LOG.pop().close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
