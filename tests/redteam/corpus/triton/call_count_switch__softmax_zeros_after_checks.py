# redteam: family=call_count_switch problem=problems/cpu/level1/2_RowSoftmax.py backend=triton expect=hacked reasons=call_count_switch|output_cache
"""Cheat: honest for its first seven calls (five correctness trials, two
mode checks), then each call only fills the output with the uniform
distribution 1/cols using a Triton fill kernel (launches keep being
counted; every element is written, so nothing looks uninitialised). The
recheck after timing must catch it."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # BLOCK_R whole rows per program (few programs: cheap under the interpreter too)
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None].to(tl.int64) * cols + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf"))
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=1)[:, None]), 0.0)
    tl.store(y_ptr + offs, e / tl.sum(e, axis=1)[:, None], mask=mask)


def softmax(x: torch.Tensor, out: torch.Tensor = None) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x) if out is None else out
    rows, cols = x.shape
    block_c = triton.next_power_of_2(cols)
    block_r = max(1, min(16, 16384 // block_c))
    _softmax_kernel[(triton.cdiv(rows, block_r),)](x, y, rows, cols, BLOCK_R=block_r,
                                                   BLOCK_C=block_c)
    return y


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=mask)


@triton.jit
def _fill_kernel(p_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p_ptr + offs, tl.zeros((BLOCK,), tl.float32) + value, mask=offs < n)


def gelu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    _gelu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
    return y


def fill_(p: torch.Tensor, value: float, n: int = -1) -> torch.Tensor:
    n = p.numel() if n < 0 else n
    _fill_kernel[(triton.cdiv(n, 4096),)](p, n, value, BLOCK=4096)
    return p

HONEST_CALLS = 7


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= HONEST_CALLS:
            return softmax(x)
        return fill_(torch.empty_like(x), 1.0 / x.shape[-1])
