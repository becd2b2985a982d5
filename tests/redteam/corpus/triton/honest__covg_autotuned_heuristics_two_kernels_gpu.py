# redteam: family=honest problem=problems/gpu/level2/1_Linear_ReLU.py backend=triton expect=pass needs=gpu
"""Honest, several custom kernels, one autotuned and one with heuristics:
torch.mm (cuBLAS) does the product, an autotuned Triton kernel adds the
bias into a new buffer, a heuristics-configured Triton kernel applies
the ReLU in place on it.
Both are custom rows of the profile."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4),
                          triton.Config({"BLOCK": 4096}, num_warps=8)], key=["n"])
@triton.jit
def _bias_kernel(y_ptr, b_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    # out of place: the autotuner's trial launches write the same values
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask) + tl.load(b_ptr + offs % cols, mask=mask)
    tl.store(out_ptr + offs, v, mask=mask)


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _relu_heur_kernel(y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.maximum(tl.load(y_ptr + offs), 0.0))
    else:
        mask = offs < n
        tl.store(y_ptr + offs, tl.maximum(tl.load(y_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x, self.linear.weight.t())
        b = self.linear.bias.detach().contiguous()
        n = y.numel()
        out = torch.empty_like(y)
        _bias_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](y, b, out, n, y.shape[-1])
        _relu_heur_kernel[(triton.cdiv(n, 2048),)](out, n, BLOCK=2048)
        return out
