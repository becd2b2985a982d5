"""Bandit arm "lazy" (gpu/matmul_bias_gelu): correct, but the matmul (cuBLAS)
and the GELU are PyTorch's and the Triton kernel only adds the bias. No
decoy (the output depends on the kernel); low profiling coverage."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _bias(h_ptr, b_ptr, y_ptr, n_total, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_total
    h = tl.load(h_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, h + tl.load(b_ptr + offs % N, mask=m, other=0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / math.sqrt(in_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.matmul(x, self.weight).contiguous()
        b = self.bias.detach().contiguous()
        z = torch.empty_like(h)
        n = h.numel()
        _bias[(triton.cdiv(n, 4096),)](h, b, z, n, b.numel(), BLOCK=4096, num_warps=8)
        return F.gelu(z)
