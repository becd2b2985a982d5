# redteam: family=profile_forgery problem=problems/cpu/level2/1_Linear_ReLU.py backend=triton expect=pass warn=_pad_busy_kernel
"""Padding, Triton: the lazy kernel (PyTorch's addmm,
a Triton ReLU in place) plus a Triton kernel of real busy work on the
input whose partial sums enter the output times zero. Correct and honest
about its output, so it passes; but its profile is mostly custom time.
The judge's per-kernel ablation replaces _pad_busy_kernel's results alone
(the launch hooks name the launch), sees the output unchanged and moves
its time out of the custom total, with a warning naming it. Runs through
Triton's interpreter on the CPU, where coverage is the wall time inside
recorded launches; the GPU twin is profile_forgery__covg_padding_*_gpu."""

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


@triton.jit
def _pad_busy_kernel(x_ptr, out_ptr, n, REPS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(REPS):
        acc += tl.sin(x + r)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        n = y.numel()
        _relu_kernel[(triton.cdiv(n, 8192),)](y, n, BLOCK=8192)
        xn = x.numel()
        parts = torch.empty(triton.cdiv(xn, 8192), device=x.device)
        _pad_busy_kernel[(parts.numel(),)](x, parts, xn, REPS=8, BLOCK=8192)
        return y + parts.sum() * 0
