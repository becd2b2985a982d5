"""Run under verl's venv by tests/python/test_verl_ray.py: kgym_agent on
verl's legacy trainer path (trainer.use_v1=false) with a local Ray:
``rollout.agent.agent_loop_manager_class`` names
kgym.verl.agent_loop.KgymAgentLoopManager, loaded as verl's trainer loads
it (load_class_from_fqn) and created as verl creates its manager; its
KgymAgentLoopWorker Ray actor runs the loop and builds the batch's
rm_scores, one reward per turn; the advantages come from verl's
compute_advantage with trloo.

The language model is a stand-in (tests/verl/verl_llm.py).

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
    "kgym.token_file=null", "kgym.turns=2", "trainer.use_v1=false",
    f"actor_rollout_ref.rollout.agent.agent_loop_config_path={REPO}/examples/verl/agent_loops.yaml",
    "+actor_rollout_ref.rollout.agent.agent_loop_manager_class="
    "kgym.verl.agent_loop.KgymAgentLoopManager",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "data.max_prompt_length=8192", "data.max_response_length=40000"])

import ray  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import kgym.verl.trloo  # noqa: E402,F401  as the trainer has it through the reward manager
from kgym.verl.trloo import turn_spans  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.utils.import_utils import load_class_from_fqn  # noqa: E402
from verl_llm import ScriptedLLM  # noqa: E402

tmp = tempfile.mkdtemp(prefix="kr", dir="/tmp")  # Ray's socket paths must be short
ray.init(num_cpus=4, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
         runtime_env={"env_vars": {k: os.environ[k] for k in
                                   ("PYTHONPATH", "KGYM_LIB", "RAY_AUTH_MODE") if k in os.environ}})
try:
    OmegaConf.resolve(cfg)
    n = len(case["replies"])
    llm = ScriptedLLM(AutoTokenizer.from_pretrained(model), case["replies"])
    # what verl's legacy trainer does with agent_loop_manager_class
    cls = load_class_from_fqn(cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class,
                              "AgentLoopManager")
    manager = cls.create(config=cfg, llm_client=llm)
    raw = [{"role": "user", "content": "Make this faster:\n```python\n" + case["reference"]
            + "\n```"}]
    prompts = DataProto.from_dict(non_tensors={
        "raw_prompt": np.array([raw] * n + [None], dtype=object)[:n],
        "reward_model": np.array([{"ground_truth": case["reference"]}] * n, dtype=object),
        "extra_info": np.array([{"entry_point": "Model"}] * n, dtype=object),
        "uid": np.array(["p0"] * n, dtype=object), "index": np.zeros(n, dtype=np.int64),
        "agent_name": np.array(["kgym_agent"] * n, dtype=object)})
    out = manager.generate_sequences(prompts)
    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    out.non_tensor_batch["uid"] = np.array(["p0"] * n, dtype=object)
    adv = compute_advantage(out, adv_estimator=cfg.algorithm.adv_estimator, gamma=1.0,
                            config=AlgoConfig(gamma=1.0, adv_estimator="trloo"))
    res = []
    for i in range(n):
        mask = adv.batch["response_mask"][i]
        res.append({"manager": type(manager).__name__,
                    "extra": {k: (v[i].tolist() if hasattr(v[i], "tolist") else v[i])
                              for k, v in out.non_tensor_batch.items() if k.startswith("kgym_")},
                    "rm_nonzero": [[j, float(v)] for j, v in
                                   enumerate(out.batch["rm_scores"][i].tolist()) if v],
                    "runs": turn_spans(mask),
                    "run_advantages": [float(adv.batch["advantages"][i, a])
                                       for a, _ in turn_spans(mask)]})
    print(json.dumps({"samples": res}, default=str))
finally:
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
