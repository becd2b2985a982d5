"""Bandit arm "lazy" (gpu/swish_residual): correct, but PyTorch computes
z * sigmoid(z) (four of the five passes) and the Triton kernel only adds
the residual. The output depends on the kernel (no decoy); most of the
device time is in PyTorch's kernels: low profiling coverage."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(a_ptr + offs, mask=m) + tl.load(b_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))
        self.shift = nn.Parameter(0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        z = x * self.scale + self.shift
        s = (z * torch.sigmoid(z)).contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _add[(triton.cdiv(n, 4096),)](s, x, y, n, BLOCK=4096, num_warps=8)
        return y
