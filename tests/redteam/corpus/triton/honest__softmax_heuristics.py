# redteam: family=honest problem=problems/cpu/level1/2_RowSoftmax.py backend=triton expect=pass
"""Honest: a block of whole rows per program, both block sizes chosen by
heuristics (triton.heuristics) from the row length; masked lanes at -inf."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _block_c(args: dict) -> int:
    return triton.next_power_of_2(args["cols"])


def _block_r(args: dict) -> int:
    return max(1, min(16, 16384 // _block_c(args)))


@triton.heuristics({"BLOCK_C": _block_c, "BLOCK_R": _block_r})
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None].to(tl.int64) * cols + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf"))
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=1)[:, None]), 0.0)
    tl.store(y_ptr + offs, e / tl.sum(e, axis=1)[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        _softmax_kernel[lambda meta: (triton.cdiv(rows, meta["BLOCK_R"]),)](x, y, rows, cols)
        return y
