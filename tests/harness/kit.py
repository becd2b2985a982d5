"""Small problems and candidates for the harness tests (written for these tests).

REF is a KernelBench-style reference: out = relu(a + b) * scale on (4, 16)
float32 inputs. Candidates for backend cpu build one tiny raw CPython
extension with load_inline(no_implicit_headers=True), which compiles in about
a second, so every cpu test shares one cached build; backend triton
candidates run under Triton's interpreter on CPU tensors.
"""

from __future__ import annotations

import textwrap

from kgym_harness.launcher import evaluate

REF = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, a, b):
            return torch.relu(a + b) * self.scale


    def get_inputs():
        return [torch.randn(4, 16), torch.randn(4, 16)]


    def get_init_inputs():
        return [2.0]
    ''')

EXT_C = r'''
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

static PyObject *add_relu_scale(PyObject *self, PyObject *args) {
    unsigned long long o, a, b; Py_ssize_t n; double s;
    if (!PyArg_ParseTuple(args, "KKKnd", &o, &a, &b, &n, &s)) return NULL;
    float *po = (float *)(uintptr_t)o;
    const float *pa = (const float *)(uintptr_t)a, *pb = (const float *)(uintptr_t)b;
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = pa[i] + pb[i];
        po[i] = (v > 0.0f ? v : 0.0f) * (float)s;
    }
    Py_RETURN_NONE;
}

static PyObject *fill(PyObject *self, PyObject *args) {
    unsigned long long o; Py_ssize_t n; double v;
    if (!PyArg_ParseTuple(args, "Knd", &o, &n, &v)) return NULL;
    float *po = (float *)(uintptr_t)o;
    for (Py_ssize_t i = 0; i < n; i++) po[i] = (float)v;
    Py_RETURN_NONE;
}

static PyObject *fail(PyObject *self, PyObject *args) {
    const char *msg;
    if (!PyArg_ParseTuple(args, "s", &msg)) return NULL;
    PyErr_SetString(PyExc_RuntimeError, msg);
    return NULL;
}

static PyObject *crash(PyObject *self, PyObject *args) {
    volatile int *p = (volatile int *)(uintptr_t)8;
    *p = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"add_relu_scale", add_relu_scale, METH_VARARGS, ""},
    {"fill", fill, METH_VARARGS, ""},
    {"fail", fail, METH_VARARGS, ""},
    {"crash", crash, METH_VARARGS, ""},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "kgym_test_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_kgym_test_ext(void) { return PyModule_Create(&mod); }
'''

CPU_PRELUDE = ('import torch\nimport torch.nn as nn\n'
               'from torch.utils.cpp_extension import load_inline\n\n'
               f'EXT_C = r"""{EXT_C}"""\n'
               'ext = load_inline("kgym_test_ext", cpp_sources=[EXT_C], no_implicit_headers=True)\n\n\n'
               'def add_relu_scale(a, b, scale):\n'
               '    a, b = a.contiguous(), b.contiguous()\n'
               '    out = torch.empty_like(a)\n'
               '    ext.add_relu_scale(out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(),'
               ' float(scale))\n'
               '    return out\n\n\n')

TRITON_PRELUDE = textwrap.dedent('''\
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    @triton.jit
    def add_relu_scale_kernel(a_ptr, b_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, tl.maximum(a + b, 0.0) * scale, mask=mask)


    def add_relu_scale(a, b, scale):
        out = torch.empty_like(a)
        n = a.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        add_relu_scale_kernel[grid](a, b, out, n, scale, BLOCK=32)
        return out


    ''')

# Kernel-module code for cheats that find the timing loop on their call stack
# (being_timed() is true inside timing.time_forward): pass as top=.
BEING_TIMED = '''import sys


def being_timed():
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "time_forward":
            return True
        f = f.f_back
    return False


'''


HONEST_MODEL = textwrap.dedent('''\
    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, a, b):
            return add_relu_scale(a, b, self.scale)
    ''')


def model_new(forward_body: str, init_extra: str = "") -> str:
    """A ModelNew whose forward(a, b) has the given (unindented) body."""
    body = textwrap.indent(textwrap.dedent(forward_body).strip("\n"), " " * 8)
    extra = textwrap.indent(textwrap.dedent(init_extra).strip("\n"), " " * 8)
    return ("class ModelNew(nn.Module):\n"
            "    def __init__(self, scale):\n"
            "        super().__init__()\n"
            "        self.scale = scale\n"
            + (extra + "\n" if extra else "")
            + "\n    def forward(self, a, b):\n" + body + "\n")


def cpu_kernel(model_src: str = HONEST_MODEL, top: str = "") -> str:
    return CPU_PRELUDE + top + model_src


def triton_kernel(model_src: str = HONEST_MODEL, top: str = "") -> str:
    return TRITON_PRELUDE + top + model_src


def task(kernel_code: str, backend: str = "cpu", reference_code: str = REF, **kw) -> dict:
    t = {"reference_code": reference_code, "kernel_code": kernel_code, "backend": backend,
         "num_correct_trials": 2, "num_perf_trials": 3, "num_warmup": 1,
         "enable_profiling": False, "timeout": 120, "seed": 1234}
    t.update(kw)
    return t


SPAWNER = None  # set by conftest: a session-wide warm.WarmSpawner


def run(kernel_code: str, backend: str = "cpu", **kw) -> dict:
    return evaluate(task(kernel_code, backend, **kw), spawner=SPAWNER)


def line_of(code: str, marker: str) -> int:
    """1-based line number of the first line containing marker."""
    for i, line in enumerate(code.splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not in code")
