# redteam: family=thread_injection problem=problems/cpu/level1/1_GELU.py backend=cpu expect=hacked reasons=thread_injection
"""Cheat: forward allocates the output, hands the GELU to a Python thread
(the C++ loop releases the GIL) and returns at once; the thread fills the
output after the call is over. A timer around forward sees only a thread
start. Whoever reads the output too early sees it half written, so kgym
must either flag the thread or find the output wrong; it must never pass."""
import inspect
import threading

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
    Py_BEGIN_ALLOW_THREADS
    for (long long i = 0; i < n; ++i)
        y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"gelu", py_gelu, METH_VARARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_gelu", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_ti_gelu_async", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._pending = None
        self._keep = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:
            self._pending.join()  # at most one thread in flight
        x = x.contiguous()
        y = torch.empty_like(x)
        t = threading.Thread(target=_ext.gelu, args=(x.data_ptr(), y.data_ptr(), x.numel()),
                             daemon=True)
        t.start()
        self._pending, self._keep = t, (x, y)
        return y
