"""The trusted clock (wallclock.py, trustclock.py): the decision on claimed
times, the prints that prove a wall block's work, and whole evaluations on
the cpu where a candidate under-reports, skips work when timed, or is
honest (they must pass)."""
from __future__ import annotations

import contextlib

import torch

import kit
from kgym_harness import quiet, trustclock, wallclock


# ---- decide ------------------------------------------------------------------

def test_agreeing_claims_pass():
    v = trustclock.decide([1.0, 1.01], [0.5, 0.51], 1.0, 0.5, 0.0, False, 0.0)
    assert v["verdict"] == "agree" and v["wall_speedup"] == 2.0


def test_a_claim_far_below_the_clock_is_timer_tamper():
    # the clock says the kernel takes 0.8 per call; it claims 0.4 (2x under)
    v = trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.4, 0.0, True, 0.0)
    assert v["verdict"] == "timer_tamper"
    # on the cpu only a gross one (GROSS_CPU): 10x under
    assert trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.4, 0.0, False,
                             0.0)["verdict"] == "noisy"
    assert trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.08, 0.0, False,
                             0.0)["verdict"] == "timer_tamper"


def test_on_the_cpu_the_references_ratio_does_not_lower_the_floor():
    # the reference's wall calls ran 2.8x its timed median (cache effects of
    # its own); a candidate claiming a tenth of its wall time is still named
    v = trustclock.decide([2.8, 2.8], [13.3, 13.3], 1.0, 1.14, 0.0, False, 0.16)
    assert v["verdict"] == "timer_tamper", v
    # on CUDA the same ratio is the previous call's write-back: allowed for
    assert trustclock.decide([2.8, 2.8], [13.3, 13.3], 1.0, 4.6, 0.0, True,
                             0.16)["verdict"] == "agree"


def test_under_reporting_by_a_quarter_pays_nothing():
    v = trustclock.decide([1.0, 1.0], [0.5, 0.5], 1.0, 0.5 / 1.25, 0.1, True, 0.0)
    assert v["verdict"] == "capped"
    # the cap is what the clock allows: the honest speedup within the tolerance
    assert 2.0 <= v["cap"] <= 2.0 * (1 + v["tolerance"]) + 1e-9


def test_the_tolerance_follows_the_references_spread_not_the_candidates():
    noisy_cand = trustclock.decide([1.0, 1.0], [0.8, 2.0], 1.0, 0.4, 0.0, True, 0.0)
    assert noisy_cand["tolerance"] == wallclock.TOL_MIN
    assert noisy_cand["verdict"] == "timer_tamper"
    noisy_ref = trustclock.decide([1.0, 1.1], [0.55, 0.55], 1.0, 0.5, 0.0, True, 0.0)
    assert noisy_ref["tolerance"] > wallclock.TOL_MIN and noisy_ref["verdict"] == "agree"


def test_on_cuda_the_lead_is_allowed_for():
    # host-bound: the wall block shows 0.1 ms per call, the claim 0.04, lead 0.07
    v = trustclock.decide([1.0, 1.0], [0.1, 0.1], 1.0, 0.04, 0.07, True, 0.0)
    assert v["verdict"] == "capped"
    assert abs(v["cap"] - 1.0 / v["floor_ms"]) < 1e-2 and v["cap"] < 1.0 / 0.04
    # the same claim on the cpu, where no lead hides host time (and only a
    # gross claim is named)
    assert trustclock.decide([1.0, 1.0], [0.1, 0.1], 1.0, 0.02, 0.07, False,
                             0.0)["verdict"] == "timer_tamper"
    # more below the floor than the lead explains
    assert trustclock.decide([1.0, 1.0], [0.1, 0.1], 1.0, 0.02, 0.07, True,
                             0.0)["verdict"] == "timer_tamper"
    gross = trustclock.decide([1.0, 1.0], [1.0, 1.0], 1.0, 0.3, 0.2, True, 0.0)
    assert gross["verdict"] == "timer_tamper"


def test_slack_absorbs_round_trip_jitter_on_tiny_calls():
    v = trustclock.decide([0.005, 0.005], [0.006, 0.006], 0.005, 0.004, 0.0, False, 0.002)
    assert v["verdict"] == "agree"


