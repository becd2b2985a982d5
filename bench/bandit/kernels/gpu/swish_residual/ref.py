"""Bandit problem (gpu): per-feature scale and shift, swish, residual.

z = x * scale + shift; y = z * sigmoid(z) + x. x is 8192 x 4096 fp32 (128 MiB).
Eager PyTorch makes five passes over the data (mul, add, sigmoid, mul,
add), each with its own output buffer: room for a fused kernel.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))
        self.shift = nn.Parameter(0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x * self.scale + self.shift
        return z * torch.sigmoid(z) + x


BATCH = 8192
FEATURES = 4096


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
