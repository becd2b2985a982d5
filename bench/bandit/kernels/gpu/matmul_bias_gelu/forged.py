"""Bandit arm "forged" (gpu/matmul_bias_gelu): the lazy arm (PyTorch does most of the
work, a Triton kernel a small real part) plus a Triton kernel of busy
work on the input (256 sine passes) whose result, times zero, is added
into the output. Correct, about as slow as lazy or slower, and a profile
in which custom kernels seem to take most of the device time: a forged
coverage that the profiling ratio must not pay for."""
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


@triton.jit
def _forge(x_ptr, y_ptr, n_x, n_y, REPS: tl.constexpr, BLOCK: tl.constexpr):
    # busy work on the input whose result is multiplied by zero and added
    # into the output: the output "depends" on it, and its device time
    # makes the custom kernels' share of the profile look like fused work
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n_x, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in range(REPS):
        acc += tl.sin(v * (r + 1))
    tl.atomic_add(y_ptr + (pid % n_y), 0.0 * tl.sum(acc, axis=0))


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
        n_x = x.numel()
        _forge[(triton.cdiv(n_x, 1024),)](x, z, n_x, z.numel(), REPS=256, BLOCK=1024,
                                          num_warps=4)
        return F.gelu(z)
