#!/usr/bin/env python3
"""The Dr. Kernel paper's own reward client, unchanged, against `kgym serve`.

drkernel/kernel/rewards/reward_client.py (hkust-nlp/KernelGYM) is the
client the paper's RL runs score rollouts with: KernelRewardClient
.compute_batch_rewards() POSTs each task to /evaluate, polls /status, GETs
/results and turns the result into a reward (calculate_reward_speedup:
0.5*correct + 0.5*min(speedup, 3) + 0.5*time_coverage when correct). This
runs that file as it is against a real `kgym serve --workers N` (cpu
workers; triton through Triton's interpreter) and records what it made of
kgym's replies, task by task.

The client imports `ray`, `httpx` and verl's TokenBucketWorker. Ray and
verl cannot run here, so stand-ins are installed in sys.modules before the
client is imported: stubs/ray_stub.py (actors as thread pools honouring
max_concurrency and concurrency groups, named actors, ray.wait/ray.get)
and stubs/verl_sandbox_fusion_tools.py (the token bucket: a counting
semaphore actor). httpx is the real one (pip install httpx into the .venv;
a bench-only dependency). The client itself is unchanged: it is read from
--client (or extracted from the fetched mirror into the ignored .device/
folder, never committed), and its git blob id is reported, so a run shows
which file it ran.

Tasks: every honest triton solution in problems/cpu/*/solutions (with its
problem) and every case of tests/redteam/corpus/triton/*.py that can run on
a CPU (`needs=gpu` skipped), expected verdict from its header. The client
sends `"backend": "triton"` whatever the task says, so only triton
candidates are used. Each task carries an explicit task_id (so kgym's own
result can be fetched afterwards), num_correct_trials and num_perf_trials.
The client's configuration is the paper's RL run's
(drkernel/kernel/scripts/rl/14b_trloo_mrs_pr_prs.sh with
kernel/config/kernel_trainer.yaml), with the timeouts cut for a CPU run.

Reported per task: kgym's verdict and hack reasons (GET /results), the
client's reward, the speedup it used, the time coverage it computed, and
its POSTs to /evaluate (from its own log lines); overall, the POSTs from
kgym's /metrics (kgym_http_requests_total{route="evaluate"}, delta over
the run), honest rewards and coverage, max cheat reward vs min honest
reward. The run is bounded by --max-wall-s: at the cap every unfinished
call is settled as failed (ray stand-in) and the run reports what it has.

    .venv/bin/python bench/kernelgym_client/run_drkernel.py \\
        --kgym build/kgym --workers 2 --label after --append \\
        --out bench/results/DATE-drkernel-client-cpu.txt

Without --client the client is extracted from --mirror (default
/work/.mirror/hkust-nlp+KernelGYM/repo, HEAD) into .device/drkernel/.
The server's data and the workers' task dirs go to a private temp dir
(removed at the end); the client's own log goes to --log (default a temp
file, path printed). Standard library + httpx.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLIENT_PATH_IN_MIRROR = "drkernel/kernel/rewards/reward_client.py"
DEFAULT_MIRROR = "/work/.mirror/hkust-nlp+KernelGYM/repo"

# The paper's RL settings (14b_trloo_mrs_pr_prs.sh over kernel_trainer.yaml).
# Timeouts are the CPU run's: the script has timeout 1800 (the trainer's
# REWARD_TIMEOUT; the server-side task timeout is REWARD_TASK_TIMEOUT=300),
# task_timeout_in_client 2400, acquire_timeout 2400, rate_limit and
# max_concurrent 64 in the yaml / 32 in the script.
REWARD_CONFIG: dict[str, Any] = {
    "reward_func_name": "calculate_reward_speedup",
    "init_correct_weight": 0.5,
    "init_performance_weight": 0.5,
    "speedup_eps": 0.01,
    "speedup_reward_upper_bound": 3.0,
    "speedup_reward_lower_bound": 0.0,
    "reward_policy": {"penalties": {"penalty_score": 0.0, "compilation_fail": -0.5,
                                    "correctness_fail": -0.3, "perf_degrade": -0.1}},
    "coverage_reward": {"enable": True, "reward_type": "time_coverage", "weight": 0.5},
    "timeout": 300,
    "task_timeout_in_client": 600,
    "max_retries": 3,
    "rate_limit": 32,
    "max_concurrent": 32,
    "acquire_timeout": 60,
}


class Config(dict):
    """A dict that also reads as attributes (cfg.a.b and cfg.get("b")), as
    the client uses both (OmegaConf does in the real trainer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for k, v in self.items():
            if isinstance(v, dict) and not isinstance(v, Config):
                self[k] = Config(v)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# ---------------------------------------------------------------- stand-ins

def _load_module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def install_stubs() -> types.ModuleType:
    """Put the Ray and verl stand-ins in sys.modules; returns the ray stub."""
    ray = _load_module("ray", HERE / "stubs" / "ray_stub.py")
    for pkg in ("verl", "verl.tools"):
        mod = types.ModuleType(pkg)
        mod.__path__ = []  # a package, for the import system
        sys.modules[pkg] = mod
    sft = _load_module("verl.tools.sandbox_fusion_tools",
                       HERE / "stubs" / "verl_sandbox_fusion_tools.py")
    sys.modules["verl"].tools = sys.modules["verl.tools"]
    sys.modules["verl.tools"].sandbox_fusion_tools = sft
    return ray


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def extract_client(mirror: str, dest_dir: Path) -> Path:
    """HEAD's reward_client.py from the bare mirror into an ignored folder."""
    data = subprocess.run(["git", "-C", mirror, "show", f"HEAD:{CLIENT_PATH_IN_MIRROR}"],
                          check=True, capture_output=True).stdout
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / "reward_client.py"
    path.write_bytes(data)
    return path


def mirror_blob(mirror: str) -> tuple[str, str]:
    """(commit, blob id) of the client at the mirror's HEAD, or ("", "")."""
    try:
        commit = subprocess.run(["git", "-C", mirror, "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        blob = subprocess.run(["git", "-C", mirror, "rev-parse", f"HEAD:{CLIENT_PATH_IN_MIRROR}"],
                              check=True, capture_output=True, text=True).stdout.strip()
        return commit, blob
    except (OSError, subprocess.CalledProcessError):
        return "", ""


# ------------------------------------------------------------- client's log

POST_RE = re.compile(r"\[HybridWorker\] POST /evaluate resp=(\d+) task_id=(\S*)")
STATUS_RE = re.compile(r"\[HybridWorker\] STATUS task_id=(\S+) -> (\S+)")
KINDS = {
    "coverage fields missing": "coverage_missing",
    "Task failed result": "task_failed",
    "preflight failed": "preflight_failed",
    "acquire timeout": "acquire_timeout",
    "decoy_kernel detected": "decoy_detected",
    "[BatchHeartbeat] hybrid": "heartbeat",
}


class ClientLog:
    """sys.stdout while the client runs: counts its per-POST lines (which a
    re-POST loop makes by the million) per task and status code, counts the
    other kinds of line it prints, and writes every line but the per-POST
    ones to a log file. print() from many threads: lines are assembled per
    thread."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "w", encoding="utf-8", errors="replace")
        self._mu = threading.Lock()
        self._tl = threading.local()
        self.posts: dict[str, dict[int, int]] = {}
        self.statuses: dict[str, list[str]] = {}
        self.kinds: dict[str, int] = {}
        self.frozen: dict[str, dict[int, int]] | None = None
        self.lines = 0

    def write(self, s: str) -> int:
        buf = getattr(self._tl, "buf", "") + s
        *lines, rest = buf.split("\n")
        self._tl.buf = rest
        for line in lines:
            self._line(line)
        return len(s)

    def flush(self) -> None:
        with self._mu:
            self._f.flush()

    def isatty(self) -> bool:
        return False

    def _line(self, line: str) -> None:
        with self._mu:
            self.lines += 1
            m = POST_RE.search(line)
            if m:
                per = self.posts.setdefault(m.group(2), {})
                per[int(m.group(1))] = per.get(int(m.group(1)), 0) + 1
                return
            if "[HybridWorker] POST /evaluate task_id=" in line:
                return
            m = STATUS_RE.search(line)
            if m:
                self.statuses.setdefault(m.group(1), []).append(m.group(2))
            for needle, kind in KINDS.items():
                if needle in line:
                    self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if not self._f.closed:
                self._f.write(line + "\n")

    def freeze(self) -> None:
        """Snapshot the POST counts (threads may go on after a capped run)."""
        with self._mu:
            self.frozen = {k: dict(v) for k, v in self.posts.items()}

    def close(self) -> None:
        with self._mu:
            self._f.close()


# ------------------------------------------------------------------- server

def http_get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for m in re.finditer(r'^kgym_http_requests_total\{route="([^"]+)",code="(\d+)"\}\s+(\S+)$',
                         text, re.M):
        out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def metrics(base: str) -> dict[tuple[str, str], float]:
    code, body = http_get(base + "/metrics")
    return parse_metrics(body) if code == 200 else {}


class Server:
    """`kgym serve --listen 127.0.0.1:0 --workers N` in a private temp dir."""

    def __init__(self, kgym: str, workers: int, python: str, cpu_only: bool) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="kgym-drkernel-"))
        os.chmod(self.work, 0o711)  # candidates run as uid nobody under root
        self.out = self.work / "serve.out"
        self.log = self.work / "serve.log"
        env = dict(os.environ, TMPDIR=str(self.work), KGYM_PYTHON=python)
        if cpu_only:
            env["CUDA_VISIBLE_DEVICES"] = ""
        self.cmd = [kgym, "serve", "--listen", "127.0.0.1:0", "--workers", str(workers),
                    "--data-dir", str(self.work / "data")]
        self.workers = workers
        with open(self.out, "wb") as o, open(self.log, "wb") as e:
            self.proc = subprocess.Popen(self.cmd, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        self.base = ""
        self.exit_status: int | None = None

    def start(self, timeout: float = 120.0) -> str:
        t0 = time.monotonic()
        while not self.base:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kgym serve exited ({self.proc.returncode}): {self.tail()}")
            if time.monotonic() - t0 > 30:
                raise RuntimeError(f"kgym serve printed no listening line: {self.tail()}")
            first = self.out.read_text(errors="replace").split("\n", 1)[0]
            m = re.match(r"kgym serve: listening on (http://\S+)", first)
            if m:
                self.base = m.group(1).rstrip("/")
                break
            time.sleep(0.1)
        while time.monotonic() - t0 < timeout:  # /health, then the workers registered
            try:
                code, body = http_get(self.base + "/health", 2)
                if code == 200:
                    code, body = http_get(self.base + "/workers/status", 2)
                    if code == 200 and json.loads(body).get("alive", 0) >= self.workers:
                        return self.base
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"kgym serve exited ({self.proc.returncode}): {self.tail()}")
            time.sleep(0.2)
        raise RuntimeError(f"kgym serve: {self.workers} workers not alive after {timeout:.0f} s")

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_status = self.proc.returncode
        return self.exit_status

    def leftovers(self) -> list[int]:
        """Pids of processes whose TMPDIR is our work dir (none should be left)."""
        left = []
        needle = f"TMPDIR={self.work}".encode()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    left.append(int(d.name))
            except OSError:
                pass
        return left

    def cleanup(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


# -------------------------------------------------------------------- tasks

@dataclass
class Case:
    name: str
    kind: str  # "honest" or "cheat"
    expect: str  # verdict(s), "|"-joined
    reasons: str
    ref: Path
    cand: Path
    fields: str = ""
    task_id: str = ""
    out: dict[str, Any] = field(default_factory=dict)


def parse_header(path: Path) -> dict[str, str] | None:
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    m = re.match(r"#\s*redteam:\s*(.*)$", first.strip())
    if not m:
        return None
    return dict(tok.split("=", 1) for tok in m.group(1).split() if "=" in tok)


def build_cases(tree: Path, filt: str, limit: int) -> tuple[list[Case], list[str]]:
    cases: list[Case] = []
    skipped: list[str] = []
    for sol in sorted(tree.glob("problems/cpu/level*/solutions/*.triton.py")):
        ref = sol.parent.parent / (sol.name[: -len(".triton.py")] + ".py")
        name = f"sol/{sol.parent.parent.name}/{sol.name[: -len('.triton.py')]}"
        if ref.is_file():
            cases.append(Case(name, "honest", "pass", "", ref, sol))
        else:
            skipped.append(f"{name} (no problem {ref})")
    for f in sorted(tree.glob("tests/redteam/corpus/triton/*.py")):
        name = f"rt/{f.stem}"
        h = parse_header(f)
        if h is None or h.get("backend") != "triton":
            skipped.append(f"{name} (no triton header)")
            continue
        if h.get("needs") == "gpu":
            skipped.append(f"{name} (needs=gpu)")
            continue
        ref = Path(h["problem"]) if h["problem"].startswith("/") else tree / h["problem"]
        kind = "honest" if h.get("family") == "honest" else "cheat"
        cases.append(Case(name, kind, h.get("expect", "pass"), h.get("reasons", ""), ref, f,
                          h.get("fields", "")))
    if filt:
        cases = [c for c in cases if filt in c.name]
    if limit:
        cases = cases[:limit]
    return cases, skipped


# ---------------------------------------------------------------------- run

def run_client(client_mod: types.ModuleType, ray: types.ModuleType, cfg: Config,
               tasks: list[dict], max_wall_s: float, log: ClientLog,
               base: str) -> tuple[list[dict], float, bool, dict]:
    """compute_batch_rewards(tasks) under a wall-time cap. Returns the
    client's results, the wall time, whether the cap cut it, and the
    /metrics snapshot taken when the client's run ended (or was cut)."""
    client = client_mod.KernelRewardClient(reward_config=cfg)
    done = threading.Event()
    state: dict[str, Any] = {"capped": False, "metrics": None}

    def watchdog() -> None:
        if not done.wait(max_wall_s):
            state["capped"] = True
            state["metrics"] = metrics(base)
            log.freeze()
            n = ray.abort_pending(f"bench wall-time cap of {max_wall_s:.0f} s reached")
            state["aborted"] = n

    threading.Thread(target=watchdog, daemon=True).start()
    t0 = time.monotonic()
    results = asyncio.run(client.compute_batch_rewards(tasks))
    wall = time.monotonic() - t0
    if not state["capped"]:
        done.set()
        state["metrics"] = metrics(base)
        log.freeze()
    return results, wall, state["capped"], state["metrics"] or {}


def kgym_result(base: str, task_id: str) -> dict[str, Any]:
    code, body = http_get(f"{base}/results/{task_id}")
    try:
        r = json.loads(body) if body else {}
    except ValueError:
        r = {"raw": body[:200]}
    r["_http"] = code
    return r


def short_error(res: dict[str, Any]) -> str:
    """The client's error for a result (kgym's `error` is an object)."""
    e = res.get("error_message") or res.get("error") or ""
    if isinstance(e, dict):
        e = e.get("message") or json.dumps(e)
    return str(e).splitlines()[0][:100] if e else ""


def fmt(x: Any, spec: str = ".3f") -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, float)):
        return format(x, spec)
    return str(x)


def stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    return (f"min {min(xs):.3f}  mean {statistics.fmean(xs):.3f}  max {max(xs):.3f}"
            f"  (n={len(xs)})")


def machine() -> str:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = "GPU present" if os.path.exists("/dev/nvidia0") else "no GPU"
    return f"{socket.gethostname()}: {os.cpu_count()} CPUs ({cpu}), {gpu}, {platform.system()} {platform.release()}"


def tree_commit(tree: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True,
                               text=True).stdout.split("\n")
        n = len([d for d in dirty if d.strip()])
        return head + (f" (+ uncommitted changes to {n} tracked files)" if n else " (clean)")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git tree)"


def report(args: argparse.Namespace, cases: list[Case], skipped: list[str],
           results: list[dict], wall: float, capped: bool, m0: dict, m1: dict,
           log: ClientLog, info: dict[str, str]) -> str:
    cfg = REWARD_CONFIG
    w_c, w_p = cfg["init_correct_weight"], cfg["init_performance_weight"]
    w_cov = cfg["coverage_reward"]["weight"]
    cap_hi, cap_lo = cfg["speedup_reward_upper_bound"], cfg["speedup_reward_lower_bound"]
    posts = log.frozen if log.frozen is not None else log.posts
    rows = []
    for c, res in zip(cases, results):
        k = c.out
        reasons = ",".join(k.get("hack_reasons") or [])
        verdict = k.get("verdict") or f"({k.get('status') or 'http ' + str(k.get('_http'))})"
        kprof = k.get("profile") if isinstance(k.get("profile"), dict) else {}
        correct = bool(res.get("correctness"))
        speedup = res.get("speedup")
        cov = None
        if correct:  # the client computes coverage only for correct results
            tot = res.get("total_kernel_run_time_in_profiling_us") or 0
            cust = res.get("custom_kernel_cuda_time_in_profiling_us") or 0
            cov = cust / tot if tot > 0 else 0.0
        # the reward as calculate_reward_speedup would make it from these
        # parts: a check that coverage/speedup above are what it used
        rs = min(speedup or 0.0, cap_hi)
        rs = 0.0 if rs < cap_lo else rs
        want = w_c * correct + w_p * rs + (w_cov * cov if cov is not None else 0.0)
        if res.get("status") != "completed" or res.get("decoy_kernel"):
            want = cfg["reward_policy"]["penalties"]["penalty_score"]
        n_post = sum(posts.get(c.task_id, {}).values())
        ok = verdict in c.expect.split("|")
        rows.append({
            "case": c.name, "kind": c.kind, "expect": c.expect, "verdict": verdict,
            "ok": ok, "reasons": reasons, "k_speedup": k.get("speedup"),
            "k_cov": kprof.get("coverage"), "c_status": res.get("status"),
            "reward": res.get("reward"), "c_speedup": speedup, "c_cov": cov,
            "correct": correct, "decoy": bool(res.get("decoy_kernel")), "posts": n_post,
            "post_codes": posts.get(c.task_id, {}), "consistent":
                res.get("reward") is not None and abs(res["reward"] - want) < 1e-9,
            "error": short_error(res),
        })

    hdr = ["case", "expect", "kgym verdict", "match", "hack_reasons", "kgym_spd", "kgym_cov",
           "client_status", "reward", "spd_used", "cov_used", "POSTs"]
    table = [[r["case"], r["expect"], r["verdict"], "ok" if r["ok"] else "NO", r["reasons"] or "-",
              fmt(r["k_speedup"], ".4f"), fmt(r["k_cov"], ".3f"), r["c_status"] or "-",
              fmt(r["reward"], ".4f"), fmt(r["c_speedup"], ".4f"), fmt(r["c_cov"], ".3f"),
              str(r["posts"])] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h)
              for i, h in enumerate(hdr)]
    lines = []
    L = lines.append
    L(f"## {args.label}: drkernel reward_client.py (unchanged) against kgym serve")
    L(f"date: {info['date']}")
    L(f"machine: {info['machine']}")
    L(f"command: {info['command']}")
    L(f"kgym: {info['kgym']} -- commit {info['commit']}")
    L(f"client: {info['client']} -- git blob {info['blob']}{info['mirror']}")
    L(f"stand-ins: ray -> bench/kernelgym_client/stubs/ray_stub.py, "
      f"verl.tools.sandbox_fusion_tools -> stubs/verl_sandbox_fusion_tools.py; httpx {info['httpx']}")
    L("config: " + json.dumps(REWARD_CONFIG, separators=(",", ":")))
    L(f"tasks: {len(cases)} ({sum(c.kind == 'honest' for c in cases)} honest, "
      f"{sum(c.kind == 'cheat' for c in cases)} cheats), num_correct_trials "
      f"{args.num_correct_trials}, num_perf_trials {args.num_perf_trials}, "
      f"{args.workers} cpu workers; skipped: {', '.join(skipped) or 'none'}")
    hfields = [f"{c.name} ({c.fields})" for c in cases if c.fields]
    if hfields:
        L("header fields= the client cannot send (not applied): " + ", ".join(hfields))
    L("")
    L("  ".join(h.ljust(w) for h, w in zip(hdr, widths)))
    for t in table:
        L("  ".join(v.ljust(w) for v, w in zip(t, widths)).rstrip())
    L("")
    honest = [r for r in rows if r["kind"] == "honest"]
    cheats = [r for r in rows if r["kind"] == "cheat"]
    hr = [r["reward"] for r in honest if r["reward"] is not None]
    cr = [r["reward"] for r in cheats if r["reward"] is not None]
    L(f"wall: {wall:.1f} s for compute_batch_rewards"
      + (f" -- CAPPED at --max-wall-s {args.max_wall_s:.0f}: unfinished calls settled as failed"
         if capped else " (finished before the cap)"))
    judge = sum(float((c.out.get("timings") or {}).get("total") or 0) for c in cases) / 1000
    L(f"kgym's own time per task (timings.total) summed: {judge:.1f} s, i.e. {judge / args.workers:.1f} s "
      f"of wall on {args.workers} workers")
    L(f"kgym verdict as the header expects: {sum(r['ok'] for r in rows)}/{len(rows)}")
    L(f"honest rewards:   {stats(hr)}")
    L(f"honest coverage the client used: {stats([r['c_cov'] for r in honest if r['c_cov'] is not None])}")
    L(f"honest coverage kgym measured:   {stats([r['k_cov'] for r in honest if r['k_cov'] is not None])}")
    if cr:
        top = max(cheats, key=lambda r: r["reward"] if r["reward"] is not None else -1e9)
        L(f"cheat rewards:    {stats(cr)}; {sum(x > 0 for x in cr)}/{len(cr)} cheats got reward > 0")
        L(f"max cheat reward {max(cr):.4f} ({top['case']}: {top['verdict']}) vs min honest reward "
          f"{min(hr) if hr else float('nan'):.4f}: "
          + ("separated" if hr and max(cr) < min(hr) else "NOT separated"))
    n = max(1, len(cases))

    def delta(route: str) -> tuple[float, dict[str, float]]:
        by = {code: m1.get((rt, code), 0) - m0.get((rt, code), 0)
              for (rt, code) in set(m0) | set(m1) if rt == route}
        by = {c: v for c, v in sorted(by.items()) if v}
        return sum(by.values()), by

    ev, ev_by = delta("evaluate")
    st, _ = delta("status")
    rs_, _ = delta("results")
    per_task = sorted(r["posts"] for r in rows)
    L(f"POST /evaluate (kgym /metrics, delta over the run): {ev:.0f} "
      f"({', '.join(f'{c}: {v:.0f}' for c, v in ev_by.items()) or 'none'}) = {ev / n:.1f} per task; "
      f"client log per task: min {per_task[0] if per_task else 0}, median "
      f"{statistics.median(per_task) if per_task else 0:.0f}, max {per_task[-1] if per_task else 0}")
    L(f"GET /status: {st:.0f} ({st / n:.1f} per task); GET /results: {rs_:.0f} ({rs_ / n:.1f} per task)")
    L(f"client log: {log.lines} lines; " + ", ".join(f"{k} {v}" for k, v in sorted(log.kinds.items()))
      + f"; statuses seen: {sorted({s for v in log.statuses.values() for s in v})}")
    bad = [r for r in rows if not r["consistent"]]
    L("reward = 0.5*correct + 0.5*clamp(speedup, 0, 3) + 0.5*cov_used (correct only), penalty 0 "
      f"when not completed or decoy: holds for {len(rows) - len(bad)}/{len(rows)}"
      + (" (not for: " + ", ".join(r["case"] for r in bad) + ")" if bad else ""))
    hacked_paid = [r for r in rows if r["verdict"] == "hacked" and (r["reward"] or 0) > 0]
    if hacked_paid:
        L(f"hacked but rewarded (speedup kept on a hacked result): "
          + ", ".join(f"{r['case']} {r['reward']:.4f} (speedup {fmt(r['c_speedup'], '.4f')})"
                      for r in hacked_paid))
    failed = [r for r in rows if r["c_status"] != "completed"]
    if failed:
        L("client status not completed: " + "; ".join(
            f"{r['case']}: {r['c_status']} {r['error']!r}" for r in failed))
    L(f"server: {info['server']}")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Exit status: 0 with a report, 1 when the run failed, 2 on bad usage."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", help="the extracted reward_client.py (default: extract "
                    "from --mirror into .device/drkernel/)")
    ap.add_argument("--mirror", default=DEFAULT_MIRROR, help="bare git dir of hkust-nlp/KernelGYM")
    ap.add_argument("--kgym", default=str(REPO / "build" / "kgym"))
    ap.add_argument("--tree", help="where problems/ and tests/redteam/ are (default: the "
                    "tree the kgym binary was built in)")
    ap.add_argument("--python", help="KGYM_PYTHON for the workers (default: $KGYM_PYTHON, "
                    "else the tree's .venv, else this interpreter)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--num-perf-trials", type=int, default=10)
    ap.add_argument("--num-correct-trials", type=int, default=2)
    ap.add_argument("--max-wall-s", type=float, default=600.0)
    ap.add_argument("--filter", default="", help="only cases whose name has this substring")
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases")
    ap.add_argument("--label", default="run", help="section title (e.g. before, after)")
    ap.add_argument("--out", help="write the report here (also printed)")
    ap.add_argument("--append", action="store_true", help="append to --out instead")
    ap.add_argument("--log", help="the client's own output (default: a temp file)")
    ap.add_argument("--json", help="also write each task's client result and kgym result "
                    "here (JSON lines)")
    ap.add_argument("--keep-gpus", action="store_true",
                    help="do not hide GPUs from the server (default: cpu workers)")
    args = ap.parse_args()

    kgym = str(Path(args.kgym).resolve())
    if not os.access(kgym, os.X_OK):
        print(f"run_drkernel: no kgym binary at {kgym} (make first)", file=sys.stderr)
        return 2
    tree = Path(args.tree).resolve() if args.tree else Path(kgym).parent.parent
    python = (args.python or os.environ.get("KGYM_PYTHON")
              or (str(tree / ".venv/bin/python") if (tree / ".venv/bin/python").exists()
                  else sys.executable))
    client_path = Path(args.client) if args.client else extract_client(
        args.mirror, REPO / ".device" / "drkernel")
    data = client_path.read_bytes()
    blob = git_blob_id(data)
    mc, mb = mirror_blob(args.mirror)
    mirror_note = ""
    if mb:
        mirror_note = (f" (= {CLIENT_PATH_IN_MIRROR} at hkust-nlp/KernelGYM {mc[:12]})"
                       if mb == blob else f" (DIFFERS from the mirror's {mb} at {mc[:12]})")

    cases, skipped = build_cases(tree, args.filter, args.limit)
    if not cases:
        print("run_drkernel: no cases", file=sys.stderr)
        return 2
    ray = install_stubs()
    import httpx  # noqa: F401 - the client's; fail here with a clear message
    client_mod = _load_module("drkernel_reward_client", client_path)

    log_path = Path(args.log) if args.log else Path(tempfile.mkstemp(
        prefix="drkernel-client-", suffix=".log")[1])
    log = ClientLog(log_path)
    server = Server(kgym, args.workers, python, not args.keep_gpus)
    info = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "machine": machine(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "kgym": kgym, "commit": tree_commit(tree), "client": str(client_path),
        "blob": blob, "mirror": mirror_note, "httpx": httpx.__version__,
    }
    # the client prints to sys.stdout from its threads, which may go on
    # after a capped run: sys.stdout stays the log; this run's own output
    # goes to the real one
    real = sys.stdout
    sys.stdout = log
    rc = 1
    try:
        t0 = time.monotonic()
        base = server.start()
        print(f"run_drkernel: {' '.join(server.cmd)} -> {base} ({time.monotonic() - t0:.1f} s to "
              f"{args.workers} alive workers); {len(cases)} tasks; client log {log_path}",
              file=real, flush=True)
        run_tag = f"{int(time.time()) % 100000000:08d}"
        tasks = []
        for i, c in enumerate(cases):
            c.task_id = f"drk-{run_tag}-{i:02d}"
            tasks.append({
                "task_id": c.task_id,
                "reference_code": c.ref.read_text(encoding="utf-8"),
                "kernel_code": c.cand.read_text(encoding="utf-8"),
                "entry_point": "Model",
                "num_correct_trials": args.num_correct_trials,
                "num_perf_trials": args.num_perf_trials,
            })
        m0 = metrics(base)
        results, wall, capped, m1 = run_client(client_mod, ray,
                                               Config(REWARD_CONFIG, server_url=base), tasks,
                                               args.max_wall_s, log, base)
        for c in cases:
            c.out = kgym_result(base, c.task_id)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                for c, res in zip(cases, results):
                    f.write(json.dumps({"case": c.name, "kind": c.kind, "expect": c.expect,
                                        "task_id": c.task_id, "client": res, "kgym": c.out,
                                        "client_posts": log.frozen.get(c.task_id, {})
                                        if log.frozen else {}}, default=str) + "\n")
        st = server.stop()
        left = server.leftovers()
        info["server"] = (f"{' '.join(server.cmd[:1] + ['serve', '...'])} exited with status {st} "
                          f"after SIGTERM; processes left: {len(left)}")
        text = report(args, cases, skipped, results, wall, capped, m0, m1, log, info)
        print(text, end="", file=real, flush=True)
        if args.out:
            out = Path(args.out)
            if args.append and out.exists() and out.stat().st_size:
                with open(out, "a", encoding="utf-8") as f:
                    f.write("\n" + text)
            else:
                out.write_text(text, encoding="utf-8")
        rc = 0
    except Exception as e:  # noqa: BLE001 - say why, keep the server's log
        traceback.print_exc(file=sys.stderr)
        print(f"run_drkernel: {type(e).__name__}: {e}; the server's log ends with:\n"
              f"{server.tail()}", file=sys.stderr)
    finally:
        server.stop()
        log.freeze()
        log.close()
        server.cleanup()
    real.flush()
    sys.stderr.flush()
    # the client's pool threads may still be polling after a capped run:
    # daemons, but leave without waiting on anything
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
