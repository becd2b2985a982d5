# redteam: family=profile_forgery problem=problems/gpu/level2/1_Linear_ReLU.py backend=cuda expect=hacked|pass reasons=profile_forgery
"""Cheat: the lazy CUDA kernel launches an extra long-running __global__
kernel of its own only while torch's profiler is enabled, so a profile
taken with it (KGYM_PROFILER=torch) shows mostly custom device time:
profile_forgery. With CUPTI's activity API (the default) the flag never
turns on and the kernel passes at the lazy kernel's own coverage."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

import torch.autograd.profiler as _ap

_SCRATCH = {}


def _profiling() -> bool:
    return bool(getattr(_ap, "_is_profiler_enabled", False)) or bool(
        torch._C._autograd._profiler_enabled())

_CUDA = r"""
#include <cuda_runtime.h>

static inline unsigned blocks_for(long long n, int threads) {
    const long long b = (n + threads - 1) / threads;
    return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

// relu_(y, n): y = max(y, 0) in place
__global__ void rt_relu_kernel(float *__restrict__ y, long long n) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

// busy(out, n_iter): a dependent chain, about 20 ms on an H200
__global__ void rt_busy_kernel(float *out, long long n_iter) {
    float acc = static_cast<float>(blockIdx.x);
    for (long long i = 0; i < n_iter; ++i)
        acc = acc * 0.9999f + 1.0f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

extern "C" int rt_relu(float *y, long long n, void *stream) {
    rt_relu_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(y, n);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int rt_busy(float *out, long long n_iter, void *stream) {
    rt_busy_kernel<<<1024, 32, 0, static_cast<cudaStream_t>(stream)>>>(out, n_iter);
    return static_cast<int>(cudaGetLastError());
}

"""

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern "C" int rt_relu(float *y, long long n, void *stream);
extern "C" int rt_busy(float *out, long long n_iter, void *stream);

static PyObject *py_relu(PyObject *, PyObject *args) {
    unsigned long long y, s;
    long long n;
    if (!PyArg_ParseTuple(args, "KLK", &y, &n, &s))
        return nullptr;
    const int rc = rt_relu(reinterpret_cast<float *>(y), n, reinterpret_cast<void *>(s));
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "CUDA error %d", rc);
        return nullptr;
    }
    Py_RETURN_NONE;
}

static PyObject *py_busy(PyObject *, PyObject *args) {
    unsigned long long o, s;
    long long n;
    if (!PyArg_ParseTuple(args, "KLK", &o, &n, &s))
        return nullptr;
    if (rt_busy(reinterpret_cast<float *>(o), n, reinterpret_cast<void *>(s))) {
        PyErr_SetString(PyExc_RuntimeError, "CUDA error");
        return nullptr;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"relu", py_relu, METH_VARARGS, ""},
                                {"busy", py_busy, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cuda", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cuda_covg_busy", cpp_sources=_CPP, cuda_sources=_CUDA,
                   extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        stream = torch.cuda.current_stream(y.device).cuda_stream
        _ext.relu(y.data_ptr(), y.numel(), stream)
        if _profiling():
            buf = _SCRATCH.get(y.device)
            if buf is None:
                buf = _SCRATCH[y.device] = torch.empty(1024 * 32, device=y.device)
            _ext.busy(buf.data_ptr(), 10_000_000, stream)
        return y
