# redteam: family=honest problem=tests/redteam/problems/degenerate_tiny.py backend=cpu expect=pass warn=degenerate
"""Honest on a degenerate problem: computes 0.001 * tanh(x @ W) properly.
It passes, and the result must carry the same degenerate-problem warning
as the all-zeros cheat (degenerate_problem__tiny_output_zeros): the
warning is about the problem, not the candidate."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <vector>

// y[b, j] = scale * tanh(sum_k x[b, k] * w[k, j])
static PyObject *py_scaled_tanh_matmul(PyObject *, PyObject *args) {
    unsigned long long xa, wa, ya;
    long long batch, d;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKLLd", &xa, &wa, &ya, &batch, &d, &scale))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    const float *w = reinterpret_cast<const float *>(wa);
    float *y = reinterpret_cast<float *>(ya);
    std::vector<float> acc(d);
    for (long long b = 0; b < batch; ++b) {
        for (long long j = 0; j < d; ++j)
            acc[j] = 0.0f;
        for (long long k = 0; k < d; ++k)
            for (long long j = 0; j < d; ++j)
                acc[j] += x[b * d + k] * w[k * d + j];
        for (long long j = 0; j < d; ++j)
            y[b * d + j] = static_cast<float>(scale) * std::tanh(acc[j]);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"scaled_tanh_matmul", py_scaled_tanh_matmul, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_stm", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_honest_degenerate", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.weight = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.weight.detach().contiguous()
        y = torch.empty_like(x)
        _ext.scaled_tanh_matmul(x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1],
                                self.scale)
        return y
