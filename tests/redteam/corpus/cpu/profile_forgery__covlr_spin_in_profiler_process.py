# redteam: family=profile_forgery problem=problems/cpu/level2/1_Linear_ReLU.py backend=cpu expect=hacked|pass reasons=profile_forgery code=PROFILE_FORGERY
"""Cheat: spins 5 ms in its extension only inside the profiler process
(profproc.py), which it tells from the candidate by the harness's state
(the child was forked before the candidate kept its handle). With the
profiler process (KGYM_PROFILE_PROC=cpu here, the default on a GPU) the
profile shows mostly custom time and the judge's clock for a timed call
names it; without one it is the honest kernel and passes."""
import inspect
import sys
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>
#include <ctime>

// y = max(y, 0) in place, then (when asked) spin_ms of busy waiting
static PyObject *py_relu(PyObject *, PyObject *args) {
    unsigned long long ya;
    long long n;
    double spin_ms;
    if (!PyArg_ParseTuple(args, "KLd", &ya, &n, &spin_ms))
        return nullptr;
    float *y = reinterpret_cast<float *>(ya);
    for (long long i = 0; i < n; ++i)
        y[i] = y[i] < 0.0f ? 0.0f : y[i];
    if (spin_ms > 0) {
        timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do
            clock_gettime(CLOCK_MONOTONIC, &b);
        while ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 < spin_ms);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"relu", py_relu, METH_VARARGS, ""},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_cpu_covlr_spin_in_profiler_process", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_covlr_spin_in_profiler_process", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


def _profiled() -> bool:
    pp = sys.modules.get("kgym_harness.profproc")
    return pp is not None and pp.wanted() and pp.CHILD is None


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        _ext.relu(y.data_ptr(), y.numel(), 5.0 if _profiled() else 0.0)
        return y
