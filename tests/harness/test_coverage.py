"""The judged coverage (coverage.py): which profile rows count as custom, and
the cap and profile_forgery by the judge's clock for a timed call."""
from __future__ import annotations

import copy
import textwrap

import kit
import pytest

from kgym_harness import coverage, profiling

CUBLAS = ("sm90_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x128x8_warpgroupsize1x1x1_"
          "execute_segment_k_off_kernel__5x_cublas")
TORCH_RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
              "namespace)::launch_clamp_scalar(at::TensorIteratorBase&)::{lambda(float)#1}, "
              "at::detail::Array<char*, 2> >(int, at::detail::Array<char*, 2>)")
CUTLASS = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nt_align1>"
           "(cutlass_80_simt_sgemm_128x128_8x4_nt_align1::Params)")


def test_row_ident_reads_the_function_name_exactly():
    assert coverage.row_ident("relu_kernel") == ("relu_kernel", "")
    assert coverage.row_ident("relu_kernel(float const*, float*, int)")[0] == "relu_kernel"
    assert coverage.row_ident("void fused<128, float>(float*, int)")[0] == "fused"
    assert coverage.row_ident("(anonymous namespace)::k(float*)") == ("k", "anonymous")
    assert coverage.row_ident("void ns::inner::k2<3>(int)") == ("k2", "ns::inner")
    assert coverage.row_ident(TORCH_RELU)[0] == "vectorized_elementwise_kernel"


@pytest.mark.parametrize("row", [CUBLAS, TORCH_RELU, CUTLASS, "ampere_sgemm_128x64_nn",
                                 "gemv2T_kernel_val", "gemmk1_kernel", "triton_poi_fused_relu_0",
                                 "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
                                 "void at::native::reduce_kernel<512, 1>(int)"])
def test_library_rows(row):
    assert coverage.is_library(row)


@pytest.mark.parametrize("row", ["relu_kernel", "matmul_kernel", "gemm_kernel", "_linear_relu",
                                 "compat::foo(int)", "attention::k(float*)",
                                 "(anonymous namespace)::linear_relu_kernel(float const*)"])
def test_candidate_rows_are_not_library(row):
    assert not coverage.is_library(row)


TRITON_CODE = textwrap.dedent('''
    import triton
    import triton.language as tl
    # @triton.jit
    # def in_a_comment(x): pass
    TEXT = "@triton.jit\\ndef in_a_string(x): pass"


    @triton.jit
    def relu_kernel(x):
        pass


    @triton.autotune(configs=[], key=[])
    @triton.jit
    def tuned_kernel(x):
        pass


    @triton.jit
    def never_launched(x):
        pass


    @triton.jit
    def Kernel2(x):
        pass
    ''')


def test_triton_names_need_a_definition_and_a_launch_record():
    launched = {"triton": {"relu_kernel", "tuned_kernel", "Kernel2", "in_a_comment",
                           "in_a_string"}}
    names = coverage.compiled_names(TRITON_CODE, launched, True)
    assert names == {"triton": {"relu_kernel", "tuned_kernel", "Kernel2"}, "cuda": set()}
    # records cut short: every defined function may have run
    names = coverage.compiled_names(TRITON_CODE, launched, False)
    assert names["triton"] == {"relu_kernel", "tuned_kernel", "never_launched", "Kernel2"}
    # a name it shares with CUTLASS's kernel does not make that kernel custom
    assert not coverage.row_is_custom(CUTLASS, names)
    assert coverage.row_is_custom("relu_kernel", names)


CUDA_CODE = textwrap.dedent('''
    from torch.utils.cpp_extension import load_inline
    UNUSED = "__global__ void in_a_string(float *y) {}"
    _HEAD = "#include <cuda_runtime.h>\\n"
    _CUDA = _HEAD + r"""
    // __global__ void in_a_comment(float *y);
    /* __global__ void in_a_block_comment(float *y); */
    #if 0
    __global__ void disabled(float *y) {}
    #endif
    __global__ void __launch_bounds__(256) relu_kernel(float *y) {}
    __global__ void gemmk1_kernel(float *y) {}
    """
    _ext = load_inline(name="x", cpp_sources="", cuda_sources=[_CUDA], functions=["in_a_list"])
    ''')


