"""triton solution for cpu/level2/3_Scale_Bias_Sigmoid_Sum: one fused kernel, BM rows per program."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_shift_sigmoid_sum_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, rows, cols,
                                    BM: tl.constexpr, BN: tl.constexpr):
    # y[r] = sum_c sigmoid(x[r, c] * scale[c] + shift[c]); columns in BN chunks.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for c0 in range(0, cols, BN):
        rc = c0 + tl.arange(0, BN)
        cmask = rc < cols
        x = tl.load(x_ptr + rm[:, None] * cols + rc[None, :], mask=(rm[:, None] < rows) & cmask[None, :], other=0.0)
        scale = tl.load(scale_ptr + rc, mask=cmask, other=0.0)
        shift = tl.load(shift_ptr + rc, mask=cmask, other=0.0)
        s = 1.0 / (1.0 + tl.exp(-(x * scale[None, :] + shift[None, :])))
        acc += tl.sum(tl.where(cmask[None, :], s, 0.0), axis=1)
    tl.store(y_ptr + rm, acc, mask=rm < rows)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, dtype=x.dtype, device=x.device)
        bm = 32
        bn = min(triton.next_power_of_2(cols), 256)
        _scale_shift_sigmoid_sum_kernel[(triton.cdiv(rows, bm),)](
            x, self.scale.detach().contiguous(), self.shift.detach().contiguous(), y, rows, cols, BM=bm, BN=bn)
        return y
