"""MRS (docs/rl.md, libkgym's kg_rl_mrs) as verl's rollout-correction
settings: algorithm.rollout_correction.rollout_rs and
rollout_rs_threshold. No code of verl runs here; this only writes the two
settings.

verl's rejection statistics are of -log r per token, r = pi_old /
pi_rollout (its old_log_prob minus rollout_log_prob: the recomputed
training logprob against the rollout's, libkgym's d), checked against
log(lower) and log(upper):

- the geometric filter, lo <= exp(mean log r) <= hi, is seq_mean_k1 with
  bounds 1/hi and 1/lo (exact, up to verl's float32);
- the token veto, min r >= veto, becomes seq_max_k2, 0.5 (log r)^2 <=
  0.5 ln(veto)^2 for every token, which drops the sequence as libkgym
  does, and also drops one with a token ratio above 1/veto (libkgym keeps
  that one when its geometric mean is within bounds). verl has no
  one-sided sequence-level token test; its token_k1 masks the token only.
verl clamps log r to +-20 first, so a veto below e^-20 cannot be expressed.
"""

from __future__ import annotations

import math


def rollout_correction(lo: float = 0.999, hi: float = 1.001, veto: float = 1e-4) -> dict:
    """{"rollout_rs", "rollout_rs_threshold"} for verl's
    algorithm.rollout_correction (rollout_is None: rejection only)."""
    if not (0 < lo <= hi):
        raise ValueError(f"mrs: need 0 < lo <= hi, got {lo}, {hi}")
    rs, thr = ["seq_mean_k1"], [f"{1 / hi!r}_{1 / lo!r}"]
    if veto > 0:
        if not (math.exp(-20.0) <= veto < 1):
            raise ValueError(f"mrs: veto must be in [e^-20, 1) for verl, got {veto}")
        rs.append("seq_max_k2")
        thr.append(repr(0.5 * math.log(veto) ** 2))
    return {"rollout_is": None, "rollout_rs": ",".join(rs), "rollout_rs_threshold": ",".join(thr)}
