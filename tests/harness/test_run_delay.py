"""quiet.run_delay_ns: the kernel's account of time a process's main thread
spent runnable but waiting for a CPU. The timer_tamper bound subtracts the
candidate's share of it from the judge's wall clock, so a loaded machine is
not read as a forged timing claim (a CI-like run at load 36 flagged an
honest-timing candidate timer_tamper)."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from kgym_harness import quiet


def _spin(seconds: float) -> None:
    os.sched_setaffinity(0, {0})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_run_delay_is_read_for_a_live_process_and_none_for_a_gone_one():
    v = quiet.run_delay_ns(os.getpid())
    if v is None:
        pytest.skip("no /proc/PID/schedstat on this kernel")
    assert isinstance(v, int) and v >= 0
    assert quiet.run_delay_ns(2 ** 22 + 12345) is None


def test_run_delay_grows_while_a_thread_waits_for_its_cpu():
    if quiet.run_delay_ns(os.getpid()) is None:
        pytest.skip("no /proc/PID/schedstat on this kernel")
    saved = os.sched_getaffinity(0)
    ctx = multiprocessing.get_context("fork")
    spinners = [ctx.Process(target=_spin, args=(1.5,)) for _ in range(2)]
    try:
        os.sched_setaffinity(0, {0})
        for p in spinners:
            p.start()
        time.sleep(0.1)
        before = quiet.run_delay_ns(os.getpid())
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # runnable all along, sharing CPU 0 with two spinners
            pass
        after = quiet.run_delay_ns(os.getpid())
    finally:
        os.sched_setaffinity(0, saved)
        for p in spinners:
            p.join()
    assert after - before > 100e6, (before, after)  # waited well over 0.1 s of the 0.5
