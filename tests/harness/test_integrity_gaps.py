"""Reward integrity beyond the guarded call: spot checks of
timed outputs (call_count_switch), the ablation forward (no_custom_kernel
when custom kernels run but contribute nothing), the rounding fingerprint
and direct evidence of fp16/bf16 compute (precision_downgrade), and the
persisting-L2 guard (l2_persist; its CUDA calls run on a GPU only, the
decision logic here). Each end-to-end cheat here passes without its
check; honest look-alikes pass."""

from __future__ import annotations

import collections
import textwrap

import pytest
import torch

import kit
from kgym_harness import guards, timing


def hacked(r: dict, reason: str) -> None:
    assert r["verdict"] == "hacked", r["feedback"]
    assert reason in r["hack_reasons"], r["hack_reasons"]
    assert r["correctness"] is False


# ---- call_count_switch: spot checks of timed outputs --------------------------------

def test_kernel_that_skips_work_only_when_timed_is_call_count_switch():
    body = """
    if being_timed():  # a cheaper, wrong launch
        out = torch.empty_like(a)
        ext.fill(out.data_ptr(), 1, 0.0)
        return out
    return add_relu_scale(a, b, self.scale)
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=kit.BEING_TIMED), num_perf_trials=10)
    hacked(r, "call_count_switch")
    assert r["error_code"] == "CALL_COUNT_SWITCH"
    assert r["mismatch"]["trial"].startswith("timed call ")
    spots = r["checks"]["spot_checks"]
    assert spots["n"] == timing.SPOT_CHECKS and "failed" in spots


def test_honest_kernel_passes_its_spot_checks():
    r = kit.run(kit.cpu_kernel(), num_perf_trials=10)
    assert r["verdict"] == "pass", r["feedback"]
    spots = r["checks"]["spot_checks"]
    assert spots["n"] == timing.SPOT_CHECKS and "failed" not in spots
    assert len(set(spots["indices"])) == timing.SPOT_CHECKS


def test_fewer_timed_calls_than_spots_checks_them_all():
    r = kit.run(kit.cpu_kernel(), num_perf_trials=2)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["spot_checks"]["n"] == 2


def test_no_spot_checks_without_hack_checks():
    r = kit.run(kit.cpu_kernel(), num_perf_trials=5, run_hack_checks=False)
    assert r["verdict"] == "pass" and "spot_checks" not in r["checks"]


def test_spot_sampler_is_uniform_and_draws_after_the_call(monkeypatch):
    draws = []
    real = timing._urandom

    def urandom(n):
        draws.append(n)
        return real(n)
    monkeypatch.setattr(timing, "_urandom", urandom)
    counts: collections.Counter = collections.Counter()
    for _ in range(3000):
        s = timing.SpotSampler(2)
        for i in range(10):
            s.offer(i, torch.tensor([float(i)]))
        kept = s.take()
        assert len(kept) == 2 and all(float(out) == i for i, out in kept)
        counts.update(i for i, _ in kept)
    assert draws  # the decisions come from the CSPRNG
    # each call kept with probability 2/10: 600 of 3000 expected
    assert all(480 < counts[i] < 720 for i in range(10)), counts


def test_spot_sampler_keeps_a_copy():
    s = timing.SpotSampler(1)
    out = torch.ones(4)
    s.offer(7, out)
    out.zero_()  # the kernel reuses its buffer: the kept copy must not change
    ((i, kept),) = s.take()
    assert i == 7 and kept.sum() == 4


# ---- no_custom_kernel: the ablation forward ------------------------------------------

def test_token_launch_with_torch_answer_is_no_custom_kernel():
    body = """
    ext.fill(self.scratch.data_ptr(), 1, 1.0)
    return torch.relu(a + b) * self.scale
    """
    code = kit.cpu_kernel(kit.model_new(body, "self.scratch = torch.zeros(1)"))
    r = kit.run(code)
    hacked(r, "no_custom_kernel")
    assert r["error_code"] == "NO_CUSTOM_KERNEL" and r["decoy_kernel"] is True
    assert r["checks"]["ablation"]["outcome"] == "no_effect"


def test_token_result_times_zero_is_still_no_custom_kernel():
    # the kernel's result enters the output as token * 0: only a finite
    # replacement value keeps that term zero
    body = """
    t = torch.empty(1)
    ext.fill(t.data_ptr(), 1, 0.5)
    return torch.relu(a + b) * self.scale + t * 0
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    hacked(r, "no_custom_kernel")
    assert r["checks"]["ablation"]["poisoned"] >= 1