def test_cuda_names_come_from_built_sources_only():
    names = coverage.compiled_names(CUDA_CODE, {"ext": {"relu"}}, True)
    assert names == {"triton": set(), "cuda": {"relu_kernel"}}
    # nothing of the extension was ever called: no built kernel ran
    assert coverage.compiled_names(CUDA_CODE, {}, True)["cuda"] == set()


def test_unresolvable_sources_fall_back_to_every_string():
    code = CUDA_CODE.replace("cuda_sources=[_CUDA]", "cuda_sources=open('k.cu').read()")
    names = coverage.compiled_names(code, {"ext": {"relu"}}, True)["cuda"]
    assert {"relu_kernel", "in_a_string"} <= names and "in_a_comment" not in names


def _prof(rows: list[tuple[str, float]], iters: int = 3, method: str = "cuda_profiler") -> dict:
    krows = [{"name": n, "device_us": us, "cpu_us": 0.0, "calls": iters, "custom": True}
             for n, us in rows]
    total = sum(us for _, us in rows)
    return profiling.assemble(krows, total, total, iters, method, keep=len(krows))


def test_attribute_counts_only_compiled_and_launched_kernels():
    prof = _prof([(CUBLAS, 3000.0), (CUTLASS, 500.0), ("relu_kernel", 30.0),
                  ("never_launched", 20.0)])
    out = coverage.attribute(prof, TRITON_CODE, {"triton": {"relu_kernel", "Kernel2"}}, True)
    assert [r["name"] for r in out["kernels"] if r["custom"]] == ["relu_kernel"]
    assert out["custom_device_us"] == 30.0 and out["total_device_us"] == 3550.0
    assert out["num_custom_kernels"] == 1 and out["num_total_kernels"] == 4


def test_attribute_cpu_rows_need_a_launch_record():
    prof = _prof([("relu", 30.0), ("forged", 60.0), (profiling.LIBRARY_ROW, 10.0)],
                 method="cpu_wall")
    out = coverage.attribute(prof, "", {"ext": {"relu"}}, True)
    assert {r["name"] for r in out["kernels"] if r["custom"]} == {"relu"}
    assert out["coverage"] == pytest.approx(0.3)


def test_bound_leaves_an_honest_profile_alone():
    # device time per iteration below the judge's wall per call
    prof = _prof([(CUBLAS, 2900.0), ("relu_kernel", 60.0)])
    prof = coverage.attribute(prof, TRITON_CODE, {"triton": {"relu_kernel"}}, True)
    before = copy.deepcopy(prof)
    b = coverage.bound(prof, 1.0, 0.98, cuda=True)
    assert b["forgery"] is None and not b["check"]["capped"]
    assert b["profile"]["coverage"] == before["coverage"]


def test_work_only_in_profiled_calls_is_forgery_and_cannot_raise_coverage():
    # the lazy kernel (1 ms GEMM a call) and 20 ms of its own kernel a profiled call
    prof = _prof([(CUBLAS, 3000.0), ("relu_kernel", 60000.0)])
    prof = coverage.attribute(prof, TRITON_CODE, {"triton": {"relu_kernel"}}, True)
    assert prof["coverage"] > 0.9  # what the candidate's rows say
    b = coverage.bound(prof, 1.02, 1.0, cuda=True)
    assert b["forgery"] and "only while profiled" in b["forgery"]
    assert b["check"]["capped"] and b["profile"]["coverage"] < 0.2
    # below the forgery factor the cap alone holds the figure down
    prof = _prof([(CUBLAS, 3000.0), ("relu_kernel", 1200.0)])
    prof = coverage.attribute(prof, TRITON_CODE, {"triton": {"relu_kernel"}}, True)
    b = coverage.bound(prof, 1.02, 1.0, cuda=True)
    assert b["forgery"] is None and b["profile"]["coverage"] < 0.2 < prof["coverage"]


def test_no_clock_no_bound():
    prof = _prof([("relu_kernel", 60000.0)])
    b = coverage.bound(prof, None, None, cuda=True)
    assert b["forgery"] is None and b["profile"] is prof and b["check"]["wall_ms"] is None


