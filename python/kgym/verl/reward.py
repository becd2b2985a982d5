"""A verl reward manager that scores through kgym serve
(docs/training.md): ``reward.reward_manager`` with ``source: importlib``,
``module.path: pkg://kgym.verl.reward``, ``name: KgymRewardManager`` (or
``source: register``, ``name: kgym`` where this module is imported).
Importing it also registers the ``trloo`` advantage estimator
(kgym.verl.trloo), so a trainer that loads the reward manager has it.

verl 0.9.1's reward loop calls ``run_single`` once per sample, all samples
of a reward worker concurrently on one event loop. Each call extracts the
code of the decoded response (the C agent's rules), and queues it on the
manager's KgymScorer, which sends what was queued together as one POST
/evaluate/batch and polls the results: so a batch is submitted at once and
polled, not evaluated one request at a time. The reward is libkgym's
(kgym.rl.reward; the paper's R = C + C*min(s, 3) + C*PR with the default
``kgym.reward``). A reply without code scores the penalty (the policy's
answer). An evaluation the policy is not to blame for (infra_error,
problem_error, a refused task, no result in time, kgym serve unreachable or
answering garbage) raises KgymEnvError instead of scoring 0: verl 0.9.1's
v1 trainer then marks the prompt's group failed and leaves it out of the
step (its replay buffer's rollout_failure); the legacy trainer stops.

The sample's fields: ``reward_model.ground_truth`` the reference program,
``extra_info.entry_point`` (default Model), as in docs/agent.md's dataset
JSONL. Settings come from the trainer config's ``kgym`` section:
``server``, ``token_file``, ``fields`` (request fields: backend, ...),
``eval_timeout``, ``server_wait``, ``reward`` (cap, w_pr, penalty,
prs_tau, prs_s).
"""

from __future__ import annotations

import logging
from typing import Any

import kgym.verl.trloo  # noqa: F401  registers "trloo" in the trainer's process
from kgym.verl.env import KgymScorer, RewardCfg, extract_code, score
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

logger = logging.getLogger(__name__)

# reward_extra_info keys: the same for every sample (verl stacks them by key)
EXTRA_KEYS = ("kgym_verdict", "kgym_correct", "kgym_hacked", "kgym_speedup",
              "kgym_coverage", "kgym_keep_prob", "kgym_has_code")


def _section(config: Any) -> dict:
    k = config.get("kgym") if hasattr(config, "get") else None
    if k is None:
        return {}
    try:
        from omegaconf import OmegaConf
        return OmegaConf.to_container(k, resolve=True) if not isinstance(k, dict) else dict(k)
    except (ImportError, ValueError):
        return dict(k)


def scorer_from_config(config: Any) -> KgymScorer:
    """The KgymScorer the ``kgym`` section describes."""
    k = _section(config)
    return KgymScorer(server=k.get("server"), token_file=k.get("token_file"),
                      fields=k.get("fields"), timeout=float(k.get("eval_timeout", 3600)),
                      server_wait=float(k.get("server_wait", 120)),
                      poll=float(k.get("poll", 0.25)))


@register("kgym")
class KgymRewardManager(RewardManagerBase):
    """Scores each sample's last python block through kgym serve."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None, **kwargs):
        super().__init__(config, tokenizer, compute_score)
        self.reward_cfg = RewardCfg.from_mapping(_section(config).get("reward"))
        self.scorer = scorer_from_config(config)

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]  # a multi-output sample is scored by its last output, as verl's naive
        responses = item.batch["responses"]
        n = int(item.batch["attention_mask"][-responses.shape[-1]:].sum())
        text = await self.loop.run_in_executor(
            None, lambda: self.tokenizer.decode(responses[:n], skip_special_tokens=True))
        rm = item.non_tensor_batch.get("reward_model") or {}
        reference = rm.get("ground_truth") if isinstance(rm, dict) else None
        if not isinstance(reference, str) or not reference:
            raise ValueError("kgym reward: the sample has no reward_model.ground_truth "
                             "(the reference program)")
        extra = item.non_tensor_batch.get("extra_info") or {}
        entry_point = extra.get("entry_point") if isinstance(extra, dict) else None
        code, _why = extract_code(text)
        result = None
        if code is not None:
            result = await self.scorer.evaluate(reference, code, entry_point)
        s = score(result, self.reward_cfg)
        info = {"kgym_verdict": s.verdict, "kgym_correct": s.correct, "kgym_hacked": s.hacked,
                "kgym_speedup": s.speedup, "kgym_coverage": s.coverage,
                "kgym_keep_prob": s.keep_prob, "kgym_has_code": code is not None}
        return {"reward_score": s.reward, "reward_extra_info": info}
