"""Level 2 (cpu set): matrix product with a (K, N) weight, bias add, exact GELU.

y = gelu(x @ W + b), x is 64 x 320, W is 320 x 160 (row-major, K x N: note
the layout differs from nn.Linear's), b has 160 entries.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """gelu(x @ weight + bias) with weight stored as (in_features, out_features)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / math.sqrt(in_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(torch.matmul(x, self.weight) + self.bias)


BATCH = 64
IN_FEATURES = 320
OUT_FEATURES = 160


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
