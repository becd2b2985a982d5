"""Run under verl's venv by tests/python/test_verl_trloo.py: the batch of
that test through verl's own advantage path (DataProto,
ray_trainer.compute_advantage with adv_estimator "trloo", AlgoConfig),
with kgym.verl.trloo imported; prints the advantages and returns."""
import json
import sys

import numpy as np
import torch

import kgym.verl.trloo  # noqa: F401  registers "trloo"
from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage

case = json.load(sys.stdin)
data = DataProto.from_dict(
    tensors={"token_level_rewards": torch.tensor(case["rewards"], dtype=torch.float32),
             "response_mask": torch.tensor(case["mask"], dtype=torch.int64)},
    non_tensors={"uid": np.array(case["uid"], dtype=object)})
assert core_algos.get_adv_estimator_fn("trloo") is kgym.verl.trloo.compute_trloo_multiturn_advantage
out = compute_advantage(data, adv_estimator="trloo", gamma=case["gamma"],
                        config=AlgoConfig(gamma=case["gamma"], adv_estimator="trloo"))
print(json.dumps({"advantages": out.batch["advantages"].tolist(),
                  "returns": out.batch["returns"].tolist()}))
