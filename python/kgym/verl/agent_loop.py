"""Multi-turn kernel episodes as a verl 0.9.1 agent loop: ``kgym_agent``
(docs/training.md). Registered with verl's agent-loop registry
(``verl.experimental.agent_loop.agent_loop.register``) where this module is
imported, and through ``rollout.agent.agent_loop_config_path`` (an entry
``{name: kgym_agent, _target_: kgym.verl.agent_loop.KgymAgentLoop}``,
examples/verl/agent_loops.yaml) in verl's agent-loop workers.

Each episode is the C agent's loop (src/agent/, docs/agent.md) for one
sample: the dataset's chat (system and first prompt) is the first prompt;
per turn the policy answers through verl's server manager (``generate``,
token in, token out), the last python block of the answer goes to kgym
serve (kgym.verl.env.KgymScorer: batched with the other episodes of the
worker, then polled), libkgym scores it (R = C + C*min(s, 3) + C*PR), and
the result's ``feedback`` goes into the next user message in the C agent's
refinement template; a reply without code scores the penalty and is told
why. Tokens are built with verl's Continuous Token helpers (as verl's own
ToolAgentLoop does): the policy's tokens have response_mask 1, the feedback
messages 0.

How the turns reach the TRLOO estimator (kgym.verl.trloo): verl 0.9.1
hands an estimator only token_level_rewards, response_mask and the uid.
So the turn structure travels in those tensors: turn k of a sample is its
k-th run of response_mask 1s, and its reward is on the run's last token.
verl itself puts one scalar on the response's last token; this module
puts one reward per turn instead: ``KgymAgentLoopOutput.as_dict`` (what
verl's v1 trainer, the 0.9.1 default, calls to build ``rm_scores``) and,
for the legacy trainer (``trainer.use_v1=false``), ``KgymAgentLoopWorker``
through ``rollout.agent.agent_loop_manager_class:
kgym.verl.agent_loop.KgymAgentLoopManager``. ``reward_score`` is the sum
of the turns' rewards (verl's metrics and filters see the episode total).
The per-turn record is also in the output's extra fields: ``turn_scores``
(verl's name) and ``kgym_turn_index``, ``kgym_turn_rewards``,
``kgym_turn_ends`` (each turn's end in the response, exclusive),
``kgym_keep``, ``kgym_keep_prob``, ``kgym_verdicts``, ``kgym_speedups``,
``kgym_coverages``, ``kgym_feedback``, ``kgym_stop``.

PRS per turn (``kgym.prs``, default on): libkgym's kg_rl_prs keeps a
correct turn with probability clip((PR - 0.3)/0.1, 0, 1), drawn from the
``kgym.seed`` and the sample's ids; a dropped turn keeps its reward (it
still counts in the returns and the group's baselines, as in kgym rollout)
but its tokens leave response_mask (no gradient). The estimator still
sees it: a reward on a token outside the mask is a turn of its own (only
a correct turn is dropped, and its reward is at least 1, so never 0).

A turn the environment could not score (infra_error, problem_error, a
refused task, no result in time, kgym serve unreachable) ends the episode
before that turn: its tokens are not kept and the sample has the turns
before it, which is how TRLOO treats a sample with fewer turns (invalid
past its end). With no turn left the loop raises KgymEnvError, and verl's
v1 trainer leaves the prompt's group out of the step (rollout_failure):
an infra failure is never scored as the policy's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from uuid import uuid4

import ray
import torch

from kgym import prompts
from kgym.verl.env import (KgymEnvError, KgymScorer, RewardCfg, extract_code,
                           feedback_text, no_code_feedback, prs_keep, score, seed_of)
from kgym.verl.reward import _section
from verl.experimental.agent_loop.agent_loop import (AgentLoopBase, AgentLoopManager,
                                                     AgentLoopOutput, AgentLoopWorker, register)
from verl.utils.profiler import simple_timer

logger = logging.getLogger(__name__)

_scorers: dict[tuple, KgymScorer] = {}


def shared_scorer(k: dict) -> KgymScorer:
    """One scorer per event loop and settings, so the episodes of a worker
    share its batches."""
    key = (id(asyncio.get_running_loop()), k.get("server"), k.get("token_file"),
           json.dumps(k.get("fields") or {}, sort_keys=True), k.get("eval_timeout"),
           k.get("server_wait"), k.get("poll"))
    s = _scorers.get(key)
    if s is None:
        s = _scorers[key] = KgymScorer(
            server=k.get("server"), token_file=k.get("token_file"), fields=k.get("fields"),
            timeout=float(k.get("eval_timeout", 3600)),
            server_wait=float(k.get("server_wait", 120)),
            poll=float(k.get("poll", 0.25)))
    return s


def turn_spans(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s."""
    spans, start = [], None
    for i, v in enumerate(list(mask) + [0]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            spans.append((start, i))
            start = None
    return spans


def turn_reward_row(n: int, ends: list[int], rewards: list[float]) -> torch.Tensor:
    """A response's rm_scores row: each turn's reward on its last token."""
    row = torch.zeros(n, dtype=torch.float32)
    for e, r in zip(ends, rewards):
        if 0 < e <= n:
            row[e - 1] += float(r)
    return row


class KgymAgentLoopOutput(AgentLoopOutput):
    """verl's AgentLoopOutput whose rm_scores hold one reward per turn."""

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        ends = self.extra_fields.get("kgym_turn_ends")
        if ends is not None:
            out["rm_scores"] = turn_reward_row(len(self.response_ids), ends,
                                               self.extra_fields["kgym_turn_rewards"])
        return out


@register("kgym_agent")
class KgymAgentLoop(AgentLoopBase):
    """The kgym episode; settings from the trainer config's ``kgym``
    section: turns (3), server, token_file, fields, eval_timeout,
    server_wait, reward (cap, w_pr, penalty, prs_tau, prs_s), prs (true),
    seed (0)."""

    def __init__(self, *args, tools=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.kcfg = _section(self.config)
        self.turns = int(self.kcfg.get("turns", 3))
        self.reward_cfg = RewardCfg.from_mapping(self.kcfg.get("reward"))
        self.use_prs = bool(self.kcfg.get("prs", True))
        self.seed = int(self.kcfg.get("seed", 0))
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], priority: int = 0,
                  **kwargs) -> AgentLoopOutput:
        priority = int(priority)
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        rm = kwargs.get("reward_model") or {}
        reference = rm.get("ground_truth") if isinstance(rm, dict) else None
        if not isinstance(reference, str) or not reference:
            raise ValueError("kgym_agent: the sample has no reward_model.ground_truth "
                             "(the reference program)")
        extra = kwargs.get("extra_info") or {}
        entry_point = extra.get("entry_point") if isinstance(extra, dict) else None
        scorer = shared_scorer(self.kcfg)
        request_id = uuid4().hex
        metrics: dict[str, Any] = {}

        ids = await self.ct_build_initial_tokens(messages)
        mask: list[int] = []
        lps: list[float] = []
        kept = (ids, mask, lps)  # the state after the last scored turn
        kept_messages = len(messages)
        scores, feedback, stop = [], [], "turns"
        for t in range(self.turns):
            with simple_timer("generate_sequences", metrics):
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=ids, sampling_params=sampling_params,
                    priority=priority)
            if not out.token_ids:
                stop = "no_reply"
                break
            toks, tlps = list(out.token_ids), (list(out.log_probs) if out.log_probs else None)
            room = self.response_length - len(mask)
            if len(toks) > room:
                # a reply past the response budget is cut there, as max_tokens
                # would cut it (its python block is then unclosed: the
                # penalty), and is the episode's last turn
                if room <= 0:
                    stop = "response_length"
                    break
                toks, tlps = toks[:room], (tlps[:room] if tlps else None)
                stop = "response_length"
            merged, mask2, lps2 = await self.ct_merge_assistant_token(
                ids, toks, mask, lps if (lps or tlps) else None, assistant_logprobs=tlps)
            new_ids = merged.token_ids
            over = len(mask2) - self.response_length
            if over > 0:  # tokens the merge added at the turn's boundary
                new_ids, mask2 = new_ids[:len(new_ids) - over], mask2[:self.response_length]
                lps2 = lps2[:self.response_length] if lps2 else lps2
                stop = "response_length"
            reply = await self.loop.run_in_executor(
                None, lambda: self.tokenizer.decode(toks, skip_special_tokens=True))
            code, why = extract_code(reply)
            try:
                result = None
                if code is not None:
                    with simple_timer("tool_calls", metrics):
                        result = await scorer.evaluate(reference, code, entry_point)
                s = score(result, self.reward_cfg)
            except KgymEnvError as e:
                if not scores:
                    raise
                logger.warning("kgym_agent: turn %d not scored, the episode ends: %s", t, e)
                stop = f"env:{e.kind}"
                break
            ids, mask, lps = new_ids, mask2, (lps2 or [])
            kept = (ids, mask, lps)
            messages.append({"role": "assistant", "content": reply})
            kept_messages = len(messages)
            fb = no_code_feedback(why) if code is None else feedback_text(result)
            scores.append(s)
            feedback.append(fb)
            if t == self.turns - 1 or stop == "response_length":
                break
            before = list(messages)
            text = prompts.fill(prompts.default("refine"), {"turn": str(t + 1), "feedback": fb})
            messages.append({"role": "user", "content": text})
            merged, mask3, lps3 = await self.ct_merge_context_msg(
                before, messages, ids, mask, lps or None)
            if len(mask3) >= self.response_length:
                stop = "response_length"
                break
            ids, mask, lps = merged.token_ids, mask3, (lps3 or [])
        if not scores:
            raise RuntimeError(f"kgym_agent: no turn was scored ({stop})")

        ids, mask, lps = kept
        mask = list(mask)
        spans = turn_spans(mask)
        if len(spans) != len(scores):
            raise RuntimeError(f"kgym_agent: {len(scores)} turns but {len(spans)} runs of "
                               "policy tokens in response_mask")
        rewards = [s.reward for s in scores]
        if self.use_prs:
            traj = seed_of(self.seed, kwargs.get("uid"), kwargs.get("index"),
                           kwargs.get("session_id"), priority)
            keep_prob, keep = prs_keep(scores, self.reward_cfg, traj)
        else:
            keep_prob, keep = [1.0] * len(scores), [True] * len(scores)
        for (a, b), k in zip(spans, keep):
            if not k:
                mask[a:b] = [0] * (b - a)
        n = len(mask)
        response_ids = ids[len(ids) - n:]
        extra_fields = {
            "turn_scores": rewards,
            "tool_rewards": [],
            "kgym_turn_index": list(range(len(scores))),
            "kgym_turn_rewards": rewards,
            "kgym_turn_ends": [b for _, b in spans],
            "kgym_keep": keep,
            "kgym_keep_prob": keep_prob,
            "kgym_verdicts": [s.verdict for s in scores],
            "kgym_speedups": [s.speedup for s in scores],
            "kgym_coverages": [s.coverage for s in scores],
            "kgym_feedback": feedback,
            "kgym_stop": stop,
        }
        return KgymAgentLoopOutput(
            prompt_ids=ids[:len(ids) - n], response_ids=response_ids, response_mask=mask,
            response_logprobs=lps if lps else None, reward_score=float(sum(rewards)),
            num_turns=kept_messages, metrics=metrics, extra_fields=extra_fields)


