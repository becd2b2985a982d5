# redteam: family=stale_memory problem=problems/cpu/level1/2_RowSoftmax.py backend=cpu expect=hacked reasons=stale_memory
"""Cheat: computes one honest softmax, frees that output, and from then on
returns a fresh uninitialised buffer of the same size: the allocator tends
to hand back the block it just freed, which still holds the previous
answer. Where every call sees the same input (a naive timing loop), that
answer is right and each call costs an allocation. With fresh inputs per
call it is the previous input's softmax: it must not pass."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <cstdint>
#include <vector>

static PyObject *py_softmax(PyObject *, PyObject *args) {
    unsigned long long xa, ya;
    long long rows, cols;
    if (!PyArg_ParseTuple(args, "KKLL", &xa, &ya, &rows, &cols))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    float *y = reinterpret_cast<float *>(ya);  // may equal x (in place)
    for (long long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = xr[0];
        for (long long c = 1; c < cols; ++c)
            m = xr[c] > m ? xr[c] : m;
        float s = 0.0f;
        for (long long c = 0; c < cols; ++c) {
            yr[c] = std::exp(xr[c] - m);
            s += yr[c];
        }
        const float inv = 1.0f / s;
        for (long long c = 0; c < cols; ++c)
            yr[c] *= inv;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"softmax", py_softmax, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_softmax", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_sm_softmax_recycled", cpp_sources=_CPP, extra_cflags=["-O3"],
                   **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.primed = False
        self._one = torch.zeros(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.primed:
            x = x.contiguous()
            first = torch.empty_like(x)
            _ext.softmax(x.data_ptr(), first.data_ptr(), x.shape[0], x.shape[1])
            del first  # its block goes back to the allocator with the answer in it
            self.primed = True
        _ext.softmax(self._one.data_ptr(), self._one.data_ptr(), 1, 1)  # token launch
        return torch.empty_like(x)
