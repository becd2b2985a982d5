"""triton solution for gpu/level3/1_MLPBlock: three kernels.

1. layer norm, one program per token row;
2. h1 = gelu(n @ W1^T + b1), a tiled matmul with bias and GELU fused;
3. y = x + h1 @ W2^T + b2, the same matmul with bias and the residual fused.

Products use "tf32x3" (three tf32 tensor-core products per tile, about fp32
accuracy) so the result tracks the fp32 reference closely.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_PRECISION = "tf32x3"


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, dim, eps, BLOCK: tl.constexpr):
    # One row per program; dim <= BLOCK (the caller checks).
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < dim
    x = tl.load(x_ptr + row * dim + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / dim
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / dim + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * dim + offs, d * rstd * w + b, mask=mask)


@triton.jit
def _linear_kernel(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K,
                   GELU: tl.constexpr, RESIDUAL: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                   PRECISION: tl.constexpr):
    # y = act(x @ w^T + b) (+ r); x is (M, K), w is (N, K), r and y are (M, N).
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_m
    pid_n = (pid % (GROUP_M * tiles_n)) // group_m

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    rm_ld = tl.minimum(rm, M - 1).to(tl.int64)
    rn_ld = tl.minimum(rn, N - 1).to(tl.int64)
    x_ptrs = x_ptr + rm_ld[:, None] * K + rk[None, :]
    w_ptrs = w_ptr + rn_ld[None, :] * K + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(x_ptrs, mask=rk[None, :] < K - k0, other=0.0)
        w = tl.load(w_ptrs, mask=rk[:, None] < K - k0, other=0.0)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)
        x_ptrs += BK
        w_ptrs += BK
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if GELU:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    out_offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if RESIDUAL:
        acc += tl.load(r_ptr + out_offs, mask=out_mask, other=0.0)
    tl.store(y_ptr + out_offs, acc, mask=out_mask)


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, residual: torch.Tensor | None, gelu: bool) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    bm, bn, bk = 128, 128, 32
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _linear_kernel[grid](x, w, b, residual if residual is not None else y, y, m, n, k,
                         GELU=gelu, RESIDUAL=residual is not None, BM=bm, BN=bn, BK=bk, GROUP_M=8,
                         PRECISION=_PRECISION, num_warps=8, num_stages=3)
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.norm_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.contiguous().view(-1, self.dim)
        block = triton.next_power_of_2(self.dim)
        if block > 16384:
            raise ValueError("layer-norm width above 16384 is not supported by this kernel")
        n = torch.empty_like(x2)
        _layer_norm_kernel[(x2.shape[0],)](x2, self.norm_weight.detach().contiguous(),
                                           self.norm_bias.detach().contiguous(), n, self.dim, self.eps,
                                           BLOCK=block, num_warps=4 if block <= 1024 else 8)
        h = _linear(n, self.fc1.weight.detach().contiguous(), self.fc1.bias.detach().contiguous(), None, gelu=True)
        y = _linear(h, self.fc2.weight.detach().contiguous(), self.fc2.bias.detach().contiguous(), x2, gelu=False)
        return y.view(shape)
