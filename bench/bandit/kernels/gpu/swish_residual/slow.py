"""Bandit arm "slow" (gpu/swish_residual): honest and all custom, but one
program per column walking down the rows 16 at a time (strided, uncoalesced
reads) in float64: correct, full coverage, slower than PyTorch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish_residual_cols(x_ptr, sc_ptr, sh_ptr, y_ptr, rows, cols, BR: tl.constexpr):
    c = tl.program_id(0)
    a = tl.load(sc_ptr + c).to(tl.float64)
    b = tl.load(sh_ptr + c).to(tl.float64)
    for r0 in range(0, rows, BR):
        r = r0 + tl.arange(0, BR)
        m = r < rows
        offs = r.to(tl.int64) * cols + c
        x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float64)
        z = x * a + b
        y = z / (1.0 + tl.exp(-z)) + x
        tl.store(y_ptr + offs, y.to(tl.float32), mask=m)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))
        self.shift = nn.Parameter(0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = self.scale.numel()
        rows = x.numel() // cols
        y = torch.empty_like(x)
        _swish_residual_cols[(cols,)](x, self.scale.detach().contiguous(),
                                      self.shift.detach().contiguous(), y, rows, cols, BR=16,
                                      num_warps=1)
        return y
