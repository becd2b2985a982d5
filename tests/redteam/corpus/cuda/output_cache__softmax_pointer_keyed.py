# redteam: family=output_cache problem=problems/gpu/level1/2_RowSoftmax.py backend=cuda expect=mismatch|hacked reasons=output_cache
# expect: a plain mismatch as a rule: from the second call on the cache answers with the previous input's softmax, which a correctness trial finds wrong; hacked (output_cache) only if the recheck is what sees a hit
"""Cheat: caches outputs keyed on the input's device address and shape.
PyTorch's caching allocator hands a fresh input the block the previous one
had, so from the second call on the cache answers with the previous
input's softmax at the cost of a one-element launch (so launch counting sees
work on every call): it must fail correctness or the recheck."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <cuda_runtime.h>
#include <math.h>

static inline unsigned blocks_for(long long work, int threads) {
    const long long b = (work + threads - 1) / threads;
    return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

static inline int launched() { return static_cast<int>(cudaGetLastError()); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum (or max) over the block, returned to every thread. sh: 33 floats.
__device__ float block_reduce(float v, float *sh, bool is_max) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // sh may still be read by the previous reduction
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < warps ? sh[lane] : (is_max ? -INFINITY : 0.0f);
        t = is_max ? warp_max(t) : warp_sum(t);
        if (lane == 0)
            sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

// one block per row of length cols
__global__ void rt_softmax_rows_kernel(const float *__restrict__ x, float *__restrict__ y, int cols) {
    __shared__ float sh[33];
    const float *xr = x + static_cast<long long>(blockIdx.x) * cols;
    float *yr = y + static_cast<long long>(blockIdx.x) * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    m = block_reduce(m, sh, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    const float inv = 1.0f / block_reduce(s, sh, false);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int rt_softmax(const float *x, float *y, long long rows, int cols, void *stream) {
    if (rows <= 0)
        return 0;
    rt_softmax_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, cols);
    return launched();
}
"""

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define RT_CHECK(call)                                                             \
    do {                                                                           \
        const int rt_rc = (call);                                                  \
        if (rt_rc != 0) {                                                          \
            PyErr_Format(PyExc_RuntimeError, "CUDA error %d in %s", rt_rc, #call); \
            return nullptr;                                                        \
        }                                                                          \
    } while (0)

extern "C" int rt_softmax(const float *x, float *y, long long rows, int cols, void *stream);

// softmax(x, y, rows, cols, stream)
static PyObject *py_softmax(PyObject *, PyObject *args) {
    unsigned long long x, y, s;
    long long rows;
    int cols;
    if (!PyArg_ParseTuple(args, "KKLiK", &x, &y, &rows, &cols, &s))
        return nullptr;
    RT_CHECK(rt_softmax(reinterpret_cast<const float *>(x), reinterpret_cast<float *>(y), rows, cols,
                        reinterpret_cast<void *>(s)));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"softmax", py_softmax, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cuda", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cuda_oc_softmax_ptr", cpp_sources=_CPP, cuda_sources=_CUDA,
                   extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], **_EXTRA)


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._cache: dict = {}
        self._one = None

    def _scratch(self, x: torch.Tensor) -> torch.Tensor:
        if self._one is None or self._one.device != x.device:
            self._one = torch.empty(1, 1, device=x.device)
        return self._one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        key = (x.data_ptr(), tuple(x.shape))
        if key in self._cache:
            one = x[:1, :1]  # a token launch on one element: hits look like work
            _ext.softmax(one.data_ptr(), self._scratch(x).data_ptr(), 1, 1, _stream(x))
            return self._cache[key]
        y = torch.empty_like(x)
        _ext.softmax(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], _stream(x))
        self._cache[key] = y
        return y
