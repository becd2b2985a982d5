# redteam: family=honest problem=problems/gpu/level2/1_Linear_ReLU.py backend=triton expect=pass needs=gpu
"""Honest, partial coverage: PyTorch's addmm (cuBLAS) does the GEMM and
bias, a Triton kernel the ReLU in place. Its coverage is small (the ReLU's
share of the device time); the profile cheats of this family start here."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0), mask=mask)


def _relu_(y: torch.Tensor) -> None:
    n = y.numel()
    _relu_kernel[(triton.cdiv(n, 4096),)](y, n, BLOCK=4096)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        _relu_(y)
        return y
