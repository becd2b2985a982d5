"""Run under verl's venv by tests/python/test_verl_reward.py: kgym's reward
manager loaded by verl's own RewardLoopWorker from the example config
(reward.reward_manager: importlib pkg://kgym.verl.reward), scoring a batch
through verl's compute_score (all samples at once) against the kgym serve
the test runs.
stdin: {"token_file", "model_dir", "runs": [{"server", "overrides",
"samples": [{"reply", "reference", "entry_point"}]}]}; stdout's last line:
{"runs": [{"scores": verl's {"reward_score", "reward_extra_info"} or
{"error": msg} per sample, "manager", "batches": sizes of the batches
sent}]}."""
import asyncio
import json
import sys

import numpy as np
import torch

from verl_common import compose, kgym_overrides, tiny_model

case = json.load(sys.stdin)
model = tiny_model(case["model_dir"])

from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.utils.ray_utils import get_event_loop  # noqa: E402


def batch(tok, samples):
    rows = []
    for s in samples:
        prompt = tok("Make it faster.")["input_ids"]
        resp = tok(s["reply"])["input_ids"] + [tok.eos_token_id]
        rows.append((prompt, resp))
    P = max(len(p) for p, _ in rows)
    R = max(len(r) for _, r in rows) + 3  # right padding after the response
    pad = tok.pad_token_id
    prompts = torch.tensor([[pad] * (P - len(p)) + p for p, _ in rows])
    responses = torch.tensor([r + [pad] * (R - len(r)) for _, r in rows])
    attn = torch.tensor([[0] * (P - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (R - len(r))
                         for p, r in rows])
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attn,
                 "input_ids": torch.cat([prompts, responses], 1)},
        non_tensors={"reward_model": np.array([{"ground_truth": s["reference"]}
                                               for s in samples], dtype=object),
                     "extra_info": np.array([{"entry_point": s.get("entry_point")}
                                             for s in samples], dtype=object),
                     "data_source": np.array(["kgym"] * len(rows), dtype=object)})


def plain(v):
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    return v


loop = get_event_loop()
results = []
for run in case["runs"]:
    cfg = compose(kgym_overrides(run["server"], case["token_file"], model)
                  + run.get("overrides", []))
    worker = RewardLoopWorker(cfg)
    data = batch(worker.input_tokenizer, run["samples"])

    async def one(i):
        try:
            return await worker.compute_score(data[i:i + 1])
        except Exception as e:  # noqa: BLE001  the test checks the message
            return {"error": f"{type(e).__name__}: {e}"}

    async def all_():
        # as verl's compute_score_batch: every sample concurrently, but an
        # error stays with its sample
        return await asyncio.gather(*[one(i) for i in range(len(data))])

    out = loop.run_until_complete(all_())
    results.append({"scores": [plain(o) for o in out],
                    "manager": type(worker.reward_manager).__name__,
                    "batches": worker.reward_manager.scorer.batches})
print(json.dumps({"runs": results}))
