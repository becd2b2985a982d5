"""Level 1 (cpu set): a small fully connected layer, y = x @ W^T + b.

x is 64 x 300, W is 200 x 300 (nn.Linear layout: out_features x in_features).
Neither dimension is a multiple of a typical tile size.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.Linear(in_features, out_features) with bias."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


BATCH = 64
IN_FEATURES = 300
OUT_FEATURES = 200


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
