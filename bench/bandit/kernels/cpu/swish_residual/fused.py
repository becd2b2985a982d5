"""Bandit arm "fused" (cpu/swish_residual): the whole forward in one OpenMP
pass, one read of x and one write of y; a CPython extension taking buffer
addresses (Python.h only, so it builds in about a second)."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <cstdint>

static void swish_residual(const float* x, const float* sc, const float* sh, float* y,
                           std::int64_t rows, std::int64_t cols) {
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
#pragma omp simd
        for (std::int64_t c = 0; c < cols; ++c) {
            const float v = xr[c];
            const float z = v * sc[c] + sh[c];
            yr[c] = z / (1.0f + std::exp(-z)) + v;
        }
    }
}

static PyObject* py_run(PyObject*, PyObject* args) {
    unsigned long long x, sc, sh, y;
    long long rows, cols;
    if (!PyArg_ParseTuple(args, "KKKKLL", &x, &sc, &sh, &y, &rows, &cols))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    swish_residual(reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(sc),
                   reinterpret_cast<const float*>(sh), reinterpret_cast<float*>(y), rows, cols);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"swish_residual", py_run, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "bandit_swish_fused", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}
_ext = load_inline(name="bandit_cpu_swish_fused", cpp_sources=_CPP,
                   extra_cflags=["-O3", "-ffast-math", "-fopenmp"], extra_ldflags=["-fopenmp"], **_EXTRA)


def _f32(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.device.type != "cpu":
        raise TypeError("expected a float32 CPU tensor")
    return t.contiguous()


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))
        self.shift = nn.Parameter(0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _f32(x)
        sc, sh = _f32(self.scale.detach()), _f32(self.shift.detach())
        cols = sc.numel()
        y = torch.empty_like(x)
        _ext.swish_residual(x.data_ptr(), sc.data_ptr(), sh.data_ptr(), y.data_ptr(),
                            x.numel() // cols, cols)
        return y