class KgymAgentLoopWorker(AgentLoopWorker):
    """verl's AgentLoopWorker for the legacy trainer: its batch's rm_scores
    get one reward per turn for the samples of kgym_agent."""

    def _postprocess(self, inputs, input_non_tensor_batch=None, validate=False):
        out = super()._postprocess(inputs, input_non_tensor_batch=input_non_tensor_batch,
                                   validate=validate)
        if all(x.extra_fields.get("kgym_turn_ends") is not None for x in inputs):
            mask = out.batch["response_mask"]
            rm = torch.zeros_like(mask, dtype=torch.float32)
            for i, x in enumerate(inputs):
                rm[i] = turn_reward_row(mask.shape[1], x.extra_fields["kgym_turn_ends"],
                                        x.extra_fields["kgym_turn_rewards"])
            out.batch["rm_scores"] = rm
            out.meta_info.setdefault("reward_extra_keys", [])
        return out


class KgymAgentLoopManager(AgentLoopManager):
    """verl's AgentLoopManager with KgymAgentLoopWorker workers, for
    ``rollout.agent.agent_loop_manager_class`` under the legacy trainer."""

    def __init__(self, *args, **kwargs):
        self.agent_loop_workers_class = ray.remote(KgymAgentLoopWorker)
        super().__init__(*args, **kwargs)


__all__ = ["KgymAgentLoop", "KgymAgentLoopOutput", "KgymAgentLoopWorker", "KgymAgentLoopManager",
           "turn_spans", "turn_reward_row", "KgymEnvError"]