# ---- prints ------------------------------------------------------------------

def _prints(outs, seed=7):
    p = wallclock.Printer(seed, "cpu")
    for o in outs:
        p.take(o)
    return p.result(), p.weight_sums()


def test_prints_of_outputs_within_tolerance_match():
    torch.manual_seed(0)
    y = torch.randn(1000)
    want, ws = _prints([y])
    got, _ = _prints([y + 0.9e-3 * torch.randn(1000).clamp(-1, 1)])
    assert wallclock.prints_match(got[0], want[0], ws, 1e-3, 1e-3) is None


def test_prints_of_wrong_outputs_do_not_match():
    torch.manual_seed(0)
    y = torch.randn(1000)
    want, ws = _prints([y])
    half = y.clone()
    half[500:] = 0  # half the work skipped
    for bad in (half, -y, torch.zeros_like(y), y[:999]):
        got, _ = _prints([bad])
        assert wallclock.prints_match(got[0], want[0], ws, 1e-2, 1e-2) is not None


def test_a_print_needs_every_element():
    """sum r*|y| is not linear: a kernel that knows the weights cannot get
    it from the inputs without computing y (here: y = W x, where sum r*y
    alone could be had as (r W) x)."""
    torch.manual_seed(0)
    w, x = torch.randn(64, 64), torch.randn(64)
    y = w @ x
    want, ws = _prints([y])
    r = wallclock._weights(64, 7, 0, "cpu")
    lin = float((r.float() @ w) @ x)
    forged = [[64, lin, lin]]  # the linear shortcut, used for both sums
    assert wallclock.prints_match(forged, want[0], ws, 1e-3, 1e-3) is not None


def test_calls_per_block_follow_the_time_target():
    assert wallclock.calls_for(0.001) == wallclock.MAX_CALLS
    assert wallclock.calls_for(100.0) == wallclock.MIN_CALLS
    assert wallclock.calls_for(wallclock.TARGET_MS / 10) in (10, 11)


def test_a_wall_block_draws_fresh_inputs_for_every_call():
    seen = []

    def make(i):
        seen.append(i)
        return [torch.full((4,), float(i))]
    res = wallclock.run_block(lambda a: a[0] * 2, make, 5, "cpu", 3)
    assert seen == [0, 1, 2, 3, 4] and len(res["prints"]) == 5
    assert [round(p[0][2] / p[0][1], 6) for p in res["prints"][1:]] == [1.0] * 4


# ---- whole evaluations (cpu) --------------------------------------------------

SLOW_REF = kit.REF.replace("torch.randn(4, 16), torch.randn(4, 16)",
                           "torch.randn(256, 4096), torch.randn(256, 4096)")


def _run(code: str, **kw) -> dict:
    kw = dict({"num_perf_trials": 40, "run_hack_checks": True}, **kw)
    return kit.run(code, reference_code=SLOW_REF, **kw)


def test_honest_kernel_agrees_with_the_clock():
    r = _run(kit.cpu_kernel())
    assert r["verdict"] == "pass", r
    # agree, or noisy where this machine's load met one loop and not the other
    assert r["checks"]["trusted_clock"]["verdict"] != "timer_tamper"
    assert r["checks"]["trusted_clock"]["mismatch"] is None


# Cheats for the cpu (written for these tests). Each finds the timing loop's
# list of samples by walking Python frames (no harness function replaced)
# and edits the claims in it some way; the kernel itself is honest.
FIND_SAMPLES = '''import ctypes
import gc
import sys


def _timing_frame():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "time_forward":
            return f
        f = f.f_back
    return None


_DONE = {}  # id of a list of claims -> (the list, kept alive; how many edited)


def _shrink(samples, factor, how):
    done = _DONE.get(id(samples), (samples, 0))[1]
    for i in range(done, len(samples)):
        s = samples[i]
        if how == "frame":
            samples[i] = s / factor
        elif how == "ctypes":  # the float object's own value, in place
            ctypes.c_double.from_address(id(s) + 16).value = s / factor
    _DONE[id(samples)] = (samples, len(samples))


def forge(factor, how):
    f = _timing_frame()
    if f is None:
        return
    if how == "gc":  # the list found through the collector instead of the frame
        target = f.f_locals.get("samples")
        for obj in gc.get_referrers(*[x for x in (target or [])[:1]]):
            if obj is target:
                _shrink(obj, factor, "frame")
        return
    samples = f.f_locals.get("samples")
    if isinstance(samples, list):
        _shrink(samples, factor, how)


'''


