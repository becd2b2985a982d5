"""The kernel bandit: policy-gradient RL on a policy whose only action is
choosing one prepared kernel for a problem, with every reward from a real
`kgym serve` evaluation (docs in bench/bandit/README.md).

The policy is one softmax per problem over that problem's kernels (the
files of kernels/<set>/<problem>/ other than ref.py; the file's stem is
the kernel's kind: fused, lazy, slow, wrong, hacked); its parameters are
the logits. A step, for each problem: draw N kernels from the policy,
have kgym evaluate them, score each result with libkgym (the paper's
R = C + C*min(s, 3) + w_pr*C*PR, PR = the result's profiling coverage),
compute group advantages with libkgym (TRLOO or GRPO over the N samples),
PRS keep flags with libkgym (on correct samples; others are kept), and
take one plain SGD step on the logits:

    g = (1/N) * sum_i keep_i * A_i * (onehot(a_i) - pi),   theta += lr * g

(the gradient of (1/N) sum_i keep_i A_i log pi(a_i)). SGD, not Adam: an
adaptive optimiser would divide away the scale of the advantages, which
is what tells GRPO from TRLOO here (GRPO's baseline includes the sample
itself: A_grpo = (1 - 1/N) * A_trloo, on the same rewards).

Several runs (estimator, w_pr, PRS on or off) learn side by side from one
server. Their draws share random numbers (inverse CDF of the same uniform
per step, problem and sample), so runs whose policies agree pick the same
kernels. --evals sample (the default) gives every sample of every run its
own evaluation (a distinct seed, force_refresh); --evals step evaluates
each (problem, kernel) drawn by any run once per step and scores every
sample that drew it in that step with that one result (the bench's only
cache, and it says so in its output). --max-evals caps the evaluations.

Run (cpu):   .venv/bin/python bench/bandit/bandit.py --backend cpu
Run (H200):  .venv/bin/python bench/bandit/bandit.py --backend triton
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from kgym import rl  # noqa: E402
from kgym.client import Client  # noqa: E402

KINDS = ("fused", "lazy", "forged", "slow", "wrong", "hacked")


# ---- the policy and its update (pure Python, tested by hand) ----------------


def softmax(logits: Sequence[float]) -> list[float]:
    m = max(logits)
    e = [math.exp(x - m) for x in logits]
    s = sum(e)
    return [x / s for x in e]


def draw(probs: Sequence[float], u: float) -> int:
    """The index the inverse CDF of probs gives for u in [0, 1)."""
    acc = 0.0
    for i, p in enumerate(probs):
        acc += p
        if u < acc:
            return i
    return len(probs) - 1


def pg_gradient(logits: Sequence[float], actions: Sequence[int],
                adv: Sequence[Optional[float]], keep: Sequence[bool]) -> list[float]:
    """Gradient (ascent direction) of (1/N) sum_i keep_i A_i log pi(a_i) with
    respect to the logits; N = len(actions). An advantage of None (an invalid
    sample) contributes nothing."""
    pi = softmax(logits)
    n = len(actions)
    g = [0.0] * len(logits)
    for a, A, k in zip(actions, adv, keep):
        if not k or A is None:
            continue
        for j in range(len(g)):
            g[j] += A * ((1.0 if j == a else 0.0) - pi[j]) / n
    return g


def sgd_step(logits: Sequence[float], grad: Sequence[float], lr: float) -> list[float]:
    return [x + lr * g for x, g in zip(logits, grad)]


# ---- scoring through libkgym --------------------------------------------------


def pr_of(result: dict) -> Optional[float]:
    """The profiling ratio of a result as kgym rollout reads it
    (src/agent/rollout_score.c): profile.coverage, else time_coverage,
    clipped to [0, 1]; None when neither is a number."""
    prof = result.get("profile")
    c = prof.get("coverage") if isinstance(prof, dict) else None
    if not isinstance(c, (int, float)) or isinstance(c, bool):
        c = result.get("time_coverage")
    if not isinstance(c, (int, float)) or isinstance(c, bool):
        return None
    return min(1.0, max(0.0, float(c)))


def turn_of(result: dict) -> Optional[dict]:
    """The reward input for one result, or None when the result is not the
    policy's to be scored on (infra_error, problem_error, not completed)."""
    if result.get("status") not in (None, "completed"):
        return None
    v = result.get("verdict")
    if v in (None, "infra_error", "problem_error"):
        return None
    pr = pr_of(result)
    return {"verdict": v, "correctness": bool(result.get("correctness")),
            "decoy_kernel": bool(result.get("decoy_kernel")),
            "hack_reasons": list(result.get("hack_reasons") or []),
            "speedup": result.get("speedup"),
            "coverage": 0.0 if pr is None else pr}


