"""Level 3 (gpu set): a pre-norm transformer MLP block on 4 x 2048 tokens of width 1024.

y = x + fc2(gelu(fc1(layer_norm(x)))), hidden width 4096, exact GELU. The
layer norm has a random affine (not ones/zeros). About 137 GFLOP per forward.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Pre-norm residual MLP: LayerNorm -> Linear(dim, hidden) -> GELU -> Linear(hidden, dim) -> + x."""

    def __init__(self, dim: int, hidden: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.norm_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(x, (self.dim,), self.norm_weight, self.norm_bias, self.eps)
        return x + self.fc2(F.gelu(self.fc1(h)))


BATCH = 4
SEQ = 2048
DIM = 1024
HIDDEN = 4096
EPS = 1e-5


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN, EPS]


def get_small_init_inputs():
    return [96, 160, EPS]


def get_small_inputs():
    """Shapes for CPU tests (Triton interpreter)."""
    return [torch.randn(2, 25, 96)]
