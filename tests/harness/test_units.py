"""Unit tests of the harness's pieces (no subprocesses)."""

from __future__ import annotations

import math
import socket

import pytest
import torch

from kgym_harness import compare, feedback, frame, hooks, loader, profiling, schema, timing
from kgym_harness.channel import Channel, ProtocolError, pack, unpack

# ---- schema ----------------------------------------------------------------


def _req(**kw):
    d = {"reference_code": "x = 1", "kernel_code": "y = 2"}
    d.update(kw)
    return d


def test_defaults_follow_design():
    r = schema.normalize_request(_req())
    assert (r["backend"], r["entry_point"], r["reference_backend"], r["priority"]) == \
        ("triton", "Model", "eager", "normal")
    assert (r["num_correct_trials"], r["num_perf_trials"], r["num_warmup"]) == (5, 100, 3)
    assert (r["atol"], r["rtol"], r["timeout"]) == (1e-2, 1e-2, 300.0)
    assert r["enable_profiling"] is True and r["run_hack_checks"] is True
    assert r["force_refresh"] is False and r["strict"] is False
    assert isinstance(r["seed"], int) and 0 <= r["seed"] < 2**63
    assert r["task_id"] and len(r["task_id"]) <= 100


def test_strict_tightens_default_tolerance_only():
    assert schema.normalize_request(_req(strict=True))["atol"] == 1e-4
    assert schema.normalize_request(_req(strict=True, rtol=1e-3))["rtol"] == 1e-3


@pytest.mark.parametrize("field,value", [
    ("num_correct_trials", 0), ("num_correct_trials", 101), ("num_perf_trials", 10001),
    ("num_warmup", -1), ("num_warmup", True), ("atol", "1e-2"), ("atol", float("nan")),
    ("backend", "rocm"), ("reference_backend", "jit"), ("priority", "urgent"),
    ("enable_profiling", 1), ("timeout", 0), ("seed", -1), ("seed", 2**63),
    ("entry_point", "Model; import os"), ("task_id", "x" * 101), ("device", "cuda:x"),
    ("kernel_code", "x" * (256 * 1024 + 1)), ("kernel_code", None), ("reference_code", 3),
])
def test_bad_fields_are_named(field, value):
    with pytest.raises(ValueError) as e:
        schema.normalize_request(_req(**{field: value}))
    assert str(e.value).startswith(field)


def test_not_an_object():
    with pytest.raises(ValueError):
        schema.normalize_request(["reference_code"])


def test_check_result_refuses_inconsistent_pass():
    ok = schema.new_result("t", "cpu")
    ok.update(verdict="pass", correctness=True)
    assert schema.check_result(ok) is ok
    for bad in ({"verdict": "pass", "correctness": False},
                {"verdict": "mismatch", "correctness": True},
                {"verdict": "great", "correctness": False},
                {"verdict": "pass", "correctness": True, "hack_reasons": ["timer_tamper"]}):
        with pytest.raises(ValueError):
            schema.check_result(bad)


# ---- result frame ------------------------------------------------------------


def test_frame_round_trip_and_every_truncation_fails():
    obj = {"verdict": "pass", "correctness": True, "x": [1, 2, "é"]}
    data = frame.encode_result(obj)
    assert data.startswith(b"KGYMRES1") and data.endswith(b"KGYMEND1")
    assert frame.decode_result(data) == obj
    for n in range(len(data)):
        with pytest.raises(frame.FrameError):
            frame.decode_result(data[:n])
    with pytest.raises(frame.FrameError):
        frame.decode_result(data + b"x")
    with pytest.raises(frame.FrameError):
        frame.decode_result(data[:-8] + b"KGYMEND2")
    with pytest.raises(frame.FrameError):
        frame.decode_result(b"KGYMRESX" + data[8:])


# ---- channel -----------------------------------------------------------------


def _pair():
    a, b = socket.socketpair()
    return Channel(a.detach()), Channel(b.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool, torch.uint8, torch.float64])
