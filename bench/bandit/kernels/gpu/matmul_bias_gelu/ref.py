"""Bandit problem (gpu): matrix product with a (K, N) weight, bias, exact GELU.

y = gelu(x @ W + b); x is 4096 x 2048, W is 2048 x 2048 (row-major, K x N),
b has 2048 entries. PyTorch's matmul is a tuned cuBLAS call: the epilogue
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


BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 2048


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
