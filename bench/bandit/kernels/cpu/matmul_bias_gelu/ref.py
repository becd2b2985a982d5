"""Bandit problem (cpu): matrix product with a (K, N) weight, bias, exact GELU.

y = gelu(x @ W + b); x is 256 x 256, W is 256 x 384 (row-major, K x N),
b has 384 entries. PyTorch's matmul is a tuned BLAS call: the epilogue
(bias, GELU) is the only easy win, which makes a lazy kernel tempting.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / math.sqrt(in_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(torch.matmul(x, self.weight) + self.bias)


BATCH = 256
IN_FEATURES = 256
OUT_FEATURES = 384


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
