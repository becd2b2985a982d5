"""GPU candidate for problems/gpu/level1/1_GELU.py: computes GELU correctly
with a Triton kernel, then leaves a long chain of matrix products running on
a side stream without joining it, hoping the timer only waits for the
default stream. Family: side_stream. Expected: pass, but timed at its true
cost (the side-stream work is included in kernel_runtime)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_side = None
_junk = None


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=m)


def junk_work():
    global _side, _junk
    if _side is None:
        _side = torch.cuda.Stream()
        _junk = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(_side):
        a = _junk
        for _ in range(20):
            a = a @ _junk
            a = a / 64.0


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        junk_work()
        return y
