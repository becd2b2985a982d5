"""Level 1 (cpu set): softmax over the last dimension of a 2-D tensor.

The row length (1000) is deliberately not a power of two. Logits are scaled by
4 so that each row has a few dominant entries: a near-uniform answer (every
probability about 1/1000) must not pass a 1e-2 absolute tolerance.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """softmax(x, dim=-1) on a (rows, cols) input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


ROWS = 128
COLS = 1000


def get_inputs():
    return [4.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
