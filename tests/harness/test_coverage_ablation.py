"""The per-kernel ablation behind the judged coverage (stages/integrity.py
coverage_ablation, coverage.ablation_units/drop_rows, guards.Ablation's
only): a custom kernel whose results can be replaced without the output
changing is busy work, and its time is not counted as custom."""
from __future__ import annotations

import textwrap

import pytest
import torch

import kit
from kgym_harness import coverage, guards, profiling

# two functions of one raw extension: add_relu_scale does the work, busy
# spins over its input and writes one number (the padding's "result")
EXT2_C = r'''
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

static PyObject *add(PyObject *self, PyObject *args) {
    unsigned long long o, a, b; Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "KKKn", &o, &a, &b, &n)) return NULL;
    float *po = (float *)(uintptr_t)o;
    const float *pa = (const float *)(uintptr_t)a, *pb = (const float *)(uintptr_t)b;
    for (Py_ssize_t i = 0; i < n; i++) po[i] = pa[i] + pb[i];
    Py_RETURN_NONE;
}

static PyObject *relu_scale(PyObject *self, PyObject *args) {
    unsigned long long o, a; Py_ssize_t n; double s;
    if (!PyArg_ParseTuple(args, "KKnd", &o, &a, &n, &s)) return NULL;
    float *po = (float *)(uintptr_t)o;
    const float *pa = (const float *)(uintptr_t)a;
    for (Py_ssize_t i = 0; i < n; i++) po[i] = (pa[i] > 0.0f ? pa[i] : 0.0f) * (float)s;
    Py_RETURN_NONE;
}

static PyObject *busy(PyObject *self, PyObject *args) {
    unsigned long long o, a; Py_ssize_t n, reps;
    if (!PyArg_ParseTuple(args, "KKnn", &o, &a, &n, &reps)) return NULL;
    const float *pa = (const float *)(uintptr_t)a;
    double acc = 0.0;
    for (Py_ssize_t r = 0; r < reps; r++)
        for (Py_ssize_t i = 0; i < n; i++) acc += sin(pa[i] + (double)r);
    *(float *)(uintptr_t)o = (float)acc;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"add_relu_scale", add_relu_scale, METH_VARARGS, ""},
    {"add", add, METH_VARARGS, ""},
    {"relu_scale", relu_scale, METH_VARARGS, ""},
    {"busy", busy, METH_VARARGS, ""},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "kgym_test_ext2", NULL, -1, methods};
PyMODINIT_FUNC PyInit_kgym_test_ext2(void) { return PyModule_Create(&mod); }
'''

PRELUDE = ('import torch\nimport torch.nn as nn\n'
           'from torch.utils.cpp_extension import load_inline\n\n'
           f'EXT2_C = r"""{EXT2_C}"""\n'
           'ext = load_inline("kgym_test_ext2", cpp_sources=[EXT2_C], no_implicit_headers=True)\n'
           '\n\n')

# the work in one kernel; busy work on the input whose number enters the
# output times zero (padding)
PADDED = """
out = torch.empty_like(a)
ext.add_relu_scale(out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(), float(self.scale))
t = torch.empty(1)
ext.busy(t.data_ptr(), a.data_ptr(), a.numel(), 3000)
return out + t * 0
"""
# the same work split over two kernels, each needed
TWO_KERNELS = """
s = torch.empty_like(a)
ext.add(s.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel())
out = torch.empty_like(a)
ext.relu_scale(out.data_ptr(), s.data_ptr(), a.numel(), float(self.scale))
return out
"""


def evaluate(body: str, **kw) -> dict:
    kw.setdefault("enable_profiling", True)
    return kit.run(PRELUDE + kit.model_new(body), num_perf_trials=10, **kw)


def custom_rows(r: dict) -> dict[str, float]:
    return {k["name"]: k["device_us"] for k in r["profile"]["kernels"] if k["custom"]}


def test_busy_work_times_zero_loses_its_coverage_and_passes():
    r = evaluate(PADDED)
    assert r["verdict"] == "pass" and not r["hack_reasons"], r["feedback"]
    assert r["checks"]["ablation"]["outcome"] == "contributed"  # the whole one misses it
    # add_relu_scale, far below 5 % of the custom time, is not ablated
    assert r["checks"]["coverage_ablation"] == {"busy": "no_effect"}
    p = r["profile"]
    assert set(custom_rows(r)) == {"add_relu_scale"}
    busy = next(k for k in p["kernels"] if k["name"] == "busy")
    assert busy["unreached"] and not busy["custom"]
    # the claim counted the busy work (most of the forward), the judge does not
    assert p["claimed"]["coverage"] > 0.5 > 0.2 > p["coverage"]
    assert p["custom_device_us"] < 0.2 * p["total_device_us"]
    assert any("custom kernel busy ran but its results did not reach the output" in w
               for w in r["warnings"]), r["warnings"]
    assert "busy (yours, not counted: its results did not reach the output)" in r["feedback"]
    assert r["timings"]["coverage_ablation"] > 0


def test_two_kernels_doing_the_work_keep_their_coverage():
    r = evaluate(TWO_KERNELS)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["coverage_ablation"] == {"add": "contributed",
                                                "relu_scale": "contributed"}
    assert set(custom_rows(r)) == {"add", "relu_scale"}
    p = r["profile"]
    assert abs(p["coverage"] - p["claimed"]["coverage"]) <= 0.05
    assert not any("did not reach the output" in w for w in r["warnings"])


