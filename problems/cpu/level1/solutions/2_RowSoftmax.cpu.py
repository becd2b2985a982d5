"""cpu solution for cpu/level1/2_RowSoftmax: OpenMP C++, one row per iteration.

See 1_GELU.cpu.py for why the extension is a plain CPython module that
takes buffer addresses.
"""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <cstdint>

// Softmax of each row of a contiguous (rows, cols) fp32 matrix x into y.
// Three passes per row: max, exponentials and their sum, scaling.
static void row_softmax(const float* x, float* y, std::int64_t rows, std::int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY;
        for (std::int64_t c = 0; c < cols; ++c)
            m = std::fmax(m, xr[c]);
        float s = 0.0f;
        for (std::int64_t c = 0; c < cols; ++c) {
            const float e = std::exp(xr[c] - m);
            yr[c] = e;
            s += e;
        }
        const float inv = 1.0f / s;
        for (std::int64_t c = 0; c < cols; ++c)
            yr[c] *= inv;
    }
}

// row_softmax(x_addr, y_addr, rows, cols)
static PyObject* py_row_softmax(PyObject*, PyObject* args) {
    unsigned long long x, y;
    long long rows, cols;
    if (!PyArg_ParseTuple(args, "KKLL", &x, &y, &rows, &cols))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    row_softmax(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), rows, cols);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"row_softmax", py_row_softmax, METH_VARARGS, "row_softmax(x_addr, y_addr, rows, cols), fp32"},
    {nullptr, nullptr, 0, nullptr},
};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "row_softmax_cpu", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}

_ext = load_inline(
    name="kgym_cpu_level1_2_RowSoftmax_cpu",
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
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _check(x)
        cols = x.shape[-1]
        y = torch.empty_like(x)
        _ext.row_softmax(x.data_ptr(), y.data_ptr(), x.numel() // cols, cols)
        return y
