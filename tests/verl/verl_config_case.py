"""Run under verl's venv by tests/python/test_verl_agent_loop.py: the
example YAML composed by hydra over verl's ppo_trainer.yaml, checked by
verl's validate_config (as main_ppo does), turned into verl's dataclasses (AlgoConfig, RolloutConfig), and what it names resolved
through verl's own registries and loaders: the advantage estimator, the
agent loop (from agent_loop_config_path) and the reward manager."""
import json
import sys

from verl_common import REPO, compose, tiny_model

case = json.load(sys.stdin)
cfg = compose([f"actor_rollout_ref.model.path={tiny_model(case['model_dir'])}"])

import hydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from kgym.verl.mrs import rollout_correction  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.reward import resolve_reward_manager_cls  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.utils.import_utils import resolve_config_path  # noqa: E402

# what verl's main_ppo checks before it starts anything
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg),
                use_critic=need_critic(cfg))
OmegaConf.resolve(cfg)
algo = omega_conf_to_dataclass(cfg.algorithm)
rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
# the reward manager's module registers "trloo" when verl loads it
rm_cls = resolve_reward_manager_cls(cfg)
trloo = core_algos.get_adv_estimator_fn(algo.adv_estimator)
import os  # noqa: E402
os.chdir(REPO)  # agent_loop_config_path is relative to the run's directory
entries = OmegaConf.load(resolve_config_path(rollout.agent.agent_loop_config_path))
entry = [x for x in entries if x.name == rollout.agent.default_agent_loop][0]
cls = hydra.utils.get_class(entry._target_)
rc = rollout_correction()

# the dataset: problems/cpu through kgym.verl.dataset, read back by verl's
# own dataset class with the example's data settings
from kgym.verl.dataset import main as make_dataset  # noqa: E402
from verl.trainer.ppo.utils import create_rl_dataset  # noqa: E402
from verl.utils import hf_tokenizer  # noqa: E402

pq = os.path.join(case["model_dir"], "train.parquet")
assert make_dataset([os.path.join(REPO, "problems", "cpu"), pq, "--backend", "cpu"]) == 0
ds = create_rl_dataset(pq, cfg.data, hf_tokenizer(cfg.actor_rollout_ref.model.path), None)
item = ds[0]
dataset = {"len": len(ds), "roles": [m["role"] for m in item["raw_prompt"]],
           "name": item["extra_info"]["name"], "agent_name": item.get("agent_name"),
           "has_reference": "class Model" in item["reward_model"]["ground_truth"],
           "cpu_hint": "C++ for the CPU" in item["raw_prompt"][-1]["content"]}
print(json.dumps({"dataset": dataset,
    "adv_estimator": algo.adv_estimator, "trloo_registered": trloo.__module__ == "kgym.verl.trloo",
    "default_agent_loop": rollout.agent.default_agent_loop,
    "agent_loop_target": entry._target_, "agent_loop_class": cls.__name__,
    "reward_manager_class": rm_cls.__name__,
    "rollout_correction_matches_mrs": all(
        algo.rollout_correction[k] == v for k, v in rc.items()),
    "use_v1": bool(cfg.trainer.use_v1), "multi_turn": bool(rollout.multi_turn.enable),
    "critic": need_critic(cfg), "reference": need_reference_policy(cfg)}))