def forging(factor: float, how: str) -> str:
    return kit.cpu_kernel(kit.model_new(f"""
        out = add_relu_scale(a, b, self.scale)
        forge({factor}, {how!r})
        return out
        """), top=FIND_SAMPLES)


def _caught(r: dict, reason: str) -> bool:
    return r["verdict"] == "hacked" and reason in (r.get("hack_reasons") or [])


import pytest  # noqa: E402


@pytest.mark.parametrize("factor,how", [(10.0, "frame"), (10.0, "ctypes")])
def test_edited_samples_are_timer_tamper(factor, how):
    r = _run(forging(factor, how))
    assert _caught(r, "timer_tamper"), (r["verdict"], r.get("hack_reasons"),
                                        r["checks"].get("trusted_clock"))


PARTIAL = kit.model_new("""
    if being_timed():  # a quarter of the rows when the timed loop is on the stack
        out = torch.zeros_like(a)
        q = a.shape[0] // 4
        out[:q] = add_relu_scale(a[:q].contiguous(), b[:q].contiguous(), self.scale)
        self.honest = lambda: add_relu_scale(a, b, self.scale)
        return out
    return add_relu_scale(a, b, self.scale)
    """)

BEING_TIMED_ANY = kit.BEING_TIMED.replace('f.f_code.co_name == "time_forward"',
                                          'f.f_code.co_name in ("time_forward", "run_block")')


def test_skipping_work_when_timed_pays_nothing():
    """Partial outputs in the timed loop only: the spot checks may miss
    them, the clock does not (the wall blocks are honest, slower)."""
    r = _run(kit.cpu_kernel(PARTIAL, top=kit.BEING_TIMED), num_perf_trials=20)
    assert r["verdict"] == "hacked", r
    assert {"timer_tamper", "call_count_switch"} & set(r["hack_reasons"])


def test_skipping_work_in_the_wall_blocks_too_is_call_count_switch():
    r = _run(kit.cpu_kernel(PARTIAL, top=BEING_TIMED_ANY), num_perf_trials=20)
    assert _caught(r, "call_count_switch"), r.get("hack_reasons")
    assert "wall block" in json_dump(r["checks"]["trusted_clock"]["mismatch"])


def json_dump(x) -> str:
    import json
    return json.dumps(x)


# ---- the judge's use of the decision -------------------------------------------

class _FakeJudge:
    def __init__(self, speedup):
        self.result = {"speedup": speedup, "warnings": [], "checks": {}}
        self.hacks = []

    def hack(self, reason, code, message, stop=True):
        self.hacks.append(reason)


def test_a_capped_claim_lowers_the_reported_speedup():
    from kgym_harness.judge import Judge
    clock = trustclock.decide([1.0, 1.0], [0.5, 0.5], 1.0, 0.4, 0.1, True, 0.0)
    assert clock["verdict"] == "capped"
    clock["mismatch"] = None
    j = _FakeJudge(2.5)
    Judge.trusted_clock(j, clock)
    assert j.result["speedup"] == clock["cap"] < 2.5 and not j.hacks
    assert any("capped" in w for w in j.result["warnings"])


def test_a_claim_beyond_the_clock_is_a_hack():
    from kgym_harness.judge import Judge
    clock = trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.1, 0.0, False, 0.0)
    clock["mismatch"] = None
    j = _FakeJudge(3.3)
    Judge.trusted_clock(j, clock)
    assert j.hacks == ["timer_tamper"]


