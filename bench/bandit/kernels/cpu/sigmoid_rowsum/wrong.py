"""Bandit arm "wrong" (cpu/sigmoid_rowsum): the fused pass with the shift
left out (sigmoid(x * scale) summed): a mismatch."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <cstdint>

static void rowsum(const float* x, const float* sc, const float* sh, float* y,
                   std::int64_t rows, std::int64_t cols) {
    (void)sh;
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (std::int64_t c = 0; c < cols; ++c)
            s += 1.0f / (1.0f + std::exp(-(xr[c] * sc[c])));
        y[r] = s;
    }
}

static PyObject* py_rowsum(PyObject*, PyObject* args) {
    unsigned long long x, sc, sh, y;
    long long rows, cols;
    if (!PyArg_ParseTuple(args, "KKKKLL", &x, &sc, &sh, &y, &rows, &cols))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    rowsum(reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(sc),
           reinterpret_cast<const float*>(sh), reinterpret_cast<float*>(y), rows, cols);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {{"rowsum", py_rowsum, METH_VARARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "bandit_sigsum_wrong", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}
_ext = load_inline(name="bandit_cpu_sigsum_wrong", cpp_sources=_CPP,
                   extra_cflags=["-O3", "-ffast-math", "-fopenmp"], extra_ldflags=["-fopenmp"], **_EXTRA)


def _f32(t: torch.Tensor) -> torch.Tensor:
    if t.dtype != torch.float32 or t.device.type != "cpu":
        raise TypeError("expected a float32 CPU tensor")
    return t.contiguous()


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _f32(x)
        sc, sh = _f32(self.scale.detach()), _f32(self.shift.detach())
        cols = sc.numel()
        rows = x.numel() // cols
        y = torch.empty(x.shape[:-1], dtype=x.dtype)
        _ext.rowsum(x.data_ptr(), sc.data_ptr(), sh.data_ptr(), y.data_ptr(), rows, cols)
        return y
