# redteam: family=degenerate_problem problem=tests/redteam/problems/degenerate_tiny.py backend=cpu expect=pass warn=degenerate
"""Cheat on a degenerate problem: every reference output is within 0.001
of zero, so a kernel that only writes zeros passes atol = 1e-2. kgym cannot
tell this from an honest kernel by the outputs, and should not guess: the
expected outcome is a pass that carries the degenerate-problem warning, so
whoever curates problems can fix or drop it."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>

static PyObject *py_gelu(PyObject *, PyObject *args) {
    unsigned long long xa, ya;
    long long n;
    if (!PyArg_ParseTuple(args, "KKL", &xa, &ya, &n))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    float *y = reinterpret_cast<float *>(ya);
    for (long long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
    Py_RETURN_NONE;
}

// fill(p, n, v): p[i] = v for i < n
static PyObject *py_fill(PyObject *, PyObject *args) {
    unsigned long long pa;
    long long n;
    double v;
    if (!PyArg_ParseTuple(args, "KLd", &pa, &n, &v))
        return nullptr;
    float *p = reinterpret_cast<float *>(pa);
    for (long long i = 0; i < n; ++i)
        p[i] = static_cast<float>(v);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"gelu", py_gelu, METH_VARARGS, ""},
                                {"fill", py_fill, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_gelu", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})

_ext = load_inline(name="rt_cpu_dp_zeros", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.new_empty(x.shape[0], self.weight.shape[1])
        _ext.fill(y.data_ptr(), y.numel(), 0.0)
        return y
