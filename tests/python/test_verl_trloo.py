"""kgym.verl.trloo through verl's own advantage path, in verl's venv
(.venv-verl, scripts/verl-venv; $KGYM_VERL_PYTHON): a multi-turn batch
worked by hand. Skips when that venv is absent, unless KGYM_REQUIRE_VERL=1
(CI), under which it fails."""
from __future__ import annotations

import json
import math
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.environ.get("KGYM_VERL_PYTHON") or os.path.join(REPO, ".venv-verl", "bin", "python")

if not os.access(PY, os.X_OK):
    if os.environ.get("KGYM_REQUIRE_VERL") == "1":
        raise RuntimeError(f"KGYM_REQUIRE_VERL=1 but {PY} is missing (scripts/verl-venv)")
    pytest.skip(f"verl's venv {PY} not built (scripts/verl-venv)", allow_module_level=True)

L = 10


def sample(turns):
    """turns: [(start, end, reward)]; the reward on the turn's last token."""
    rew, mask = [0.0] * L, [0] * L
    for a, b, r in turns:
        mask[a:b] = [1] * (b - a)
        rew[b - 1] = r
    return rew, mask


def test_trloo_through_verl_compute_advantage():
    # uid a: s0 turns (3, 1), s1 (0, 2), s2 one turn (1); gamma 0.5.
    # returns s0 3.5, 1; s1 1, 2; s2 1.
    # turn 0, N = 3: s0 3.5 - (1 + 1)/2 = 2.5; s1 1 - (3.5 + 1)/2 = -1.25; s2 -1.25
    # turn 1, N = 2 (s2 has ended): s0 1 - 2 = -1; s1 2 - 1 = 1
    # uid b: a lone sample: 0 (no other sample to compare with)
    # uid c: single-turn, rewards 4, 0: TRLOO 4 and -4
    samples = [sample([(0, 3, 3.0), (5, 8, 1.0)]), sample([(0, 2, 0.0), (4, 6, 2.0)]),
               sample([(0, 4, 1.0)]), sample([(1, 3, 5.0)]),
               sample([(0, 6, 4.0)]), sample([(0, 2, 0.0)])]
    uid = ["a", "a", "a", "b", "c", "c"]
    want_adv = [[(0, 3, 2.5), (5, 8, -1.0)], [(0, 2, -1.25), (4, 6, 1.0)], [(0, 4, -1.25)],
                [(1, 3, 0.0)], [(0, 6, 4.0)], [(0, 2, -4.0)]]
    want_ret = [[(0, 3, 3.5), (5, 8, 1.0)], [(0, 2, 1.0), (4, 6, 2.0)], [(0, 4, 1.0)],
                [(1, 3, 5.0)], [(0, 6, 4.0)], [(0, 2, 0.0)]]
    case = {"rewards": [s[0] for s in samples], "mask": [s[1] for s in samples],
            "uid": uid, "gamma": 0.5}
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([PY, os.path.join(REPO, "tests", "verl", "verl_trloo_case.py")],
                       input=json.dumps(case), capture_output=True, text=True, timeout=300,
                       env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])

    def dense(spans):
        row = [0.0] * L
        for a, b, v in spans:
            row[a:b] = [v] * (b - a)
        return row

    for i in range(len(samples)):
        assert got["advantages"][i] == pytest.approx(dense(want_adv[i]), abs=1e-6), i
        assert got["returns"][i] == pytest.approx(dense(want_ret[i]), abs=1e-6), i


def test_mrs_settings_match_libkgym_through_verl():
    """kgym.verl.mrs's rollout_rs settings in verl's own rejection code
    keep the sequences libkgym's MRS keeps: geometric means around both
    bounds, tokens around the veto (one-sided: ratios below 1)."""
    import random

    from kgym import rl

    rng = random.Random(5)
    seqs = []
    for _ in range(300):
        n = rng.randint(1, 12)
        g = math.log(rng.uniform(0.9975, 1.0025))  # geometric ratio around [0.999, 1.001]
        d = [g] * n
        if n > 1 and rng.random() < 0.4:  # a spike down, compensated: the veto's side
            spike = -rng.uniform(8.0, 10.5)  # ratio e^-8 .. e^-10.5 around 1e-4 = e^-9.21
            d[0] += spike
            d[1] -= spike
        seqs.append(d)
    # between a bound and its reciprocal: 1/1.001 = 0.999000999, 1/0.999 = 1.001001
    for g in (0.9990005, 0.9989995, 1.0009995, 1.0010005):
        seqs.append([math.log(g)] * 3)
    # the libkgym side: train = d, rollout = 0
    want = rl.mrs(seqs, [[0.0] * len(s) for s in seqs])["keep"]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([PY, os.path.join(REPO, "tests", "verl", "verl_mrs_case.py")],
                       input=json.dumps({"log_ratio": seqs, "cfg": {}}), capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])["keep"]
    # verl computes the mean in its own order: leave out means within 1e-12
    # of a bound
    near = [abs(math.exp(sum(s) / len(s)) - b) < 1e-12 for s in seqs for b in (0.999, 1.001)]
    near = [near[2 * i] or near[2 * i + 1] for i in range(len(seqs))]
    bad = [i for i in range(len(seqs)) if not near[i] and got[i] != want[i]]
    assert not bad, [(seqs[i], want[i], got[i]) for i in bad[:3]]
    assert want[-4:] == [True, False, True, False]
    assert 50 < sum(want) < 250  # both outcomes are exercised
    assert sum(1 for s, k in zip(seqs, want) if not k and 0.999 <= math.exp(sum(s) / len(s))
               <= 1.001) > 10  # some by the veto alone
