"""Run under verl's venv by tests/python/test_verl_agent_loop.py: kgym_agent
on verl's v1 trainer path, the 0.9.1 default. A local Ray and
TransferQueue; verl's own AgentLoopWorkerTQ actor runs the loop (its
registry from the example's agent_loop_config_path) and puts each output
into TransferQueue through the output's as_dict; the advantages then come
from verl's v1 compute_advantage_for_multi_trajectories with trloo on what
TransferQueue holds, as the v1 trainer's _compute_advantage reads it.

The language model is a stand-in (tests/verl/verl_llm.py: replies written
in the test, by the sample's priority and the call's turn).

stdin: {"server", "model_dir", "reference", "replies": [[turn 0, turn 1]
per sample]}; stdout's last line: per sample the extra fields, the
nonzero rm_scores, the mask's runs and the advantage of each run."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from verl_common import REPO, compose, kgym_overrides, tiny_model

case = json.load(sys.stdin)
model = tiny_model(case["model_dir"])
cfg = compose(kgym_overrides(case["server"], "/dev/null", model) + [
    "kgym.token_file=null", "kgym.turns=2",
    f"actor_rollout_ref.rollout.agent.agent_loop_config_path={REPO}/examples/verl/agent_loops.yaml",
    "data.max_prompt_length=8192", "data.max_response_length=40000",
    # one storage actor, not 8: each takes one of Ray's CPUs
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])

import ray  # noqa: E402
import transfer_queue as tq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import kgym.verl.trloo  # noqa: E402,F401  as the trainer has it through the reward manager
from kgym.verl.trloo import turn_spans  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl_llm import ScriptedLLM  # noqa: E402

tmp = tempfile.mkdtemp(prefix="kr", dir="/tmp")  # Ray's socket paths must be short
ray.init(num_cpus=8, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
         runtime_env={"env_vars": {k: os.environ[k] for k in
                                   ("PYTHONPATH", "KGYM_LIB", "RAY_AUTH_MODE") if k in os.environ}})
try:
    cfg.transfer_queue.enable = True
    OmegaConf.resolve(cfg)
    tq.init(cfg.transfer_queue)
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    n = len(case["replies"])
    llm = ScriptedLLM(AutoTokenizer.from_pretrained(model), case["replies"])
    worker = AgentLoopWorkerTQ.remote(cfg, llm)
    raw = [{"role": "user", "content": "Make this faster:\n```python\n" + case["reference"]
            + "\n```"}]
    # what AgentLoopWorkerTQ._run_prompt starts for each of a prompt's n sessions
    ray.get([worker._run_agent_loop.remote(
        {"temperature": 1.0}, {"step": 1, "sample_index": 0, "rollout_n": s, "validate": False},
        trace=False, agent_name="kgym_agent", session_id=s, uid="p0", global_steps=1,
        raw_prompt=raw, reward_model={"ground_truth": case["reference"]},
        extra_info={"entry_point": "Model"}, index=0, priority=s) for s in range(n)])
    keys = [f"p0_{s}_0" for s in range(n)]
    got = tq.kv_batch_get(keys=keys, partition_id="train",
                          select_fields=["response_mask", "rm_scores", "extra_fields"])
    data = DataProto(batch=tq.kv_batch_get(keys=keys, partition_id="train",
                                           select_fields=["response_mask", "rm_scores"]
                                           ).to_padded_tensor())
    # the v1 trainer's _compute_advantage: token_level_rewards = rm_scores
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data.non_tensor_batch["uid"] = np.array(["p0"] * n, dtype=object)
    out = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator=cfg.algorithm.adv_estimator, gamma=1.0,
        config=AlgoConfig(gamma=1.0, adv_estimator="trloo"))
    res = []
    for i in range(n):
        ef = got["extra_fields"][i]
        mask = out.batch["response_mask"][i]
        res.append({"extra": {k: v for k, v in ef.items() if k.startswith("kgym_")},
                    "rm_nonzero": [[j, float(v)] for j, v in
                                   enumerate(got["rm_scores"][i].tolist()) if v],
                    "runs": turn_spans(mask),
                    "run_advantages": [float(out.batch["advantages"][i, a])
                                       for a, _ in turn_spans(mask)]})
    print(json.dumps({"samples": res}, default=str))
finally:
    try:
        tq.close()
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