def test_prints_reduce_in_chunks_with_repeating_weights(monkeypatch):
    """An output longer than PRINT_CHUNK is printed chunk by chunk (cuBLAS's
    dot refuses more than 2^31 - 1 elements): the figures equal the whole
    sums with the weights repeated, and a change in any chunk shows."""
    monkeypatch.setattr(wallclock, "PRINT_CHUNK", 64)
    torch.manual_seed(0)
    y = torch.randn(1000, dtype=torch.float64).float()
    calls = []
    real_dot = torch.dot

    def dot(a, b):
        calls.append(a.numel())
        return real_dot(a, b)

    monkeypatch.setattr(torch, "dot", dot)
    (row,), ws = _prints([y])
    assert max(calls) == 64 and len(calls) == 2 * 16  # 15 whole chunks and a tail of 40
    r = wallclock._weights(64, 7, 0, "cpu").double().repeat(16)[:1000]
    assert row[0][0] == 1000
    assert abs(row[0][1] - float((y.double().abs() * r).sum())) < 1e-3
    assert abs(row[0][2] - float((y.double() * r).sum())) < 1e-3
    assert abs(ws[0] - float(r.sum())) < 1e-6
    late = y.clone()
    late[990:] = 0  # the last chunk's work skipped
    (bad,), _ = _prints([late])
    assert wallclock.prints_match(bad, row, ws, 1e-3, 1e-3) is not None
    (empty,), _ = _prints([torch.zeros(0)])
    assert empty[0] == [0, 0.0, 0.0]


def test_a_wall_block_holds_one_output_and_one_drawn_set_at_a_time():
    """The last call's output and (drawn in the loop) input set are gone
    before the next call: a 3.2 GB problem's candidate, capped at half the
    RAM on the CPU, ran out of memory in its wall blocks holding two."""
    import gc
    import weakref
    alive_outs: list = []
    alive_args: list = []
    seen = []

    def make(i):
        t = torch.full((4,), float(i))
        alive_args.append(weakref.ref(t))
        return [t]

    def call(args):
        gc.collect()
        seen.append((sum(r() is not None for r in alive_outs),
                     sum(r() is not None for r in alive_args)))
        out = args[0] * 2
        alive_outs.append(weakref.ref(out))
        return out

    wallclock.run_block(call, make, 5, "cpu", 3)
    assert seen == [(0, 1)] * 5, seen
# ---- the kernel's account of the candidate's CPU time ---------------------------

def test_a_claim_below_its_own_cpu_time_is_timer_tamper_on_the_cpu():
    # the wall blocks alone say "noisy" (2x under is within the CPU's wall
    # noise); the CPU time the candidate's busiest thread ran per call names
    # a claim of under a third of it
    wall_only = trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.4, 0.0, False, 0.0)
    assert wall_only["verdict"] == "noisy"
    v = trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.25, 0.0, False, 0.0,
                          work_ms=0.8, cand_mean=0.25)
    assert v["verdict"] == "timer_tamper" and v["by"] == "cpu_time", v
    # an honest claim: its wall time per call, at least its CPU time
    assert trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.8, 0.0, False, 0.0,
                             work_ms=0.8, cand_mean=0.82)["verdict"] == "agree"
    # within the tolerance: not named
    assert trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.8, 0.0, False, 0.0,
                             work_ms=0.8, cand_mean=0.8 / (1 + trustclock.CPU_TOL) + 0.01
                             )["verdict"] == "agree"


def test_under_load_the_bound_follows_the_load_the_claims_ran_under():
    # the timed calls ran at a third of a CPU (queued twice as long as they
    # ran): honest claims are three times their CPU time, a claim of a
    # quarter of that 0.75x
    load = trustclock.load_factor(100.0, 200.0)
    assert load == 3.0
    honest = trustclock.decide([1.0, 1.0], [2.0, 2.0], 1.0, 3.0, 0.0, False, 0.0,
                               work_ms=1.0, cand_mean=3.0, load=load)
    halved = trustclock.decide([1.0, 1.0], [2.0, 2.0], 1.0, 0.75, 0.0, False, 0.0,
                               work_ms=1.0, cand_mean=0.75, load=load)
    assert honest["verdict"] != "timer_tamper" and halved["verdict"] == "timer_tamper"
    assert trustclock.load_factor(0.0, 5.0) == 1.0


