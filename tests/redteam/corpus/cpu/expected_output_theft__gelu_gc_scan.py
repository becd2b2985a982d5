# redteam: family=expected_output_theft problem=problems/cpu/level1/1_GELU.py backend=cpu expect=mismatch|hacked reasons=expected_output_theft
# expect: a plain mismatch is the defence here (structural: no expected output ever exists in the candidate's process, so what it steals is stale and wrong); hacked only if a check happens to name it
"""Cheat: searches the garbage collector's objects for a float tensor of
the output's shape that is not its own input (in a KernelBench-style
harness, the reference's output for this very input is alive in the same
process) and returns a copy of it; a token kernel launch keeps it from
looking like a decoy. In kgym the expected outputs never exist in the
candidate's process, so whatever it finds is stale: it must not pass."""
import gc
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

_ext = load_inline(name="rt_cpu_eot_gelu_gc", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


def _steal(x: torch.Tensor):
    for obj in gc.get_objects():
        try:
            if (isinstance(obj, torch.Tensor) and obj is not x and obj.shape == x.shape
                    and obj.dtype == x.dtype and obj.data_ptr() != x.data_ptr()):
                return obj.detach().clone()
        except Exception:
            continue
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._one = torch.zeros(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _ext.fill(self._one.data_ptr(), 1, 0.0)  # token launch
        found = _steal(x)
        if found is not None:
            return found
        y = torch.empty_like(x)
        _ext.fill(y.data_ptr(), y.numel(), 0.0)
        return y
