"""cuda solution for gpu/level2/2_Add_LayerNorm_GELU: one fused thread block per row.

Three sweeps over x + residual: the sum (from DRAM), the squared deviations
and the output (both mostly from L2); the sum is never written out. float4
accesses when rows and parameters are 16-byte aligned.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(kFull, v, o);
    return v;
}

// Every thread of the block gets the sum. smem holds 32 floats; the leading
// barrier lets the same smem serve consecutive calls.
__device__ float block_sum(float v, float* smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        smem[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? smem[lane] : 0.0f);
}

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__global__ void __launch_bounds__(kThreads)
add_layer_norm_gelu_kernel(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ w,
                           const float* __restrict__ b, float* __restrict__ y, int64_t dim, float eps, bool vec) {
    __shared__ float smem[32];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
    const float* xr = x + base;
    const float* rr = r + base;
    float* yr = y + base;
    const float inv_dim = 1.0f / static_cast<float>(dim);
    const int64_t n4 = vec ? dim / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* r4 = reinterpret_cast<const float4*>(rr);

    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = add4(x4[i], r4[i]);
        s += (v.x + v.y) + (v.z + v.w);
    }
    for (int64_t i = n4 * 4 + threadIdx.x; i < dim; i += blockDim.x)
        s += xr[i] + rr[i];
    const float mean = block_sum(s, smem) * inv_dim;

    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = add4(x4[i], r4[i]);
        const float d0 = v.x - mean, d1 = v.y - mean, d2 = v.z - mean, d3 = v.w - mean;
        q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
    for (int64_t i = n4 * 4 + threadIdx.x; i < dim; i += blockDim.x) {
        const float d = (xr[i] + rr[i]) - mean;
        q += d * d;
    }
    const float rstd = 1.0f / sqrtf(block_sum(q, smem) * inv_dim + eps);

    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = add4(x4[i], r4[i]);
        const float4 ww = __ldg(w4 + i);
        const float4 bb = __ldg(b4 + i);
        y4[i] = make_float4(gelu_erf((v.x - mean) * rstd * ww.x + bb.x), gelu_erf((v.y - mean) * rstd * ww.y + bb.y),
                            gelu_erf((v.z - mean) * rstd * ww.z + bb.z), gelu_erf((v.w - mean) * rstd * ww.w + bb.w));
    }
    for (int64_t i = n4 * 4 + threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = gelu_erf(((xr[i] + rr[i]) - mean) * rstd * w[i] + b[i]);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

}  // namespace

at::Tensor add_layer_norm_gelu_forward(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                       const at::Tensor& bias, double eps) {
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "add_layer_norm_gelu_forward: CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat && residual.scalar_type() == at::kFloat &&
                weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
                "add_layer_norm_gelu_forward: float32 expected");
    TORCH_CHECK(x.sizes() == residual.sizes(), "add_layer_norm_gelu_forward: x and residual differ in shape");
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous();
    const at::Tensor rc = residual.contiguous();
    const at::Tensor wc = weight.contiguous();
    const at::Tensor bc = bias.contiguous();
    const int64_t dim = wc.numel();
    TORCH_CHECK(dim > 0 && xc.size(-1) == dim && bc.numel() == dim, "add_layer_norm_gelu_forward: shape mismatch");
    at::Tensor y = at::empty_like(xc);
    const int64_t rows = xc.numel() / dim;
    if (rows == 0)
        return y;
    TORCH_CHECK(rows < (int64_t{1} << 31), "add_layer_norm_gelu_forward: too many rows");
    const float* xp = xc.data_ptr<float>();
    const float* rp = rc.data_ptr<float>();
    const float* wp = wc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec = dim % 4 == 0 && aligned16(xp) && aligned16(rp) && aligned16(wp) && aligned16(bp) &&
                     aligned16(yp);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    add_layer_norm_gelu_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        xp, rp, wp, bp, yp, dim, static_cast<float>(eps), vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_CPP = ("at::Tensor add_layer_norm_gelu_forward(const at::Tensor& x, const at::Tensor& residual, "
        "const at::Tensor& weight, const at::Tensor& bias, double eps);")

_ext = load_inline(
    name="kgym_gpu_level2_2_Add_LayerNorm_GELU_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["add_layer_norm_gelu_forward"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.add_layer_norm_gelu_forward(x, residual, self.weight.detach(), self.bias.detach(),
                                                float(self.eps))
