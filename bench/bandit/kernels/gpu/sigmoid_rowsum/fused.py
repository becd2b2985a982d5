"""Bandit arm "fused" (gpu/sigmoid_rowsum): scale, shift, sigmoid and the row
sum in one Triton kernel, one program per row, no temporaries."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, sc_ptr, sh_ptr, y_ptr, rows, cols, BC: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BC,), dtype=tl.float32)
    for c0 in range(0, cols, BC):
        c = c0 + tl.arange(0, BC)
        m = c < cols
        x = tl.load(x_ptr + r * cols + c, mask=m, other=0.0)
        z = x * tl.load(sc_ptr + c, mask=m, other=0.0) + tl.load(sh_ptr + c, mask=m, other=0.0)
        acc += tl.where(m, tl.sigmoid(z), 0.0)
    tl.store(y_ptr + r, tl.sum(acc, axis=0))


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
                         rows, cols, BC=1024, num_warps=4)
        return y
