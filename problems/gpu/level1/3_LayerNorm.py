"""Level 1 (gpu set): layer normalisation over the last dimension, 16384 x 4096 fp32.

weight and bias are drawn at random (not nn.LayerNorm's ones/zeros) so a
kernel that ignores the affine part fails.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Layer norm over the last dimension with a learned per-feature affine."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


ROWS = 16384
DIM = 4096
EPS = 1e-5


def get_inputs():
    return [1.5 * torch.randn(ROWS, DIM) + 0.5]


def get_init_inputs():
    return [DIM, EPS]


def get_small_init_inputs():
    return [9000, EPS]


def get_small_inputs():
    """A shape for CPU tests: rows longer than one 8192-wide block."""
    return [1.5 * torch.randn(3, 9000) + 0.5]
