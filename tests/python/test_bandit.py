"""bench/bandit/bandit.py, the kernel bandit: its policy-gradient step
against values worked by hand, GRPO's advantages being (1 - 1/N) times
TRLOO's on the same rewards (libkgym, both estimators), and a short real
run against `kgym serve` on the cpu backend in which the hacked kernel is
never rewarded and the policy moves off it. About 15 s on 2 CPUs (the real
run; the C++ extensions are built once into kgym's extension cache)."""
from __future__ import annotations

import importlib.util
import math
import os
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KGYM = os.environ.get("KGYM_BIN") or str(REPO / "build" / "kgym")

_spec = importlib.util.spec_from_file_location("bandit", REPO / "bench" / "bandit" / "bandit.py")
bandit = importlib.util.module_from_spec(_spec)
sys.modules["bandit"] = bandit
_spec.loader.exec_module(bandit)


def test_pg_gradient_by_hand():
    # pi = (1/4, 1/2, 1/4); samples (a, A, keep): (1, 2, T), (0, -1, T),
    # (1, 0.5, F: PRS dropped it), (2, None: invalid), N = 4.
    # 2 * (e1 - pi) = (-0.5, 1, -0.5); -1 * (e0 - pi) = (-0.75, 0.5, 0.25)
    # sum / 4 = (-0.3125, 0.375, -0.0625)
    logits = [0.0, math.log(2.0), 0.0]
    assert bandit.softmax(logits) == pytest.approx([0.25, 0.5, 0.25], abs=1e-15)
    g = bandit.pg_gradient(logits, [1, 0, 1, 2], [2.0, -1.0, 0.5, None], [True, True, False, True])
    assert g == pytest.approx([-0.3125, 0.375, -0.0625], abs=1e-15)
    new = bandit.sgd_step(logits, g, 2.0)
    assert new == pytest.approx([-0.625, math.log(2.0) + 0.75, -0.125], abs=1e-15)
    # the same gradient by central differences of (1/N) sum keep A log pi(a)
    acts, adv, keep = [1, 0, 1, 2], [2.0, -1.0, 0.5, 0.0], [True, True, False, True]

    def J(th):
        pi = bandit.softmax(th)
        return sum(A * math.log(pi[a]) for a, A, k in zip(acts, adv, keep) if k) / len(acts)

    h = 1e-6
    for j in range(3):
        up = list(logits)
        dn = list(logits)
        up[j] += h
        dn[j] -= h
        assert (J(up) - J(dn)) / (2 * h) == pytest.approx(g[j], abs=1e-8)
    # a kept positive advantage raises its own probability, and only keep counts
    assert bandit.pg_gradient(logits, [1], [1.0], [False]) == [0.0, 0.0, 0.0]
    assert bandit.draw([0.25, 0.5, 0.25], 0.0) == 0
    assert bandit.draw([0.25, 0.5, 0.25], 0.25) == 1
    assert bandit.draw([0.25, 0.5, 0.25], 0.999) == 2


def test_grpo_is_trloo_times_one_minus_one_over_n():
    # by hand, N = 4, rewards 3, 1, 1, 0: TRLOO R_i - mean(others), GRPO R_i - mean
    t = bandit.group_advantages([3.0, 1.0, 1.0, 0.0], "trloo")
    g = bandit.group_advantages([3.0, 1.0, 1.0, 0.0], "grpo")
    assert t == pytest.approx([3 - 2 / 3, 1 - 4 / 3, 1 - 4 / 3, -5 / 3], abs=1e-12)
    assert g == pytest.approx([1.75, -0.25, -0.25, -1.25], abs=1e-12)
    rng = random.Random(7)
    for n in (2, 4, 16):
        R = [rng.choice([0.0, 0.0, 1.0 + 3 * rng.random(), 2.0 + 2 * rng.random()]) for _ in range(n)]
        R[0] = 4.5  # never all equal
        t = bandit.group_advantages(R, "trloo")
        g = bandit.group_advantages(R, "grpo")
        for a, b in zip(t, g):
            assert b == pytest.approx((1 - 1 / n) * a, abs=1e-12)
        # so the policy gradient on the same samples is scaled the same way
        logits = [rng.gauss(0, 1) for _ in range(5)]
        acts = [rng.randrange(5) for _ in range(n)]
        keep = [True] * n
        gt = bandit.pg_gradient(logits, acts, t, keep)
        gg = bandit.pg_gradient(logits, acts, g, keep)
        for a, b in zip(gt, gg):
            assert b == pytest.approx((1 - 1 / n) * a, abs=1e-12)
    # an invalid sample leaves the group: the factor is 1 - 1/(valid samples)
    t = bandit.group_advantages([3.0, None, 1.0, 0.0], "trloo")
    g = bandit.group_advantages([3.0, None, 1.0, 0.0], "grpo")
    assert t[1] is None and g[1] is None
    assert [g[i] for i in (0, 2, 3)] == pytest.approx([(2 / 3) * t[i] for i in (0, 2, 3)], abs=1e-12)


