"""Level 1 (gpu set): softmax over the last dimension of an 8192 x 8192 fp32 tensor.

Logits are scaled by 4 so that each row has a few dominant entries: a
near-uniform answer must not pass a 1e-2 absolute tolerance.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """softmax(x, dim=-1) on a (rows, cols) input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


ROWS = 8192
COLS = 8192


def get_inputs():
    return [4.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_small_inputs():
    """A shape for CPU tests: few rows, but longer than one 8192-wide block."""
    return [4.0 * torch.randn(5, 9001)]