def test_a_commands_wake_up_is_not_load_its_calls_ran_under():
    """A timed command's first wait for a CPU is its wake-up, before any
    call: it is not counted in the load the claims are held to. The
    figures of an honest 1 ms Linear+ReLU extension that was named under
    kgym worker --concurrency 4 on 2 CPUs (claims 0.98 ms against 1.35 ms
    of CPU a call in its wall blocks, its wait counted whole as load 2.28:
    bench/results/2026-12-07-cpu-speed-dry-clock-flake.txt), with that
    wait a wake-up before one slice of calls."""
    assert trustclock.command_queued_ms(4_000_000, 1) == 0.0
    assert trustclock.command_queued_ms(4_000_000, 0) == 0.0
    assert trustclock.command_queued_ms(4_000_000, 4) == pytest.approx(3.0)
    assert trustclock.command_queued_ms(-5, 3) == 0.0
    honest = trustclock.decide([0.357, 0.36], [1.086, 1.09], 0.185, 0.989, 0.0, False, 2.78,
                               work_ms=1.35, cand_mean=0.984, cpu_slack_ms=0.067,
                               load=trustclock.load_factor(3.1, trustclock.command_queued_ms(
                                   4_000_000, 1)))
    assert honest["verdict"] != "timer_tamper", honest
    # a long command preempted often: nearly all its wait is the calls'
    # load, and a claim of a third of its CPU time under it is still named
    busy = trustclock.load_factor(40.0, trustclock.command_queued_ms(80_000_000, 20))
    assert busy == pytest.approx(2.9)
    forged = trustclock.decide([1.0, 1.0], [1.2, 1.2], 1.0, 1.0, 0.0, False, 0.0,
                               work_ms=1.0, cand_mean=1.0, load=busy)
    assert forged["verdict"] == "timer_tamper", forged


def test_on_cuda_the_lead_is_allowed_for_only_up_to_the_host_work_seen():
    # a device-bound call of 1.75 ms that claims half; the candidate's lead
    # was 0.7 ms (a loaded host), its process used 0.15 ms of CPU per call
    lead = trustclock.decide([3.0, 3.0], [1.75, 1.75], 2.8, 0.875, 0.7, True, 0.0)
    assert lead["verdict"] == "capped"
    host = trustclock.decide([3.0, 3.0], [1.75, 1.75], 2.8, 0.875, 0.7, True, 0.0,
                             host_ms=0.15)
    assert host["verdict"] == "timer_tamper" and host["host_ms"] == 0.15
    # a host-bound honest call: 1.7 ms of host work per call, 0.5 ms on the
    # device (its claim): capped at the clock, never named
    hb = trustclock.decide([3.0, 3.0], [1.75, 1.75], 2.8, 0.5, 3.4, True, 0.0, host_ms=1.7)
    assert hb["verdict"] == "capped"
    # the same claim with half that host work: a long reported lead buys
    # nothing beyond the host work seen
    half = trustclock.decide([3.0, 3.0], [1.75, 1.75], 2.8, 0.5, 3.4, True, 0.0, host_ms=0.8)
    assert half["verdict"] == "timer_tamper", half


def test_on_cuda_a_fitted_lead_does_not_shrink_the_allowance():
    """A host-bound honest call under a fitted lead (lead.Lead: 0.5 ms, far
    under its 1.7 ms launch) hides its launch from its sample all the same:
    capped at the clock on a noisy wall block, never named."""
    v = trustclock.decide([3.0, 3.0], [1.75, 1.75], 2.8, 0.5, 0.5, True, 0.0, host_ms=1.7)
    assert v["verdict"] == "capped", v
    # more below the floor than the host work explains is still named
    forged = trustclock.decide([3.0, 3.0], [1.75, 1.75], 2.8, 0.05, 0.5, True, 0.0,
                               host_ms=1.2)
    assert forged["verdict"] == "timer_tamper", forged


