"""Level 1 (gpu set): elementwise GELU, exact (erf) form, on 8192 x 8192 fp32.

256 MiB in and 256 MiB out: memory bound, several times the H200's L2.
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


ROWS = 8192
COLS = 8192


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_small_inputs():
    """A shape for CPU tests (Triton interpreter); its size is not a multiple of 4."""
    return [torch.randn(37, 259)]
