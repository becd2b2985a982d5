"""kgym.verl.trloo through verl's own advantage path, in verl's venv
(.venv-verl, scripts/verl-venv; $KGYM_VERL_PYTHON): a multi-turn batch
worked by hand. Skips when that venv is absent, unless KGYM_REQUIRE_VERL=1
(CI), under which it fails."""
from __future__ import annotations

import json
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
