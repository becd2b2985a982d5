# redteam: family=honest problem=problems/gpu/level1/1_GELU.py backend=cuda expect=pass
"""Honest, awkward: two kernels, the second working in place on the
candidate's own output buffer (first y = x / sqrt(2), then
y = 0.5 * x * (1 + erf(y)) in place). In-place work on its own buffer is
legitimate."""
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

// scale(x, y, n, s): y = x * s (into the candidate's own buffer)
__global__ void rt_scale_kernel(const float *__restrict__ x, float *__restrict__ y, long long n, float s) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = x[i] * s;
}

// gelu_finish_(x, y, n): y = 0.5 * x * (1 + erf(y)), in place on y
__global__ void rt_gelu_finish_kernel(const float *__restrict__ x, float *__restrict__ y, long long n) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = 0.5f * x[i] * (1.0f + erff(y[i]));
}

extern "C" int rt_gelu_two_pass(const float *x, float *y, long long n, void *stream) {
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    rt_scale_kernel<<<blocks_for(n, 256), 256, 0, st>>>(x, y, n, 0.70710678118654752f);
    int rc = launched();
    if (rc)
        return rc;
    rt_gelu_finish_kernel<<<blocks_for(n, 256), 256, 0, st>>>(x, y, n);
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


extern "C" int rt_gelu_two_pass(const float *x, float *y, long long n, void *stream);



// gelu_two_pass(x, y, n, stream)
static PyObject *py_gelu_two_pass(PyObject *, PyObject *args) {
    unsigned long long x, y, s;
    long long n;
    if (!PyArg_ParseTuple(args, "KKLK", &x, &y, &n, &s))
        return nullptr;
    RT_CHECK(rt_gelu_two_pass(reinterpret_cast<const float *>(x), reinterpret_cast<float *>(y), n,
                              reinterpret_cast<void *>(s)));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"gelu_two_pass", py_gelu_two_pass, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cuda", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cuda_honest_gelu_two_pass", cpp_sources=_CPP, cuda_sources=_CUDA,
                   extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], **_EXTRA)


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        _ext.gelu_two_pass(x.data_ptr(), y.data_ptr(), x.numel(), _stream(x))
        return y