def test_tensor_round_trip(dtype):
    left, right = _pair()
    t = (torch.randn(3, 5) * 10).to(dtype)
    nc = t.t()  # non-contiguous
    empty = torch.empty(0, 4, dtype=dtype)
    tensors = []
    desc = pack([nc, (t, 3, 2.5, None, float("inf")), "s", empty], tensors)
    left.send({"cmd": "x", "args": desc}, tensors)
    header, got = right.recv()
    out = unpack(header["args"], got)
    assert torch.equal(out[0], nc) and out[0].dtype == dtype
    assert torch.equal(out[1][0], t) and out[1][1:] == (3, 2.5, None, float("inf"))
    assert out[2] == "s" and out[3].shape == (0, 4)


def _raw_send(chan: Channel, header: bytes, payload: bytes = b"") -> None:
    chan.sock.sendall(len(header).to_bytes(4, "big") + header + payload)


@pytest.mark.parametrize("header", [
    b'{"tensors": [{"dtype": "object", "shape": [1], "nbytes": 8}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [2], "nbytes": 4}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [-1], "nbytes": 4}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [1,1,1,1,1,1,1,1,1], "nbytes": 4}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [1099511627775, 1099511627775], "nbytes": 0}]}',
    b'[1, 2]', b'not json', b'{"tensors": 5}',
])
def test_malformed_messages_are_rejected(header):
    left, right = _pair()
    _raw_send(left, header, b"\0" * 8)
    with pytest.raises(ProtocolError):
        right.recv()


def test_unpack_rejects_bad_indices():
    with pytest.raises(ProtocolError):
        unpack({"__tensor__": 1}, [torch.zeros(1)])
    with pytest.raises(ProtocolError):
        unpack({"__code__": "os.system"}, [])


def test_recv_deadline():
    from kgym_harness.channel import ChannelTimeout
    import time
    _left, right = _pair()
    right.deadline = time.monotonic() + 0.2
    with pytest.raises(ChannelTimeout):
        right.recv()


# ---- compare -------------------------------------------------------------------


def test_compare_codes():
    e = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert compare.compare_outputs(e, e + 0.005, 1e-2, 1e-2) is None
    f = compare.compare_outputs(e, e + torch.tensor([0, 0, 0.5, 0]), 1e-2, 1e-2)
    assert f["code"] == "VALUE_MISMATCH" and f["bad_fraction"] == 0.25
    assert math.isclose(f["max_abs_err"], 0.5) and math.isclose(f["max_rel_err"], 0.5 / 3, rel_tol=1e-5)
    nan = e.clone()
    nan[1] = float("nan")
    assert compare.compare_outputs(e, nan, 1e-2, 1e-2)["code"] == "NONFINITE_OUTPUT"
    assert compare.compare_outputs(nan, nan.clone(), 1e-2, 1e-2) is None  # NaN where expected
    assert compare.compare_outputs(e, e.reshape(2, 2), 1e-2, 1e-2)["code"] == "SHAPE_MISMATCH"
    assert compare.compare_outputs(e, e.double(), 1e-2, 1e-2)["code"] == "DTYPE_MISMATCH"
    assert compare.compare_outputs(e, [e, e], 1e-2, 1e-2)["code"] == "OUTPUT_TYPE"
    assert compare.compare_outputs((e, e), (e, e + 1), 1e-2, 1e-2)["output_index"] == 1
    assert compare.compare_outputs(e, 3, 1e-2, 1e-2)["code"] == "OUTPUT_TYPE"


def _exact_only(monkeypatch_target):
    """compare_outputs with its fast path off: the exact float64 path alone."""
    saved = compare._within_fast
    compare._within_fast = lambda *a: False
    try:
        return monkeypatch_target()
    finally:
        compare._within_fast = saved


