"""kgym rollout -> kgym train, end to end: a scripted policy
(scripted_policy.py) against a real `kgym serve --workers 2` on the cpu
backend writes rows for one problem (3 samples x 2 turns: honest, wrong
then honest, no code then a cheat); `kgym train` takes policy-gradient
steps on them with a tiny random Llama built here (loss finite, parameters
changed, the rows it used counted as the rows say); with the rows' token
ids, MRS rejects the scripted policy's made-up logprobs and nothing moves;
`kgym collect` on the same rollout file feeds `kgym train --sft`."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from kgym_env import KGYM, ROOT, Env
from scripted_policy import ScriptedPolicy

pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import train_tiny as T  # noqa: E402

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")

SOL = os.path.join(ROOT, "problems", "cpu", "level1", "solutions")
GELU = "1_GELU"


def block(code: str, before: str) -> str:
    return f"{before}\n\n```python\n{code}```\n"


def honest() -> str:
    with open(os.path.join(SOL, f"{GELU}.cpu.py")) as f:
        return block(f.read(), "I fuse the op into one OpenMP loop.")


def wrong() -> str:
    with open(os.path.join(SOL, f"{GELU}.cpu.py")) as f:
        code = f.read()
    code = code.replace("0.70710678118654752f", "0.5f").replace(
        "kgym_cpu_level1_1_GELU_cpu", "kgym_train_gelu_wrong")
    return block(code, "A tuned constant.")


CHEAT = block("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n",
              "PyTorch's own GELU.")


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KGYM, "train", *args], capture_output=True, text=True, timeout=300)


def metrics(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(x) for x in f]


def test_rollout_then_train(tmp_path) -> None:
    e = Env("sqlite")
    pol = ScriptedPolicy({GELU: {0: {0: {"text": honest()}, 1: {"text": honest()}},
                                 1: {0: {"text": wrong()}, 1: {"text": honest()}},
                                 2: {0: {"text": "No code today."}, 1: {"text": CHEAT}}}})
    try:
        e.start_server("--workers", "2")
        probs = os.path.join(e.base, "problems")
        os.makedirs(probs)
        shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
        rows = str(tmp_path / "rows.jsonl")
        flags = ["--policy", pol.url, "--model", "scripted", "--server", e.url,
                 "--token-file", e.token_file, "--problems", probs, "--samples", "3",
                 "--turns", "2", "--seed", "7", "--logprobs", "--no-group-n",
                 "--backend", "cpu", "--num-perf-trials", "5", "--num-correct-trials", "2"]
        p = subprocess.run([KGYM, "rollout", *flags, "--out", rows],
                           capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr
        sft = str(tmp_path / "sft.jsonl")
        n_req = len(pol.requests)
        p = subprocess.run([KGYM, "collect", "--sft", sft, *flags, "--out", rows],
                           capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr
        assert len(pol.requests) == n_req  # the rollout file was complete
    finally:
        pol.close()
        e.close()

    with open(rows) as f:
        rr = [json.loads(x) for x in f]
    assert len(rr) == 6 and all(r["token_ids"] and r["logprobs"] for r in rr if r["reply"])
    used = [r for r in rr if r["reply"] is not None and r["valid"] and r["keep"]
            and r["loss_mask"] and r["advantage_trloo"] is not None]
    assert any(r["advantage_trloo"] > 0 for r in used) and any(r["advantage_trloo"] < 0 for r in used)
    width = max(max(r["token_ids"]) for r in rr if r["token_ids"]) + 1
    model = T.make_tiny(str(tmp_path / "m"), vocab_pad=width)  # room for the rows' token ids
    before = T.params(model)

    out = str(tmp_path / "pg")
    p = train(rows, "--model", model, "--out", out, "--steps", "3", "--batch-size", "4",
              "--lr", "1e-2", "--max-len", "2048")
    assert p.returncode == 0, p.stderr
    assert f"6 rows: {len(used)} used" in p.stderr
    m = metrics(out)
    assert [x["step"] for x in m] == [1, 2, 3]
    assert all(math.isfinite(x["loss"]) and x["tokens"] > 0 for x in m)
    assert all(x["mrs_checked"] == 0 for x in m)  # retokenized text: no rollout logprobs
    after = T.params(os.path.join(out, "step-3"))
    assert any(not __import__("torch").equal(before[k], after[k]) for k in before)

    # the rows' own ids with their made-up logprobs: MRS rejects every one
    out = str(tmp_path / "mrs")
    p = train(rows, "--model", model, "--out", out, "--steps", "2", "--batch-size", "4",
              "--lr", "1e-2", "--token-ids", "rows", "--max-len", "2048")
    assert p.returncode == 0, p.stderr
    m = metrics(out)
    assert all(x["mrs_checked"] > 0 and x["mrs_dropped"] == x["mrs_checked"]
               and x["tokens"] == 0 for x in m)
    after = T.params(os.path.join(out, "step-2"))
    assert all(__import__("torch").equal(before[k], after[k]) for k in before)

    # cold start: kgym collect's chats
    with open(sft) as f:
        chats = [json.loads(x) for x in f]
    assert chats and all(c["messages"][-1]["role"] == "assistant" for c in chats)
    out = str(tmp_path / "sft")
    p = train("--sft", sft, "--model", model, "--out", out, "--steps", "2", "--batch-size", "2",
              "--lr", "1e-2", "--val-frac", "0.5", "--max-len", "2048")
    assert p.returncode == 0, p.stderr
    m = metrics(out)
    assert math.isfinite(m[-1]["loss"]) and (len(chats) < 2 or math.isfinite(m[-1]["val_loss"]))
