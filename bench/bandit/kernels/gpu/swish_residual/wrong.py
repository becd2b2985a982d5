"""Bandit arm "wrong" (gpu/swish_residual): the fused kernel, but it
forgets the residual (y = swish(z), not swish(z) + x): a mismatch."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish_residual(x_ptr, sc_ptr, sh_ptr, y_ptr, rows, cols,
                    BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    m = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r.to(tl.int64)[:, None] * cols + c[None, :]
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    sc = tl.load(sc_ptr + c, mask=c < cols, other=0.0)
    sh = tl.load(sh_ptr + c, mask=c < cols, other=0.0)
    z = x * sc[None, :] + sh[None, :]
    tl.store(y_ptr + offs, z * tl.sigmoid(z), mask=m)


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
        br, bc = 8, 512
        grid = (triton.cdiv(rows, br), triton.cdiv(cols, bc))
        _swish_residual[grid](x, self.scale.detach().contiguous(), self.shift.detach().contiguous(),
                              y, rows, cols, BR=br, BC=bc, num_warps=8)
        return y
