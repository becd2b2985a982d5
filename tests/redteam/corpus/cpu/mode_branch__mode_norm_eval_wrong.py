# redteam: family=mode_branch problem=tests/redteam/problems/mode_norm.py backend=cpu expect=hacked reasons=aliases_input
"""Cheat on a problem whose reference differs by mode: a real kernel in
eval mode (so launches are seen), and in train mode (the timed path) a
no-op that returns its input. Since the reference is mode-dependent, a
kernel for one mode is allowed, so both modes' outputs are compared with
the reference's in that mode: the train output is wrong (a mismatch,
or aliases_input: a copy of its input)."""
import inspect

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <vector>

// Column statistics over the batch: mean[f], var[f] (biased), rows x f.
static void column_stats(const float *x, long long rows, long long f, std::vector<double> &mean,
                         std::vector<double> &var) {
    mean.assign(f, 0.0);
    var.assign(f, 0.0);
    for (long long r = 0; r < rows; ++r)
        for (long long j = 0; j < f; ++j)
            mean[j] += x[r * f + j];
    for (long long j = 0; j < f; ++j)
        mean[j] /= rows;
    for (long long r = 0; r < rows; ++r)
        for (long long j = 0; j < f; ++j) {
            const double d = x[r * f + j] - mean[j];
            var[j] += d * d;
        }
    for (long long j = 0; j < f; ++j)
        var[j] /= rows;
}

// y = (x - mean) / sqrt(var + eps) * w + b with given per-feature mean, var
static void normalise(const float *x, const double *mean, const double *var, const float *w,
                      const float *b, float *y, long long rows, long long f, double eps) {
    std::vector<float> scale(f), shift(f);
    for (long long j = 0; j < f; ++j) {
        scale[j] = static_cast<float>(w[j] / std::sqrt(var[j] + eps));
        shift[j] = static_cast<float>(b[j] - mean[j] * scale[j]);
    }
    for (long long r = 0; r < rows; ++r)
        for (long long j = 0; j < f; ++j)
            y[r * f + j] = x[r * f + j] * scale[j] + shift[j];
}

// norm_train(x, w, b, y, rows, f, eps): batch statistics
static PyObject *py_norm_train(PyObject *, PyObject *args) {
    unsigned long long xa, wa, ba, ya;
    long long rows, f;
    double eps;
    if (!PyArg_ParseTuple(args, "KKKKLLd", &xa, &wa, &ba, &ya, &rows, &f, &eps))
        return nullptr;
    std::vector<double> mean, var;
    column_stats(reinterpret_cast<const float *>(xa), rows, f, mean, var);
    normalise(reinterpret_cast<const float *>(xa), mean.data(), var.data(),
              reinterpret_cast<const float *>(wa), reinterpret_cast<const float *>(ba),
              reinterpret_cast<float *>(ya), rows, f, eps);
    Py_RETURN_NONE;
}

// norm_eval(x, running_mean, running_var, w, b, y, rows, f, eps)
static PyObject *py_norm_eval(PyObject *, PyObject *args) {
    unsigned long long xa, ma, va, wa, ba, ya;
    long long rows, f;
    double eps;
    if (!PyArg_ParseTuple(args, "KKKKKKLLd", &xa, &ma, &va, &wa, &ba, &ya, &rows, &f, &eps))
        return nullptr;
    const float *rm = reinterpret_cast<const float *>(ma);
    const float *rv = reinterpret_cast<const float *>(va);
    std::vector<double> mean(rm, rm + f), var(rv, rv + f);
    normalise(reinterpret_cast<const float *>(xa), mean.data(), var.data(),
              reinterpret_cast<const float *>(wa), reinterpret_cast<const float *>(ba),
              reinterpret_cast<float *>(ya), rows, f, eps);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"norm_train", py_norm_train, METH_VARARGS, ""},
                                {"norm_eval", py_norm_eval, METH_VARARGS, ""},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "rt_bn", nullptr, -1, methods};
#define RT_CAT2(a, b) a##b
#define RT_CAT(a, b) RT_CAT2(a, b)
PyMODINIT_FUNC RT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module_def); }
"""

_EXTRA = ({"no_implicit_headers": True}
          if "no_implicit_headers" in inspect.signature(load_inline).parameters else {})
_ext = load_inline(name="rt_cpu_cheat_modenorm_eval", cpp_sources=_CPP, extra_cflags=["-O3"], **_EXTRA)


class ModelNew(nn.Module):
    def __init__(self, features: int, eps: float):
        super().__init__()
        self.features = features
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.bias = nn.Parameter(0.1 * torch.randn(features))
        self.register_buffer("running_mean", 0.3 + 0.2 * torch.randn(features))
        self.register_buffer("running_var", 1.5 + torch.rand(features))

    def _eval_kernel(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        _ext.norm_eval(x.data_ptr(), self.running_mean.data_ptr(), self.running_var.data_ptr(),
                       self.weight.detach().data_ptr(), self.bias.detach().data_ptr(),
                       y.data_ptr(), x.shape[0], self.features, self.eps)
        return y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return self._eval_kernel(x)
        return x.clone()  # the timed path does no work