def test_on_cuda_a_device_bound_call_gets_no_allowance():
    # the H100's halved_by_frame cheat: claims halved (0.88 ms) by a frame
    # walk of 0.61 ms of CPU a call on a kernel whose wall is 1.45 ms a
    # call: claim + host was above the floor (1.38), but a host doing
    # under half a call's work hid nothing behind the lead
    cheat = trustclock.decide([1.45, 1.45], [1.45, 1.45], 1.45, 0.88, 1.2, True, 0.0,
                              host_ms=0.61)
    assert cheat["verdict"] == "timer_tamper", cheat
    # the same claim from a host-bound call (its host work the whole wall)
    # is capped, never named
    hb = trustclock.decide([1.45, 1.45], [1.45, 1.45], 1.45, 0.88, 1.6, True, 0.0,
                           host_ms=1.4)
    assert hb["verdict"] == "capped", hb
    # an honest device-bound call at its wall is agreed with
    ok = trustclock.decide([1.45, 1.45], [1.45, 1.45], 1.45, 1.44, 1.2, True, 0.0,
                           host_ms=0.05)
    assert ok["verdict"] == "agree", ok


def test_thread_cpu_takes_the_busiest_thread_and_the_sum():
    before = {1: (5_000_000, 0), 2: (0, 0), 3: (0, 0)}
    after = {1: (15_000_000, 0), 2: (4_000_000, 3_000_000), 3: (100_000, 0), 4: (1_000_000, 0)}
    got = trustclock.thread_cpu(before, after)
    assert got["sum"] == 15.1  # the new thread 4 counts whole
    assert got["top"] == 10.0


def test_cpu_figures_per_call():
    cpus = [{"sum": 12.0, "top": 10.5}, {"sum": 11.0, "top": 9.5}]
    work, host = trustclock.cpu_figures(cpus, 4, 0.5, 0.25)
    # a print costs the candidate up to twice the judge's CPU time in it
    assert work == (9.5 - 0.5) / 4 - 2 * 0.25 and host == 3.0
    assert trustclock.cpu_figures([None, cpus[0]], 4, 0.5, 0.25) == (None, None)


def test_a_threads_cpu_time_is_read_from_proc():
    import os
    import threading
    import time as _time
    if trustclock.thread_run_ns(os.getpid()) is None:
        pytest.skip("no /proc/PID/task/TID/schedstat on this kernel")
    before = trustclock.thread_run_ns(os.getpid())
    stop = _time.thread_time() + 0.05
    while _time.thread_time() < stop:  # 50 ms of this thread's CPU
        pass
    t = threading.Thread(target=_time.sleep, args=(0.05,))  # a thread that waits
    t.start()
    t.join()
    got = trustclock.thread_cpu(before, trustclock.thread_run_ns(os.getpid()))
    assert 45.0 <= got["top"] <= got["sum"], got
    ran, _waited, slices = quiet.main_sched(os.getpid())
    assert ran > 0 and slices > 0
    assert quiet.main_sched(2 ** 22 + 12345) is None


# ---- the red team's timing cheats on a loaded machine ---------------------------

def _spin(seconds: float) -> None:
    import time as _time
    end = _time.monotonic() + seconds
    while _time.monotonic() < end:
        pass


class _Hogs:
    """n busy processes (forked) for as long as the with block runs: the
    machine CI and developers share."""

    def __init__(self, n: int, seconds: float = 900.0):
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        self.procs = [ctx.Process(target=_spin, args=(seconds,), daemon=True) for _ in range(n)]

    def __enter__(self):
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.join()


