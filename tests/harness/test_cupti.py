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
