# redteam: family=honest problem=problems/cpu/level2/1_Linear_ReLU.py backend=cpu expect=pass
"""Honest, full coverage: GEMM, bias and ReLU in one C++ extension call."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>
#include <ctime>

// y (M, N) = max(x (M, K) @ w (N, K)^T + b (N), 0); all contiguous fp32
static PyObject *py_linear_relu(PyObject *, PyObject *args) {
    unsigned long long xa, wa, ba, ya;
    long long M, N, K;
    if (!PyArg_ParseTuple(args, "KKKKLLL", &xa, &wa, &ba, &ya, &M, &N, &K))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    const float *w = reinterpret_cast<const float *>(wa);
    const float *b = reinterpret_cast<const float *>(ba);
    float *y = reinterpret_cast<float *>(ya);
    Py_BEGIN_ALLOW_THREADS
    for (long long m = 0; m < M; ++m)
        for (long long n = 0; n < N; ++n) {
            float acc = 0.0f;
            for (long long k = 0; k < K; ++k)
                acc += x[m * K + k] * w[n * K + k];
            acc += b[n];
            y[m * N + n] = acc < 0.0f ? 0.0f : acc;
        }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"linear_relu", py_linear_relu, METH_VARARGS, ""},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cpu_covlr_fused", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_covlr_fused", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.linear.weight.detach(), self.linear.bias.detach()
        y = x.new_empty(x.shape[0], w.shape[0])
        _ext.linear_relu(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(),
                         x.shape[0], w.shape[0], w.shape[1])
        return y
