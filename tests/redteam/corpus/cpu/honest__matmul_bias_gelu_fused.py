# redteam: family=honest problem=problems/cpu/level2/2_Matmul_Bias_GELU.py backend=cpu expect=pass
"""Honest: gelu(x @ W + b) in one pass: each output row is accumulated
along W's contiguous rows (W is K x N), then bias and GELU on the way
out."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <vector>

static PyObject *py_matmul_bias_gelu(PyObject *, PyObject *args) {
    unsigned long long xa, wa, ba, ya;
    long long m, k, n;
    if (!PyArg_ParseTuple(args, "KKKKLLL", &xa, &wa, &ba, &ya, &m, &k, &n))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    const float *w = reinterpret_cast<const float *>(wa);
    const float *bias = reinterpret_cast<const float *>(ba);
    float *y = reinterpret_cast<float *>(ya);
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < m; ++i) {
        std::vector<float> acc(bias, bias + n);
        for (long long p = 0; p < k; ++p) {
            const float xv = x[i * k + p];
            const float *wp = w + p * n;
            for (long long j = 0; j < n; ++j)
                acc[j] += xv * wp[j];
        }
        for (long long j = 0; j < n; ++j)
            y[i * n + j] = 0.5f * acc[j] * (1.0f + std::erf(acc[j] * 0.70710678118654752f));
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"matmul_bias_gelu", py_matmul_bias_gelu, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_mbg", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_honest_mbg_fused", cpp_sources=_CPP,
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features) / in_features ** 0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.weight.detach().contiguous()
        b = self.bias.detach().contiguous()
        y = x.new_empty(x.shape[0], w.shape[1])
        _ext.matmul_bias_gelu(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(),
                              x.shape[0], w.shape[0], w.shape[1])
        return y