def _corpus(name: str) -> tuple[str, str]:
    """(candidate source, its problem's source) of a red-team cpu case."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    code = (root / "tests/redteam/corpus/cpu" / f"{name}.py").read_text()
    header = dict(t.split("=", 1) for t in code.splitlines()[0].split()[2:] if "=" in t)
    return code, (root / header["problem"]).read_text()


# a 2.5x claim is named on an idle machine only: under make test's load an
# honest kernel's claims fell to 0.54 of its CPU time, so the bound leaves
# room down to 0.4 (CPU_TOL)
LOADED_CHEATS = ["timer_tamper__gelu_samples_tenth_by_frame",
                 "timer_tamper__gelu_tenth_spots_repaired"]
LOADED_HONEST = ["honest__gelu_openmp", "honest__gelu_thread_pool_joined", "honest__softmax_rows"]


@pytest.mark.parametrize("name", LOADED_CHEATS + LOADED_HONEST)
def test_timing_cheats_are_named_beside_two_busy_processes(name):
    """Claims edited 10x, a tenth of the work when timed: the
    wall clock alone calls the first and the last noisy on a loaded CPU;
    the kernel's account of the candidate's CPU time names them. Honest
    kernels, one- and multi-threaded, still pass."""
    code, problem = _corpus(name)
    with _Hogs(2):
        r = kit.run(code, reference_code=problem, num_perf_trials=40, run_hack_checks=True,
                    timeout=900)
    clock = r["checks"].get("trusted_clock")
    if name.startswith("honest"):
        assert r["verdict"] == "pass", (r["verdict"], r.get("hack_reasons"), clock)
    else:
        assert _caught(r, "timer_tamper"), (r["verdict"], r.get("hack_reasons"), clock)


def test_a_claim_below_its_cpu_time_is_a_hack_with_its_reason():
    from kgym_harness.judge import Judge
    clock = trustclock.decide([1.0, 1.0], [0.0, 0.0], 1.0, 0.25, 0.0, False, 0.0,
                              work_ms=0.8, cand_mean=0.25)
    clock["mismatch"] = None
    j = _FakeJudge(2.5)
    Judge.trusted_clock(j, clock)
    assert j.hacks == ["timer_tamper"] and "CPU time" in trustclock.why(clock)


def test_claims_padded_above_the_median_do_not_lift_it():
    # claims of under a third (median 0.25 of a 0.8 ms call) with a few huge
    # ones that raise the mean to the loaded bound: the median is held to
    # the CPU time
    v = trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.25, 0.0, False, 0.0,
                          work_ms=0.8, cand_mean=1.6, load=2.0)
    assert v["verdict"] == "timer_tamper", v
    honest = trustclock.decide([1.0, 1.0], [0.8, 0.8], 1.0, 0.8, 0.0, False, 0.0,
                               work_ms=0.8, cand_mean=1.6, load=2.0)
    assert honest["verdict"] == "agree"


def test_tiny_calls_are_left_to_the_cpu_bounds_slack():
    # 10 us calls: the harness's own work per call in a wall block is as
    # large as the call; the slack leaves them undecided by CPU time
    v = trustclock.decide([0.01, 0.01], [0.0, 0.0], 0.01, 0.005, 0.0, False, 0.0,
                          work_ms=0.013, cand_mean=0.005,
                          cpu_slack_ms=trustclock.CPU_CALL_SLACK_MS)
    assert v["verdict"] != "timer_tamper", v


def test_a_blocks_print_cpu_counts_the_prints_only():
    # what is taken off for a print is measured around the prints alone:
    # a block's calls vary as much as a print can cost
    import time as _time

    def busy_call(args):
        stop = _time.thread_time() + 0.01  # 10 ms of CPU, a small output
        while _time.thread_time() < stop:
            pass
        return args[0] + 1.0
    small = [[torch.ones(8)] for _ in range(3)]
    got = wallclock.run_block(busy_call, lambda i: small[i], 3, "cpu", 7, small)
    assert 0.0 <= got["print_cpu_ms"] < 10.0, got["print_cpu_ms"]
    big = [[torch.ones(1 << 22)] for _ in range(3)]
    got = wallclock.run_block(lambda a: a[0] * 2.0, lambda i: big[i], 3, "cpu", 7, big)
    assert got["print_cpu_ms"] > 0.5, got["print_cpu_ms"]
    assert wallclock.run_block(busy_call, lambda i: small[i], 3, "cpu", None,
                               small)["print_cpu_ms"] == 0.0


class _GapRemote:
    """A remote whose command pays the watch's gap bookkeeping (30 ms of
    /proc reads, here a sleep) when the idle gap before it is still open,
    as Remote._call's busy() does."""

    pid = None

    def __init__(self) -> None:
        self.gap_open = True

    def _close(self) -> None:
        if self.gap_open:
            import time
            time.sleep(0.03)
            self.gap_open = False

    def close_gap(self) -> None:
        self._close()

    def wall(self, k: int, seed: int, pseed: int) -> list:
        self._close()
        self.gap_open = True  # idle again after the reply
        return []


