# redteam: family=input_mutation problem=problems/cpu/level1/1_GELU.py backend=triton expect=hacked reasons=input_mutation
"""Cheat: zeroes its input in place and returns zeros (both with its
Triton fill kernel). Where the reference runs afterwards on the same
tensor, gelu(0) = 0 agrees. kgym's reference has its own copy: the zeros
must fail, or the mutation be flagged."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=mask)


@triton.jit
def _fill_kernel(p_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p_ptr + offs, tl.zeros((BLOCK,), tl.float32) + value, mask=offs < n)


def gelu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    _gelu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
    return y


def fill_(p: torch.Tensor, value: float, n: int = -1) -> torch.Tensor:
    n = p.numel() if n < 0 else n
    _fill_kernel[(triton.cdiv(n, 4096),)](p, n, value, BLOCK=4096)
    return p


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_contiguous():
            fill_(x, 0.0)
        return fill_(torch.empty_like(x), 0.0)
