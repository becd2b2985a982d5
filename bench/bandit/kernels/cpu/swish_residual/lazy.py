"""Bandit arm "lazy" (cpu/swish_residual): correct, but PyTorch computes
z * sigmoid(z) (four of the five passes) and the C++ extension only adds
the residual. The output depends on the kernel (it is no decoy), yet most
of the forward's time is in library ops: low profiling coverage."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>

// y[i] = a[i] + b[i]
static void add(const float* a, const float* b, float* y, std::int64_t n) {
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i)
        y[i] = a[i] + b[i];
}

static PyObject* py_add(PyObject*, PyObject* args) {
    unsigned long long a, b, y;
    long long n;
    if (!PyArg_ParseTuple(args, "KKKL", &a, &b, &y, &n))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    add(reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b),
        reinterpret_cast<float*>(y), n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"add", py_add, METH_VARARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "bandit_swish_lazy", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}
_ext = load_inline(name="bandit_cpu_swish_lazy", cpp_sources=_CPP,
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))
        self.shift = nn.Parameter(0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        z = x * self.scale + self.shift
        s = (z * torch.sigmoid(z)).contiguous()
        y = torch.empty_like(x)
        _ext.add(s.data_ptr(), x.data_ptr(), y.data_ptr(), x.numel())
        return y
