"""The miniature Dr. Kernel pipeline (bench/pipeline/pipeline.py) at toy
size on the CPU, every stage real: scripts/tiny-model (under a million
parameters) -> `kgym collect` from the scripted teacher (honest, wrong and
cheating kernels) against a real `kgym serve` on the cpu backend ->
`kgym train --sft` -> kgym.serve_lm -> `kgym rollout` 4 samples x 2 turns
with logprobs -> `kgym train` TRLOO and GRPO on those rows (MRS on the
server's logprobs) -> reload -> `kgym rollout` -> `kgym report`. Any
stage failing fails the run (exit 1 naming it); the checks below read the
files the stages wrote."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from kgym_env import KGYM, ROOT

PIPE = os.path.join(ROOT, "bench", "pipeline", "pipeline.py")
pytestmark = pytest.mark.skipif(
    not os.access(KGYM, os.X_OK) or importlib.util.find_spec("transformers") is None,
    reason=f"needs {KGYM} (make) and transformers")


def rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(x) for x in f]


@pytest.fixture
def out():
    # a folder of its own: kgym serve's data and the candidates' work dirs
    # live below it for the whole run, reachable by uid nobody
    base = tempfile.mkdtemp(prefix="kgym-pipe-", dir="/tmp")
    os.chmod(base, 0o755)
    yield os.path.join(base, "pipe")
    shutil.rmtree(base, ignore_errors=True)


def test_pipeline_toy(out: str) -> None:
    p = subprocess.Popen([sys.executable, PIPE, "--mode", "toy", "--out", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, KGYM_BIN=KGYM))
    try:
        _, err = p.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        p.terminate()  # the pipeline ends its servers on SIGTERM
        _, err = p.communicate(timeout=60)
        raise AssertionError(f"the pipeline took over 540 s:\n{err[-4000:]}")
    assert p.returncode == 0, err[-4000:]
    with open(os.path.join(out, "rounds.json")) as f:
        rec = json.load(f)
    assert "error" not in rec
    st = rec["stages"]
    assert 0 < st["tiny_model"]["params"] < 1_000_000

    # the teacher: honest kernels pass, its cheats are hacked and paid 0,
    # the wrong kernel is a mismatch; collect keeps the trajectories that
    # end correct (samples 0-2 of 4)
    teach = {(r["sample"], r["turn"]): r for r in rows(os.path.join(out, "rounds",
                                                                     "teacher.jsonl"))}
    assert sorted(teach) == [(s, t) for s in range(4) for t in range(2)]
    verdict = {k: (r["result"] or {}).get("verdict") for k, r in teach.items()}
    assert verdict[0, 0] == verdict[0, 1] == "pass"
    assert verdict[1, 0] == "mismatch" and verdict[1, 1] == "pass"
    assert verdict[2, 0] == verdict[3, 0] == verdict[3, 1] == "hacked"
    assert all(r["reward"] == 0 for k, r in teach.items() if verdict[k] != "pass")
    assert all(r["reward"] >= 1 for k, r in teach.items() if verdict[k] == "pass")
    assert st["collect"]["sft_chats"] == 3 and st["collect"]["hacked_reward_max"] == 0

    # SFT moved the model; the held-out loss is finite
    assert st["sft"]["steps"] == 4 and st["sft"]["loss_last"] < st["sft"]["loss_first"]
    assert math.isfinite(st["sft"]["val_loss"])

    # rounds: round 0 from the SFT checkpoint, then TRLOO and GRPO each
    # trained on round 0's rows, the server reloaded with their checkpoints
    rds = {r["name"]: r for r in rec["rounds"]}
    assert list(rds) == ["teacher", "r0-sft", "r1-trloo", "r1-grpo"]
    assert rds["r0-sft"]["checkpoint"] == "ckpt/sft/step-4"
    for e in ("trloo", "grpo"):
        rd = rds[f"r1-{e}"]
        assert rd["checkpoint"] == f"ckpt/{e}-r1/step-2"
        assert rd["train"]["on"] == "r0-sft" and rd["train"]["estimator"] == e
        # MRS checked every sequence against the logprobs serve_lm returned,
        # and they are the trainer's own: none rejected
        assert rd["train"]["mrs_checked"] > 0 and rd["train"]["mrs_dropped"] == 0
    for name in ("r0-sft", "r1-trloo", "r1-grpo"):
        rr = rows(os.path.join(out, "rounds", f"{name}.jsonl"))
        assert len(rr) == 8 and rds[name]["rollout"]["trajectories"] == 4
        for r in rr:
            assert r["reply"] is not None and r["token_ids"], (name, r["error"], r)
            assert len(r["logprobs"] or []) == len(r["token_ids"]), (name, r)
        assert rds[name]["generation"]["sequences"] >= 8
        assert rds[name]["generation"]["tokens"] == sum(len(r["token_ids"]) for r in rr)

    # the report holds every run side by side, its numbers those of the rows
    with open(os.path.join(out, "report", "report.json")) as f:
        rep = json.load(f)
    assert [r["name"] for r in rep["runs"]] == list(rds)
    assert os.path.getsize(os.path.join(out, "report", "report.html")) > 1000
    t0 = rep["runs"][0]["levels"]["level1"]["turns"]["0"]
    assert t0["hacked_ratio"] == pytest.approx(2 / 4)  # the two cheats of turn 0
    assert t0["fast_p"]["0.0"] == pytest.approx(1 / 4)
    assert [d["b"] for d in rep["diffs"]] == list(rds)[1:]
    with open(os.path.join(out, "rounds.txt")) as f:
        txt = f.read()
    assert all(n in txt for n in rds) and "mrs drop/chk" in txt
