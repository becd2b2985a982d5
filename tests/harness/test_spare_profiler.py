"""The warm spares' profiler start (spare.spare_profiles): off unless
asked, and then in both processes, so that CUPTI's callbacks are on the
candidate's timed launches and the judge's reference alike."""
from __future__ import annotations

import threading
import time


def test_spares_leave_the_profiler_start_to_its_phase_unless_asked(monkeypatch):
    from kgym_harness import spare
    monkeypatch.delenv("KGYM_SPARE_PROFILER", raising=False)
    monkeypatch.setenv("KGYM_WARM_PROFILER", "1")
    assert spare.spare_profiles() is False
    monkeypatch.setenv("KGYM_SPARE_PROFILER", "0")
    assert spare.spare_profiles() is False
    monkeypatch.setenv("KGYM_SPARE_PROFILER", "1")
    assert spare.spare_profiles() is True


def test_the_profiler_part_starts_it_here_too(monkeypatch):
    """_warm_pair's profiler part: the candidate's start and this process's
    at once, both timed in the warm-up's report."""
    from kgym_harness import profiling, spare

    class Chan:
        def __init__(self):
            self.sent = []

        def send(self, msg):
            self.sent.append(msg)

        def recv(self):
            return {"ok": True}, []
    ran = []
    monkeypatch.setattr(profiling, "warm_profiler", lambda dev: ran.append(dev) or 1.0)
    chan = Chan()
    out: dict = {}
    spare._profiler_part(chan, out, "cuda:0")
    assert chan.sent == [{"cmd": "warm", "part": "profiler"}]
    assert ran == ["cuda:0"] and "profiler_judge_ms" in out and "profiler_ms" in out


def test_warm_in_thread_runs_the_start_and_survives_its_failure(monkeypatch):
    from kgym_harness import profiling
    seen = []

    def warm(dev):
        seen.append(dev)
        raise RuntimeError("CUPTI said no")
    monkeypatch.setattr(profiling, "warm_profiler", warm)
    th = profiling.warm_in_thread("cuda:0", "kgym-judge-profiler")
    assert isinstance(th, threading.Thread) and th.name == "kgym-judge-profiler"
    th.join(5)
    assert seen == ["cuda:0"] and not th.is_alive()
