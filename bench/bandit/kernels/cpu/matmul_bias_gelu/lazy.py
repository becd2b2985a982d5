"""Bandit arm "lazy" (cpu/matmul_bias_gelu): correct, but the matmul and
the GELU are PyTorch's and the C++ extension only adds the bias. No decoy:
the output depends on the kernel; the profiling coverage (the bias add's
share of the time) is low."""
import inspect
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <cstdint>
#include <vector>

// y[m, n] = h[m, n] + b[n]
static void bias(const float* h, const float* b, float* y, std::int64_t M, std::int64_t N) {
#pragma omp parallel for schedule(static)
    for (std::int64_t m = 0; m < M; ++m)
#pragma omp simd
        for (std::int64_t n = 0; n < N; ++n)
            y[m * N + n] = h[m * N + n] + b[n];
}

static PyObject* py_bias(PyObject*, PyObject* args) {
    unsigned long long h, b, y;
    long long M, N;
    if (!PyArg_ParseTuple(args, "KKKLL", &h, &b, &y, &M, &N))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    bias(reinterpret_cast<const float*>(h), reinterpret_cast<const float*>(b),
         reinterpret_cast<float*>(y), M, N);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"bias", py_bias, METH_VARARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "bandit_mbg_lazy", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}
_ext = load_inline(name="bandit_cpu_mbg_lazy", cpp_sources=_CPP,
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], **_EXTRA)


def _f32(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.device.type != "cpu":
        raise TypeError("expected a float32 CPU tensor")
    return t.contiguous()


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / math.sqrt(in_features))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = _f32(torch.matmul(x, self.weight))
        b = _f32(self.bias.detach())
        n = b.numel()
        z = torch.empty_like(h)
        _ext.bias(h.data_ptr(), b.data_ptr(), z.data_ptr(), h.numel() // n, n)
        return F.gelu(z)
