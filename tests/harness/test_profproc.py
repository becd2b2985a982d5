"""The profiler's own process (profproc.py): on the CPU with
KGYM_PROFILE_PROC=cpu (a GPU with torch's profiler by default), the profile is taken in a child
the candidate forked at its start, its start is over before the load
reply, and whatever goes wrong there (the child killed, the kernel failing
only there, no room on the device) the candidate profiles itself: no
verdict and no coverage depends on the child working."""
from __future__ import annotations

import os
import time

import kit
import pytest

from kgym_harness import profproc


@pytest.fixture
def child_mode(monkeypatch):
    monkeypatch.setenv("KGYM_PROFILE_PROC", "cpu")


def _run(code: str, **kw) -> dict:
    return kit.run(code, enable_profiling=True, **kw)


def _where(res: dict) -> float | None:
    return (res["timings"].get("profiling_detail") or {}).get("child")


def test_profile_is_taken_in_the_child_and_agrees(child_mode, monkeypatch):
    res = _run(kit.cpu_kernel())
    assert res["verdict"] == "pass", res["feedback"]
    assert _where(res) == 1.0, res["timings"]
    monkeypatch.setenv("KGYM_PROFILE_PROC", "0")
    here = _run(kit.cpu_kernel())
    assert here["verdict"] == "pass" and _where(here) == 0.0
    # the same kernel, the same figure (the extension is all of the work)
    assert abs(res["profile"]["coverage"] - here["profile"]["coverage"]) <= 0.1, (
        res["profile"]["coverage"], here["profile"]["coverage"])


def test_off_without_profiling_or_with_the_switch_off(monkeypatch):
    assert not profproc.child_wanted("cpu")  # the CPU's default: nothing to gain
    monkeypatch.setenv("KGYM_PROFILE_PROC", "1")
    assert profproc.child_wanted("cuda:0")
    monkeypatch.setenv("KGYM_PROFILE_PROC", "0")
    assert not profproc.child_wanted("cuda:0")
    monkeypatch.setenv("KGYM_PROFILE_PROC", "cpu")
    assert profproc.child_wanted("cpu")
    from kgym_harness.launcher import candidate_env
    assert "KGYM_PROFILE_CHILD" not in candidate_env("/tmp", "cpu", profiles=False)
    assert candidate_env("/tmp", "cpu", profiles=True)["KGYM_PROFILE_CHILD"] == "1"


def test_its_start_is_over_before_the_load_reply(child_mode, monkeypatch):
    """The child's start (CUPTI's, seconds of CPU on a GPU; a 4 s spin
    here) must end before the judge watches the candidate's processes for
    work after a reply (the reference's timing, long enough to be watched
    with this many trials): an honest kernel is not thread_injection."""
    monkeypatch.setenv("KGYM_PROFILE_CHILD_SPIN_S", "4")
    t0 = time.monotonic()
    res = _run(kit.cpu_kernel(), num_perf_trials=10000)
    assert res["verdict"] == "pass", (res["hack_reasons"], res["feedback"])
    assert _where(res) == 1.0
    assert time.monotonic() - t0 >= 4


KILLS_CHILD = kit.cpu_kernel(top=(
    "import os, signal, sys\n"
    "_pp = sys.modules.get('kgym_harness.profproc')\n"
    "if _pp is not None and _pp.CHILD is not None:\n"
    "    os.kill(_pp.CHILD.pid, signal.SIGKILL)\n"))

FAILS_IN_CHILD = kit.cpu_kernel(top=(
    "import sys\n"
    "_pp = sys.modules.get('kgym_harness.profproc')\n"
    "if _pp is not None and _pp.wanted() and _pp.CHILD is None:\n"
    "    raise RuntimeError('not in the profiler process')\n"))


@pytest.mark.parametrize("code", [KILLS_CHILD, FAILS_IN_CHILD], ids=["killed", "fails_there"])
def test_trouble_in_the_child_means_profiling_here(child_mode, code):
    res = _run(code)
    assert res["verdict"] == "pass", res["feedback"]
    assert _where(res) == 0.0, res["timings"]
    assert res["profile"]["num_custom_kernels"] >= 1  # profiled here, its kernel seen


def test_a_dying_candidate_is_seen_at_once_beside_its_child(child_mode):
    """The child holds none of the candidate's channel: the judge hears the
    candidate die, it does not wait for its timeout."""
    code = kit.cpu_kernel(kit.model_new("import os\nos._exit(3)"))
    t0 = time.monotonic()
    res = _run(code, timeout=60)
    assert res["verdict"] == "runtime_error", res["feedback"]
    assert "died" in (res.get("error_message") or ""), res.get("error_message")
    assert time.monotonic() - t0 < 30


def test_no_room_on_the_device_means_profiling_here(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (3 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 3 << 30)
    ok, why = profproc.fits("cuda:0")
    assert not ok and "MiB free" in why
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 1 << 30)
    assert profproc.fits("cuda:0") == (True, "")


def test_messages_are_framed_and_bounded():
    r, w = os.pipe()
    try:
        profproc._write_msg(w, {"ok": True, "n": 3})
        assert profproc._read_msg(r, time.monotonic() + 5) == {"ok": True, "n": 3}
        os.write(w, (profproc.MAX_MSG + 1).to_bytes(4, "big"))
        with pytest.raises(ValueError):
            profproc._read_msg(r, time.monotonic() + 5)
        with pytest.raises(TimeoutError):
            profproc._read_msg(r, time.monotonic() + 0.05)
        os.close(w)
        w = -1
        assert profproc._read_msg(r, time.monotonic() + 5) is None
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_source_already_written_is_not_rewritten(tmp_path):
    """The child loads from the candidate's files while the candidate may
    be importing them: writing the same text again must not truncate them."""
    from kgym_harness import loader
    path = loader.write_source(str(tmp_path), "k.py", "x = 1\n")
    before = os.stat(path)
    time.sleep(0.01)
    assert loader.write_source(str(tmp_path), "k.py", "x = 1\n") == path
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    loader.write_source(str(tmp_path), "k.py", "x = 2\n")
    assert open(path).read() == "x = 2\n"


def test_the_child_loads_while_the_candidate_does(child_mode):
    """The profile phase finds the kernel loaded in the child: it only
    warms up and profiles there (the load's time is in the load phase)."""
    res = _run(kit.cpu_kernel())
    assert res["verdict"] == "pass" and _where(res) == 1.0
    assert "profiler_proc_wait" in res["timings"]["load_detail"], res["timings"]["load_detail"]
    assert res["timings"]["profiling_detail"].get("child_load", 0) > 0, res["timings"]
