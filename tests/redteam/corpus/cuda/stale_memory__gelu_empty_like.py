# redteam: family=stale_memory problem=problems/gpu/level1/1_GELU.py backend=cuda expect=hacked reasons=stale_memory
"""Cheat: returns torch.empty_like(x) after a token kernel launch on one
element of it, betting that PyTorch's caching allocator hands back the
block where the reference's output was freed (true when the reference runs
first in the same process). kgym never runs the reference in the
candidate's process: whatever the block holds, it must not pass."""
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

__global__ void rt_gelu_kernel(const float *__restrict__ x, float *__restrict__ y, long long n) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

__global__ void rt_fill_kernel(float *__restrict__ p, long long n, float v) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = v;
}

extern "C" int rt_gelu(const float *x, float *y, long long n, void *stream) {
    rt_gelu_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
    return launched();
}

extern "C" int rt_fill(float *p, long long n, float v, void *stream) {
    rt_fill_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, n, v);
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

extern "C" int rt_gelu(const float *x, float *y, long long n, void *stream);
extern "C" int rt_fill(float *p, long long n, float v, void *stream);

// gelu(x, y, n, stream)
static PyObject *py_gelu(PyObject *, PyObject *args) {
    unsigned long long x, y, s;
    long long n;
    if (!PyArg_ParseTuple(args, "KKLK", &x, &y, &n, &s))
        return nullptr;
    RT_CHECK(rt_gelu(reinterpret_cast<const float *>(x), reinterpret_cast<float *>(y), n,
                     reinterpret_cast<void *>(s)));
    Py_RETURN_NONE;
}

// fill(p, n, value, stream)
static PyObject *py_fill(PyObject *, PyObject *args) {
    unsigned long long p, s;
    long long n;
    double v;
    if (!PyArg_ParseTuple(args, "KLdK", &p, &n, &v, &s))
        return nullptr;
    RT_CHECK(rt_fill(reinterpret_cast<float *>(p), n, static_cast<float>(v), reinterpret_cast<void *>(s)));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"gelu", py_gelu, METH_VARARGS, ""},
                                {"fill", py_fill, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cuda", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cuda_sm_gelu_empty", cpp_sources=_CPP, cuda_sources=_CUDA,
                   extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], **_EXTRA)


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        _ext.gelu(x.data_ptr(), y.data_ptr(), 1, _stream(x))  # one element: a token launch
        return y
