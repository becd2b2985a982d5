"""The multi-turn TRLOO estimator for verl: ``algorithm.adv_estimator=trloo``
after ``import kgym.verl.trloo`` (e.g. through verl's custom module hooks,
docs/training.md).

verl gives an estimator the batch's token_level_rewards, response_mask and
the group ids (``uid``, one per prompt), not turn indices. A multi-turn
agent loop's response is the policy's turns with the environment's
messages between them, which the response_mask leaves out (0). So the
turns are read from the data verl already carries: turn k of a sample is
its k-th maximal run of mask-1 tokens, and its reward is the sum of the
token_level_rewards on that run (the reward manager puts each turn's
libkgym reward on the turn's last token). Per uid the samples' turns make
a K x T matrix (a sample with fewer turns has invalid entries past its
end); returns are reward-to-go with algorithm.gamma and the advantages
TRLOO per (uid, turn), both computed by libkgym (kgym.rl: kg_rl_returns,
kg_rl_trloo); each turn's tokens get its turn's advantage and return.
A single-turn batch is the paper's TRLOO per prompt. A nonzero reward on a
token outside the mask is a turn too, one without tokens to train: where
kgym's agent loop puts a turn PRS dropped (kgym.verl.agent_loop).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from kgym import rl
from verl.trainer.ppo.core_algos import register_adv_est


def turn_spans(mask_row: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of 1s."""
    m = mask_row.to(torch.int8).tolist()
    spans, start = [], None
    for i, v in enumerate(m + [0]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            spans.append((start, i))
            start = None
    return spans


def sample_turns(rewards_row: torch.Tensor, mask_row: torch.Tensor) -> list[tuple[float, Any]]:
    """A sample's turns in order: (reward, (start, end) or None). A run of
    mask 1s is a turn, its reward the sum on the run; a nonzero reward on a
    token outside the mask is a turn whose tokens left the mask (kgym's
    PRS drop, kgym.verl.agent_loop), its span None."""
    spans = turn_spans(mask_row)
    r = rewards_row.tolist()
    m = mask_row.to(torch.int8).tolist()
    turns = [(b, float(sum(r[a:b])), (a, b)) for a, b in spans]
    turns += [(i + 1, float(v), None) for i, v in enumerate(r) if v != 0 and not m[i]]
    turns.sort(key=lambda x: x[0])
    return [(rew, span) for _, rew, span in turns]


def multiturn_advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                         index: np.ndarray, gamma: float = 1.0,
                         estimator: str = "trloo") -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each (bs, response_length), zero off the mask."""
    bs = token_level_rewards.shape[0]
    turns = [sample_turns(token_level_rewards[i], response_mask[i]) for i in range(bs)]
    adv = torch.zeros_like(token_level_rewards)
    ret = torch.zeros_like(token_level_rewards)
    groups: dict[Any, list[int]] = {}
    for i in range(bs):
        groups.setdefault(index[i], []).append(i)
    for members in groups.values():
        T = max((len(turns[i]) for i in members), default=0)
        if T == 0:
            continue
        mat = [[turns[i][t][0] if t < len(turns[i]) else None for t in range(T)] for i in members]
        G = rl.returns(mat, gamma=gamma)
        A = rl.advantages(G, estimator=estimator)
        for row, i in enumerate(members):
            for t, (_, span) in enumerate(turns[i]):
                if span is not None:
                    a, b = span
                    adv[i, a:b] = A[row][t]
                    ret[i, a:b] = G[row][t]
    return adv, ret


@register_adv_est("trloo")
def compute_trloo_multiturn_advantage(token_level_rewards: torch.Tensor,
                                      response_mask: torch.Tensor,
                                      index: Optional[np.ndarray] = None,
                                      config: Any = None, **kwargs: Any):
    """verl's estimator signature: TRLOO per (uid, turn) over reward-to-go."""
    if index is None:
        raise ValueError("trloo needs the batch's uid (verl's group ids)")
    gamma = float(getattr(config, "gamma", 1.0) if config is not None else 1.0)
    with torch.no_grad():
        return multiturn_advantages(token_level_rewards, response_mask, index, gamma)