def test_a_forged_claim_is_the_clocks_finding_not_the_profiles():
    # timed calls claimed at a tenth of the wall: the profile matches the
    # wall, so the profile is not what was forged (timer_tamper's case)
    prof = _prof([(CUBLAS, 3000.0), ("relu_kernel", 60.0)])
    prof = coverage.attribute(prof, TRITON_CODE, {"triton": {"relu_kernel"}}, True)
    b = coverage.bound(prof, 1.0, 0.1, cuda=True)
    assert b["forgery"] is None and not b["check"]["capped"]
    b = coverage.bound(prof, 0.1, 0.1, cuda=True)
    assert b["forgery"] and "0.100 ms" in b["forgery"]


# ---- through the judge (cpu) --------------------------------------------------------

PROFILED = '''
def _profiled():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "profile_cpu":
            return True
        f = f.f_back
    return False

'''


def test_judge_names_work_only_in_profiled_calls_profile_forgery():
    # 5000 extra custom calls in each profiled call only
    body = ("if _profiled():\n    for _ in range(5000):\n        add_relu_scale(a, b, self.scale)\n"
            "return add_relu_scale(a, b, self.scale)")
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top="import sys\n" + PROFILED),
                enable_profiling=True, num_perf_trials=10)
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["profile_forgery"], r["feedback"]
    assert r["error_code"] == "PROFILE_FORGERY"
    assert r["checks"]["coverage_bound"]["capped"]
    # the figure every reward reads is the judged one, not the claim
    p = r["profile"]
    assert p["claimed"]["coverage"] > p["coverage"] + 0.05, p


def test_a_replaced_profiler_function_is_seen():
    import torch.autograd.profiler as ap
    from kgym_harness import integrity
    snap = integrity.Snapshot()
    orig = ap.profile.__exit__
    try:
        ap.profile.__exit__ = lambda self, *a: orig(self, *a)
        changed = snap.changed()
    finally:
        ap.profile.__exit__ = orig
    assert "torch.profiler:torch.autograd.profiler.profile.__exit__" in changed
    assert all(n.startswith(integrity.PROFILER_PREFIX) for n in changed), changed
    assert snap.changed() == []


def test_a_replaced_cupti_recorder_function_is_profile_forgery():
    # the GPU's recorder (cupti.py) is the candidate's like torch's profiler:
    # replacing one of its functions (here one that drops every row) is named
    top = ("import sys\n"
           "sys.modules['kgym_harness.cupti'].KernelTrace.stop = lambda self: []\n")
    r = kit.run(kit.cpu_kernel(top=top), enable_profiling=True, num_perf_trials=10)
    assert r["verdict"] == "hacked", r["feedback"]
    assert "profile_forgery" in r["hack_reasons"], r["hack_reasons"]
    assert "kgym_harness.cupti.KernelTrace.stop" in r["checks"]["replaced_functions"]


def test_judge_keeps_the_claim_apart_and_honest_figures_equal():
    body = "out = add_relu_scale(a, b, self.scale)\nreturn out + torch.zeros_like(out)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), enable_profiling=True)
    assert r["verdict"] == "pass", r["feedback"]
    p = r["profile"]
    # equal but for a cold first call the cap may trim (at most 0.05)
    assert abs(p["claimed"]["coverage"] - p["coverage"]) <= 0.05
    assert p["custom_device_us"] <= p["claimed"]["custom_device_us"] + 1e-6
    assert r["checks"]["coverage_bound"]["claimed_ms"] > 0


