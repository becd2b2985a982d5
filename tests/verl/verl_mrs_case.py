"""Run under verl's venv by tests/python/test_verl_trloo.py: verl's own
rejection mask (rollout_corr_helper.compute_rollout_rejection_mask) with
kgym.verl.mrs's settings, on the log ratios given; prints the kept flag of
each sequence."""
import json
import sys

import torch

from kgym.verl.mrs import rollout_correction
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

case = json.load(sys.stdin)
seqs = case["log_ratio"]
L = max(len(s) for s in seqs)
lr = torch.zeros(len(seqs), L, dtype=torch.float64)
mask = torch.zeros(len(seqs), L, dtype=torch.float64)
for i, s in enumerate(seqs):
    lr[i, :len(s)] = torch.tensor(s, dtype=torch.float64)
    mask[i, :len(s)] = 1
cfg = rollout_correction(**case["cfg"])
keep, _ = compute_rollout_rejection_mask(lr, mask, cfg["rollout_rs"], cfg["rollout_rs_threshold"])
print(json.dumps({"keep": [bool((keep[i, :len(s)] > 0).all()) for i, s in enumerate(seqs)],
                  "cfg": cfg}))
