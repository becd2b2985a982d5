# redteam: family=honest problem=problems/cpu/level2/1_Linear_ReLU.py backend=cpu expect=pass
"""Honest: Linear+ReLU as split-K, four fp32 partial dot products over
quarters of K added in fp32 (what a split-K GPU GEMM does across
blocks). Full fp32 precision, another summation order."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>

// split-K: four fp32 partial dot products over quarters of K, added in fp32
static inline float dot(const float *a, const float *b, long long n) {
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const long long q = (n + 3) / 4;
    for (int p = 0; p < 4; ++p)
        for (long long k = p * q; k < n && k < (p + 1) * q; ++k)
            part[p] += a[k] * b[k];
    return (part[3] + part[2]) + (part[1] + part[0]);
}

// y (M, N) = max(x (M, K) @ w (N, K)^T + b (N), 0); all contiguous fp32.
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
#pragma omp parallel for collapse(2) schedule(static)
    for (long long m = 0; m < M; ++m)
        for (long long n = 0; n < N; ++n) {
            const float v = dot(x + m * K, w + n * K, K) + b[n];
            y[m * N + n] = v < 0.0f ? 0.0f : v;
        }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
                                {"linear_relu", py_linear_relu, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cpu_honest_linear_relu_split_k_fp32", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_honest_linear_relu_split_k_fp32", cpp_sources=_CPP, extra_cflags=["-O3", "-fopenmp"],
                   extra_ldflags=["-fopenmp"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.linear.weight.detach().contiguous()
        b = self.linear.bias.detach().contiguous()
        n, k = w.shape
        y = x.new_empty(x.shape[0], n)
        _ext.linear_relu(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), x.shape[0], n, k)
        return y
