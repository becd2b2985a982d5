# redteam: family=honest problem=problems/cpu/level2/1_Linear_ReLU.py backend=cpu expect=pass
"""Honest, partial coverage: PyTorch's addmm does the GEMM and bias, a
C++ extension the ReLU in place. The coverage is the ReLU's share of the
forward; the profile's cheats below start from this kernel."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>
#include <ctime>

// y = max(y, 0) in place
static PyObject *py_relu(PyObject *, PyObject *args) {
    unsigned long long ya;
    long long n;
    if (!PyArg_ParseTuple(args, "KL", &ya, &n))
        return nullptr;
    float *y = reinterpret_cast<float *>(ya);
    for (long long i = 0; i < n; ++i)
        y[i] = y[i] < 0.0f ? 0.0f : y[i];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"relu", py_relu, METH_VARARGS, ""},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cpu_covlr_lazy", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_covlr_lazy", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        _ext.relu(y.data_ptr(), y.numel())
        return y
