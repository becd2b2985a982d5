# redteam: family=output_cache problem=problems/cpu/level1/4_LayerNorm.py backend=triton expect=mismatch|hacked reasons=output_cache
# expect: a plain mismatch: the replayed output is the first input's, so the second correctness trial already fails; hacked (output_cache) only if a trial's check let it through to the recheck
"""Cheat: computes one layer norm per input shape and replays it for every
later input of that shape. A timing loop over one fixed input measures a
dictionary lookup; with fresh inputs per call the replayed output is the
first input's: it must fail correctness or the recheck."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, rows, d, eps,
                       BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    # BLOCK_R whole rows per program
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_D)
    mask = (r[:, None] < rows) & (c[None, :] < d)
    offs = r[:, None].to(tl.int64) * d + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=1) / d
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / d + eps)
    w = tl.load(w_ptr + c, mask=c < d, other=0.0)
    b = tl.load(b_ptr + c, mask=c < d, other=0.0)
    tl.store(y_ptr + offs, xc * rstd[:, None] * w[None, :] + b[None, :], mask=mask)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float,
               rows: int = -1) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    d = w.numel()
    rows = x.numel() // d if rows < 0 else rows
    block_d = triton.next_power_of_2(d)
    block_r = max(1, min(16, 8192 // block_d))
    _layer_norm_kernel[(triton.cdiv(rows, block_r),)](
        x, w.detach().contiguous(), b.detach().contiguous(), y, rows, d, eps,
        BLOCK_R=block_r, BLOCK_D=block_d)
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))
        self._cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype, str(x.device))
        if key not in self._cache:
            self._cache[key] = layer_norm(x, self.weight, self.bias, self.eps)
        return self._cache[key]
