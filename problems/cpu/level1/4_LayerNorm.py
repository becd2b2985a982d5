"""Level 1 (cpu set): layer normalisation over the last dimension.

y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance,
per row of a 96 x 384 input. weight and bias are drawn at random (not the
ones/zeros that nn.LayerNorm starts with) so a kernel that ignores the affine
part fails.
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


ROWS = 96
DIM = 384
EPS = 1e-5


def get_inputs():
    return [1.5 * torch.randn(ROWS, DIM) + 0.5]


def get_init_inputs():
    return [DIM, EPS]
