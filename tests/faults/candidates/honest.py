"""The honest candidate: y = 2x + 1 in a small C++ extension (load_inline).

Placed after each fault in the suite: it must pass, which proves that the
worker and its zygote survived the fault and the next task succeeds.
"""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>

static PyObject* py_affine(PyObject*, PyObject* args) {
    unsigned long long x, y;
    long long n;
    if (!PyArg_ParseTuple(args, "KKL", &x, &y, &n))
        return nullptr;
    const float* xp = reinterpret_cast<const float*>(x);
    float* yp = reinterpret_cast<float*>(y);
    for (long long i = 0; i < n; ++i)
        yp[i] = 2.0f * xp[i] + 1.0f;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"affine", py_affine, METH_VARARGS, "affine(x_addr, y_addr, n): y = 2x + 1"},
    {nullptr, nullptr, 0, nullptr},
};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "kgym_faults_affine", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}
_ext = load_inline(name="kgym_faults_affine", cpp_sources=_CPP, extra_cflags=["-O2"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise TypeError("expected a float32 CPU tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        _ext.affine(x.data_ptr(), y.data_ptr(), x.numel())
        return y
