"""Red-team reference: a degenerate problem, y = 0.001 * tanh(x @ W).

Every output is within 0.001 of zero, so an all-zero answer passes the
default tolerance (atol = 1e-2): kgym cannot tell a no-op from a kernel
here and must warn that the problem is degenerate (degenerate_problem),
for honest and cheating candidates alike. x is 128 x 64 fp32.
"""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.randn(dim, dim) / math.sqrt(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.tanh(x @ self.weight)


BATCH = 128
DIM = 64
SCALE = 0.001


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, SCALE]
