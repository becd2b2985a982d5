"""cpu solution for cpu/level2/1_Linear_ReLU: fused linear + ReLU in OpenMP C++.

See cpu/level1/solutions/1_GELU.cpu.py for why the extension is a plain
CPython module that takes buffer addresses.
"""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>

// Dot product with eight independent partial sums (vectorisable without
// -ffast-math).
static inline float dot(const float* a, const float* b, std::int64_t n) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    std::int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; ++u)
            acc[u] += a[k + u] * b[k + u];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; k < n; ++k)
        s += a[k] * b[k];
    return s;
}

// y (M, N) = max(x (M, K) @ w (N, K)^T + b (N), 0); all contiguous fp32.
static void linear_relu(const float* x, const float* w, const float* b, float* y,
                        std::int64_t M, std::int64_t N, std::int64_t K) {
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n) {
            const float v = dot(x + m * K, w + n * K, K) + b[n];
            y[m * N + n] = v < 0.0f ? 0.0f : v;  // NaN stays NaN, as in torch.relu
        }
}

// linear_relu(x_addr, w_addr, b_addr, y_addr, M, N, K)
static PyObject* py_linear_relu(PyObject*, PyObject* args) {
    unsigned long long x, w, b, y;
    long long M, N, K;
    if (!PyArg_ParseTuple(args, "KKKKLLL", &x, &w, &b, &y, &M, &N, &K))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    linear_relu(reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(w),
                reinterpret_cast<const float*>(b), reinterpret_cast<float*>(y), M, N, K);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"linear_relu", py_linear_relu, METH_VARARGS, "linear_relu(x, w, b, y, M, N, K): y = relu(x @ w^T + b)"},
    {nullptr, nullptr, 0, nullptr},
};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "linear_relu_cpu", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}

_ext = load_inline(
    name="kgym_cpu_level2_1_Linear_ReLU_cpu",
    cpp_sources=_CPP,
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    **_EXTRA,
)


def _check(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.device.type != "cpu":
        raise TypeError("expected a float32 CPU tensor")
    return t.contiguous()


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _check(x)
        w = _check(self.linear.weight.detach())
        b = _check(self.linear.bias.detach())
        n, k = w.shape
        m = x.numel() // k
        y = torch.empty(*x.shape[:-1], n, dtype=x.dtype)
        _ext.linear_relu(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), m, n, k)
        return y
