"""A WRONG kernel for cpu/level1/1_GELU (an example reply of kgym policy scripted):
the honest solution with the constant 1/sqrt(2) replaced by 0.5, so its
results mismatch. Otherwise: an OpenMP C++ loop built with load_inline.

The extension is a plain CPython module (Python.h only: no pybind11, no
torch headers), so it builds in about a second instead of the best part of a
minute that <torch/extension.h> costs. Its functions take buffer addresses;
ModelNew checks dtype, device and layout before it hands them over, and the
C++ side releases the GIL while it computes.
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

// y[i] = gelu(x[i]) (erf form) for i < n; x and y are distinct fp32 buffers.
static void gelu(const float* x, float* y, std::int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + std::erf(v * 0.5f));
    }
}

// gelu(x_addr, y_addr, n)
static PyObject* py_gelu(PyObject*, PyObject* args) {
    unsigned long long x, y;
    long long n;
    if (!PyArg_ParseTuple(args, "KKL", &x, &y, &n))
        return nullptr;
    Py_BEGIN_ALLOW_THREADS
    gelu(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"gelu", py_gelu, METH_VARARGS, "gelu(x_addr, y_addr, n): y = gelu(x), fp32"},
    {nullptr, nullptr, 0, nullptr},
};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "gelu_cpu", nullptr, -1, methods};
#define KG_CAT2(a, b) a##b
#define KG_CAT(a, b) KG_CAT2(a, b)
PyMODINIT_FUNC KG_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

# no_implicit_headers appeared in torch 2.7; without it torch prepends
# <torch/extension.h>, which still builds, only slower.
_EXTRA = {"no_implicit_headers": True} if "no_implicit_headers" in inspect.signature(load_inline).parameters else {}

_ext = load_inline(
    name="kgym_example_gelu_wrong",
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
        y = torch.empty_like(x)
        _ext.gelu(x.data_ptr(), y.data_ptr(), x.numel())
        return y
