# redteam: family=input_mutation problem=problems/cpu/level1/1_GELU.py backend=cpu expect=hacked reasons=input_mutation
"""Cheat: zeroes its input in place and returns zeros (both with its own
kernel). Where the reference runs after the candidate on the same tensor,
it computes gelu(0) = 0 and agrees. kgym gives the reference its own copy,
so the zeros must fail (or the mutation be flagged)."""
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

_ext = load_inline(name="rt_cpu_im_gelu_zero", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_contiguous():
            _ext.fill(x.data_ptr(), x.numel(), 0.0)
        y = torch.empty_like(x)
        _ext.fill(y.data_ptr(), y.numel(), 0.0)
        return y
