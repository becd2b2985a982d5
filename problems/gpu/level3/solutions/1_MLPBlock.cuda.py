"""cuda solution for gpu/level3/1_MLPBlock: a layer-norm kernel and two fused GEMMs.

1. layer norm, one thread block per token row, into a scratch buffer;
2. h = gelu(n @ W1^T + b1): fp32 SIMT GEMM, bias and GELU in the epilogue;
3. y = x + h @ W2^T + b2: the same GEMM, bias and residual in the epilogue.

The GEMM: each 256-thread block computes a 128 x 128 tile, 8 x 8 outputs per
thread (two 4 x 4 quadrants 64 apart, for conflict-free shared-memory
reads), stepping through K 8 at a time with double-buffered, padded, k-major
shared-memory tiles and register prefetch of the next tile. Plain fp32 FMA,
so results match the fp32 reference to rounding.
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

constexpr unsigned kFull = 0xffffffffu;
constexpr int kNormThreads = 256;
constexpr int BM = 128, BN = 128, BK = 8, PAD = 4, THREADS = 256;
constexpr int EPI_GELU = 0, EPI_RESIDUAL = 1;

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

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

// Layer norm of one row per block (three sweeps: sum, squared deviations, output).
__global__ void __launch_bounds__(kNormThreads) layer_norm_kernel(const float* __restrict__ x,
                                                                  const float* __restrict__ w,
                                                                  const float* __restrict__ b, float* __restrict__ y,
                                                                  int64_t dim, float eps) {
    __shared__ float smem[32];
    const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
    float* yr = y + static_cast<int64_t>(blockIdx.x) * dim;
    const float inv_dim = 1.0f / static_cast<float>(dim);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        s += xr[i];
    const float mean = block_sum(s, smem) * inv_dim;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float d = xr[i] - mean;
        q += d * d;
    }
    const float rstd = 1.0f / sqrtf(block_sum(q, smem) * inv_dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

// Four consecutive k-values of row `row` of a (rows, K) row-major matrix,
// starting at column k (a multiple of 4); zeros past either edge. vec means
// K % 4 == 0 and a 16-byte-aligned base, so k < K implies k + 3 < K.
__device__ __forceinline__ void load_k4(const float* __restrict__ base, int row, int rows, int k, int K, bool vec,
                                        float out[4]) {
    if (row < rows && vec && k < K) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(base + static_cast<size_t>(row) * K + k));
        out[0] = v.x;
        out[1] = v.y;
        out[2] = v.z;
        out[3] = v.w;
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
            out[i] = (row < rows && k + i < K) ? __ldg(base + static_cast<size_t>(row) * K + k + i) : 0.0f;
    }
}

// Epilogue for four consecutive outputs of one row: add the bias, then GELU
// or the residual R. vec_n means N % 4 == 0 and 16-byte-aligned C, bias, R.
template <int EPI>
__device__ __forceinline__ void store4(float* __restrict__ C, const float* __restrict__ bias,
                                       const float* __restrict__ R, int row, int col, int N, bool vec_n,
                                       const float v[4]) {
    const size_t off = static_cast<size_t>(row) * N + col;
    if (vec_n && col < N) {
        const float4 bb = __ldg(reinterpret_cast<const float4*>(bias + col));
        float4 o = make_float4(v[0] + bb.x, v[1] + bb.y, v[2] + bb.z, v[3] + bb.w);
        if (EPI == EPI_GELU) {
            o = make_float4(gelu_erf(o.x), gelu_erf(o.y), gelu_erf(o.z), gelu_erf(o.w));
        } else {
            const float4 rr = __ldg(reinterpret_cast<const float4*>(R + off));
            o = make_float4(o.x + rr.x, o.y + rr.y, o.z + rr.z, o.w + rr.w);
        }
        *reinterpret_cast<float4*>(C + off) = o;
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (col + j < N) {
                const float o = v[j] + bias[col + j];
                C[off + j] = EPI == EPI_GELU ? gelu_erf(o) : o + R[off + j];
            }
        }
    }
}

// C (M, N) = epilogue(A (M, K) @ W (N, K)^T + bias).
template <int EPI>
__global__ void __launch_bounds__(THREADS, 2)
sgemm_nt_kernel(const float* __restrict__ A, const float* __restrict__ W, const float* __restrict__ bias,
                const float* __restrict__ R, float* __restrict__ C, int M, int N, int K, bool vec_k, bool vec_n) {
    __shared__ __align__(16) float As[2][BK][BM + PAD];
    __shared__ __align__(16) float Ws[2][BK][BN + PAD];

    const int tid = threadIdx.x;
    const int tx = tid & 15;  // output columns tx*4 .. +3 and 64 + tx*4 .. +3
    const int ty = tid >> 4;  // output rows    ty*4 .. +3 and 64 + ty*4 .. +3
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    const int lrow = tid >> 1;     // tile row this thread loads, of A and of W
    const int lk = (tid & 1) * 4;  // first of the 4 k-values it loads

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
            acc[i][j] = 0.0f;

    float a_ld[4], w_ld[4];
    load_k4(A, m0 + lrow, M, lk, K, vec_k, a_ld);
    load_k4(W, n0 + lrow, N, lk, K, vec_k, w_ld);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        As[0][lk + i][lrow] = a_ld[i];
        Ws[0][lk + i][lrow] = w_ld[i];
    }
    __syncthreads();

    const int ktiles = (K + BK - 1) / BK;
    for (int t = 0; t < ktiles; ++t) {
        const int cur = t & 1;
        const bool has_next = t + 1 < ktiles;
        if (has_next) {
            load_k4(A, m0 + lrow, M, (t + 1) * BK + lk, K, vec_k, a_ld);
            load_k4(W, n0 + lrow, N, (t + 1) * BK + lk, K, vec_k, w_ld);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][kk][ty * 4 + 64]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Ws[cur][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Ws[cur][kk][tx * 4 + 64]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // The other buffer was last read in iteration t - 1, before the
        // barrier that ended it; the barrier below publishes the new tile.
        if (has_next) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                As[cur ^ 1][lk + i][lrow] = a_ld[i];
                Ws[cur ^ 1][lk + i][lrow] = w_ld[i];
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + ty * 4 + (i & 3) + (i >> 2) * 64;
        if (row < M) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float v[4] = {acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]};
                store4<EPI>(C, bias, R, row, n0 + h * 64 + tx * 4, N, vec_n, v);
            }
        }
    }
}

template <int EPI>
void launch_sgemm(const float* A, const float* W, const float* bias, const float* R, float* C, int64_t M, int64_t N,
                  int64_t K, cudaStream_t stream) {
    TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && (M + BM - 1) / BM <= 65535,
                "mlp_block_forward: GEMM too large");
    const bool vec_k = K % 4 == 0 && aligned16(A) && aligned16(W);
    const bool vec_n = N % 4 == 0 && aligned16(C) && aligned16(bias) && (R == nullptr || aligned16(R));
    const dim3 grid(static_cast<unsigned>((N + BN - 1) / BN), static_cast<unsigned>((M + BM - 1) / BM));
    sgemm_nt_kernel<EPI><<<grid, THREADS, 0, stream>>>(A, W, bias, R, C, static_cast<int>(M), static_cast<int>(N),
                                                       static_cast<int>(K), vec_k, vec_n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void check_param(const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == at::kFloat, "mlp_block_forward: ", name,
                " must be a float32 CUDA tensor");
}

}  // namespace

at::Tensor mlp_block_forward(const at::Tensor& x, const at::Tensor& norm_weight, const at::Tensor& norm_bias,
                             const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2, const at::Tensor& b2,
                             double eps) {
    check_param(x, "x");
    check_param(norm_weight, "norm_weight");
    check_param(norm_bias, "norm_bias");
    check_param(w1, "w1");
    check_param(b1, "b1");
    check_param(w2, "w2");
    check_param(b2, "b2");
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous();
    const at::Tensor nw = norm_weight.contiguous(), nb = norm_bias.contiguous();
    const at::Tensor w1c = w1.contiguous(), b1c = b1.contiguous(), w2c = w2.contiguous(), b2c = b2.contiguous();
    const int64_t dim = nw.numel();
    const int64_t hidden = w1c.size(0);
    TORCH_CHECK(dim > 0 && xc.size(-1) == dim && nb.numel() == dim, "mlp_block_forward: norm shape mismatch");
    TORCH_CHECK(w1c.dim() == 2 && w1c.size(1) == dim && b1c.numel() == hidden, "mlp_block_forward: fc1 shape mismatch");
    TORCH_CHECK(w2c.dim() == 2 && w2c.size(0) == dim && w2c.size(1) == hidden && b2c.numel() == dim,
                "mlp_block_forward: fc2 shape mismatch");
    at::Tensor y = at::empty_like(xc);
    const int64_t rows = xc.numel() / dim;
    if (rows == 0)
        return y;
    TORCH_CHECK(rows < (int64_t{1} << 31), "mlp_block_forward: too many rows");
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

    at::Tensor normed = at::empty({rows, dim}, xc.options());
    layer_norm_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
        xc.data_ptr<float>(), nw.data_ptr<float>(), nb.data_ptr<float>(), normed.data_ptr<float>(), dim,
        static_cast<float>(eps));
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    at::Tensor h = at::empty({rows, hidden}, xc.options());
    launch_sgemm<EPI_GELU>(normed.data_ptr<float>(), w1c.data_ptr<float>(), b1c.data_ptr<float>(), nullptr,
                           h.data_ptr<float>(), rows, hidden, dim, stream);
    launch_sgemm<EPI_RESIDUAL>(h.data_ptr<float>(), w2c.data_ptr<float>(), b2c.data_ptr<float>(),
                               xc.data_ptr<float>(), y.data_ptr<float>(), rows, dim, hidden, stream);
    return y;
}
"""

_CPP = ("at::Tensor mlp_block_forward(const at::Tensor& x, const at::Tensor& norm_weight, "
        "const at::Tensor& norm_bias, const at::Tensor& w1, const at::Tensor& b1, const at::Tensor& w2, "
        "const at::Tensor& b2, double eps);")

_ext = load_inline(
    name="kgym_gpu_level3_1_MLPBlock_cuda",
    cpp_sources=_CPP,
    cuda_sources=_CUDA,
    functions=["mlp_block_forward"],
    extra_cuda_cflags=["-O3"],
)


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
        return _ext.mlp_block_forward(x, self.norm_weight.detach(), self.norm_bias.detach(),
                                      self.fc1.weight.detach(), self.fc1.bias.detach(),
                                      self.fc2.weight.detach(), self.fc2.bias.detach(), float(self.eps))
