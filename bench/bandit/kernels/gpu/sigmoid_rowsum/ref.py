"""Bandit problem (gpu): per-feature scale and shift, sigmoid, row sum.

y[i] = sum_j sigmoid(x[i, j] * scale[j] + shift[j]); x is 16384 x 1024 fp32,
y has 16384 entries. Eager PyTorch: four passes and a 64 MiB temporary per
op before the reduction.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * self.scale + self.shift).sum(dim=1)


BATCH = 16384
FEATURES = 1024


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
