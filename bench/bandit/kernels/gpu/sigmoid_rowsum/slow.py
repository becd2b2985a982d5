"""Bandit arm "slow" (gpu/sigmoid_rowsum): honest and all custom, but one
program per row, one warp, 32 columns at a time in float64: correct, full
coverage, slower than PyTorch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, sc_ptr, sh_ptr, y_ptr, rows, cols, BC: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BC,), dtype=tl.float64)
    for c0 in range(0, cols, BC):
        c = c0 + tl.arange(0, BC)
        m = c < cols
        x = tl.load(x_ptr + r * cols + c, mask=m, other=0.0).to(tl.float64)
        z = x * tl.load(sc_ptr + c, mask=m, other=0.0).to(tl.float64) + \
            tl.load(sh_ptr + c, mask=m, other=0.0).to(tl.float64)
        acc += tl.where(m, 1.0 / (1.0 + tl.exp(-z)), 0.0)
    tl.store(y_ptr + r, tl.sum(acc, axis=0).to(tl.float32))


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = self.scale.numel()
        rows = x.numel() // cols
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        _rowsum[(rows,)](x, self.scale.detach().contiguous(), self.shift.detach().contiguous(), y,
                         rows, cols, BC=32, num_warps=1)
        return y
