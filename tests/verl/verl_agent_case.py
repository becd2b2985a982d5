"""Run under verl's venv by tests/python/test_verl_agent_loop.py: the
kgym_agent loop run by verl's own agent-loop worker (AgentLoopWorker, as
KgymAgentLoopWorker; its registry filled from the example's
agent_loop_config_path, the loop built by hydra.utils.instantiate, verl's
postprocessing into a DataProto), then verl's compute_advantage with
adv_estimator trloo on what came out.

The language model is a stand-in, ScriptedLLM (tests/verl/verl_llm.py): it
answers verl's server-manager generate() call with the token ids of
replies written in the test (by the sample's priority and the call's
turn), and records each prompt it was given. Everything else is real: verl's token building, kgym
serve on the cpu backend, libkgym's scores.

stdin: {"server", "token_file", "model_dir", "runs": [{"overrides", "server",
"groups": [{"uid", "reference", "replies": [[turn 0 reply, turn 1 reply,
...] per sample]}]}]}; stdout's last line: {"runs": [the batch's fields
per sample, or {"error", "kind"}]}."""
import json
import sys

import numpy as np
import torch

from verl_common import REPO, compose, kgym_overrides, tiny_model

case = json.load(sys.stdin)
model = tiny_model(case["model_dir"])

from kgym.verl.agent_loop import KgymAgentLoopOutput, KgymAgentLoopWorker  # noqa: E402
from kgym.verl.env import KgymEnvError  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.utils.ray_utils import get_event_loop  # noqa: E402
from verl_llm import ScriptedLLM  # noqa: E402


def run(spec):
    cfg = compose(kgym_overrides(spec.get("server", case["server"]), case["token_file"], model) + [
        "actor_rollout_ref.rollout.agent.agent_loop_config_path="
        f"{REPO}/examples/verl/agent_loops.yaml",
        "data.max_prompt_length=8192", "data.max_response_length=40000"]
        + spec.get("overrides", []))
    replies, raw, rms, uids = [], [], [], []
    for g in spec["groups"]:
        for r in g["replies"]:
            replies.append(r)
            raw.append([{"role": "system", "content": "You write fast CPU kernels."},
                        {"role": "user", "content": "Make this faster:\n```python\n"
                         + g["reference"] + "\n```"}])
            rms.append({"ground_truth": g["reference"]})
            uids.append(g["uid"])
    n = len(replies)
    data = DataProto.from_dict(
        tensors={"dummy": torch.zeros(n, 1)},
        non_tensors={"raw_prompt": np.array(raw + [None], dtype=object)[:n],
                     "reward_model": np.array(rms, dtype=object),
                     "extra_info": np.array([{"entry_point": "Model"}] * n, dtype=object),
                     "uid": np.array(uids, dtype=object), "index": np.arange(n),
                     "agent_name": np.array(["kgym_agent"] * n, dtype=object),
                     "priority": np.arange(n)})
    worker = KgymAgentLoopWorker(cfg, llm_client=None)
    llm = worker.llm_client = ScriptedLLM(worker.tokenizer, replies)
    try:
        out = get_event_loop().run_until_complete(worker.generate_sequences(data))
    except KgymEnvError as e:
        return {"error": str(e), "kind": e.kind,
                "calls": {str(k): v for k, v in llm.calls.items()}}

    b = out.batch
    res = {"registry": sorted(_agent_loop_registry), "samples": []}
    out.batch["token_level_rewards"] = b["rm_scores"]
    adv = compute_advantage(out, adv_estimator="trloo", gamma=1.0,
                            config=AlgoConfig(gamma=1.0, adv_estimator="trloo"))
    for i in range(n):
        mask = b["response_mask"][i].tolist()
        ends = list(out.non_tensor_batch["kgym_turn_ends"][i])
        rew = list(out.non_tensor_batch["kgym_turn_rewards"][i])
        # v1's path: verl calls the loop output's as_dict for rm_scores
        L = int(b["attention_mask"][i, b["prompts"].shape[1]:].sum())
        o = KgymAgentLoopOutput(prompt_ids=[1], response_ids=b["responses"][i, :L].tolist(),
                                response_mask=mask[:L], reward_score=float(sum(rew)),
                                metrics={}, extra_fields={"kgym_turn_ends": ends,
                                                          "kgym_turn_rewards": rew})
        res["samples"].append({
            "uid": uids[i], "mask": mask, "response_len": L,
            "rm_scores": b["rm_scores"][i].tolist(),
            "as_dict_rm_scores": o.as_dict()["rm_scores"].tolist(),
            "advantages": adv.batch["advantages"][i].tolist(),
            "returns": adv.batch["returns"][i].tolist(),
            "prompts_seen": llm.calls[i],
            **{k: (v[i].tolist() if hasattr(v[i], "tolist") else v[i])
               for k, v in out.non_tensor_batch.items() if k.startswith("kgym_")
               or k in ("turn_scores", "__num_turns__")}})
    return res


print(json.dumps({"runs": [run(spec) for spec in case["runs"]]},
                 default=lambda x: x.item() if hasattr(x, "item") else str(x)))