def rewards_of(results: Sequence[dict], w_pr: float) -> list[Optional[float]]:
    turns = [turn_of(r) for r in results]
    valid = [t for t in turns if t is not None]
    out = rl.reward(valid, w_pr=w_pr) if valid else []
    it = iter(out)
    return [None if t is None else next(it) for t in turns]


def group_advantages(rewards: Sequence[Optional[float]], estimator: str) -> list[Optional[float]]:
    """libkgym's advantages of one group (N samples, one turn each)."""
    R = [[0.0 if r is None else r] for r in rewards]
    valid = [[r is not None] for r in rewards]
    if not any(v[0] for v in valid):
        return [None] * len(rewards)
    A = rl.advantages(R, valid, estimator=estimator)
    return [a[0] for a in A]


def prs_keep(results: Sequence[dict], rewards: Sequence[Optional[float]], seed: int,
             tau: float, s: float) -> tuple[list[bool], list[Optional[float]]]:
    """PRS as kgym rollout applies it: a correct, unhacked sample is kept
    with libkgym's PRS draw on its coverage (seed, index = sample); any
    other valid sample is kept; an invalid one is not."""
    cov = []
    for r, R in zip(results, rewards):
        t = turn_of(r) if R is not None else None
        ok = t is not None and t["correctness"] and not t["decoy_kernel"] and not t["hack_reasons"]
        cov.append(t["coverage"] if ok else None)
    out = rl.prs(cov, tau=tau, s=s, seed=seed)
    keep = []
    for c, k, R in zip(cov, out["keep"], rewards):
        keep.append(bool(k) if c is not None else R is not None)
    return keep, out["keep_prob"]


# ---- runs --------------------------------------------------------------------


@dataclasses.dataclass
class RunSpec:
    name: str
    estimator: str  # trloo | grpo
    w_pr: float
    prs: bool


def parse_runs(text: str) -> list[RunSpec]:
    """"NAME:EST:W_PR:PRS,..." (PRS: prs or noprs)."""
    out = []
    for part in text.split(","):
        f = part.strip().split(":")
        if len(f) != 4 or f[1] not in ("trloo", "grpo") or f[3] not in ("prs", "noprs"):
            raise SystemExit(f"bandit: --runs entry {part!r}: expected NAME:trloo|grpo:W_PR:prs|noprs")
        out.append(RunSpec(f[0], f[1], float(f[2]), f[3] == "prs"))
    return out


DEFAULT_RUNS = ("trloo-pr-prs:trloo:1:prs,grpo-pr-prs:grpo:1:prs,"
                "trloo-pr:trloo:1:noprs,trloo-prs:trloo:0:prs,trloo-speed:trloo:0:noprs")


@dataclasses.dataclass
class Problem:
    name: str
    ref: str
    kinds: list[str]
    code: dict[str, str]


def load_problems(kdir: str, names: Optional[Sequence[str]], kinds: Optional[Sequence[str]]) -> list[Problem]:
    out = []
    for name in sorted(os.listdir(kdir)):
        d = os.path.join(kdir, name)
        if not os.path.isfile(os.path.join(d, "ref.py")) or (names and name not in names):
            continue
        ks = [k for k in KINDS if os.path.isfile(os.path.join(d, k + ".py"))
              and (not kinds or k in kinds)]
        code = {}
        for k in ["ref"] + ks:
            with open(os.path.join(d, k + ".py")) as f:
                code[k] = f.read()
        out.append(Problem(name, os.path.join(d, "ref.py"), ks, code))
    if names:
        missing = set(names) - {p.name for p in out}
        if missing:
            raise SystemExit(f"bandit: no problem {sorted(missing)} under {kdir}")
    return out