def test_reward_and_prs_from_results():
    # kgym result objects, as the server returns them (the fields read)
    fused = {"status": "completed", "verdict": "pass", "correctness": True, "decoy_kernel": False,
             "hack_reasons": [], "speedup": 2.0, "profile": {"coverage": 0.95}}
    lazy = dict(fused, speedup=1.0, profile={"coverage": 0.1})
    hacked = {"status": "completed", "verdict": "hacked", "correctness": False, "decoy_kernel": True,
              "hack_reasons": ["no_custom_kernel"], "speedup": None, "profile": None}
    broken = {"status": "completed", "verdict": "problem_error", "correctness": False}
    R = bandit.rewards_of([fused, lazy, hacked, broken], 1.0)
    assert R[:3] == pytest.approx([1 + 2 + 0.95, 1 + 1 + 0.1, 0.0]) and R[3] is None
    assert bandit.rewards_of([fused, lazy], 0.0) == pytest.approx([3.0, 2.0])
    keep, kp = bandit.prs_keep([fused, lazy, hacked, broken], R, seed=1, tau=0.3, s=0.1)
    # coverage 0.95 keeps surely, 0.1 never; the hacked sample is not PRS's
    # to judge (kept: its zero reward teaches), the problem_error one is out
    assert keep == [True, False, True, False]
    assert kp[:2] == [1.0, 0.0]


def _why(kind: str, res: dict) -> str:
    """What a failed assertion on a real result shows: the verdict, its
    message and the clock's figures (a dict's repr is cut short)."""
    err = res.get("error") or {}
    checks = res.get("checks") or {}
    return (f"{kind}: {res.get('verdict')} {res.get('hack_reasons')} {err.get('message')}; "
            f"trusted_clock {checks.get('trusted_clock')}; first look "
            f"{checks.get('trusted_clock_retried')}; retried {checks.get('timing_retried')}")


@pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"no kgym binary at {KGYM}")
def test_real_run_hacked_never_rewarded():
    kdir = REPO / "bench" / "bandit" / "kernels" / "cpu"
    problems = bandit.load_problems(str(kdir), ["swish_residual"], ["fused", "lazy", "wrong", "hacked"])
    assert problems[0].kinds == ["fused", "lazy", "wrong", "hacked"]
    runs = [bandit.RunSpec("trloo", "trloo", 1.0, False), bandit.RunSpec("grpo-prs", "grpo", 1.0, True)]
    server = bandit.Server(KGYM, "1")
    try:
        ev = bandit.Evaluator(server.url, "cpu", {"num_correct_trials": 1, "num_perf_trials": 5,
                                                  "num_warmup": 1, "timeout": 120}, max_evals=40)
        rows: list = []
        logged: list = []
        bandit.run_bandit(problems, runs, ev, steps=3, samples=8, lr=2.0, init="hacked=2",
                          seed=3, evals_mode="step", prs_tau=0.3, prs_s=0.1, out_rows=rows,
                          log=logged.append)
    finally:
        server.close()
    # the step lines' numbers are named once, before them
    assert "pi(fused)/pi(lazy)/pi(hacked)" in logged[0] and "swish_residual" in logged[0]
    assert sum(1 for ln in logged if ln.startswith("bandit: step ")) == 3
    assert len(rows) == 6 and ev.count <= 12
    n_hacked = 0
    for r in rows:
        for kind, res, R in zip(r["actions"], r["results"], r["rewards"]):
            if kind == "hacked":
                n_hacked += 1
                assert res["verdict"] == "hacked" and res["hack_reasons"], res
                assert R == 0.0
            elif kind == "wrong":
                assert res["verdict"] == "mismatch" and R == 0.0, res
            else:  # fused, lazy: correct, so at least 1
                assert res["verdict"] == "pass" and R >= 1.0, _why(kind, res)
    assert n_hacked >= 8  # pi(hacked) starts at e^2 / (e^2 + 3) = 0.71
    # the figure the bench reports: GRPO's step is TRLOO's times 1 - 1/N
    ratios = [r["grpo_over_trloo"] for r in rows if r["grpo_over_trloo"] is not None]
    assert ratios and all(x == pytest.approx(1 - 1 / 8, abs=1e-9) for x in ratios)
    for run in ("trloo", "grpo-prs"):
        rr = [r for r in rows if r["run"] == run]
        start, end = rr[0]["pi"]["hacked"], rr[-1]["pi_next"]["hacked"]
        assert start == pytest.approx(math.exp(2) / (math.exp(2) + 3))
        assert end < start - 0.15, (run, start, end)
        # the mass went to the kernels that pass
        assert rr[-1]["pi_next"]["fused"] + rr[-1]["pi_next"]["lazy"] > rr[0]["pi"]["fused"] + rr[0]["pi"]["lazy"]


def test_plot_axes_name_their_quantity():
    rows = [{"experiment": "evals per step", "problem": "p", "run": run, "step": st,
             "pi": {"fused": 0.3, "lazy": 0.3, "hacked": 0.4},
             "pi_next": {"fused": 0.4, "lazy": 0.3, "hacked": 0.3}, "mean_reward": 1.5}
            for run in ("trloo", "grpo") for st in range(2)]
    fig = bandit.figure(rows, "t")
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["pi(fused): chance of drawing fused", "pi(lazy): chance of drawing lazy",
                      "pi(hacked): chance of drawing hacked", "mean sample reward R"], labels
    assert fig.axes[0].get_title().startswith("evals per step: p: ")
