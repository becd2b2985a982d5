"""Level 2 (gpu set): Linear(4096, 4096) followed by ReLU on a 4096 x 4096 fp32 input.

y = relu(x @ W^T + b), weights from nn.Linear. About 137 GFLOP per forward.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Linear(in_features, out_features) then ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


BATCH = 4096
IN_FEATURES = 4096
OUT_FEATURES = 4096


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_small_init_inputs():
    return [200, 136]


def get_small_inputs():
    """Shapes for CPU tests: no dimension is a multiple of a typical tile."""
    return [torch.randn(70, 200)]