def parse_init(text: str, kinds: Sequence[str]) -> list[float]:
    vals = {}
    for part in filter(None, (text or "").split(",")):
        k, _, v = part.partition("=")
        vals[k.strip()] = float(v)
    return [vals.get(k, 0.0) for k in kinds]


# ---- kgym serve ---------------------------------------------------------------


class Server:
    """`kgym serve --workers W` on a free loopback port, data in a temp dir
    (reachable by uid nobody, where sandboxed candidates run)."""

    def __init__(self, kgym: str, workers: str, tmp_base: Optional[str] = None):
        self.dir = tempfile.mkdtemp(prefix="bandit-serve-", dir=tmp_base)
        os.chmod(self.dir, 0o755)
        self.log = os.path.join(self.dir, "serve.log")
        env = dict(os.environ, TMPDIR=self.dir)
        self.proc = subprocess.Popen(
            [kgym, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(self.dir, "data"),
             "--workers", workers],
            stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True, env=env,
            start_new_session=True)
        self.url = None
        self.lines = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip())
            if "listening on" in line:
                self.url = line.split("listening on", 1)[1].split()[0]
                break
        if not self.url:
            self.close()
            raise RuntimeError(f"kgym serve did not start: {self.lines} {open(self.log).read()[-2000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


class Evaluator:
    """Submits requests in batches and waits for their results."""

    def __init__(self, url: str, backend: str, fields: dict, max_evals: Optional[int]):
        self.client = Client(url, timeout=120)
        self.backend = backend
        self.fields = fields
        self.max_evals = max_evals
        self.count = 0
        self.seconds = 0.0

    def left(self) -> Optional[int]:
        return None if self.max_evals is None else self.max_evals - self.count

    def evaluate(self, jobs: Sequence[tuple[Problem, str, int]], timeout: float = 1800) -> list[dict]:
        """jobs: (problem, kind, seed); one real evaluation each."""
        t0 = time.monotonic()
        reqs = [{"reference_code": p.code["ref"], "kernel_code": p.code[k], "backend": self.backend,
                 "seed": seed, "force_refresh": True, **self.fields} for p, k, seed in jobs]
        out: list[Optional[dict]] = [None] * len(reqs)
        for lo in range(0, len(reqs), 1000):
            rep = self.client.batch(reqs[lo:lo + 1000])
            for i, t in enumerate(rep["tasks"]):
                if "error" in t:
                    raise RuntimeError(f"kgym refused a task: {t}")
                out[lo + i] = t.get("result") or {"_task": t["task_id"]}
        for i, r in enumerate(out):
            if "_task" in r:
                out[i] = self.client.wait(r["_task"], timeout=timeout)
        self.count += len(reqs)
        self.seconds += time.monotonic() - t0
        return out  # type: ignore[return-value]


def seed_of(*parts: int) -> int:
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (p & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h & ((1 << 53) - 1)


# ---- the loop -----------------------------------------------------------------


def summarize_result(r: dict) -> dict:
    """What the JSONL keeps of a result: the reward input (turn_of) and
    scored true, or the verdict and scored false."""
    t = turn_of(r)
    return {**t, "scored": True} if t else {"verdict": r.get("verdict"), "scored": False}


def run_bandit(problems: list[Problem], runs: list[RunSpec], ev: Evaluator, *, steps: int,
               samples: int, lr: float, init: str, seed: int, evals_mode: str,
               prs_tau: float, prs_s: float, out_rows: list, log=print,
               max_seconds: Optional[float] = None) -> dict:
    """The training loop; appends one row per (run, step, problem) to
    out_rows and returns the final state."""
    logits = {(r.name, p.name): parse_init(init, p.kinds) for r in runs for p in problems}
    t_start = time.monotonic()
    stopped = None
    log("bandit: each step line: step, its seconds, its evaluations (total so far); then per "
        "run, per problem (" + ", ".join(p.name for p in problems) + "), the policy after the "
        "step as pi(fused)/pi(lazy)/pi(hacked): the chances of drawing each kernel")
    for step in range(steps):
        t_step = time.monotonic()
        if max_seconds is not None and t_step - t_start > max_seconds:
            stopped = f"--max-seconds {max_seconds:g} passed before step {step}"
            log(f"bandit: {stopped}")
            break
        # draws (shared uniforms across runs)
        acts: dict[tuple[str, str], list[int]] = {}
        for p_i, p in enumerate(problems):
            rng = random.Random(seed_of(seed, step, p_i))
            us = [rng.random() for _ in range(samples)]
            for r in runs:
                pi = softmax(logits[(r.name, p.name)])
                acts[(r.name, p.name)] = [draw(pi, u) for u in us]
        # evaluations
        if evals_mode == "step":
            want = sorted({(p_i, a) for p_i, p in enumerate(problems) for r in runs
                           for a in acts[(r.name, p.name)]})
            jobs = [(problems[p_i], problems[p_i].kinds[a], seed_of(seed, step, p_i, a, 1))
                    for p_i, a in want]
        else:
            want = [(r_i, p_i, s) for r_i, r in enumerate(runs) for p_i, p in enumerate(problems)
                    for s in range(samples)]
            jobs = [(problems[p_i], problems[p_i].kinds[acts[(runs[r_i].name, problems[p_i].name)][s]],
                     seed_of(seed, step, p_i, r_i, s, 2)) for r_i, p_i, s in want]
        left = ev.left()
        if left is not None and len(jobs) > left:
            stopped = f"--max-evals {ev.max_evals} reached before step {step}"
            log(f"bandit: {stopped}")
            break
        results = ev.evaluate(jobs)
        if evals_mode == "step":
            by = {key: res for key, res in zip(want, results)}
            res_of = {(r.name, p.name): [by[(p_i, a)] for a in acts[(r.name, p.name)]]
                      for r in runs for p_i, p in enumerate(problems)}
        else:
            by = {key: res for key, res in zip(want, results)}
            res_of = {(r.name, p.name): [by[(r_i, p_i, s)] for s in range(samples)]
                      for r_i, r in enumerate(runs) for p_i, p in enumerate(problems)}
        # learning
        for r in runs:
            for p_i, p in enumerate(problems):
                key = (r.name, p.name)
                res = res_of[key]
                a = acts[key]
                R = rewards_of(res, r.w_pr)
                A = group_advantages(R, r.estimator)
                A_t = group_advantages(R, "trloo")
                A_g = group_advantages(R, "grpo")
                if r.prs:
                    keep, kp = prs_keep(res, R, seed_of(seed, step, p_i, 3), prs_tau, prs_s)
                else:
                    keep, kp = [x is not None for x in R], [None] * len(R)
                th = logits[key]
                pi = softmax(th)
                g = pg_gradient(th, a, A, keep)
                gt = pg_gradient(th, a, A_t, keep)
                gg = pg_gradient(th, a, A_g, keep)
                nt = math.sqrt(sum(x * x for x in gt))
                ng = math.sqrt(sum(x * x for x in gg))
                logits[key] = sgd_step(th, g, lr)
                pi_next = softmax(logits[key])
                per_kind = {}
                for j, k in enumerate(p.kinds):
                    idx = [i for i, x in enumerate(a) if x == j]
                    rs = [R[i] for i in idx if R[i] is not None]
                    per_kind[k] = {
                        "n": len(idx), "kept": sum(1 for i in idx if keep[i]),
                        "mean_reward": sum(rs) / len(rs) if rs else None,
                        "max_reward": max(rs) if rs else None,
                        "verdicts": sorted({res[i].get("verdict") for i in idx}),
                        "mean_speedup": _mean([res[i].get("speedup") for i in idx]),
                        "mean_coverage": _mean([pr_of(res[i]) for i in idx]),
                    }
                valid_R = [x for x in R if x is not None]
                out_rows.append({
                    "run": r.name, "estimator": r.estimator, "w_pr": r.w_pr, "prs": r.prs,
                    "step": step, "problem": p.name, "samples": samples, "evals_mode": evals_mode,
                    "pi": dict(zip(p.kinds, pi)), "pi_next": dict(zip(p.kinds, pi_next)),
                    "logits_next": dict(zip(p.kinds, logits[key])),
                    "actions": [p.kinds[x] for x in a], "rewards": R, "advantages": A,
                    "keep": keep, "keep_prob": kp, "mean_reward": _mean(valid_R),
                    "per_kind": per_kind,
                    "grad": dict(zip(p.kinds, g)), "grad_norm_trloo": nt, "grad_norm_grpo": ng,
                    # None where the gradient vanishes (every sample drew one
                    # kernel: the advantages sum to 0, the norms are rounding)
                    "grpo_over_trloo": ng / nt if nt > 1e-9 else None,
                    "results": [summarize_result(x) for x in res],
                })
        dt = time.monotonic() - t_step
        msg = [f"step {step:3d} {dt:6.1f}s evals {len(jobs):4d} (total {ev.count})"]
        for r in runs:
            fs = []
            for p in problems:
                pi = softmax(logits[(r.name, p.name)])
                d = dict(zip(p.kinds, pi))
                fs.append("/".join(f"{d.get(k, 0):.2f}" for k in ("fused", "lazy", "forged", "hacked")))
            msg.append(f"{r.name} {' '.join(fs)}")
        log("bandit: " + " | ".join(msg))
    return {"logits": logits, "seconds": time.monotonic() - t_start, "stopped": stopped}


def _mean(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return sum(xs) / len(xs) if xs else None


# ---- the report ---------------------------------------------------------------


def first_step(rows: list[dict], run: str, problem: str, kind: str, thr: float) -> Optional[int]:
    """The first step after which pi(kind) >= thr (None: never)."""
    for r in rows:
        if r["run"] == run and r["problem"] == problem and r["pi_next"].get(kind, 0) >= thr:
            return r["step"] + 1
    return None


def table(rows: list[dict], runs: list[RunSpec], problems: list[Problem], thr: float,
          tau: float = rl.DEFAULT_TAU, s_prs: float = rl.DEFAULT_S) -> str:
    out = []
    # what each kernel got from kgym, over every sample of every run
    out.append("kernels (every sample of every run; R recomputed with w_pr 0 and 1):")
    out.append(f"  {'problem':18s} {'kernel':7s} {'samples':>7s} {'verdicts':26s} {'speedup':>8s} "
               f"{'PR':>6s} {'R(w_pr=0)':>9s} {'R(w_pr=1)':>9s} {'PRS keep':>8s}")
    seen: dict = {}
    for r in rows:
        scored = [x for x in r["results"] if x["scored"]]
        turns = [{k: v for k, v in x.items() if k != "scored"} for x in scored]
        R0 = iter(rl.reward(turns, w_pr=0) if turns else [])
        R1 = iter(rl.reward(turns, w_pr=1) if turns else [])
        kp = iter(rl.prs([x["coverage"] if x["correctness"] and not x["decoy_kernel"]
                          and not x["hack_reasons"] else None for x in turns],
                         tau=tau, s=s_prs)["keep_prob"] if turns else [])
        for k, res in zip(r["actions"], r["results"]):
            d = seen.setdefault((r["problem"], k), {"v": {}, "sp": [], "pr": [], "R0": [], "R1": [],
                                                   "kp": []})
            d["v"][res["verdict"]] = d["v"].get(res["verdict"], 0) + 1
            if not res["scored"]:
                continue
            d["R0"].append(next(R0))
            d["R1"].append(next(R1))
            q = next(kp)
            if q is not None:
                d["kp"].append(q)
            if res["speedup"] is not None:
                d["sp"].append(res["speedup"])
            if res["correctness"]:
                d["pr"].append(res["coverage"])
    for p in problems:
        for k in p.kinds:
            d = seen.get((p.name, k))
            if not d:
                continue
            vs = ",".join(f"{v}:{n}" for v, n in sorted(d["v"].items()))
            out.append(f"  {p.name:18s} {k:7s} {sum(d['v'].values()):7d} {vs:26s} "
                       f"{_fmt(_gmean(d['sp']), '8.3f')} {_fmt(_mean(d['pr']), '6.2f')} "
                       f"{_fmt(_mean(d['R0']), '9.3f')} {_fmt(_mean(d['R1']), '9.3f')} "
                       f"{_fmt(_mean(d['kp']), '8.2f')}")
    out.append("  (speedup: geometric mean over passes; PR: mean coverage of the passes; "
               "PRS keep: mean libkgym keep probability of the passes)")
    out.append("")
    out.append(f"policies: pi after the last step, and the first step after which pi(fused) >= {thr}")
    hdr = f"  {'run':14s} {'problem':18s} " + " ".join(f"{k:>7s}" for k in KINDS) + \
        f" {'->fused':>7s} {'hackedR':>7s} {'R mean':>7s}"
    out.append(hdr)
    for run in runs:
        for p in problems:
            rr = [r for r in rows if r["run"] == run.name and r["problem"] == p.name]
            if not rr:
                continue
            last = rr[-1]["pi_next"]
            fs = first_step(rows, run.name, p.name, "fused", thr)
            hr = [R for r in rr for k, R in zip(r["actions"], r["rewards"]) if k == "hacked" and R is not None]
            allR = [R for r in rr for R in r["rewards"] if R is not None]
            out.append(f"  {run.name:14s} {p.name:18s} " +
                       " ".join(f"{last[k]:7.3f}" if k in last else f"{'-':>7s}" for k in KINDS) +
                       f" {('never' if fs is None else str(fs)):>7s} "
                       f"{_fmt(max(hr) if hr else None, '7.2f')} {_fmt(_mean(allR), '7.3f')}")
    out.append("  (hackedR: the largest reward any hacked sample got; R mean: over all samples and steps)")
    # GRPO / TRLOO
    ratios = [r["grpo_over_trloo"] for r in rows if r["grpo_over_trloo"] is not None]
    if ratios:
        n = rows[0]["samples"]
        out.append("")
        out.append(f"GRPO vs TRLOO on the same samples: |g_grpo| / |g_trloo| min {min(ratios):.6f} "
                   f"max {max(ratios):.6f} over {len(ratios)} groups (1 - 1/N = {1 - 1 / n:.6f}, N = {n})")
    return "\n".join(out)


def _gmean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _fmt(x, spec):
    w = int(spec.split(".")[0])
    return f"{'-':>{w}s}" if x is None else format(x, spec)


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib.pyplot as plt
    fig = figure(rows, title)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def figure(rows: list[dict], title: str):
    """One row of panels per (experiment, problem) in the rows, in order of
    appearance: pi(fused), pi(lazy), pi(forged), pi(hacked) (those the
    rows hold) and the mean sample reward
    (under the run's own w_pr) against the step, one line per run. Each
    y axis names its quantity; the experiment is in the panel's title."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: list[tuple[str, str]] = []
    for r in rows:
        g = (r.get("experiment", ""), r["problem"])
        if g not in groups:
            groups.append(g)
    # a panel per kind the rows hold (forged arms exist on the GPU only)
    kinds = tuple(k for k in ("fused", "lazy", "forged", "hacked")
                  if any(k in r.get("pi", {}) for r in rows))
    fig, axes = plt.subplots(len(groups), len(kinds) + 1,
                             figsize=(4.2 * (len(kinds) + 1), 3.0 * len(groups)), squeeze=False)
    styles = ["-", "--", "-.", ":", (0, (3, 1, 1, 1))]
    for i, (exp, prob) in enumerate(groups):
        gr = [r for r in rows if r.get("experiment", "") == exp and r["problem"] == prob]
        names = list(dict.fromkeys(r["run"] for r in gr))
        for j, k in enumerate(kinds + ("reward",)):
            ax = axes[i][j]
            for n, name in enumerate(names):
                rr = [r for r in gr if r["run"] == name]
                if k == "reward":
                    xs = [r["step"] for r in rr]
                    ys = [r["mean_reward"] for r in rr]
                else:
                    xs = [0] + [r["step"] + 1 for r in rr]
                    ys = [rr[0]["pi"].get(k, 0)] + [r["pi_next"].get(k, 0) for r in rr]
                ax.plot(xs, ys, linestyle=styles[n % len(styles)], label=name)
            what = f"pi({k})" if k != "reward" else "mean R (run's own w_pr)"
            ax.set_title(f"{exp + ': ' if exp else ''}{prob}: {what}", fontsize=8)
            ax.set_ylabel(f"pi({k}): chance of drawing {k}" if k != "reward"
                          else "mean sample reward R", fontsize=7)
            ax.set_xlabel("step", fontsize=8)
            if k != "reward":
                ax.set_ylim(-0.02, 1.02)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cpu", "triton"), default="cpu",
                    help="cpu: kernels/cpu (C++ extensions); triton: kernels/gpu, for a CUDA "
                    "machine (on a CPU Triton's interpreter would run them at GPU sizes)")
    ap.add_argument("--kernels", help="folder of problem folders (default kernels/cpu for backend cpu, "
                    "kernels/gpu for triton)")
    ap.add_argument("--problems", help="comma-separated problem names (default: all)")
    ap.add_argument("--kinds", help="comma-separated kernel kinds to offer (default: all present)")
    ap.add_argument("--server", help="an existing kgym serve URL (default: start one)")
    ap.add_argument("--workers", default="auto", help="kgym serve --workers (default auto)")
    ap.add_argument("--kgym", default=os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym")))
    ap.add_argument("--runs", default=DEFAULT_RUNS, help="NAME:trloo|grpo:W_PR:prs|noprs,... "
                    f"(default {DEFAULT_RUNS})")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--samples", type=int, default=16, help="N, samples per problem per step")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--init", default="lazy=1.5,hacked=1.0",
                    help="initial logits KIND=V,... (others 0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evals", choices=("sample", "step"), default="sample",
                    help="sample: every sample its own evaluation; step: one evaluation per "
                    "(problem, kernel) drawn in a step, shared by its samples and runs")
    ap.add_argument("--max-evals", type=int, help="evaluation budget; stops before a step "
                    "that would exceed it")
    ap.add_argument("--max-seconds", type=float, help="time budget; no step starts after it")
    ap.add_argument("--prs-tau", type=float, default=rl.DEFAULT_TAU)
    ap.add_argument("--prs-s", type=float, default=rl.DEFAULT_S)
    ap.add_argument("--threshold", type=float, default=0.9, help="pi(fused) level for the table")
    ap.add_argument("--num-correct-trials", type=int, default=2)
    ap.add_argument("--num-perf-trials", type=int, default=10)
    ap.add_argument("--num-warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", help="output prefix: PREFIX.jsonl, PREFIX.txt, PREFIX.png")
    ap.add_argument("--append", action="store_true", help="add this experiment to PREFIX's files "
                    "(the .txt and .jsonl keep the earlier ones; the .png shows them all)")
    ap.add_argument("--label", help="the experiment's name in the files (default: evals per MODE)")
    a = ap.parse_args(argv)

    kdir = a.kernels or os.path.join(HERE, "kernels", "cpu" if a.backend == "cpu" else "gpu")
    problems = load_problems(kdir, a.problems.split(",") if a.problems else None,
                             a.kinds.split(",") if a.kinds else None)
    if not problems:
        raise SystemExit(f"bandit: no problems under {kdir}")
    runs = parse_runs(a.runs)
    fields = {"num_correct_trials": a.num_correct_trials, "num_perf_trials": a.num_perf_trials,
              "num_warmup": a.num_warmup, "timeout": a.timeout}
    server = None
    lines: list[str] = []

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    try:
        if a.server:
            url = a.server
        else:
            server = Server(a.kgym, a.workers, tmp_base=os.environ.get("TMPDIR"))
            url = server.url
            log("bandit: " + " / ".join(server.lines))
        ev = Evaluator(url, a.backend, fields, a.max_evals)
        rows: list[dict] = []
        state = run_bandit(problems, runs, ev, steps=a.steps, samples=a.samples, lr=a.lr,
                           init=a.init, seed=a.seed, evals_mode=a.evals, prs_tau=a.prs_tau,
                           prs_s=a.prs_s, out_rows=rows, log=log, max_seconds=a.max_seconds)
    finally:
        if server:
            server.close()
    wall = time.monotonic() - t0
    head = (f"kernel bandit: backend {a.backend}, problems {','.join(p.name for p in problems)}, "
            f"N = {a.samples}, steps {a.steps}, lr {a.lr} (SGD on logits), init {a.init}, seed {a.seed}, "
            f"evals {a.evals}" + (" (ONE real evaluation per (problem, kernel) per step, shared by the "
                                  "samples and runs that drew it)" if a.evals == "step" else
                                  " (every sample its own real evaluation)") +
            f"; request: {json.dumps(fields)}; PRS tau {a.prs_tau} s {a.prs_s}")
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        rev = "?"
    lines.append(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.uname().nodename} "
                 f"({os.cpu_count()} CPUs), tree at {rev}: bench/bandit/bandit.py "
                 + " ".join(argv if argv is not None else sys.argv[1:]))
    lines.append(head)
    lines.append("runs: " + ", ".join(f"{r.name} ({r.estimator}, w_pr {r.w_pr:g}, "
                                      f"{'PRS' if r.prs else 'no PRS'})" for r in runs))
    lines.append(f"evaluations: {ev.count} in {ev.seconds:.0f} s of waiting; wall {wall:.0f} s"
                 + (f"; stopped: {state['stopped']}" if state["stopped"] else ""))
    lines.append("")
    lines.append(table(rows, runs, problems, a.threshold, a.prs_tau, a.prs_s))
    text = "\n".join(lines)
    print(text)
    if a.out:
        label = a.label or f"evals per {a.evals}"
        for r in rows:
            r["experiment"] = label
        old_lines: list[str] = []
        old_text = ""
        if a.append and os.path.exists(a.out + ".jsonl"):
            with open(a.out + ".jsonl") as f:
                old_lines = [ln for ln in f.read().splitlines() if ln.strip()]
            with open(a.out + ".txt") as f:
                old_text = f.read().rstrip("\n") + "\n\n\n"
        new_lines = [json.dumps({"kind": "header", "experiment": label, "text": head,
                                 "argv": list(argv if argv is not None else sys.argv[1:]),
                                 "runs": [dataclasses.asdict(r) for r in runs],
                                 "problems": {p.name: p.kinds for p in problems}})]
        new_lines += [json.dumps({"kind": "step", **r}) for r in rows]
        new_lines.append(json.dumps({"kind": "summary", "experiment": label, "evaluations": ev.count,
                                     "wall_s": wall, "eval_wait_s": ev.seconds,
                                     "stopped": state["stopped"]}))
        with open(a.out + ".jsonl", "w") as f:
            f.write("\n".join(old_lines + new_lines) + "\n")
        with open(a.out + ".txt", "w") as f:
            f.write(old_text + text + "\n")
        all_rows = []
        for ln in old_lines + new_lines:
            o = json.loads(ln)
            if o.get("kind") == "step":
                o.setdefault("experiment", "evals per " + o.get("evals_mode", "?"))
                all_rows.append(o)
        try:
            plot(all_rows, a.out + ".png", f"kernel bandit ({a.backend}, N={a.samples}, SGD on logits)")
        except ImportError as e:  # a machine without matplotlib: plot PREFIX.jsonl elsewhere
            log(f"bandit: no plot ({e}); the rows are in {a.out}.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
