"""Level 2 (cpu set): per-feature scale and shift, sigmoid, then a row sum.

y[i] = sum_j sigmoid(x[i, j] * scale[j] + shift[j]), x is 512 x 128, y has
512 entries. The row length is kept short so that the spread of y across rows
(a few units) is well above the tolerance: a constant answer fails.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """sigmoid(x * scale + shift).sum(dim=1) with learned scale and shift."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * self.scale + self.shift).sum(dim=1)


BATCH = 512
FEATURES = 128


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