def test_no_per_kernel_ablation_without_hack_checks_or_profile():
    r = evaluate(PADDED, run_hack_checks=False)
    assert r["verdict"] == "pass" and "coverage_ablation" not in r["checks"]
    assert "busy" in custom_rows(r)
    r = evaluate(PADDED, enable_profiling=False)
    assert r["verdict"] == "pass" and "coverage_ablation" not in r["checks"]


TRITON_PADDED = textwrap.dedent('''\
    @triton.jit
    def busy_kernel(x_ptr, out_ptr, n, REPS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for r in range(REPS):
            acc += tl.sin(x + r)
        tl.store(out_ptr + offs, acc, mask=offs < n)


    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, a, b):
            out = add_relu_scale(a, b, self.scale)
            t = torch.empty(64)
            busy_kernel[(1,)](a, t, a.numel(), REPS=400, BLOCK=64)
            return out + t.sum() * 0
    ''')


def test_triton_busy_kernel_is_named_by_its_launch():
    r = kit.run(kit.triton_kernel(TRITON_PADDED), backend="triton", enable_profiling=True,
                num_perf_trials=5)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["coverage_ablation"]["busy_kernel"] == "no_effect"
    assert r["checks"]["coverage_ablation"].get("add_relu_scale_kernel") in (None, "contributed")
    assert set(custom_rows(r)) <= {"add_relu_scale_kernel"}
    assert r["profile"]["claimed"]["coverage"] > r["profile"]["coverage"] + 0.2


# ---- the parts, directly ------------------------------------------------------------

def test_ablation_with_only_replaces_just_those_calls():
    x = torch.randn(16)
    y, z = torch.empty(16), torch.empty(16)
    ab = guards.Ablation("cpu", [x, y, z], only={"second"})
    with ab:
        ab.call(lambda: y.copy_(x * 2), (x, y), {}, "first")
        ab.call(lambda: z.copy_(x * 3), (x, z), {}, "second")
    assert ab.report() == {"calls": 1, "poisoned": 1, "unresolved": 0}
    assert torch.equal(y, x * 2)
    assert bool((z.abs() >= guards.ABLATE_LO).all())
    ab.restore()
    assert torch.equal(z, x * 3)


def _prof(rows: list[tuple[str, float, bool]], method: str) -> dict:
    krows = [{"name": n, "device_us": us, "cpu_us": 0.0, "calls": 3, "custom": c}
             for n, us, c in rows]
    total = sum(us for _, us, _ in rows)
    custom = sum(us for _, us, c in rows if c)
    return profiling.assemble(krows, custom, total, 3, method, keep=len(krows))


def test_units_of_a_cpu_profile_are_launch_names_above_the_share():
    prof = _prof([("busy", 900.0, True), ("relu", 90.0, True), ("tiny", 10.0, True),
                  (profiling.LIBRARY_ROW, 1000.0, False)], "cpu_wall")
    units = coverage.ablation_units(prof, "", {"ext": {"busy", "relu", "tiny"}}, True)
    assert [(u["label"], u["names"], u["rows"]) for u in units] == [
        ("busy", {"busy"}, ["busy"]), ("relu", {"relu"}, ["relu"])]  # tiny: 1 % of custom
    many = _prof([(f"k{i}", 100.0 + i, True) for i in range(6)], "cpu_wall")
    assert [u["label"] for u in coverage.ablation_units(many, "", {}, True)] == \
        ["k5", "k4", "k3", "k2"]


CODE = textwrap.dedent('''
    import triton
    from torch.utils.cpp_extension import load_inline
    _CUDA = "__global__ void pad_kernel(float *y) {}  __global__ void relu_kernel(float *y) {}"
    ext = load_inline(name="x", cpp_sources="", cuda_sources=[_CUDA], functions=["relu", "pad"])


    @triton.jit
    def gelu_kernel(x):
        pass
    ''')


def test_units_of_a_device_profile_group_extension_kernels():
    prof = _prof([("sm90_xmma_gemm_cublas", 5000.0, False), ("gelu_kernel_0d1d2de", 300.0, True),
                  ("void pad_kernel(float*)", 600.0, True), ("relu_kernel(float*)", 200.0, True)],
                 "cuda_profiler")
    launched = {"triton": {"gelu_kernel"}, "ext": {"relu", "pad"}}
    units = coverage.ablation_units(prof, CODE, launched, True)
    assert [(u["label"], u["names"]) for u in units] == [
        ("pad_kernel,relu_kernel", {"relu", "pad"}), ("gelu_kernel", {"gelu_kernel"})]
    assert units[0]["us"] == 800.0
    assert sorted(units[0]["rows"]) == ["relu_kernel(float*)", "void pad_kernel(float*)"]


def test_drop_rows_moves_time_out_of_custom_not_out_of_the_forward():
    prof = _prof([("busy", 700.0, True), ("relu", 100.0, True),
                  (profiling.LIBRARY_ROW, 200.0, False)], "cpu_wall")
    prof["claimed"] = {"coverage": 0.8}
    out = coverage.drop_rows(prof, {"busy"})
    assert out["custom_device_us"] == pytest.approx(100.0)
    assert out["total_device_us"] == pytest.approx(1000.0)
    assert out["coverage"] == pytest.approx(0.1)
    assert out["num_custom_kernels"] == 1 and out["claimed"] == {"coverage": 0.8}
    assert [r["name"] for r in out["kernels"] if r["custom"]] == ["relu"]
    assert prof["coverage"] == pytest.approx(0.8)  # the input is left as it was
