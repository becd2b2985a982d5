"""kgym.verl.env without verl (the project's Python and libkgym): the
C agent's code extraction rules (the cases of tests/unit/test_agent_prompt.c),
the classification and reward of result objects (rollout_score.c's rules,
libkgym's numbers), PRS per turn, and KgymScorer's batching and polling
against a stand-in server (tests/verl/verl_serve.py)."""
from __future__ import annotations

import asyncio
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "verl"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
import verl_serve as V  # noqa: E402
from kgym.verl.env import (KgymEnvError, KgymScorer, RewardCfg, extract_code,  # noqa: E402
                           prs_keep, score)

PAPER = RewardCfg()  # cap 3, w_pr 1, penalty 0, PRS 0.3 / 0.1


def test_extract_code_follows_the_c_agent():
    reply = ("Plan.\n```python\nclass ModelNew: # first\n    pass\n"
             "```\ntext\n```\nnot python\n```\n"
             "  ```Python  \nimport torch\nclass ModelNew(object):\n"
             "    pass\n  ```\nbye")
    assert extract_code(reply) == ("import torch\nclass ModelNew(object):\n    pass\n", "")
    assert extract_code("```py\nclass ModelNew:\n  x=1\n```") == ("class ModelNew:\n  x=1\n", "")
    code, why = extract_code("```pyx\nclass ModelNew: pass\n```")
    assert code is None and "no fenced ```python" in why
    assert extract_code("I cannot help.")[0] is None
    assert extract_code(None)[0] is None
    code, why = extract_code("```python\nclass Model(nn.Module): pass\n```")
    assert code is None and "class ModelNew" in why
    assert extract_code("```python\nclass ModelNewer: pass\n```")[0] is None
    code, why = extract_code("```python\nclass ModelNew: pass\n```\n"
                             "```python\nclass ModelNew:\n    def")
    assert code is None and "not closed" in why
    big = "```python\nclass ModelNew: pass\n" + "#" * (300 * 1024) + "\n```\n"
    code, why = extract_code(big)
    assert code is None and "256 KiB" in why


def result(**kw):
    return {"status": "completed", "verdict": "pass", "correctness": True, "speedup": 1.5,
            "profile": {"coverage": 0.8}, "hack_reasons": [], **kw}


def test_score_of_result_objects():
    s = score(result(), PAPER)
    assert s.correct and not s.hacked and s.reward == pytest.approx(1 + 1.5 + 0.8)
    assert s.keep_prob == 1  # coverage 0.8 > 0.4
    assert score(result(speedup=7.0), PAPER).reward == pytest.approx(1 + 3 + 0.8)  # capped
    s = score(result(profile=None, time_coverage=1.7), PAPER)  # clipped to 1
    assert s.coverage == 1 and s.reward == pytest.approx(3.5)
    assert score(result(profile=None), PAPER).reward == pytest.approx(2.5)  # no coverage: 0
    s = score(result(profile={"coverage": 0.35}), PAPER)
    assert s.keep_prob == pytest.approx(0.5)
    for hacked in ({"decoy_kernel": True}, {"hack_reasons": ["timer"]}, {"verdict": "hacked"}):
        s = score(result(**hacked), PAPER)
        assert s.hacked and s.reward == 0
    assert score(result(verdict="mismatch", correctness=False, speedup=None), PAPER).reward == 0
    assert score(None, RewardCfg(penalty=-1)).reward == -1  # no code: the penalty
    for bad, kind in ((result(verdict="infra_error"), "infra_error"),
                      (result(verdict="problem_error"), "problem_error"),
                      (result(status="failed", verdict=None), "infra_error"),
                      (result(status="cancelled", verdict=None), "cancelled"),
                      (result(status="running"), "malformed"), ("nope", "malformed")):
        with pytest.raises(KgymEnvError) as e:
            score(bad, PAPER)
        assert e.value.kind == kind


def test_score_reads_the_judged_coverage_never_the_claim():
    # the judge writes its figure to profile.coverage; the candidate's own
    # stays under profile.claimed, which no reward or PRS reads
    judged = {"coverage": 0.05, "claimed": {"coverage": 0.96}}
    s = score(result(profile=judged), PAPER)
    assert s.coverage == pytest.approx(0.05) and s.reward == pytest.approx(1 + 1.5 + 0.05)
    assert s.keep_prob == 0


def test_prs_per_turn():
    ss = [score(result(profile={"coverage": c}), PAPER) for c in (0.9, 0.35, 0.2, 0.35)]
    ss.append(score(result(verdict="mismatch", correctness=False, speedup=None,
                           profile={"coverage": 0.0}), PAPER))
    probs, keep = prs_keep(ss, PAPER, seed=7)
    assert probs == pytest.approx([1, 0.5, 0, 0.5, 1])
    assert keep[0] and not keep[2] and keep[4]  # certain ones
    assert prs_keep(ss, PAPER, seed=7) == (probs, keep)  # reproducible
    draws = [prs_keep(ss, PAPER, seed=s)[1][1] for s in range(200)]
    assert 60 < sum(draws) < 140  # kept about half the time


def test_scorer_batches_and_polls():
    srv = V.fake("seq", [V.PASS_2X])
    old = V.fake("old", [V.PASS_2X])
    try:
        async def go(url, n):
            sc = KgymScorer(server=url, fields={"backend": "cpu"}, poll=0.05)
            rs = await asyncio.gather(*[sc.evaluate("ref", f"code {i}") for i in range(n)])
            return sc, rs
        sc, rs = asyncio.run(go(f"http://127.0.0.1:{srv.server_port}", 5))
        assert sc.batches == [5] and all(r["verdict"] == "pass" for r in rs)
        assert len({r["task_id"] for r in rs}) == 5
        sc, rs = asyncio.run(go(f"http://127.0.0.1:{old.server_port}", 2))
        assert sc._per_task and [score(r, PAPER).reward for r in rs] == [3.5, 3.5]
    finally:
        srv.shutdown()
        old.shutdown()
