"""Bandit arm "wrong" (gpu/matmul_bias_gelu): the fused kernel without the
bias: a mismatch."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _mbg(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
         BK: tl.constexpr, BIAS: tl.constexpr):
    # y (M, N) = gelu(x (M, K) @ w (K, N) + b); fp32 via "tf32x3" (three tf32
    # products per tile, about fp32 accuracy: no precision downgrade)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    rm_ld = tl.minimum(rm, M - 1).to(tl.int64)
    rn_ld = tl.minimum(rn, N - 1).to(tl.int64)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + rk
        x = tl.load(x_ptr + rm_ld[:, None] * K + k[None, :], mask=k[None, :] < K, other=0.0)
        w = tl.load(w_ptr + k.to(tl.int64)[:, None] * N + rn_ld[None, :], mask=k[:, None] < K, other=0.0)
        acc = tl.dot(x, w, acc, input_precision="tf32x3")
    if BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    y = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * N + rn[None, :], y,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _launch(x, w, b, bias=True, bm=128, bn=128, bk=32, warps=8, stages=3):
    k, n = w.shape
    m = x.numel() // k
    y = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _mbg[grid](x, w, b, y, m, n, k, BM=bm, BN=bn, BK=bk, BIAS=bias, num_warps=warps, num_stages=stages)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / math.sqrt(in_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _launch(x.contiguous(), self.weight.detach().contiguous(), self.bias.detach().contiguous(),
                       bias=False)
