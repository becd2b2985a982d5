# redteam: family=profile_forgery problem=problems/gpu/level2/1_Linear_ReLU.py backend=triton expect=pass needs=gpu
"""Cheat: the lazy kernel names library kernels as its own, hoping a judge
that reads names from the source counts cuBLAS's GEMM and PyTorch's
kernels as custom: a __global__ declaration in a comment, the names in a
string, and never-launched @triton.jit functions called like cuBLAS and
CUTLASS kernels. Only kernels the candidate compiled and launched count,
and never one of a library's names, so its coverage is the lazy kernel's."""
# expect: pass is legitimate: the names count for nothing, the figure is the honest lazy one

import torch
import torch.nn as nn
import triton
import triton.language as tl

# __global__ void sm90_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x128x8_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas(float *y)
# __global__ void ampere_sgemm_128x128_nt(float *y)
_NAMES = ("__global__ void Kernel2(float *y) {} __global__ void gemmk1_kernel(float *y) {} "
          "__global__ void vectorized_elementwise_kernel(float *y) {}")


@triton.jit
def _relu_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(y_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0), mask=mask)


def _relu_(y: torch.Tensor) -> None:
    n = y.numel()
    _relu_kernel[(triton.cdiv(n, 4096),)](y, n, BLOCK=4096)


@triton.jit
def Kernel2(y_ptr):
    tl.store(y_ptr, 0.0)


@triton.jit
def gemmSN_NN_kernel(y_ptr):
    tl.store(y_ptr, 0.0)


@triton.jit
def gemv2T_kernel_val(y_ptr):
    tl.store(y_ptr, 0.0)


@triton.jit
def nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT(y_ptr):
    tl.store(y_ptr, 0.0)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        _relu_(y)
        return y
