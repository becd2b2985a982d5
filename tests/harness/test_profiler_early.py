"""The profiler's first start in a pair forked for its task (candidate.py
_start_profiler_early, the worker's KGYM_PROFILER_EARLY=1 on a GPU): it
runs in a thread from the candidate's start, while the judge sets the task
up, and is over before load runs any code of the candidate's, so the
candidate's code and the quiescence checks never meet a thread of ours.
(CUPTI is the GPU's; here warm_profiler is replaced by a 0.4 s wait.)"""
from __future__ import annotations

import threading
import time

import pytest

from kgym_harness import candidate, profiling

REF = ("import torch\n"
       "class Model(torch.nn.Module):\n"
       "    def forward(self, x):\n"
       "        return x + 1\n"
       "def get_inputs():\n"
       "    return [torch.ones(4)]\n"
       "def get_init_inputs():\n"
       "    return []\n")
# the candidate's import records the threads it can see
KERNEL = ("import threading, torch\n"
          "SEEN = sorted(t.name for t in threading.enumerate())\n"
          "class ModelNew(torch.nn.Module):\n"
          "    def forward(self, x):\n"
          "        return x + 1\n")


@pytest.fixture
def slow_profiler(monkeypatch):
    done: list[float] = []

    def warm(dev: str) -> float:
        time.sleep(0.4)
        done.append(time.monotonic())
        return 400.0
    monkeypatch.setattr(profiling, "warm_profiler", warm)
    monkeypatch.setenv("KGYM_PROFILER_EARLY", "1")
    yield done
    candidate._PROF_EARLY.clear()


def _load(tmp_path, monkeypatch) -> tuple[dict, object]:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    state = candidate.CandidateState()
    state.workdir = candidate.make_workdir("kgym-cand-")
    reply, _ = candidate.cmd_load(state, {"device": "cpu", "backend": "cpu",
                                          "kernel_code": KERNEL, "reference_code": REF}, [])
    return reply, state


def test_it_is_over_before_the_candidates_code_runs(slow_profiler, tmp_path, monkeypatch):
    candidate._start_profiler_early("cuda:0")
    assert any(t.name == "kgym-profiler-early" for t in threading.enumerate())
    t0 = time.monotonic()
    reply, _ = _load(tmp_path, monkeypatch)
    assert reply["ok"], reply
    assert slow_profiler and slow_profiler[0] <= time.monotonic()
    import sys
    seen = sys.modules["kgym_kernel"].SEEN
    assert "kgym-profiler-early" not in seen, seen
    assert "profiler_early_wait" in reply["ms"], reply["ms"]
    assert time.monotonic() - t0 >= 0.3  # it waited for the rest of the 0.4 s


def test_off_without_the_workers_switch(slow_profiler, tmp_path, monkeypatch):
    monkeypatch.delenv("KGYM_PROFILER_EARLY")
    candidate._start_profiler_early("cuda:0")
    candidate._start_profiler_early(None)
    assert not candidate._PROF_EARLY and not slow_profiler
    monkeypatch.setenv("KGYM_PROFILER_EARLY", "1")
    candidate._start_profiler_early(None)  # no CUDA device: nothing to warm
    assert not candidate._PROF_EARLY
    reply, _ = _load(tmp_path, monkeypatch)
    assert reply["ok"] and "profiler_early_wait" not in reply["ms"], reply
