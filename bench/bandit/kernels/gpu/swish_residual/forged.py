"""Bandit arm "forged" (gpu/swish_residual): the lazy arm (PyTorch does most of the
work, a Triton kernel a small real part) plus a Triton kernel of busy
work on the input (64 sine passes) whose result, times zero, is added
into the output. Correct, about as slow as lazy or slower, and a profile
in which custom kernels seem to take most of the device time: a forged
coverage that the profiling ratio must not pay for."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(a_ptr + offs, mask=m) + tl.load(b_ptr + offs, mask=m), mask=m)


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
        n_x = x.numel()
        _forge[(triton.cdiv(n_x, 1024),)](x, y, n_x, y.numel(), REPS=64, BLOCK=1024,
                                          num_warps=4)
        return y
