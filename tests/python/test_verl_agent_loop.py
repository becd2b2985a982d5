"""kgym's verl agent loop (kgym.verl.agent_loop, ``kgym_agent``) run by
verl's own agent-loop worker against a real `kgym serve --workers 2` on the
cpu backend, in verl's venv (tests/verl/verl_agent_case.py): the language
model is the one stand-in (a scripted generate()). Per-turn rewards by
libkgym, feedback carried into the next prompt, turn indices, PRS dropping
a turn's tokens but not its reward, TRLOO per (problem, turn) through
verl's compute_advantage, a problem_error never scored, and (against a
stand-in server, to have it on demand) an infra error at turn 1 ending the
episode after turn 0. Also: the
example YAML composed by verl's hydra config names components that are
registered. Skips without verl's venv, unless KGYM_REQUIRE_VERL=1 (CI)."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "verl"))
import verl_serve as V  # noqa: E402

V.require_verl()
sys.path.insert(0, os.path.join(V.REPO, "python"))
from kgym import rl  # noqa: E402

NO_CODE = "Let me think about it first."


def spans(mask):
    out, start = [], None
    for i, v in enumerate(list(mask) + [0]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    return out


def test_agent_loop_through_verl_against_kgym_serve(tmp_path):
    ref = V.read(V.GELU_REF)
    # three samples of one problem, two turns each
    replies = [[V.honest(), V.honest()], [V.wrong(), V.honest()], [NO_CODE, V.CHEAT]]
    # the turn-1 evaluation fails on the server's side (status failed: an
    # infra_error on its last attempt); a stand-in server, to have it on demand
    flaky = V.fake("seq", [V.PASS_2X, {"status": "failed", "verdict": "infra_error",
                                       "error": "the worker died"}])
    e = V.Env("sqlite")
    try:
        e.start_server("--workers", "2")
        out = V.run_case("verl_agent_case.py", {
            "server": e.url, "token_file": e.token_file, "model_dir": str(tmp_path / "tiny"),
            "runs": [
                # PRS threshold above the honest kernel's coverage (0.98): its
                # correct turns are dropped (keep_prob 0), the others kept
                {"overrides": ["kgym.turns=2", "kgym.reward.prs_tau=0.995",
                               "kgym.reward.prs_s=0.001"],
                 "groups": [{"uid": "gelu", "reference": ref, "replies": replies}]},
                {"overrides": ["kgym.turns=2"],
                 "groups": [{"uid": "broken", "reference": V.broken_ref(),
                             "replies": [[V.honest(), V.honest()]]}]},
                {"overrides": ["kgym.turns=2"], "server": f"http://127.0.0.1:{flaky.server_port}",
                 "groups": [{"uid": "flaky", "reference": ref,
                             "replies": [[V.honest(), V.honest()]]}]},
                # a response budget of 120 tokens: the honest reply is cut
                {"overrides": ["kgym.turns=2", "data.max_response_length=120"],
                 "groups": [{"uid": "long", "reference": ref,
                             "replies": [[V.honest(), V.honest()]]}]}]}, timeout=300)
    finally:
        e.close()
        flaky.shutdown()
    run, broken, cut, long = out["runs"]
    assert "kgym_agent" in run["registry"]
    s = run["samples"]
    assert [x["kgym_turn_index"] for x in s] == [[0, 1]] * 3
    assert [x["kgym_verdicts"] for x in s] == [["pass", "pass"], ["mismatch", "pass"],
                                               [None, "hacked"]]
    # per-turn rewards: libkgym's R = 1 + min(s, 3) + PR for a pass, else 0
    R = {}
    for i, x in enumerate(s):
        for t, (v, sp, cov) in enumerate(zip(x["kgym_verdicts"], x["kgym_speedups"],
                                             x["kgym_coverages"])):
            want = rl.reward(correct=v == "pass", hacked=v == "hacked", speedup=sp,
                             coverage=cov, w_pr=1)
            assert x["kgym_turn_rewards"][t] == pytest.approx(want)
            R[i, t] = want
            if v == "pass":
                assert want == pytest.approx(1 + min(sp, 3) + cov) and want > 1
            else:
                assert want == 0
        assert x["turn_scores"] == x["kgym_turn_rewards"]
    # PRS: correct turns dropped, the others kept
    assert [x["kgym_keep"] for x in s] == [[False, False], [True, False], [True, True]]
    assert [x["kgym_keep_prob"] for x in s] == [[0, 0], [1, 0], [1, 1]]
    for i, x in enumerate(s):
        ends = x["kgym_turn_ends"]
        # each turn's reward on its last token, in the batch (legacy worker)
        # and in as_dict (the v1 trainer's path)
        nz = {j: v for j, v in enumerate(x["rm_scores"]) if v}
        assert nz == pytest.approx({ends[t] - 1: R[i, t] for t in range(2) if R[i, t]})
        L = len(x["as_dict_rm_scores"])
        assert x["as_dict_rm_scores"] == pytest.approx(x["rm_scores"][:L])
        # kept turns are runs of the mask ending at their ends; dropped: no tokens
        kept = [t for t in range(2) if x["kgym_keep"][t]]
        assert [b for _, b in spans(x["mask"])] == [ends[t] for t in kept]
        for t in range(2):
            if not x["kgym_keep"][t]:
                assert x["mask"][ends[t] - 1] == 0
    # the feedback of turn 0 is in the prompt of turn 1, in the C agent's words
    for x in s:
        assert len(x["prompts_seen"]) == 2
        fb = x["kgym_feedback"][0]
        assert "Your program of turn 1 was compiled" in x["prompts_seen"][1]
        assert fb in x["prompts_seen"][1] and fb not in x["prompts_seen"][0]
    assert s[0]["kgym_feedback"][0].startswith("Verdict: pass")
    assert "mismatch" in s[1]["kgym_feedback"][0]
    assert s[2]["kgym_feedback"][0].startswith("Your program was not evaluated: your reply has "
                                               "no fenced ```python code block")
    # TRLOO per turn over the group, computed by hand from the rewards
    G = rl.returns([[R[i, 0], R[i, 1]] for i in range(3)], gamma=1.0)
    for i, x in enumerate(s):
        for t in range(2):
            others = [G[j][t] for j in range(3) if j != i]
            a = G[i][t] - sum(others) / 2
            if x["kgym_keep"][t]:
                sp_t = [sp for sp in spans(x["mask"]) if sp[1] == x["kgym_turn_ends"][t]][0]
                assert x["advantages"][sp_t[0]] == pytest.approx(a, abs=1e-5), (i, t)
                assert x["returns"][sp_t[1] - 1] == pytest.approx(G[i][t], abs=1e-5)
    # no code then a cheat: both turns well below the group (about -3 and -2)
    assert all(s[2]["advantages"][a] < -1 for a, _ in spans(s[2]["mask"]))
    # a problem whose reference fails: the environment's fault, never a score
    assert broken.get("kind") == "problem_error", broken
    assert list(broken["calls"]) == ["0"] and len(broken["calls"]["0"]) == 1
    # an infra error at turn 1: the episode ends after turn 0, whose reward
    # (1 + min(2, 3) + 0.5 by libkgym) is on the response's last token; the
    # turn-1 reply and the feedback before it are not in the response
    c = cut["samples"][0]
    assert c["kgym_stop"] == "env:infra_error" and len(c["prompts_seen"]) == 2
    assert c["kgym_turn_index"] == [0] and c["kgym_turn_rewards"] == pytest.approx([3.5])
    assert spans(c["mask"]) == [(0, c["response_len"])] == [(0, c["kgym_turn_ends"][0])]
    assert {j: v for j, v in enumerate(c["rm_scores"]) if v} == {c["response_len"] - 1: 3.5}
    # a reply past the response budget is cut at it, as max_tokens would: its
    # block is unclosed, it scores the penalty (nothing submitted), it is
    # the last turn
    g = long["samples"][0]
    assert g["kgym_stop"] == "response_length" and len(g["prompts_seen"]) == 1
    assert g["kgym_turn_rewards"] == [0] and g["kgym_verdicts"] == [None]
    assert "not closed" in g["kgym_feedback"][0]
    assert g["response_len"] == 120 and spans(g["mask"]) == [(0, 120)]


def test_example_yaml_composes_with_registered_components(tmp_path):
    out = V.run_case("verl_config_case.py", {"model_dir": str(tmp_path / "tiny")})
    assert out["adv_estimator"] == "trloo" and out["trloo_registered"]
    assert out["default_agent_loop"] == "kgym_agent" and out["agent_loop_target"] == \
        "kgym.verl.agent_loop.KgymAgentLoop"
    assert out["agent_loop_class"] == "KgymAgentLoop"
    assert out["reward_manager_class"] == "KgymRewardManager"
    assert out["rollout_correction_matches_mrs"], out
    assert out["use_v1"] and out["multi_turn"]
    assert not out["critic"] and not out["reference"]  # TRLOO: no critic, no KL reference
    # python -m kgym.verl.dataset's parquet, read by verl's own dataset class
    d = out["dataset"]
    assert d["len"] == 7 and d["roles"] == ["system", "user"], d
    assert d["name"] == "level1/1_GELU" and d["agent_name"] == "kgym_agent"
    assert d["has_reference"] and d["cpu_hint"]

