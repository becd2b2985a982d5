"""The reference itself as a candidate (problems/gpu/level1/1_GELU.py):
used with run_hack_checks=false to measure the harness's self-speedup,
which must lie in [0.98, 1.02]."""
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)
