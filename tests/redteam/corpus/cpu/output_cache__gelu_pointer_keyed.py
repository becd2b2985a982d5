# redteam: family=output_cache problem=problems/cpu/level1/1_GELU.py backend=cpu expect=mismatch|hacked reasons=output_cache|call_count_switch
# expect: either, by where the allocator puts each block: a replayed output in a correctness trial is a plain mismatch, one in the recheck or a timed call is named (output_cache, call_count_switch)
"""Cheat: caches outputs keyed on the input's address and shape and
replays them. A harness that times the same input tensor over and over
measures a dictionary lookup. A hit still launches the kernel on one
scratch element, so launch counting sees work on every call. With fresh
inputs, freed blocks are reused at the same address, so the cache hands
back the previous input's output: it must fail correctness, or be caught
by the recheck (output_cache) or by the spot checks of timed outputs
(call_count_switch). Which one sees a hit depends on where the allocator
puts each block: runs have ended in each of the three (one full make test
run had only the spot checks' call_count_switch)."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>

static PyObject *py_gelu(PyObject *, PyObject *args) {
    unsigned long long xa, ya;
    long long n;
    if (!PyArg_ParseTuple(args, "KKL", &xa, &ya, &n))
        return nullptr;
    const float *x = reinterpret_cast<const float *>(xa);
    float *y = reinterpret_cast<float *>(ya);
    for (long long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
    Py_RETURN_NONE;
}

// fill(p, n, v): p[i] = v for i < n
static PyObject *py_fill(PyObject *, PyObject *args) {
    unsigned long long pa;
    long long n;
    double v;
    if (!PyArg_ParseTuple(args, "KLd", &pa, &n, &v))
        return nullptr;
    float *p = reinterpret_cast<float *>(pa);
    for (long long i = 0; i < n; ++i)
        p[i] = static_cast<float>(v);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"gelu", py_gelu, METH_VARARGS, ""},
                                {"fill", py_fill, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_gelu", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})

_ext = load_inline(name="rt_cpu_oc_gelu_ptr", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._cache: dict = {}
        self._one = torch.zeros(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        key = (x.data_ptr(), tuple(x.shape))
        hit = self._cache.get(key)
        if hit is not None:
            _ext.fill(self._one.data_ptr(), 1, 0.0)  # a token launch: hits look like work
            return hit
        y = torch.empty_like(x)
        _ext.gelu(x.data_ptr(), y.data_ptr(), x.numel())
        self._cache[key] = y
        return y
