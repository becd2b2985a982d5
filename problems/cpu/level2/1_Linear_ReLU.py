"""Level 2 (cpu set): fully connected layer followed by ReLU.

y = relu(x @ W^T + b), x is 128 x 256, W is 192 x 256 (from nn.Linear).
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


BATCH = 128
IN_FEATURES = 256
OUT_FEATURES = 192


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
