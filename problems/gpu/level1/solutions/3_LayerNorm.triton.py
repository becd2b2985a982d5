"""triton solution for gpu/level1/3_LayerNorm: one program per row.

A row of up to 8192 entries is loaded once and kept in registers; a longer
row is streamed in 8192-wide chunks (mean, variance, write), the later passes
mostly from L2.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_MAX_BLOCK = 8192


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, dim, eps, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * dim
    y_row = y_ptr + row * dim
    offs = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = offs < dim
        x = tl.load(x_row + offs, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / dim
        d = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / dim + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        tl.store(y_row + offs, d * rstd * w + b, mask=mask)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, dim, BLOCK):
            acc += tl.load(x_row + c0 + offs, mask=c0 + offs < dim, other=0.0)
        mean = tl.sum(acc, axis=0) / dim
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, dim, BLOCK):
            mask = c0 + offs < dim
            d = tl.where(mask, tl.load(x_row + c0 + offs, mask=mask, other=0.0) - mean, 0.0)
            acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / dim + eps)
        for c0 in range(0, dim, BLOCK):
            mask = c0 + offs < dim
            x = tl.load(x_row + c0 + offs, mask=mask, other=0.0)
            w = tl.load(w_ptr + c0 + offs, mask=mask, other=0.0)
            b = tl.load(b_ptr + c0 + offs, mask=mask, other=0.0)
            tl.store(y_row + c0 + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows = x.numel() // self.dim
        block = min(triton.next_power_of_2(self.dim), _MAX_BLOCK)
        warps = 16 if block >= 8192 else (8 if block >= 2048 else 4)
        _layer_norm_kernel[(rows,)](x, self.weight.detach().contiguous(), self.bias.detach().contiguous(), y,
                                    self.dim, self.eps, BLOCK=block, ONE_PASS=self.dim <= block, num_warps=warps)
        return y
