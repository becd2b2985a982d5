"""Reference for the fault-injection suite: y = 2 * x + 1 on a small fp32 tensor.

Tiny on purpose: the faults, not the kernel, are under test.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x + 1.0


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
