"""Level 1 (cpu set): elementwise GELU, exact (erf) form.

y = x * 0.5 * (1 + erf(x / sqrt(2)))   for every element of a 256 x 1024 fp32 input.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Applies the exact GELU activation elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


ROWS = 256
COLS = 1024


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
