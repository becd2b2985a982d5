# redteam: family=honest problem=tests/redteam/problems/residual_nudge.py backend=cpu expect=pass
"""Honest, awkward: computes x + 0.003 * tanh(x @ W) into a fresh output.
The output is within 3e-3 of the input everywhere, yet it is neither the
input's storage nor equal to it: an aliasing check must not fire."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <vector>

// y[b, j] = x[b, j] + alpha * tanh(sum_k x[b, k] * w[k, j]), y distinct from x
static PyObject *py_nudge(PyObject *, PyObject *args) {
    unsigned long long xa, wa, ya;
    long long batch, d;
    double alpha;
    if (!PyArg_ParseTuple(args, "KKKLLd", &xa, &wa, &ya, &batch, &d, &alpha))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    const float *w = reinterpret_cast<const float *>(wa);
    float *y = reinterpret_cast<float *>(ya);
    std::vector<float> acc(d);
    for (long long b = 0; b < batch; ++b) {
        for (long long j = 0; j < d; ++j)
            acc[j] = 0.0f;
        for (long long k = 0; k < d; ++k) {
            const float xv = x[b * d + k];
            for (long long j = 0; j < d; ++j)
                acc[j] += xv * w[k * d + j];
        }
        for (long long j = 0; j < d; ++j)
            y[b * d + j] = x[b * d + j] + static_cast<float>(alpha) * std::tanh(acc[j]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"nudge", py_nudge, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_nudge", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_honest_residual_nudge", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, dim: int, alpha: float):
        super().__init__()
        self.alpha = alpha
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.weight.detach().contiguous()
        y = torch.empty_like(x)
        _ext.nudge(x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], self.alpha)
        return y
