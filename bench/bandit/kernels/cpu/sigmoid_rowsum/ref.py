"""Bandit problem (cpu): per-feature scale and shift, sigmoid, row sum.

y[i] = sum_j sigmoid(x[i, j] * scale[j] + shift[j]); x is 2048 x 256 fp32,
y has 2048 entries. Eager PyTorch: four passes and a 2 MiB temporary per
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


BATCH = 2048
FEATURES = 256


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
