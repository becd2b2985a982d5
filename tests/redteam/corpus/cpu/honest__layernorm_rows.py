# redteam: family=honest problem=problems/cpu/level1/4_LayerNorm.py backend=cpu expect=pass
"""Honest: layer norm, two passes per row (mean, then variance in double
precision), affine fused into the write."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <vector>

// Per row of length d: y = (x - mean) / sqrt(var + eps) * w + b.
// With w == b == 0 (null addresses) the affine part is skipped.
static PyObject *py_layer_norm(PyObject *, PyObject *args) {
    unsigned long long xa, wa, ba, ya;
    long long rows, d;
    double eps;
    if (!PyArg_ParseTuple(args, "KKKKLLd", &xa, &wa, &ba, &ya, &rows, &d, &eps))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    const float *w = reinterpret_cast<const float *>(wa);
    const float *b = reinterpret_cast<const float *>(ba);
    float *y = reinterpret_cast<float *>(ya);
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static)
    for (long long r = 0; r < rows; ++r) {
        const float *xr = x + r * d;
        double s = 0.0, ss = 0.0;
        for (long long i = 0; i < d; ++i)
            s += xr[i];
        const double mean = s / d;
        for (long long i = 0; i < d; ++i)
            ss += (xr[i] - mean) * (xr[i] - mean);
        const float m = static_cast<float>(mean);
        const float rstd = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
        for (long long i = 0; i < d; ++i) {
            const float v = (xr[i] - m) * rstd;
            y[r * d + i] = w ? v * w[i] + b[i] : v;
        }
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"layer_norm", py_layer_norm, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_ln", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_honest_ln_rows", cpp_sources=_CPP,
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        _ext.layer_norm(x.data_ptr(), self.weight.detach().data_ptr(), self.bias.detach().data_ptr(),
                        y.data_ptr(), x.numel() // self.dim, self.dim, self.eps)
        return y