def test_fast_path_decides_every_case_as_the_exact_path():
    """compare._within_fast (the outputs' own precision, tolerance shrunk by
    FAST_MARGIN) never changes an outcome: on elements placed at, just
    inside and just outside the tolerance, in every float type, with
    infinities, NaNs and values near the type's largest, compare_outputs
    returns exactly what the float64 path alone returns."""
    g0 = torch.Generator().manual_seed(7)
    n = 4096
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for atol, rtol in ((1e-2, 1e-2), (1e-5, 1e-5), (1e-3, 0.0), (0.0, 1e-3), (0.0, 0.0),
                           (1e-40, 1e-2), (1e30, 1e30)):
            e = (torch.randn(n, generator=g0, dtype=torch.float64) * 10).to(dtype)
            tol = atol + rtol * e.double().abs()
            # each element at a multiple of its own tolerance around the boundary
            k = torch.tensor([0.0, 0.5, 0.999, 1.0 - 1e-7, 1.0, 1.0 + 1e-7, 1.001, 2.0],
                             dtype=torch.float64)
            sign = torch.where(torch.rand(n, generator=g0) < 0.5, -1.0, 1.0).double()
            for j in range(len(k)):
                g = (e.double() + sign * k[j] * tol).to(dtype)
                got = compare.compare_outputs(e, g, atol, rtol)
                want = _exact_only(lambda: compare.compare_outputs(e, g, atol, rtol))
                assert got == want, (dtype, atol, rtol, float(k[j]), got, want)
            # mostly passing, one element each of: inf, nan, a huge value, past tolerance
            for bad in (float("inf"), float("-inf"), float("nan"), 6e4, 3.0e38):
                g = e.clone()
                g[n // 3] = bad
                got = compare.compare_outputs(e, g, atol, rtol)
                want = _exact_only(lambda: compare.compare_outputs(e, g, atol, rtol))
                assert got == want, (dtype, atol, rtol, bad, got, want)
    big = torch.tensor([3.0e38, -3.0e38, 1.0])
    for got_v in (torch.tensor([-3.0e38, 3.0e38, 1.0]), big.clone()):
        for atol, rtol in ((1e-2, 1e-2), (1e-2, 10.0)):
            assert compare.compare_outputs(big, got_v, atol, rtol) == _exact_only(
                lambda: compare.compare_outputs(big, got_v, atol, rtol))


def test_fast_path_settles_an_honest_output_and_hands_on_the_rest():
    """A passing output is settled by the fast path; an output it cannot
    pass (past tolerance, NaN, or an element at the tolerance exactly,
    which the exact path passes) is decided by the exact path."""
    torch.manual_seed(1)
    e = torch.randn(100_000)
    assert compare._within_fast(e, e + 1e-4 * torch.randn(100_000), 1e-3, 1e-3)
    assert compare._within_fast(e.half(), (e + 1e-4).half(), 1e-2, 1e-2)
    assert not compare._within_fast(e, e + 1.0, 1e-3, 1e-3)
    nan = e.clone()
    nan[3] = float("nan")
    assert not compare._within_fast(nan, nan.clone(), 1e-3, 1e-3)
    assert not compare._within_fast(e, e, 0.0, 0.0)  # exact comparisons: the exact path
    assert not compare._within_fast(torch.arange(5), torch.arange(5), 1e-3, 1e-3)
    for dtype in (torch.float32, torch.float64):
        x = torch.tensor([1.0], dtype=dtype)
        at = torch.tensor([1.5], dtype=dtype)  # |1.5 - 1| = 0.25 + 0.25 * 1 exactly
        assert not compare._within_fast(x, at, 0.25, 0.25)
        assert compare.compare_outputs(x, at, 0.25, 0.25) is None
        assert compare.compare_outputs(x, torch.nextafter(at, at + 1), 0.25, 0.25) is not None


def test_strict_tolerance_rejects_bf16_rounding():
    torch.manual_seed(0)
    x = torch.randn(256)
    y = x.bfloat16().float()
    assert compare.compare_outputs(x, y, 1e-2, 1e-2) is None
    assert compare.compare_outputs(x, y, 1e-4, 1e-4)["code"] == "VALUE_MISMATCH"


# ---- seeds and inputs -----------------------------------------------------------


def test_derived_seeds_differ_and_repeat():
    a = loader.derive_seed(42, "trial:0")
    assert a == loader.derive_seed(42, "trial:0")
    assert len({a, loader.derive_seed(42, "trial:1"), loader.derive_seed(43, "trial:0"),
                loader.derive_seed(42, "timing")}) == 4
    assert 0 <= a < 2**63


# ---- hooks --------------------------------------------------------------------


def test_grid_resolution():
    def kern(x, n, BLOCK=8):
        pass
    assert hooks._resolve_grid(kern, (3, 2), (), {}) == [3, 2]
    assert hooks._resolve_grid(kern, lambda m: (m["n"] // m["BLOCK"],), (None, 64), {}) == [8]
    assert hooks._resolve_grid(kern, lambda m: (m["n"] // m["BLOCK"],), (None, 64),
                               {"BLOCK": 16}) == [4]
    assert hooks._resolve_grid(kern, lambda m: 1 / 0, (), {}) == "callable"
    assert hooks._is_empty_grid([0]) and not hooks._is_empty_grid([1, 1])


def test_build_key_depends_on_content_not_paths(tmp_path):
    src = tmp_path / "a.cpp"
    src.write_text("int f() { return 1; }")
    k1 = hooks.build_key("load", "m", ([str(src)],), {"build_directory": "/x"})
    other = tmp_path / "b.cpp"
    other.write_text("int f() { return 1; }")
    assert hooks.build_key("load", "m", ([str(other)],), {"build_directory": "/y"}) == k1
    other.write_text("int f() { return 2; }")
    assert hooks.build_key("load", "m", ([str(other)],), {}) != k1
    base = hooks.build_key("load_inline", "m", (["src"],), {})
    assert hooks.build_key("load_inline", "m", (["src"],), {"extra_cflags": ["-O3"]}) != base
    assert hooks.build_key("load_inline", "n", (["src"],), {}) != base


def test_extension_proxy_records_calls():
    import types
    mod = types.ModuleType("fake")
    mod.add = lambda a, b: a + b
    mod.CONST = 3
    proxy = hooks.ExtensionProxy(mod, "fake")
    hooks.RECORDER.take()
    assert proxy.add(2, 3) == 5 and proxy.CONST == 3
    got = hooks.RECORDER.take()
    assert got["count"] == 1 and got["records"][0]["name"] == "add"


# ---- timing ---------------------------------------------------------------------


def test_stats():
    s = timing.stats([3.0, 1.0, 2.0, 10.0])
    assert s == {"median": 2.5, "mean": 4.0, "std": pytest.approx(4.0825, rel=1e-4),
                 "min": 1.0, "max": 10.0, "n": 4}
    assert timing.stats([]) is None


def test_time_forward_cpu_uses_fresh_inputs():
    seen = []
    res = timing.time_forward(lambda args: seen.append(args), lambda i: i, 2, 5, "cpu")
    assert seen == list(range(7)) and len(res["samples_ms"]) == 5
    assert res["wall_ms"] >= sum(res["samples_ms"])


def test_tamper_bound():
    # Honest: 100 iterations of 10 ms in a 1.05 s phase.
    assert timing.tamper_excess(1000.0, 100, 3, 1050.0, 5.0, 0.0) < 0
    # Claims 1 us per iteration of a phase that took a second: flagged.
    assert timing.tamper_excess(0.1, 100, 3, 1050.0, 5.0, 0.0) > 500
    # Tiny kernels inside a big fixed overhead are never flagged.
    assert timing.tamper_excess(0.1, 100, 3, 90.0, 5.0, 0.0) < 0
    # Flush time is allowed for on the GPU.
    assert timing.tamper_excess(1.0, 100, 3, 300.0, 1.0, 1.0) < 0


def test_reftime_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("KGYM_CACHE_DIR", str(tmp_path))
    key = timing.reftime_key("code", {"n": 1}, "cpu: x")
    assert timing.reftime_load(key) is None
    obj = {"samples_ms": [1.0, 2.0], "prep_ms": 0.1, "warmup_ms": 0.2, "wall_ms": 3.0}
    timing.reftime_store(key, obj)
    assert timing.reftime_load(key) == obj
    (tmp_path / "reftime" / f"{key}.json").write_text('{"samples_ms": [-1]}')
    assert timing.reftime_load(key) is None
    assert timing.reftime_key("code2", {"n": 1}, "cpu: x") != key
    assert timing.reftime_key("code", {"n": 2}, "cpu: x") != key
    assert timing.reftime_key("code", {"n": 1}, "cpu: y") != key


# ---- profiling --------------------------------------------------------------------


def test_global_names_and_summary():
    src = ("template <int B> __global__ void __launch_bounds__(128) k1(float* x) {}\n"
           "__global__ void\nk2(int n) {}\nvoid host(int) {}\n")
    assert profiling.global_names(src) == {"k1", "k2"}
    assert profiling._matches("void k1<128>(float*)", {"k1"})
    assert not profiling._matches("k10_other", {"k1"})
    assert profiling.summary_string(12.344, 56.78, 0.2173) == \
        "Custom kernel CUDA time: 12.34 us / Total time: 56.78 us, Coverage: 21.73%"


def test_sanitize_profile_drops_garbage():
    assert profiling.sanitize_profile("x") is None
    assert profiling.sanitize_profile({"kernels": [{"name": "k"}]}) is None
    p = profiling.sanitize_profile({"kernels": [{"name": "k", "device_us": 5, "cpu_us": 1,
                                                 "calls": 2, "custom": True}],
                                    "custom_device_us": 50, "total_device_us": 10,
                                    "iterations": 3})
    assert p["custom_device_us"] == 10 and p["coverage"] == 1.0


# ---- feedback ---------------------------------------------------------------------


def test_feedback_trims_traceback_to_candidate_frames():
    code = "import torch\n\nclass ModelNew:\n    def forward(self, x):\n        return x @ x\n"
    result = schema.new_result("t", "cpu")
    schema.set_error(result, "runtime_error", "FORWARD_EXCEPTION", "run", "RuntimeError",
                     "RuntimeError: shapes cannot be multiplied", "Traceback ...",
                     [{"file": "/site-packages/kgym_harness/candidate.py", "line": 99,
                       "name": "cmd_run", "source": "out = call(args)", "candidate": False},
                      {"file": "kernel.py", "line": 5, "name": "forward", "source": "",
                       "candidate": True},
                      {"file": "/site-packages/torch/x.py", "line": 7, "name": "f",
                       "source": "", "candidate": False}])
    text = feedback.make_feedback(result, code)
    assert "Verdict: runtime_error (FORWARD_EXCEPTION)" in text
    assert "line 5, in forward: return x @ x" in text
    assert "candidate.py" not in text and "torch/x.py" not in text
    assert len(text.splitlines()) <= 40


def test_feedback_is_short_even_for_huge_errors():
    result = schema.new_result("t", "cpu")
    frames = [{"file": "kernel.py", "line": i, "name": "f", "source": "", "candidate": True}
              for i in range(1, 40)]
    schema.set_error(result, "compile_error", "BUILD_ERROR", "load", "RuntimeError",
                     "\n".join(f"main.cpp:{i}: error: nope" for i in range(500)), "", frames)
    result["profile"] = profiling.assemble([{"name": f"k{i}", "device_us": float(i), "cpu_us": 0.0,
                                            "calls": 1, "custom": i % 2 == 0}
                                           for i in range(30)], 1.0, 2.0, 3, "x")
    text = feedback.make_feedback(result, "x = 1\n" * 50)
    assert len(text.splitlines()) <= 40


# ---- failure classification ----------------------------------------------------


def _raise(exc: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        raise exc from cause
    except BaseException as e:  # noqa: BLE001
        return e


def test_classify_codes(monkeypatch):
    c = loader.classify
    assert c(_raise(SyntaxError("bad")), "load", None)["code"] == "SYNTAX_ERROR"
    assert c(_raise(ModuleNotFoundError("x")), "load", None)["code"] == "IMPORT_ERROR"
    assert c(_raise(ValueError("x")), "load", None)["verdict"] == "compile_error"
    assert c(_raise(ValueError("x")), "init", None)["code"] == "INIT_EXCEPTION"
    assert c(_raise(ValueError("x")), "run", None)["code"] == "FORWARD_EXCEPTION"
    cuda = c(_raise(RuntimeError("CUDA error: an illegal memory access was encountered\n"
                                 "CUDA kernel errors might be asynchronously reported")),
             "run", None)
    assert (cuda["verdict"], cuda["code"]) == ("runtime_error", "CUDA_ERROR")
    assert cuda["type"] == "CUDA error: an illegal memory access was encountered"
    oom = c(_raise(torch.OutOfMemoryError("CUDA out of memory")), "run", None)
    assert oom["code"] == "OUT_OF_MEMORY"


def test_classify_triton_errors():
    from triton.runtime.errors import InterpreterError
    semantic = _raise(InterpreterError("ValueError(...)"), ValueError("arange's range"))
    assert loader.classify(semantic, "run", None)["code"] == "TRITON_COMPILE_ERROR"
    crash = _raise(InterpreterError("RuntimeError(...)"), RuntimeError("numpy said no"))
    assert loader.classify(crash, "run", None)["code"] == "FORWARD_EXCEPTION"
    from triton.compiler.errors import CompilationError
    comp = CompilationError.__new__(CompilationError)  # no message attribute: str() raises
    info = loader.classify(_raise(RuntimeError("wrap"), comp), "run", None)
    assert info["code"] == "TRITON_COMPILE_ERROR"


def test_classify_survives_unprintable_exceptions():
    class Nasty(Exception):
        def __str__(self):
            raise ValueError("no")
    info = loader.classify(_raise(Nasty()), "run", None)
    assert info["code"] == "FORWARD_EXCEPTION" and "unprintable" in info["message"]


def test_classify_build_error_wins(monkeypatch):
    monkeypatch.setattr(hooks.RECORDER, "build_error", "building extension 'x' failed: oops")
    info = loader.classify(_raise(AttributeError("ext has no attr")), "run", None)
    assert (info["verdict"], info["code"]) == ("compile_error", "BUILD_ERROR")
    assert "oops" in info["message"]


def test_remote_sanitizes_candidate_failures():
    from kgym_harness.remote import sanitize_failure
    claimed = sanitize_failure({"verdict": "infra_error", "code": "REFERENCE_ERROR",
                                "message": "x" * 10_000, "frames": [{"line": "7"}, 3]})
    assert claimed["verdict"] == "runtime_error" and claimed["code"] == "FORWARD_EXCEPTION"
    assert len(claimed["message"]) == 4000 and claimed["frames"][0]["line"] == 0
    assert sanitize_failure({"verdict": "pass"})["verdict"] == "runtime_error"
    assert sanitize_failure("junk")["verdict"] == "runtime_error"
    ok = sanitize_failure({"verdict": "compile_error", "code": "SYNTAX_ERROR"})
    assert (ok["verdict"], ok["code"]) == ("compile_error", "SYNTAX_ERROR")


def test_source_kernel_names_and_judge_side_attribution():
    code = ('import triton\nimport triton.language as tl\n'
            'from torch.utils.cpp_extension import load_inline\n'
            '@triton.autotune(configs=[], key=[])\n@triton.jit\ndef tk(x):\n    pass\n'
            '@triton.jit\ndef tk2(x):\n    pass\n'
            'def helper():\n    pass\n'
            'CUDA = "__global__ void my_cuda_kernel(float* x) {}"\n'
            'ext = load_inline("e", cpp_sources=[""], cuda_sources=[CUDA], functions=["fwd"])\n')
    names = profiling.source_kernel_names(code)
    assert names == {"tk", "tk2", "my_cuda_kernel", "fwd"}
    assert profiling.source_kernel_names("def (:") == set()
    sent = profiling.sanitize_profile({
        "kernels": [{"name": "tk", "device_us": 30.0, "cpu_us": 0, "calls": 3, "custom": True},
                    {"name": "void my_cuda_kernel(float*)", "device_us": 10.0, "cpu_us": 0,
                     "calls": 3, "custom": False},
                    {"name": "ampere_sgemm_128x64_nn", "device_us": 60.0, "cpu_us": 0,
                     "calls": 3, "custom": True}],  # a forged claim
        "custom_device_us": 100.0, "total_device_us": 100.0, "iterations": 3,
        "method": "cuda_profiler"})
    p = profiling.attribute_device_rows(sent, names)
    assert [r["custom"] for r in p["kernels"]] == [False, True, True]  # sorted by time
    assert (p["custom_device_us"], p["total_device_us"]) == (40.0, 100.0)
    assert p["summary"].endswith("Coverage: 40.00%")


def test_send_deadline_when_the_peer_stops_reading(monkeypatch):
    import time
    from kgym_harness import channel
    from kgym_harness.channel import ChannelTimeout
    monkeypatch.setattr(channel, "SHM_MIN_BYTES", 1 << 40)  # bytes on the socket
    left, _right = _pair()
    left.deadline = time.monotonic() + 0.3
    with pytest.raises(ChannelTimeout):
        left.send({"cmd": "run"}, [torch.zeros(16 << 20, dtype=torch.uint8)])


def test_send_to_a_dead_peer():
    from kgym_harness.channel import PeerClosed
    left, right = _pair()
    right.close()
    with pytest.raises(PeerClosed):
        for _ in range(4):
            left.send({"cmd": "run"}, [torch.zeros(1 << 20, dtype=torch.uint8)])


def test_input_fingerprints():
    a = [torch.arange(6.0).reshape(2, 3), 3, torch.ones(2, dtype=torch.int64)]
    fa = loader.fingerprint(a)
    assert loader.fingerprints_match(fa, loader.fingerprint([t.clone() if isinstance(t, torch.Tensor)
                                                             else t for t in a]))
    assert not loader.fingerprints_match(fa, loader.fingerprint([a[0] + 1e-3, 3, a[2]]))
    assert not loader.fingerprints_match(fa, loader.fingerprint([a[0].reshape(3, 2), 3, a[2]]))
    assert not loader.fingerprints_match(fa, loader.fingerprint([a[0], 4, a[2]]))
    assert not loader.fingerprints_match(fa, loader.fingerprint([a[0], 3, a[2].int()]))
    assert not loader.fingerprints_match(fa, None) and not loader.fingerprints_match(fa, fa[:2])


def test_fingerprint_sums_in_float64_as_read():
    """loader.fingerprint's sums are float64 sums of the elements (taken
    without a float64 copy), whatever the dtype; non-finite and empty or
    complex tensors as before."""
    x = torch.full((1 << 20,), 1.0 + 2.0 ** -20)  # fp32 accumulation would lose the tail
    want = float(x.double().sum())
    assert loader.fingerprint([x])[0]["sum"] == pytest.approx(want, rel=1e-12)
    assert loader.fingerprint([torch.ones(4, dtype=torch.bool)])[0]["sum"] == 4.0
    assert loader.fingerprint(torch.tensor([0.5, 0.25], dtype=torch.float16)) == [
        {"shape": [2], "dtype": "float16", "sum": 0.75}]
    f = loader.fingerprint([torch.tensor([float("inf"), 1.0]), torch.empty(0),
                            torch.zeros(2, dtype=torch.cfloat)])
    assert [e["sum"] for e in f] == ["inf", 0.0, 0.0]


def test_infra_claims_only_from_the_load_reply():
    from kgym_harness.remote import sanitize_failure
    claim = {"verdict": "infra_error", "code": "INFRA_ERROR", "message": "TMPDIR"}
    assert sanitize_failure(claim)["verdict"] == "runtime_error"
    assert sanitize_failure(claim, allow_infra=True)["verdict"] == "infra_error"
    assert sanitize_failure(dict(claim, code="BAD_REQUEST"), allow_infra=True)["verdict"] \
        == "runtime_error"


def test_warm_spare_errors_are_kept_bounded():
    from kgym_harness.spare import _note_warm_error
    out: dict = {}
    _note_warm_error(out, "device_error", {"ok": True, "warm_error": "x" * 1000})
    _note_warm_error(out, "profiler_error", {"ok": True, "ms": 3.0})
    _note_warm_error(out, "other", ["not", "a", "reply"])
    assert out == {"device_error": "x" * 300}


def test_run_judge_keeps_the_channel_it_is_given(monkeypatch):
    """A warm spare's judge hands run_judge the channel its warm-up used
    (with the device regions both sides settled). run_judge once made a new
    Channel on the same fd instead: the settled regions were lost and two
    objects owned one descriptor."""
    import os
    from kgym_harness import judge
    made = []
    real = judge.Channel
    monkeypatch.setattr(judge, "Channel", lambda fd: made.append(fd) or real(fd))
    a, b = socket.socketpair()
    chan = real(a.detach())
    r, w = os.pipe()
    judge.run_judge({"not": "a task"}, chan.sock.fileno(), w, chan=chan)
    data = b""
    while True:
        part = os.read(r, 1 << 16)
        if not part:
            break
        data += part
    os.close(r)
    result = frame.decode_result(data)
    assert result["verdict"] == "infra_error" and result["error_code"] == "BAD_REQUEST"
    assert made == []
    b.close()


def test_outputs_match_agrees_with_compare_outputs():
    """compare.outputs_match (audit.degenerate's yes/no, settled on a sample
    when the answer is no) says what compare_outputs says, in every case:
    a difference the sample misses goes on to the full comparison."""
    base = torch.randn(300_000)
    off_sample = base.clone()
    off_sample[1] += 1.0  # the sample takes every 4th element: index 1 is not in it
    nan_both = base.clone()
    nan_both[::7] = float("nan")
    inf_got = base.clone()
    inf_got[5] = float("inf")
    cases = [
        (base, base.clone()), (base, base + 1e-9), (base, torch.randn(300_000)),
        (base, off_sample), (nan_both, nan_both.clone()), (nan_both, base), (base, inf_got),
        (base, base[:-1]), (base, base.double()), ((base, base[:10]), (base, base[:10] + 1)),
        ((base, base[:10]), (base.clone(), base[:10].clone())),
        (torch.arange(10), torch.arange(10)), (torch.arange(10), torch.arange(10) + 1),
        (torch.empty(0), torch.empty(0)), (3, 3), (3, 4),
    ]
    for e, g in cases:
        want = compare.compare_outputs(e, g, 1e-5, 1e-5) is None
        assert compare.outputs_match(e, g, 1e-5, 1e-5) is want, (e, g)


def test_cpustat_counts_cpu_run_queue_and_modules_since_the_mark():
    import sys

    from kgym_harness import cpustat
    cpustat.mark_fork()
    cpu0, runq0, mods0 = cpustat.sample()
    assert mods0 == 0 and cpu0 > 0 and runq0 >= 0
    sum(i * i for i in range(300000))  # some CPU
    sys.modules["kgym_test_fake_module"] = type(sys)("kgym_test_fake_module")
    try:
        cpu1, runq1, mods1 = cpustat.sample()
    finally:
        del sys.modules["kgym_test_fake_module"]
    assert cpu1 > cpu0 and runq1 >= runq0 and mods1 == 1


def test_a_staged_task_that_never_gets_a_device_slot_is_infra_error():
    """Judge.wait_for_device (a staged task at its gate): 'D' on the task
    pipe lets it go on; a deadline reached while every slot is busy is the
    worker's failure, infra_error (retried), not the candidate's timeout;
    the pipe closed without 'D' is infra_error too. The pipe is closed."""
    import os
    import time
    from kgym_harness import judge

    def staged(write: bytes | None, left_s: float) -> tuple[dict, bool]:
        j = object.__new__(judge.Judge)
        r, w = os.pipe()
        if write is not None:
            os.write(w, write)
            os.close(w)
        j.gate_fd, j.result, j.phase = r, schema.new_result("t", "cpu"), "compile"
        j.chan = type("Chan", (), {"deadline": time.monotonic() + left_s})()
        t0 = time.monotonic()
        try:
            j.wait_for_device()
            stopped = False
        except judge.Stop:
            stopped = True
        if write is None:
            assert 0.15 <= time.monotonic() - t0 < 5
            os.close(w)
        assert j.gate_fd is None
        try:
            os.fstat(r)
            raise AssertionError("the gate pipe was left open")
        except OSError:
            pass
        return j.result, stopped

    res, stopped = staged(b"D", 5.0)
    assert not stopped and res["error"] is None
    res, stopped = staged(None, 0.2)
    assert stopped and res["verdict"] == "infra_error" and res["error_code"] == "INFRA_ERROR"
    assert res["error"]["phase"] == "gate" and "device slot" in res["error_message"]
    res, stopped = staged(b"", 5.0)
    assert stopped and res["verdict"] == "infra_error" and "dropped" in res["error_message"]
