"""kgym's verl reward manager (kgym.verl.reward) against a real `kgym serve
--workers 2` on the cpu backend, loaded and called by verl's own
RewardLoopWorker from examples/verl/kgym_trloo_qwen.yaml, in verl's venv
(tests/verl/verl_reward_case.py); and against stand-in servers for the
replies a real one never gives (malformed, no POST /results/batch). Skips without that venv, unless
KGYM_REQUIRE_VERL=1 (CI), under which it fails."""
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


def test_reward_manager_scores_a_batch_through_kgym_serve(tmp_path):
    ref = V.read(V.GELU_REF)
    samples = [{"reply": V.honest(), "reference": ref},
               {"reply": V.wrong(), "reference": ref},
               {"reply": "I would rather not write code.", "reference": ref},
               {"reply": V.CHEAT, "reference": ref},
               {"reply": V.honest(), "reference": V.broken_ref()}]
    fakes = [V.fake("batch"), V.fake("results"), V.fake("old")]
    e = V.Env("sqlite")
    try:
        e.start_server("--workers", "2")
        out = V.run_case("verl_reward_case.py", {
            "token_file": e.token_file, "model_dir": str(tmp_path / "tiny"),
            "runs": [{"server": e.url, "samples": samples},
                     # nothing listens there: unreachable for server_wait (3 s)
                     {"server": f"http://127.0.0.1:{V.free_port()}", "samples": samples[:1]},
                     *[{"server": f"http://127.0.0.1:{f.server_port}", "samples": samples[:1]}
                       for f in fakes]]})
    finally:
        e.close()
        for f in fakes:
            f.shutdown()
    real, down, bad, bad_results, old = out["runs"]
    assert real["manager"] == "KgymRewardManager"
    # the four samples with code went out as one batch, then were polled
    assert real["batches"] == [4], real["batches"]
    s = real["scores"]
    info = [x.get("reward_extra_info") for x in s]
    # honest: pass; the paper's reward 1 + min(s, 3) + PR, recomputed by libkgym
    assert info[0]["kgym_verdict"] == "pass" and info[0]["kgym_correct"], s[0]
    sp, cov = info[0]["kgym_speedup"], info[0]["kgym_coverage"]
    assert 0 < cov <= 1 and sp > 0
    assert s[0]["reward_score"] == pytest.approx(1 + min(sp, 3) + cov)
    assert s[0]["reward_score"] == pytest.approx(
        rl.reward(correct=True, hacked=False, speedup=sp, coverage=cov, w_pr=1))
    # wrong constant: mismatch, 0; no code: 0 and nothing submitted; cheat: hacked, 0
    assert info[1]["kgym_verdict"] == "mismatch" and s[1]["reward_score"] == 0
    assert info[2] == {**info[2], "kgym_has_code": False, "kgym_verdict": None}
    assert s[2]["reward_score"] == 0
    assert info[3]["kgym_hacked"] and s[3]["reward_score"] == 0, s[3]
    # the problem's fault is not scored as the policy's: an error, never a 0
    assert "error" in s[4] and "problem_error" in s[4]["error"], s[4]
    assert "unreachable" in down["scores"][0]["error"], down
    assert "did not answer POST /evaluate/batch" in down["scores"][0]["error"]
    assert "malformed" in bad["scores"][0]["error"] and "not a list" in bad["scores"][0]["error"]
    assert "malformed" in bad_results["scores"][0]["error"], bad_results
    assert "POST /results/batch answered" in bad_results["scores"][0]["error"]
    # a server without POST /results/batch: polled task by task; the result's
    # numbers scored by libkgym (1 + min(2, 3) + 0.5)
    assert old["scores"][0]["reward_score"] == pytest.approx(3.5), old
