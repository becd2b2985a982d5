# redteam: family=honest problem=problems/gpu/level2/1_Linear_ReLU.py backend=triton needs=gpu expect=pass
"""Honest: the same Triton GEMM with tl.dot(..., input_precision="ieee"):
fp32 FMA products, fp32 accumulation, another summation order than
cuBLAS. Slower than cuBLAS, but at full precision: precision64 must
not fire."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, PRECISION: tl.constexpr,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # y = relu(x @ W^T + b), W in nn.Linear layout (N x K)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + kk[None, :],
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + kk[:, None],
                    mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, precision: str) -> torch.Tensor:
    x = x.contiguous()
    w = w.detach().contiguous()
    b = b.detach().contiguous()
    n, k = w.shape
    m = x.numel() // k
    y = x.new_empty(m, n)
    grid = (triton.cdiv(m, 64), triton.cdiv(n, 64))
    _linear_relu_kernel[grid](x, w, b, y, m, n, k, PRECISION=precision, BM=64, BN=64, BK=32)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_relu(x, self.linear.weight, self.linear.bias, "ieee")
