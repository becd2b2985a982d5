"""The judge's side of the trusted clock (wallclock.py): wall blocks of
both sides inside the exclusive timing section, and the decision on the
candidate's claimed times (docs/harness-notes.md "The trusted clock").

Figures, all on the judge's clock (a wall block draws each call's inputs
right before it, calls, prints: wallclock.run_block):
  E   the empty call's round trip (a wall command of no calls), fastest of 3;
  D, w_r, P  per call, from the reference's blocks in the judge's process:
      the block's draws alone (D), draws and calls less D (w_r), and what
      the prints add to that (P), each measured in place (D and P: the
      least over the blocks);
  w_c (W - E) / k - D - P: W the judge's wall clock around the candidate's
      wall command, less the time its thread sat runnable waiting for a
      CPU (/proc, not the candidate's word).
Per side the fastest of ROUNDS blocks counts (a stall must hit every block).
The claimed speedup S = reference median / claimed kernel median; the
clock's S_w = w_r / w_c. S > S_w (1 + tol) is a disagreement (decide()).
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import torch

from . import lead, loader, quiet, timing, wallclock

EMPTY_CALLS = 3
EMPTY_MAX_MS = 0.5    # the most of a block taken off for the round trip
HOST_BOUND = 0.5      # CUDA: a call whose host work is below this share of the floor is
                      # device-bound, and its claim gets no allowance for a lead
GROSS_CPU = 4.0       # timer_tamper on the CPU: a claim this many times below the floor
CPU_TOL = 1.5         # timer_tamper on the CPU: a claim this far below its CPU time per call
CPU_CALL_SLACK_MS = 0.03  # per call: harness work in a wall block no claim holds (the
                          # candidate's hooks around its print's torch calls, the loop)
PRINT_CPU_FACTOR = 2.0  # a print's CPU taken off a candidate's block: this many times the
                        # judge's (all its threads); one print's CPU varies that much between
                        # blocks, and on some problems it exceeds the call's
VERIFY = 2            # calls of each candidate block whose prints the judge checks
JITTER_FACTOR = 4.0   # a block's slack: this many times the empty calls' spread,
SLACK_MIN_MS = 0.02   # plus this (ms per block)


def _now_ms() -> float:
    return time.perf_counter() * 1e3


def command_queued_ms(queued_ns: int, slices: int) -> float:
    """Of one timed command's wait for a CPU (ms), the part its calls ran
    under. Each time the thread is put on a CPU follows one wait; the
    first is its wake-up for the command, before any call, and is left
    out. The rest is taken as the calls' (preemptions; the draws' share
    too, which only raises the bound's load). More slices only raise the
    share: a kernel that yields often makes its own bound tighter."""
    if slices <= 1 or queued_ns <= 0:
        return 0.0
    return queued_ns * (slices - 1) / slices / 1e6


def load_factor(ran_ms: float, queued_ms: float) -> float:
    """How much longer than its CPU time a stretch of the candidate's main
    thread took while it was runnable: 1 + queued / ran (1 when unknown)."""
    return 1.0 + queued_ms / ran_ms if ran_ms > 0 else 1.0


def thread_run_ns(pid: int) -> dict[int, tuple[int, int]] | None:
    """{thread id: (ns it has run, ns it sat runnable waiting for a CPU)}
    for pid's live threads, by the kernel's account
    (/proc/PID/task/TID/schedstat: the candidate cannot write it); None
    when none can be read."""
    out = {}
    for tid in quiet.task_ids(pid):
        got = quiet.thread_sched(pid, tid)
        if got is not None:
            out[tid] = got
    return out or None


def thread_cpu(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> dict:
    """The CPU time between two thread_run_ns readings, in ms: "sum" over
    the threads, "top" the most any one thread ran. A thread new since
    before counts whole; one that ended in between is not seen (its time
    is lost, which only lowers both figures). A thread spinning at a
    barrier runs while it waits: under load its time grows as its calls'
    wall time does (decide() compares it with claims made under the load
    measured the same way)."""
    runs = [max(ran - before.get(tid, (0, 0))[0], 0) / 1e6 for tid, (ran, _w) in after.items()]
    return {"sum": round(sum(runs), 5), "top": round(max(runs, default=0.0), 5)}


def cpu_figures(cpus: list[dict | None], k: int, empty_top: float | None,
                print_ms: float) -> tuple[float | None, float | None]:
    """(work, host) per call from the candidate's CPU time over its wall
    blocks of k calls (thread_cpu of each); None without /proc.
    work: the busiest thread's CPU per call, less the empty command's (its
    round trip) and PRINT_CPU_FACTOR times the judge's print cost (print_ms:
    its CPU time in one call's print, all threads), the least over the blocks. One
    thread cannot run longer than the wall time of the calls it ran in,
    so an honest claim (a call's wall time) is not below it, however loaded
    the machine: waiting for a CPU is not CPU time.
    host: all threads' CPU per call, the most over the blocks. With the
    block's wait for the device sleeping (timing.sync_sleeping) it is the
    host's work: draws, launches, prints; what a call's launch can hide
    from its timed sample on CUDA (the lead) is at most that."""
    if k <= 0 or not cpus or any(c is None for c in cpus):
        return None, None
    e = empty_top or 0.0
    off = PRINT_CPU_FACTOR * print_ms
    work = min(max(c["top"] - e, 0.0) / k - off for c in cpus)  # type: ignore[index]
    host = max(c["sum"] / k for c in cpus)  # type: ignore[index]
    return round(max(work, 0.0), 5), round(host, 5)


def decide(ref_ms: list[float], cand_ms: list[float], ref_median: float,
           cand_median: float, lead_ms: float, cuda: bool, slack_ms: float,
           work_ms: float | None = None, host_ms: float | None = None,
           cand_mean: float | None = None, cpu_slack_ms: float = 0.0,
           load: float = 1.0) -> dict:
    """The verdict on one phase's claims: "agree", "capped" (the speedup
    is capped at what the clock allows) or "timer_tamper".

    rho = w_r / (reference median) is how a call's wall-block time relates
    to its timed-loop median, measured on the reference (same loop, same
    inputs, the judge's process); on CUDA used only when above 1 (a wall
    block slower than the timed loop: the previous call's dirty L2 lines
    are written back during the next). On the CPU it is 1: there the
    reference's ratio is not the candidate's (a multi-threaded torch
    reference ran its wall blocks from 1.5x faster to 2.8x slower than its
    timed calls, a single-threaded extension 1.1x slower), and a reference
    ratio of 2.8 let a 10x forgery pass. The smallest claim the clock allows is
    floor = (w_c - slack_ms) / (rho (1 + tol)); slack_ms is the round
    trip's jitter per call. A claimed median c below it disagrees, and the
    speedup is capped at reference median / floor: under-reporting pays
    nothing beyond the tolerance.

    timer_tamper needs more. On CUDA: c + host_ms < floor (lead_ms, the
    candidate's word, when /proc gave no host_ms). The timed loop's lead
    hides a call's host launch time from its claim (lead.Lead), which a
    wall block shows (max(host, device) per call), so an honest host-bound
    call can claim up to that much less, never more; host_ms
    (cpu_figures) is the kernel's account of the host work per call. Under
    a fitted lead the device starts before the host has launched the whole
    call, so the launch hidden is not bounded by the lead itself (ResNet101
    at a 0.5 ms lead: its 7 ms launch); and a lead bounds nothing a forger
    cannot raise, since it is theirs to report. With host_ms below
    HOST_BOUND x floor the call is device-bound (max(host, device) is the
    device's) and nothing is allowed: c < floor is timer_tamper. On the CPU: c
    GROSS_CPU < floor (the wall blocks: on a loaded 2-CPU machine honest
    small extensions ran them up to 2.7x slower than their timed calls),
    or claims below the candidate's own CPU time per call, work_ms
    (cpu_figures): their mean below work_ms x load / (1 + CPU_TOL), load
    the factor the timed commands ran under (load_factor), or their
    median below work_ms / (1 + CPU_TOL). Else no cap ("noisy")."""
    w_r, w_c = min(ref_ms), min(cand_ms)
    # what a call's launch may hide from its timed sample: the host work the
    # kernel saw it do (the lead, the candidate's word, without /proc)
    allow = (lead_ms if host_ms is None else host_ms) if cuda else 0.0
    tol = wallclock.tolerance(ref_ms)
    out = {"reference_ms": round(w_r, 5), "kernel_ms": round(w_c, 5),
           "claimed_ms": round(cand_median, 5), "reference_median_ms": round(ref_median, 5),
           "tolerance": round(tol, 4), "slack_ms": round(slack_ms, 5), "verdict": "agree"}
    if cuda and host_ms is not None:
        out["host_ms"] = round(host_ms, 5)
    if cand_median <= 0 or ref_median <= 0:
        return out
    if not cuda and work_ms is not None:  # whatever the wall blocks' figures
        # the mean carries the load (some calls preempted, some not); the
        # median, which the speedup reads, is held to the CPU time itself,
        # so claims padded above the median cannot lift the mean for it
        cpu_floor = work_ms * load / (1 + CPU_TOL) - cpu_slack_ms
        median_floor = work_ms / (1 + CPU_TOL) - cpu_slack_ms
        mean = cand_median if cand_mean is None else cand_mean
        out.update(cpu_work_ms=round(work_ms, 5), cpu_floor_ms=round(max(cpu_floor, 0.0), 5),
                   claimed_mean_ms=round(mean, 5), load=round(load, 4),
                   cpu_slack_ms=round(cpu_slack_ms, 5))
        if mean < cpu_floor or cand_median < median_floor:
            out.update(verdict="timer_tamper", by="cpu_time",
                       claimed_speedup=round(ref_median / cand_median, 4))
            return out
    if w_r <= 0 or w_c <= 0:
        return out
    rho = max(w_r / ref_median, 1.0) if cuda else 1.0
    floor = (w_c - slack_ms) / (rho * (1 + tol))
    out.update(claimed_speedup=round(ref_median / cand_median, 4),
               wall_speedup=round(w_r / w_c, 4), floor_ms=round(max(floor, 0.0), 5))
    if cand_median >= floor:
        return out
    if cuda and host_ms is not None and host_ms < HOST_BOUND * floor:
        # device-bound (the host's work per call well below the wall's): a
        # block overlaps host and device, so its time is the device's and
        # the lead hid nothing a claim may leave out
        allow = 0.0
    if (cand_median + allow) * (1.0 if cuda else GROSS_CPU) < floor:
        out["verdict"] = "timer_tamper"
    elif cuda:
        out["verdict"] = "capped"
        out["cap"] = round(ref_median / floor, 4)
    else:
        out["verdict"] = "noisy"  # the CPU: within what its noise has shown
    return out


def why(clock: dict) -> str:
    """The message of a timer_tamper verdict of decide()."""
    if clock.get("by") == "cpu_time":
        return (f"the claimed calls average {clock['claimed_mean_ms']:.3g} ms; the candidate's "
                f"own CPU time was {clock['cpu_work_ms']:.3g} ms per back-to-back call (the "
                f"kernel's account, /proc), {clock['load']:.3g}x that under the load its timed "
                f"calls ran under, tolerance {CPU_TOL:.0%}")
    return (f"the claimed speedup {clock['claimed_speedup']:.3g}x is beyond the judge's clock "
            f"({clock['wall_speedup']:.3g}x over back-to-back calls, "
            f"tolerance {clock['tolerance']:.0%})")


class WallCheck:
    """One timing phase's wall blocks (inside the exclusive section)."""

    def __init__(self, device: str, draw: Callable[[int], list], remote: Any,
                 mark: Callable[[], Any]):
        self.device, self.draw, self.remote, self.mark = device, draw, remote, mark
        self.predrawn = not timing.is_cuda(device)
        self.claims: list[dict] = []  # the candidate's clock over its blocks (diagnostic)

    def _make(self, seed: int) -> Callable[[int], list]:
        return lambda i: self.draw(loader.derive_seed(seed, f"iter:{i}"))

    def _ref_block(self, call: Callable, seed: int, k: int, pseed: int) -> dict:
        """The reference's block, three times on the same k input sets: drawn
        alone, drawn and called, drawn, called and printed. Per call: D (a
        draw), the calls less D, and P (what a print adds), each measured
        in place. On the CPU the sets are drawn once, before (D is that
        draw), and the calls and prints run on them."""
        make = self._make(seed)
        with self.mark():
            if self.predrawn:
                t0 = _now_ms()
                inputs = wallclock.draw_block(make, k, self.device)
                drawn = _now_ms() - t0
                called = wallclock.run_block(call, make, k, self.device, None, inputs)["ms"]
                block = wallclock.run_block(call, make, k, self.device, pseed, inputs)
                printed, print_cpu = block["ms"], block["print_cpu_ms"] / k
                per_call = called / k
            else:
                drawn = wallclock.run_block(None, make, k, self.device, None)["ms"]
                called = wallclock.run_block(call, make, k, self.device, None)["ms"]
                printed = wallclock.run_block(call, make, k, self.device, pseed)["ms"]
                per_call = max(called - drawn, 0.0) / k
                print_cpu = 0.0
        return {"per_call": per_call, "draw": drawn / k,
                "print": max(printed - called, 0.0) / k, "print_cpu": print_cpu}

    def _timed(self, fn: Callable[[], Any]) -> tuple[Any, float, dict | None]:
        """(fn(), the judge's wall ms of it less the time the candidate's
        thread sat runnable waiting for a CPU, the candidate's CPU time
        over it by the kernel's account (thread_cpu; None without /proc)).
        The judge's watch on the idle gap before it is closed first: its
        /proc reads are the judge's work, and the empty blocks that
        calibrate the round trip follow one another with no gap to close."""
        pid = self.remote.pid
        close_gap = getattr(self.remote, "close_gap", None)
        if close_gap is not None:
            close_gap()
        d0 = quiet.run_delay_ns(pid) if pid else None
        c0 = thread_run_ns(pid) if pid else None
        t0 = _now_ms()
        got = fn()
        wall = _now_ms() - t0
        c1 = thread_run_ns(pid) if c0 is not None else None
        d1 = quiet.run_delay_ns(pid) if d0 is not None else None
        if d1 is not None and d1 >= d0:
            wall -= min((d1 - d0) / 1e6, wall)
        return got, wall, thread_cpu(c0, c1) if c0 is not None and c1 is not None else None

    def _cand_block(self, seed: int, k: int, pseed: int
                    ) -> tuple[list, float, float, dict | None]:
        """(prints, the draw command's ms (CPU; else 0), the run command's
        ms, by the judge's clock; the candidate's CPU over the run command
        (thread_cpu))."""
        draw = 0.0
        if self.predrawn and k:
            _, draw, _ = self._timed(lambda: self.remote.wall_draw(k, seed))
        prints, run, cpu = self._timed(lambda: self.remote.wall(k, seed, pseed))
        claim = getattr(self.remote, "wall_claim", None)
        if k and isinstance(claim, dict):
            self.claims.append({"run_ms": round(run, 4), "calls_ms": round(claim["calls"], 4),
                                "handler_ms": round(claim["handler"], 4), "k": k})
        return prints, draw, run, cpu

    def empty_ms(self) -> list[float]:
        """EMPTY_CALLS round trips of a wall command of no calls (ms)."""
        return [b[0] for b in self.empty_blocks()]

    def empty_blocks(self) -> list[tuple[float, dict | None]]:
        """EMPTY_CALLS wall commands of no calls: (ms, CPU) of each."""
        return [self._cand_block(0, 0, 0)[2:] for _ in range(EMPTY_CALLS)]

    def verify(self, call: Callable, seed: int, prints: list, pseed: int, atol: float,
               rtol: float) -> str | None:
        """The candidate's prints of VERIFY calls of one block, chosen now
        (after its reply: every print was committed before the choice),
        against the reference's on the same inputs. None, or why not."""
        k = len(prints)
        chosen = sorted({int.from_bytes(os.urandom(4), "little") % k
                         for _ in range(min(VERIFY, k) * 2)})[:VERIFY]
        make = self._make(seed)
        with self.mark():
            for i in chosen:
                printer = wallclock.Printer(pseed, self.device)
                printer.take(call(make(i)))
                why = wallclock.prints_match(prints[i], printer.result()[0],
                                             printer.weight_sums(), atol, rtol)
                if why is not None:
                    return f"call {i}: {why}"
        return None

    def run(self, call: Callable, k_ref: int, k_cand: int, atol: float,
            rtol: float) -> dict:
        """A warm-up block per side (first calls of the prints, allocator),
        then blocks A B B A (A the reference, B the candidate), each
        side's of about wallclock.TARGET_MS of calls; the figures per side
        and the first print mismatch (None when every verified call
        matched). The candidate's block is timed from command to reply; its
        draws and prints are taken off at the judge's own cost of them."""
        pseed = int.from_bytes(os.urandom(8), "little") >> 1  # drawn per phase, by the judge
        # the blocks' inputs: drawn now too, not derived from the timing seed
        # the candidate was sent (it could have computed these outputs ahead,
        # in the slack its timed commands leave, and replayed them here)
        base = int.from_bytes(os.urandom(8), "little") >> 1
        warm = loader.derive_seed(base, "wall:warm")
        # with prints: a first print loads its kernels, which must not count
        self._ref_block(call, warm, 1, pseed)
        self._cand_block(warm, 1, pseed)
        empty_blocks = self.empty_blocks()
        empties = [b[0] for b in empty_blocks]
        # the candidate could slow its empty calls down to look faster: at most
        # EMPTY_MAX_MS of a block is taken off for the round trip (and of its CPU)
        empty = min(min(empties), EMPTY_MAX_MS)
        e_cpu = [b[1] for b in empty_blocks]
        e_tops = [c["top"] for c in e_cpu if c is not None]
        empty_top = min(min(e_tops), EMPTY_MAX_MS) if len(e_tops) == len(e_cpu) else None
        refs: list[dict] = []
        cands: list[tuple[int, list, float, float, dict | None]] = []
        for r in range(wallclock.ROUNDS):
            for who in (("ref", "cand") if r % 2 == 0 else ("cand", "ref")):
                seed = loader.derive_seed(base, f"wall:{who}:{r}")
                if who == "ref":
                    refs.append(self._ref_block(call, seed, k_ref, pseed))
                else:
                    cands.append((seed, *self._cand_block(seed, k_cand, pseed)))
        ref_ms = [b["per_call"] for b in refs]
        draw, prnt = min(b["draw"] for b in refs), min(b["print"] for b in refs)
        tol = wallclock.tolerance(ref_ms)
        cand_ms, mismatch = [], None
        # a print's CPU time on this thread, the most over the blocks (taken off)
        work, host = cpu_figures([c[4] for c in cands], k_cand, empty_top,
                                 max(b["print_cpu"] for b in refs))
        for j, (seed, prints, drawn, run, _cpu) in enumerate(cands):
            if self.predrawn:  # drawing counts for what it took beyond the judge's own draw
                extra = max(0.0, drawn - empty - draw * k_cand * (1 + tol))
                cand_ms.append(max((run - empty + extra) / k_cand - prnt, 0.0))
            else:
                cand_ms.append(max((run - empty) / k_cand - draw - prnt, 0.0))
            if mismatch is None:
                why = self.verify(call, seed, prints, pseed, atol, rtol)
                mismatch = f"wall block {j}, {why}" if why else None
        # what a block's time may be off by: the round trip's jitter
        slack = JITTER_FACTOR * (max(empties) - min(empties)) + SLACK_MIN_MS
        return {"calls": {"reference": k_ref, "kernel": k_cand}, "ref_ms": ref_ms,
                "cand_ms": cand_ms, "empty_ms": round(empty, 4), "slack_ms": slack / k_cand,
                "draw_ms": round(draw, 5), "print_ms": round(prnt, 5), "mismatch": mismatch,
                "cpu_work_ms": work, "cpu_host_ms": host,
                # what a block's CPU figure may be off by: the round trip's CPU
                # time beyond the least taken off, within what is taken off at most
                "cpu_slack_ms": ((min(max(e_tops), EMPTY_MAX_MS) - empty_top + SLACK_MIN_MS)
                                 / k_cand + CPU_CALL_SLACK_MS if empty_top is not None else 0.0),
                "cpu_blocks_ms": [c[4] for c in cands], "empty_cpu_ms": empty_top,
                "print_cpu_ms": round(max(b["print_cpu"] for b in refs), 5),
                "claimed_blocks": self.claims[-len(cands):]}


UNRESOLVED = 2.0    # prints (and draws) this many times a call: no decision
LEAD_MAX_MS = lead.LEAD_MAX_NS / 1e6  # the most host time a timed call's lead can hide


def check_phase(judge: Any, run: dict, call: Callable) -> dict:
    """The wall blocks of one timing pass (run: stages/timing.py, _time_blocks) and the
    decision on its claims: checks.trusted_clock. Each run's wall blocks draw
    inputs of their own (WallCheck.run)."""
    ref_med = timing.stats(run["ref"]["samples_ms"])["median"]
    cand_med = timing.stats(run["cand"])["median"]
    device = judge.device

    def draw(seed: int) -> list:  # no marker per draw: the block is marked whole
        return loader.draw_inputs(judge.ref_module, seed, device)
    check = WallCheck(device, draw, judge.remote, lambda: judge.marker.mark("reference:forward"))
    # the reference's buffers (running statistics) as the timed blocks left them
    state = {k: v.detach().clone() for k, v in judge.ref_model.named_buffers()}
    try:
        fig = check.run(call, wallclock.calls_for(ref_med),
                        wallclock.calls_for(cand_med), judge.req["atol"], judge.req["rtol"])
    finally:
        with torch.no_grad():
            for k, v in judge.ref_model.named_buffers():
                if k in state:
                    v.copy_(state[k])
    lead_ms = min(run["lead"]["kernel"][0] / 1e3, LEAD_MAX_MS) if timing.is_cuda(device) else 0.0
    verdict = decide(fig["ref_ms"], fig["cand_ms"], ref_med, cand_med, lead_ms,
                     timing.is_cuda(device), fig["slack_ms"], work_ms=fig["cpu_work_ms"],
                     host_ms=fig["cpu_host_ms"], cand_mean=statistics.fmean(run["cand"]),
                     cpu_slack_ms=fig["cpu_slack_ms"],
                     load=load_factor(run.get("ran_ms", 0.0), run.get("call_queued_ms", 0.0)))
    # what the clock takes off each call at its own cost, against the calls:
    # beyond UNRESOLVED times the slower side's call, a block's time per call
    # is mostly that estimate (a tiny problem), and the clock decides nothing
    taken = fig["print_ms"] + (fig["draw_ms"] if timing.is_cuda(device) else 0.0)
    calls = max(min(fig["ref_ms"]), min(fig["cand_ms"]))
    if verdict["verdict"] != "agree" and taken > UNRESOLVED * calls:
        verdict.update(verdict="unresolved", overhead_ms=round(taken, 5))
        verdict.pop("cap", None)
    verdict.update({k: fig[k] for k in ("calls", "empty_ms", "draw_ms", "print_ms")})
    verdict["blocks_ms"] = {"reference": [round(x, 5) for x in fig["ref_ms"]],
                            "kernel": [round(x, 5) for x in fig["cand_ms"]]}
    verdict["cpu_blocks_ms"] = {"kernel": fig["cpu_blocks_ms"], "empty_top": fig["empty_cpu_ms"],
                                "print": fig["print_cpu_ms"]}
    verdict["mismatch"] = fig["mismatch"]
    # diagnostics, never read by a decision: the candidate's own clock over
    # each timed block (the calls, the whole command) beside the judge's
    # (run_ms, the round trip included): where a slow block's time went
    verdict["claimed_blocks"] = fig["claimed_blocks"]
    return verdict
