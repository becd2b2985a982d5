"""GPU candidate for problems/gpu/level1/1_GELU.py: a Triton kernel that
stores far outside its buffer, which faults on the device (illegal memory
access). Expected: runtime_error naming the CUDA error; the worker probes
the device and the next task passes."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs + (1 << 40), x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        bad_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        torch.cuda.synchronize()
        return y