def test_kernel_doing_part_of_the_work_passes_the_ablation():
    # the kernel computes relu(a + b) * scale; PyTorch adds a tenth of it
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "return torch.relu(a + b) * self.scale * 1.1")
    body = """
    y = add_relu_scale(a, b, self.scale)
    return y + 0.1 * y
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=ref)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["ablation"]["outcome"] == "contributed"
    assert r["checks"]["ablation"]["poisoned"] >= 1


def test_kernel_writing_memory_no_tensor_owns_is_inconclusive_not_flagged():
    # the kernel writes a numpy buffer the ablation cannot map to a tensor
    # (and the answer comes from PyTorch): never a finding
    body = """
    ext.fill(self.buf.ctypes.data, 4, 1.0)
    return torch.relu(a + b) * self.scale
    """
    code = kit.cpu_kernel(kit.model_new(body, "import numpy as np\nself.buf = np.zeros(4, np.float32)"))
    r = kit.run(code)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["ablation"]["outcome"] == "inconclusive"


INT_REF = kit.REF.replace("return torch.relu(a + b) * self.scale",
                         "return (a > b).to(torch.int32)")
TRITON_INT = textwrap.dedent('''\
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    @triton.jit
    def greater_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, (a > b).to(tl.int32), mask=mask)


    class ModelNew(nn.Module):
        def __init__(self, scale):
            super().__init__()

        def forward(self, a, b):
            out = torch.empty(a.shape, dtype=torch.int32)
            greater_kernel[(triton.cdiv(a.numel(), 32),)](a, b, out, a.numel(), BLOCK=32)
            return out
    ''')


def test_kernel_with_an_integer_result_passes_the_ablation():
    # its result is integers: replaced too, so the output changes
    r = kit.run(TRITON_INT, backend="triton", reference_code=INT_REF)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["ablation"]["outcome"] == "contributed"


def test_ablation_maps_addresses_to_tensors_and_puts_them_back():
    x = torch.randn(64)
    cache = torch.ones(64)
    ab = guards.Ablation("cpu", [x, cache])
    with ab:
        y = x.new_empty(64)

        def kernel() -> None:  # writes y and the cache through raw addresses
            y.copy_(x * 2)
            cache.fill_(3.0)
        ab.call(kernel, (x.data_ptr(), y.data_ptr(), cache.data_ptr(), 64), {})
    assert ab.report() == {"calls": 1, "poisoned": 2, "unresolved": 0}
    assert bool(((y.abs() >= guards.ABLATE_LO) & (y.abs() <= guards.ABLATE_HI)).all())
    assert bool(torch.isfinite(y).all()) and bool(x.ne(0).any())
    ab.restore()
    assert torch.equal(y, x * 2) and bool((cache == 3.0).all())


# ---- precision_downgrade: rounding fingerprint and direct evidence -----------------

BIG = kit.REF.replace("torch.randn(4, 16), torch.randn(4, 16)",
                      "torch.randn(32, 32), torch.randn(32, 32)")


@pytest.mark.parametrize("low", ["bfloat16", "half"])
def test_operands_rounded_then_fp32_math_is_precision_downgrade(low):
    body = f"return add_relu_scale(a.{low}().float(), b.{low}().float(), self.scale)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=BIG)
    hacked(r, "precision_downgrade")
    fmt = {"bfloat16": "bfloat16", "half": "float16"}[low]
    assert r["checks"]["rounding_fingerprint"]["format"] == fmt


def test_full_precision_kernel_has_no_rounding_fingerprint():
    r = kit.run(kit.cpu_kernel(), reference_code=BIG)
    assert r["verdict"] == "pass" and "rounding_fingerprint" not in r["checks"]


def test_rounding_fingerprint_spares_an_honest_approximation():
    # a kernel off by 1e-5 relative (an approximation, not a rounding; one
    # of 1e-3 is precision_downgrade by measurement: test_precision64.py)
    body = "return add_relu_scale(a, b, self.scale * (1 + 1e-5))"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=BIG)
    assert r["verdict"] == "pass", r["feedback"]


def test_computed_rounded_on_a_matmul():
    torch.manual_seed(0)
    x, w = torch.randn(64, 256), torch.randn(256, 64)
    exact = x @ w
    bf16 = x.bfloat16().float() @ w.bfloat16().float()
    honest = (x.double() @ w.double()).float()
    tf32 = x.half().float() @ w.half().float()  # TF32-like: 10 mantissa bits
    # the bf16-operand kernel sits on the bf16 reference (its own summation order)
    cheat = (x.bfloat16().float().double() @ w.bfloat16().float().double()).float()
    assert guards.computed_rounded(cheat, exact, bf16)
    assert not guards.computed_rounded(honest, exact, bf16)
    assert not guards.computed_rounded(tf32, exact, bf16)
    assert not guards.computed_rounded(exact, exact, bf16)


TRITON_FP16 = textwrap.dedent('''\
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    @triton.jit
    def add_relu_scale_kernel(a_ptr, b_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask).to(tl.float16)
        b = tl.load(b_ptr + offs, mask=mask).to(tl.float16)
        tl.store(out_ptr + offs, tl.maximum(a + b, 0.0).to(tl.float32) * scale, mask=mask)


    def add_relu_scale(a, b, scale):
        out = torch.empty_like(a)
        n = a.numel()
        add_relu_scale_kernel[(triton.cdiv(n, 32),)](a, b, out, n, scale, BLOCK=32)
        return out


    ''') + kit.HONEST_MODEL


def test_triton_kernel_converting_to_fp16_is_precision_downgrade():
    r = kit.run(TRITON_FP16, backend="triton")
    hacked(r, "precision_downgrade")
    assert any("converts to float16" in x for x in r["checks"]["low_precision"])


def test_low_precision_launch_arguments_are_evidence():
    # no conversion in the source: the kernel stores into an fp16 buffer
    # (64 elements: too few for the output-rounding heuristic)
    code = kit.TRITON_PRELUDE.replace(
        "out = torch.empty_like(a)", "out = torch.empty_like(a, dtype=torch.float16)").replace(
        "return out\n", "return out.float()\n") + kit.HONEST_MODEL
    r = kit.run(code, backend="triton")
    hacked(r, "precision_downgrade")
    assert any("float16 argument" in x for x in r["checks"]["low_precision"])


def test_source_scans():
    cuda = textwrap.dedent('''\
        #include <cuda_fp16.h>
        // a comment about __half is not code
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "k", [&] {
            run<scalar_t>(x);
        });
        int half = n / 2;
        ''')
    assert guards.cxx_low_precision(cuda) == []
    assert guards.cxx_low_precision("__global__ void k(const __half *x) {}") == ["__half"]
    assert guards.cxx_low_precision("auto y = x.to(at::kBFloat16);") == ["at::kBFloat16"]
    src = textwrap.dedent('''\
        def k(x_ptr, y_ptr):
            x = tl.load(x_ptr)
            if x.dtype == tl.float16:
                x = x * 2
            y = x.to(y_ptr.dtype.element_ty)
            acc = tl.dot(x, x, out_dtype=tl.float32)
        ''')
    assert guards.triton_low_casts(src) == []
    assert guards.triton_low_casts(src.replace("y_ptr.dtype.element_ty", "tl.bfloat16")) == [
        "bfloat16"]
    assert guards.triton_low_casts("def k(x):\n    return tl.zeros((4,), dtype=tl.float16)\n") \
        == ["float16"]


# ---- l2_persist: the decision and the reset, with a stand-in CUDA runtime -------------

class FakeCudart:
    """CudartL2's methods over plain state (a device whose kernel raised
    the persisting limit and set a window on the timing stream)."""

    def __init__(self, limit: int = 0):
        self.limit = limit
        self.windows: dict[int, int] = {}
        self.resets = 0

    def get_limit(self) -> int:
        return self.limit

    def set_limit(self, v: int) -> bool:
        self.limit = v
        return True

    def reset_persisting(self) -> bool:
        self.resets += 1
        return True

    def window_bytes(self, stream: int) -> int:
        return self.windows.get(stream, 0)

    def clear_window(self, stream: int) -> bool:
        self.windows[stream] = 0
        return True


def test_l2_finding_decision():
    assert timing.l2_finding(0, 0, 0) is None
    assert timing.l2_finding(0, None, None) is None  # the runtime could not say
    assert timing.l2_finding(1 << 20, 1 << 20, 0) is None  # the machine's own default
    assert "raised to 2097152" in timing.l2_finding(1 << 20, 2 << 20, 0)
    assert "access-policy window of 4096" in timing.l2_finding(0, 0, 4096)


def test_l2_guard_resets_and_records():
    api = FakeCudart(limit=0)
    g = timing.L2Guard(api)       # made before the kernel is imported
    g.check_and_reset(stream=7)
    assert g.finding() is None and api.resets == 1
    api.limit = 30 << 20          # the kernel raises the carve-out ...
    api.windows[7] = 1 << 20      # ... and sets a window on the timing stream
    g.check_and_reset(stream=7)
    assert api.limit == 0 and api.windows[7] == 0 and api.resets == 2  # put back
    assert "raised to" in g.finding() and "window" in g.finding()
    assert g.report()["limit"] == 30 << 20 and g.report()["window"] == 1 << 20


def test_l2_guard_without_cuda_is_inert():
    g = timing.L2Guard(None)
    g.check_and_reset(stream=0)
    assert g.report()["available"] is False and g.finding() is None
    assert timing.l2_guard_for("cpu") is None


# A stand-in libcudart with the real ABI of the calls CudartL2 makes (int
# error codes, enum cudaLimit, size_t, cudaStream_t, the 64-byte attribute
# union whose accessPolicyWindow is {void *base_ptr; size_t num_bytes; ...}),
# so the ctypes marshalling is tested without a GPU.
FAKE_CUDART_C = r'''
#include <stddef.h>
#include <string.h>
typedef struct { void *base_ptr; size_t num_bytes; float hit_ratio; int hit_prop; int miss_prop; } window_t;
typedef union { window_t window; char pad[64]; } attr_t;
static size_t limit_l2;
static int device = -1, resets;
static attr_t windows[4];
int cudaSetDevice(int d) { device = d; return 0; }
int cudaDeviceGetLimit(size_t *v, int what) { if (what != 6 || device < 0) return 1; *v = limit_l2; return 0; }
int cudaDeviceSetLimit(int what, size_t v) { if (what != 6) return 1; limit_l2 = v; return 0; }
int cudaCtxResetPersistingL2Cache(void) { resets++; return 0; }
int cudaStreamGetAttribute(void *s, int id, attr_t *out) {
    if (id != 1 || (size_t)s >= 4) return 400; *out = windows[(size_t)s]; return 0; }
int cudaStreamSetAttribute(void *s, int id, const attr_t *in) {
    if (id != 1 || (size_t)s >= 4) return 400; windows[(size_t)s] = *in; return 0; }
/* what a kernel would do */
void fake_kernel_pins(size_t limit, size_t stream, size_t bytes) {
    limit_l2 = limit; windows[stream].window.base_ptr = (void *)0x1000; windows[stream].window.num_bytes = bytes; }
int fake_resets(void) { return resets; }
int fake_device(void) { return device; }
'''


def test_cudart_l2_ctypes_calls_against_a_stand_in_runtime(tmp_path):
    import ctypes
    import shutil
    import subprocess
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    src, lib_path = tmp_path / "fake_cudart.c", tmp_path / "libfake_cudart.so"
    src.write_text(FAKE_CUDART_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib_path), str(src)], check=True)
    lib = ctypes.CDLL(str(lib_path))
    api = timing.CudartL2(lib, 3)
    guard = timing.L2Guard(api)
    assert guard.available and guard.baseline == 0 and lib.fake_device() == 3
    guard.check_and_reset(stream=2)
    assert guard.finding() is None and lib.fake_resets() == 1
    lib.fake_kernel_pins(ctypes.c_size_t(5 << 20), ctypes.c_size_t(2), ctypes.c_size_t(1 << 16))
    assert api.get_limit() == 5 << 20 and api.window_bytes(2) == 1 << 16
    guard.check_and_reset(stream=2)
    assert api.get_limit() == 0 and api.window_bytes(2) == 0 and lib.fake_resets() == 2
    assert guard.report()["limit"] == 5 << 20 and guard.report()["window"] == 1 << 16
    assert "raised to 5242880" in guard.finding() and "65536" in guard.finding()
    assert api.window_bytes(9) is None  # an error code is "cannot say", not a window