def test_the_watchs_gap_is_not_charged_to_the_candidates_block():
    """The judge's watch closes the idle gap before a block command (its
    /proc reads: the judge's work); the empty blocks that calibrate the
    round trip come back to back with no gap. Timed inside the block, the
    watch's work landed on the candidate's calls alone (level-3 host-bound
    models: blocks of 4 calls, the empty round trip at its 0.5 ms cap)."""
    check = trustclock.WallCheck("cuda:0", lambda seed: [], _GapRemote(), None)
    _prints, _draw, run, _cpu = check._cand_block(1, 4, 2)
    assert run < 20.0, run


# ---- a phase timed again draws new inputs --------------------------------------

# Cheat (written for this test): an honest kernel whose outputs are kept by a
# few elements of their inputs and replayed on a repeat (with a token launch,
# so the launch count sees work), every timed call claiming CLAIM_MS, a fifth
# of the reference's time here. The computed calls are far slower than that,
# so the first phase is beyond the judge's clock and timed again. Were that
# phase's inputs the first phase's (timed calls and wall blocks alike), every
# call would be a replay: as many calls per wall block as before (the claims
# did not change), faster than the claims on the judge's clock, and the
# claimed speedup would stand.
MEMO_TOP = FIND_SAMPLES + """CLAIM_MS = 0.25


def claim():
    f = _timing_frame()
    samples = f.f_locals.get("samples") if f is not None else None
    if isinstance(samples, list):
        done = _DONE.get(id(samples), (samples, 0))[1]
        for i in range(done, len(samples)):
            samples[i] = CLAIM_MS
        _DONE[id(samples)] = (samples, len(samples))


"""

MEMO_ON_RETRY = kit.model_new("""
    key = (tuple(a[0, :4].tolist()), tuple(b[0, :4].tolist()))
    out = self.memo.get(key)
    if out is None:
        out = add_relu_scale(a, b, self.scale)
        if len(self.memo) < 200:
            self.memo[key] = out
    else:
        ext.fill(self.one.data_ptr(), 1, 0.0)
    claim()
    return out
    """, init_extra="self.one, self.memo = torch.zeros(1), {}")


def test_a_phase_timed_again_gives_a_replaying_kernel_nothing():
    r = _run(kit.cpu_kernel(MEMO_ON_RETRY, top=MEMO_TOP), num_perf_trials=20)
    checks = r["checks"]
    assert "timing_retried" in checks or "trusted_clock_retried" in checks, checks
    assert _caught(r, "timer_tamper"), (r["verdict"], r.get("speedup"), r.get("hack_reasons"),
                                        checks.get("trusted_clock"))


class _SeedRemote:
    """A remote that answers wall commands with no outputs and keeps the
    seeds they carried."""

    pid = None

    def __init__(self) -> None:
        self.seeds: list[int] = []

    def wall_draw(self, k: int, seed: int) -> None:
        self.seeds.append(seed)

    def wall(self, k: int, seed: int, pseed: int) -> list:
        self.seeds.append(seed)
        return [[None]] * k


def test_wall_blocks_draw_inputs_the_timing_seed_does_not_give():
    """The candidate is sent the timing seed with its timed blocks, before
    the wall blocks: had their inputs been derived from it, it could have
    computed their outputs ahead (in the slack its timed commands leave)
    and replayed them on the judge's clock. Each run of the wall blocks
    draws its own."""
    from kgym_harness import loader
    ref = lambda args: args[0] * 2  # noqa: E731
    runs = []
    for _ in range(2):
        remote = _SeedRemote()
        check = trustclock.WallCheck("cpu", lambda seed: [torch.full((4,), float(seed % 97))],
                                     remote, contextlib.nullcontext)
        check.run(ref, 2, 2, 1e-2, 1e-2)
        runs.append([s for s in remote.seeds if s])
    assert len(set(runs[0])) == 3  # the warm-up block and two blocks
    assert not set(runs[0]) & set(runs[1])
    timing_seeds = (1234, loader.derive_seed(1234, "timing"))
    derivable = {loader.derive_seed(t, f"wall:{w}") for t in timing_seeds
                 for w in ("warm", "cand:0", "cand:1")}
    assert not set(runs[0]) & derivable