def test_cpu_iterations_are_capped_one_by_one():
    # an honest partial kernel (0.1 ms custom, 0.2 ms library a call), two of
    # its 8 iterations stalled 30 ms in the library part: no forgery, the
    # figure barely moves
    prof = _prof([("relu", 800.0), (profiling.LIBRARY_ROW, 61600.0)], iters=8, method="cpu_wall")
    prof["iter_us"] = [30300.0, 30300.0] + [300.0] * 6
    prof["iter_custom_us"] = [100.0] * 8
    prof = coverage.attribute(prof, "", {"ext": {"relu"}}, True)
    assert prof["iter_us"][0] == 30300.0 and prof["iter_custom_us"] == [100.0] * 8
    b = coverage.bound(prof, 0.3, 0.3, cuda=False)
    assert b["forgery"] is None and not b["check"]["capped"]
    assert b["profile"]["coverage"] == prof["coverage"]
    # the same kernel spinning 5 ms in its extension in 3 of the 8 profiled
    # calls: the middle iteration is clean, each spun one is capped
    prof = _prof([("relu", 15500.0), (profiling.LIBRARY_ROW, 1600.0)], iters=8, method="cpu_wall")
    prof["iter_us"] = [5300.0] * 3 + [300.0] * 5
    prof["iter_custom_us"] = [5100.0] * 3 + [100.0] * 5
    prof = coverage.attribute(prof, "", {"ext": {"relu"}}, True)
    b = coverage.bound(prof, 0.3, 0.3, cuda=False)
    assert prof["coverage"] > 0.9 and b["check"]["capped"]
    assert b["profile"]["coverage"] < 0.45
    # in most of them: profile_forgery
    prof["iter_us"] = [5300.0] * 5 + [300.0] * 3
    assert coverage.bound(prof, 0.3, 0.3, cuda=False)["forgery"]


def test_cpu_forgery_not_fooled_by_a_lucky_wall_block():
    # a loaded machine: wall blocks at 5.6 ms, the timed loop and the
    # profile at about 20 ms a call (an honest 5 ms extension)
    prof = _prof([("linear_relu", 155000.0), (profiling.LIBRARY_ROW, 800.0)], iters=8,
                 method="cpu_wall")
    prof["iter_us"] = [19400.0, 19450.0, 19450.0, 19500.0, 19500.0, 19500.0, 19500.0, 19500.0]
    prof["iter_custom_us"] = [w - 100.0 for w in prof["iter_us"]]
    prof = coverage.attribute(prof, "", {"ext": {"linear_relu"}}, True)
    b = coverage.bound(prof, 5.6, 21.2, cuda=False)
    assert b["forgery"] is None and not b["check"]["capped"]
    assert coverage.bound(prof, 5.6, 5.0, cuda=False)["forgery"]

# A forward whose custom kernel is about two thirds of its time: the rest a
# product in torch whose result it multiplies by zero (the output stays the
# reference's, and the ablation still finds the custom kernel's output in
# it). REPLAY: outputs kept by a few input elements; a repeat returns the
# kept one after running the custom kernel on scratch inputs (the kernel the
# ablation finds the output depends on, for about as long as a call).
MIXED = """
    out = MEMO.get(key) if REPLAY else None
    if out is not None:
        add_relu_scale(self.scratch, self.scratch, 1.0)
        return out
    out = add_relu_scale(a, b, self.scale)
    out = out + 0.0 * (a[:, :256] @ b + a[:, 256:512] @ b)
    if REPLAY and len(MEMO) < 200:
        MEMO[key] = out
    return out
"""


def _mixed(replay: bool) -> str:
    body = ("key = (tuple(a[0, :4].tolist()), tuple(b[0, :4].tolist()))\n"
            + textwrap.dedent(MIXED))
    top = f"MEMO = {{}}\nREPLAY = {replay}\n\n\n"
    return kit.cpu_kernel(kit.model_new(body, init_extra="self.scratch = torch.zeros(1 << 23)"),
                          top=top)


def test_profiled_calls_draw_inputs_no_timed_call_had():
    """A kernel that keeps its outputs by their inputs replays them on any
    input set it has seen, and can fill the time with its custom kernel on
    scratch: had the profiled calls' inputs been the timing phase's, most
    profiled calls would be that kernel alone, and the coverage every
    reward reads near 1."""
    ref = kit.REF.replace("torch.randn(4, 16), torch.randn(4, 16)",
                          "torch.randn(256, 4096), torch.randn(256, 4096)")
    honest = kit.run(_mixed(False), reference_code=ref, enable_profiling=True,
                     num_perf_trials=10)
    replay = kit.run(_mixed(True), reference_code=ref, enable_profiling=True,
                     num_perf_trials=10)
    assert honest["verdict"] == "pass" and replay["verdict"] == "pass", (
        honest.get("error_message"), replay.get("error_message"))
    h, r = honest["profile"]["coverage"], replay["profile"]["coverage"]
    assert h < 0.9, honest["profile"]
    assert r < h + 0.2, (h, r, replay["profile"])
