"""kgym's verl reward manager (kgym.verl.reward) against a real `kgym serve
--workers 2` on the cpu backend, loaded and called by verl's own
RewardLoopWorker from examples/verl/kgym_trloo_qwen.yaml, in verl's venv
(tests/verl/verl_reward_case.py). Skips without that venv, unless
KGYM_REQUIRE_VERL=1 (CI), under which it fails."""
from __future__ import annotations

import http.server
import json
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "verl"))
import verl_serve as V  # noqa: E402

V.require_verl()
sys.path.insert(0, os.path.join(V.REPO, "python"))
from kgym import rl  # noqa: E402


class Garbage(http.server.BaseHTTPRequestHandler):
    """A server that answers every request 200 with JSON that is not what
    docs/api.md says."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"tasks": "not a list"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *a):
        pass


def test_reward_manager_scores_a_batch_through_kgym_serve(tmp_path):
    ref = V.read(V.GELU_REF)
    samples = [{"reply": V.honest(), "reference": ref},
               {"reply": V.wrong(), "reference": ref},
               {"reply": "I would rather not write code.", "reference": ref},
               {"reply": V.CHEAT, "reference": ref},
               {"reply": V.honest(), "reference": V.broken_ref()}]
    garbage = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=garbage.serve_forever, daemon=True).start()
    e = V.Env("sqlite")
    try:
        e.start_server("--workers", "2")
        out = V.run_case("verl_reward_case.py", {
            "token_file": e.token_file, "model_dir": str(tmp_path / "tiny"),
            "runs": [{"server": e.url, "samples": samples},
                     # nothing listens there: unreachable for server_wait (3 s)
                     {"server": f"http://127.0.0.1:{V.free_port()}", "samples": samples[:1]},
                     {"server": f"http://127.0.0.1:{garbage.server_port}",
                      "samples": samples[:1]}]})
    finally:
        e.close()
        garbage.shutdown()
    real, down, bad = out["runs"]
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
