"""The device profiler's choice (profiling.backend, profproc.child_wanted)
and what of cupti.py runs without a GPU: demangling, finding the library.
The recorder itself is proven on a GPU (bench/speed/cupti_direct.py, the
GPU red team)."""
from __future__ import annotations

from kgym_harness import cupti, profiling, profproc


def test_demangle_reads_cxx_names_as_kineto_shows_them():
    assert cupti.demangle("_Z11relu_kernelPKfPfi") == "relu_kernel(float const*, float*, int)"
    # C names (Triton's, cuBLAS's sm90_*) and names that are not symbols stay
    for name in ("_relu_kernel", "sm90_xmma_gemm_f32f32_tf32f32", "_Zbroken", ""):
        assert cupti.demangle(name) == name


def test_find_library_gives_a_path_or_none():
    got = cupti.find_library()
    assert got is None or "libcupti" in got


def test_backend_is_cupti_unless_torch_is_asked_for(monkeypatch):
    monkeypatch.delenv("KGYM_PROFILER", raising=False)
    assert profiling.backend() == "cupti"
    monkeypatch.setenv("KGYM_PROFILER", "anything")
    assert profiling.backend() == "cupti"
    monkeypatch.setenv("KGYM_PROFILER", "torch")
    assert profiling.backend() == "torch"
    assert profiling._direct() is None  # torch's profiler: no recorder made


def test_the_profiler_process_by_default_only_for_torchs_profiler(monkeypatch):
    monkeypatch.delenv("KGYM_PROFILE_PROC", raising=False)
    monkeypatch.delenv("KGYM_PROFILER", raising=False)
    assert not profproc.child_wanted("cuda:0")  # CUPTI starts in a millisecond
    assert not profproc.child_wanted("cpu")
    monkeypatch.setenv("KGYM_PROFILER", "torch")
    assert profproc.child_wanted("cuda:0")  # its first start costs seconds
    assert not profproc.child_wanted("cpu")
    monkeypatch.setenv("KGYM_PROFILE_PROC", "0")
    assert not profproc.child_wanted("cuda:0")
    monkeypatch.delenv("KGYM_PROFILER")
    monkeypatch.setenv("KGYM_PROFILE_PROC", "1")
    assert profproc.child_wanted("cuda:0") and not profproc.child_wanted("cpu")
    monkeypatch.setenv("KGYM_PROFILE_PROC", "cpu")
    assert profproc.child_wanted("cpu")


class _FakeTrace:
    """Stands in for cupti.KernelTrace: what CUPTI would have recorded."""

    def __init__(self, rows=None, fail_start=False, fail_stop=False):
        self.rows, self.fail_start, self.started = rows or [], fail_start, 0
        self.fail_stop = fail_stop

    def start(self):
        if self.fail_start:
            raise cupti.CuptiError("CUPTI enable: 39 another subscriber")
        self.started += 1

    def stop(self):
        if self.fail_stop:
            raise cupti.CuptiError("CUPTI flush: 7 buffer lost")
        return list(self.rows)


def _profile(monkeypatch, trace):
    monkeypatch.setattr(profiling, "_direct", lambda: trace)
    calls = []
    src = "__global__ void my_relu(float* y, int n) {}"
    return profiling.profile_cuda(lambda a: calls.append(a), lambda i: [i], 3, "cpu", src), calls


def test_the_recorders_rows_are_attributed_as_torchs_were(monkeypatch):
    rows = [("my_relu(float*, int)", 10.0), ("Memcpy HtoD (Pageable -> Device)", 5.0),
            ("sm90_xmma_gemm_f32f32", 30.0), ("my_relu(float*, int)", 10.0)]
    prof, calls = _profile(monkeypatch, _FakeTrace(rows))
    assert len(calls) == 3 and prof["method"] == "cuda_profiler"
    got = {r["name"]: (r["device_us"], r["calls"], r["custom"]) for r in prof["kernels"]}
    assert got == {"my_relu(float*, int)": (20.0, 2, True),
                   "sm90_xmma_gemm_f32f32": (30.0, 1, False)}  # copies never count
    assert abs(prof["coverage"] - 0.4) < 1e-9
    assert "torch_profiler" not in prof["detail_ms"]


def test_a_recorder_that_cannot_start_falls_back_to_torchs(monkeypatch):
    monkeypatch.setattr(profiling, "_DIRECT_FAILED", "")
    prof, calls = _profile(monkeypatch, _FakeTrace(fail_start=True))
    assert len(calls) == 3  # profiled once, under torch's profiler
    assert prof["detail_ms"]["cupti_failed"] == 1.0 and prof["detail_ms"]["torch_profiler"] == 1.0
    assert "another subscriber" in profiling._DIRECT_FAILED


def test_a_recorder_that_fails_at_stop_counts_host_times_once(monkeypatch):
    """The calls ran once under the failed recorder and once under torch's:
    a row's host time is the second run's alone."""
    monkeypatch.setattr(profiling, "_DIRECT_FAILED", "")
    row = "my_relu(float*, int)"
    monkeypatch.setattr(profiling, "_torch_events",
                        lambda call, arg_sets, device, lap, detail:
                        [(row, 10.0)] * len([call(a) for a in arg_sets]))

    def call(args):
        profiling.RECORDER.add_time("my_relu", 1000)  # 1 us of host work a call
    monkeypatch.setattr(profiling, "_direct", lambda: _FakeTrace(fail_stop=True))
    src = "__global__ void my_relu(float* y, int n) {}"
    prof = profiling.profile_cuda(call, lambda i: [i], 3, "cpu", src)
    assert prof["detail_ms"]["cupti_failed"] == 1.0
    got = {r["name"]: r for r in prof["kernels"]}[row]
    assert got["calls"] == 3 and abs(got["cpu_us"] - 3.0) < 1e-9
