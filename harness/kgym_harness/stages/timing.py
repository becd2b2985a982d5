"""Timing and the trusted clock: the speedup and what the judge checks of it.

Interleaved ABBA blocks of reference (timed here) and candidate (timed in
its process: a claim), each phase cross-checked against the judge's own
clock (trustclock.py, timing.tamper_excess), the timed inputs' prints, the
spot checks of timed outputs and, above speedup_recheck_bound, a second
timing on new inputs. Tested by tests/harness/test_trusted_clock.py,
test_spot_sample.py, test_timing_lock.py, test_integrity_speedup.py and
the GPU files test_timing_gpu.py and test_side_stream_gpu.py.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .. import compare, lead, loader, problem, quiet, timing, trustclock
from ..channel import ProtocolError
from . import now


# timing phases at most: a retry for any disturbance, a third while a
# side_stream finding repeats
SIDE_STREAM_PHASES = 3
# the clock's verdicts that time a phase again (its wall blocks first)
CLOCK_OFF = ("capped", "timer_tamper")


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


class Timing:
    """The timing stage of Judge: holds the device exclusively from timing()
    until profiling ends; fills runtime_stats, kernel_runtime,
    reference_runtime, speedup and checks.trusted_clock/timing_*; leaves
    self.pending_checks for timing_checks()."""

    def reference_timer(self, plan: list[dict]) -> tuple[Any, dict | None, str | None]:
        """(forward of the reference as timed, cached pooled timing or None,
        cache key when the cache is on; timing.reftime_mode). "always": a
        cached time stands in whole (None for the forward; clock drift
        enters the speedup). "fresh": a recent, tight cached time stands in
        only if this phase's probe agrees (timing()), so the forward is
        built too. force_refresh reads no cached time."""
        req = self.req
        config = {"n_warmup": req["num_warmup"], "n_iter": req["num_perf_trials"],
                  "backend": req["reference_backend"], "entry": req["entry_point"],
                  "blocks": len(plan), "warmup_ms": timing.WARMUP_MIN_MS, "prewarmed": True,
                  "allow_tf32": req["allow_tf32"],  # the reference's precision
                  # samples of the lead that made them
                  "lead_max_ns": lead.LEAD_MAX_NS, "lead_fit": lead.fit_on()}
        key, cached = None, None
        mode = timing.reftime_mode(self.device)
        checks = self.result["checks"]
        if mode != "off":
            key = timing.reftime_key(req["reference_code"], config, self.device_identity())
            cached = None if req["force_refresh"] else timing.reftime_load(key)
        if cached is not None and mode == "always":
            checks["reference_cached"] = True
            checks["reference_backend"] = str(cached.get("backend", "eager"))
            return None, cached, key
        if cached is not None:
            why = timing.fresh_enough(cached, timing.wall_s())
            if why is not None or cached.get("backend") != req["reference_backend"]:
                checks["reference_probe"] = {"used": False, "why": why or "backend"}
                cached = None
        checks["reference_cached"] = False
        model = self.ref_model
        loader.set_mode(model, "train")
        fn: Any = model
        used = "eager"
        if req["reference_backend"] == "torch_compile":
            try:
                fn = torch.compile(model)
                with torch.no_grad():  # compiles now, outside the timed loop
                    fn(*self.draw(self.timing_seed))
                used = "torch_compile"
            except Exception as e:
                fn = model
                self.result["warnings"].append(f"torch.compile failed, timed eager: {e}"[:500])
        self.result["checks"]["reference_backend"] = used
        if used != req["reference_backend"]:
            key, cached = None, None  # never cache (nor probe against) a fallback

        def call(args: Any) -> Any:
            # timed: no marker here (the caller marks the whole block), and
            # a try costs nothing until something raises
            try:
                with torch.no_grad():
                    return fn(*args)
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                raise problem.failed("reference:forward", e, "forward") from None
        return call, cached, key

    def device_identity(self) -> str:
        """The device's name and, on a GPU, its UUID: a cached reference
        time is this physical device's own."""
        name = str(self.result["device"]["name"])
        if timing.is_cuda(self.device):
            uuid = getattr(torch.cuda.get_device_properties(torch.device(self.device)), "uuid", "")
            name += f" {uuid}"
        return name

    def timing_inputs(self, i: int) -> list:
        return self.draw(loader.derive_seed(self.timing_seed, f"iter:{i}"))

    def timing(self) -> None:
        """Interleaved blocks: reference block (here), candidate block (its
        process), alternating ABBA so linear clock drift cancels; samples
        pooled per side. Holds the device exclusively (until profiling
        ends); what can be checked without it waits for timing_checks().

        The trusted-clock bound (timer_tamper) is checked on the whole
        phase; a phase that fails it is timed once more and the second
        phase's figures are the ones used (and must pass the bound). A
        claim that lies fails both; an honest one fails only when something
        outside the evaluation stalled the device or the host for a moment
        (seen once under 4-way concurrency on the H200: an honest phase of
        405 ms by the judge's clock, 31 ms of it unexplained, where the same
        solution takes 128-136 ms at concurrency 1). The side_stream rule
        is treated the same way (timing.side_stream_found): a phase where
        most samples needed the device-wide figure is timed again, and only
        the second phase's samples count."""
        self.phase = "timing"
        req = self.req
        n_blocks = timing.blocks_for(req["num_perf_trials"], self.ref_forward_ms,
                                    self.ref_launch_ms, self.input_draw_ms)
        plan = timing.block_plan(req["num_perf_trials"], req["num_warmup"], n_blocks,
                                 prewarmed=True)
        # where the phase's time goes (ms): the judge's clock, diagnostics only
        detail = self.result.setdefault("timings", {}).setdefault("timing_detail", {})
        t0 = now()
        self.lock_device(exclusive=False, label="timing/prewarm")
        ref_call, cached, key = self.reference_timer(plan)  # torch.compile: not while exclusive
        if timing.is_cuda(self.device):
            self.lock.intend()  # warm spares take no new hold until ours is granted
        t1 = now()
        self.prewarm(ref_call, cached, plan)
        t2 = now()
        self.lock_device(exclusive=True)
        t3 = now()
        detail.update(reference_timer=_ms(t1 - t0), prewarm=_ms(t2 - t1), exclusive_wait=_ms(t3 - t2))
        wall_call = ref_call if ref_call is not None else self.eager_reference()
        run, unexplained, clock, cached = self._probed_phases(plan, ref_call, cached, wall_call)
        checks = self.result["checks"]
        n = req["num_perf_trials"]
        ref, cand, side = run["ref"], run["cand"], run["side"]
        if cached is None and key is not None:
            timing.reftime_store(key, dict(ref, backend=req["reference_backend"],
                                           t=timing.wall_s()))
        kstats = timing.stats(cand)
        rstats = timing.stats(ref["samples_ms"])
        self.result["runtime_stats"] = {"kernel": kstats, "reference": rstats}
        self.result["kernel_runtime"] = kstats["median"]
        self.result["reference_runtime"] = rstats["median"]
        if kstats["median"] > 0:
            self.result["speedup"] = rstats["median"] / kstats["median"]
        self.trusted_clock(clock)
        checks["timing_run_delay_ms"] = round(run["queued_ms"], 2)
        checks["timing_call_delay_ms"] = round(run["call_queued_ms"], 2)  # the load's part
        checks["timing_blocks"] = len(plan)
        checks["timing_wall_ms"] = run["wall_ms"]
        checks["timing_unexplained_ms"] = max(unexplained, 0.0)
        checks["side_stream_samples"] = len(side)
        if timing.is_cuda(self.device):
            # diagnostics for the GPU runs: per block, median over its samples of
            # t_dev - L - t_stream, and the calibrated L (ms)
            checks["sync_excess_ms"] = run["excess"]
            checks["sync_latency_ms"] = run["latency"]
            # the lead before each sample (us, at the phase's end), the
            # timed calls whose start the device reached before the host
            # had launched them, and the lead's fit state (lead.Lead)
            checks["timing_lead"] = {side: {"us": v[0], "late": v[1], "fit": v[2]}
                                     for side, v in run["lead"].items()}
            if cached is None:
                checks["reference_side_stream_samples"] = run["ref_side"]
            checks["timing_host_ms"] = {side: {k: round(v, 2) for k, v in parts.items()}
                                        for side, parts in run["host"].items() if parts}
        if side:
            checks["side_stream_indices"] = side[:20]
        if run["launches"] == 0 and not self.ref_mode_dependent:
            self.hack("mode_branch", "MODE_BRANCH",
                      "no custom kernel ran during the timed iterations", stop=False)
        if unexplained > 0:
            self.hack("timer_tamper", "TIMER_TAMPER",
                      f"the timed phase took {run['wall_ms']:.1f} ms by the judge's clock; the "
                      f"claimed kernel times leave {unexplained:.1f} ms unexplained", stop=False)
        if run["l2_report"] is not None:
            checks["l2_persist"] = run["l2_report"]
        if run["l2_found"]:
            self.hack("l2_persist", "L2_PERSIST", f"persisting L2 during timing: "
                      f"{run['l2_found']} (lines marked persisting survive the L2 flush)",
                      stop=False)
        if timing.side_stream_found(len(side), n):
            self.hack("side_stream", "SIDE_STREAM",
                      f"{len(side)} of {n} timed calls left work running on another stream "
                      "after returning (timed until the whole device was idle)", stop=False)
        self.pending_checks = {"claims": run["claims"], "spots": run["spots"],
                               "timed": run["timed"], "wall_mismatch": clock["mismatch"]}

    def _probed_phases(self, plan: list[dict], ref_call: Any, cached: dict | None,
                       wall_call: Any) -> tuple[dict, float, dict, dict | None]:
        """_timed_phases, and when a cached reference time stood in but this
        phase's probe of the reference disagrees with it (its time has
        moved), all of it again in full, on new inputs; the cached time
        that stands (None once it did not)."""
        run, unexplained, clock = self._timed_phases(plan, ref_call, cached, wall_call)
        if cached is not None and ref_call is not None and not self._probe_agrees(cached, run):
            cached = None
            self.new_timing_seed("probe")
            run, unexplained, clock = self._timed_phases(plan, ref_call, None, wall_call)
        return run, unexplained, clock, cached

    def _timed_phases(self, plan: list[dict], ref_call: Any, cached: dict | None,
                      wall_call: Any) -> tuple[dict, float, dict]:
        """The timing phase, timed again when it looked disturbed (time
        unexplained, the trusted clock capping, most calls needing the
        device-wide figure); the last phase's figures count. A side_stream
        finding is timed a third time when the second phase has it too:
        another process's CUDA context made or torn down outside the lock
        spans many calls of a short phase (honest kernels at 10 timed
        calls under 4-way concurrency, docs/harness-notes.md), while a
        kernel's own side stream is there on every call of every phase.

        When only the clock disagreed, its wall blocks run once more first
        (a noisy wall block, most often; each run of them draws inputs of
        its own, WallCheck.run) and the whole phase only if they disagree
        again. Every phase after the first draws inputs of its own
        (new_timing_seed): on the first phase's inputs a kernel that
        remembered its outputs would replay every call of the next one."""
        n = self.req["num_perf_trials"]
        detail = self.result.setdefault("timings", {}).setdefault("timing_detail", {})
        t0 = now()
        run = self._time_blocks(plan, ref_call, cached)
        t1 = now()
        unexplained = self._unexplained(run, plan)
        clock = trustclock.check_phase(self, run, wall_call)
        detail.update(blocks=_ms(t1 - t0), clock=_ms(now() - t1),
                      blocks_reference=round(run.get("ref_wall_ms", 0.0), 2),
                      blocks_kernel=round(run.get("wall_ms", 0.0), 2))
        retried: list[dict] = []
        clock_again = False
        again_ms = 0.0  # the clock's second look
        while len(retried) < SIDE_STREAM_PHASES - 1:
            side_found = timing.side_stream_found(len(run["side"]), n)
            off = clock["verdict"] in CLOCK_OFF
            if not (unexplained > 0 or side_found or off) or (retried and not side_found):
                break
            if off and unexplained <= 0 and not side_found and not clock_again:
                clock_again = True
                t2 = now()
                first = clock
                clock = trustclock.check_phase(self, run, wall_call)
                clock["mismatch"] = clock["mismatch"] or first["mismatch"]
                again_ms = detail["clock_again"] = _ms(now() - t2)
                self.result["checks"]["trusted_clock_retried"] = {
                    k: first.get(k) for k in ("verdict", "claimed_speedup", "wall_speedup",
                                              "blocks_ms")}
                continue  # still off: the whole phase again
            retried.append({"unexplained_ms": round(max(unexplained, 0.0), 2),
                            "wall_ms": round(run["wall_ms"], 2),
                            "side_stream_samples": len(run["side"]),
                            "trusted_clock": clock["verdict"]})
            first_l2, first_mismatch = run["l2_found"], clock["mismatch"]
            self.new_timing_seed(f"phase:{len(retried)}")
            run = self._time_blocks(plan, ref_call, cached)
            run["l2_found"] = run["l2_found"] or first_l2
            unexplained = self._unexplained(run, plan)
            clock = trustclock.check_phase(self, run, wall_call)
            clock["mismatch"] = clock["mismatch"] or first_mismatch
        detail["passes"] = 1 + len(retried)
        detail["after_first"] = _ms(now() - t0) - detail["blocks"] - detail["clock"] - again_ms
        if retried:
            self.result["checks"]["timing_retried"] = retried[0]
        if len(retried) > 1:
            self.result["checks"]["timing_retried_side_stream"] = retried[1:]
        return run, unexplained, clock

    def new_timing_seed(self, label: str) -> None:
        """The inputs of a phase timed again (and of its wall blocks): none
        an earlier phase drew. The claims and spot checks (timing_checks)
        are of the last phase's inputs."""
        self.timing_seed = loader.derive_seed(self.timing_seed, label)

    def _probe_agrees(self, cached: dict, run: dict) -> bool:
        """Whether this phase's probe of the reference (PROBE_CALLS a
        block, timed here like the full blocks) agrees with the cached
        time (timing.probe_agrees); checks.reference_probe and
        checks.reference_cached say what was used."""
        ok, ratio = timing.probe_agrees(cached["samples_ms"], run["probe"])
        self.result["checks"]["reference_probe"] = {
            "used": ok, "calls": len(run["probe"]), "ratio": round(ratio, 5),
            "age_s": round(timing.wall_s() - cached["t"], 2),
            "median_ms": round(timing.stats(run["probe"])["median"], 6) if run["probe"] else None}
        self.result["checks"]["reference_cached"] = ok
        return ok

    def trusted_clock(self, clock: dict) -> None:
        """What the judge's clock (trustclock.check_phase) says about the
        claimed times (prints of back-to-back calls that do not match the
        reference's are call_count_switch, in timing_checks); a claim no honest call could make
        is timer_tamper; a claim beyond the clock that an honest host-bound
        call could make caps the speedup at the clock's."""
        self.result["checks"]["trusted_clock"] = clock  # a print mismatch: timing_checks
        if clock["verdict"] == "timer_tamper":
            self.hack("timer_tamper", "TIMER_TAMPER", trustclock.why(clock), stop=False)
        elif clock["verdict"] == "capped" and self.result.get("speedup") is not None:
            self.result["speedup"] = min(self.result["speedup"], clock["cap"])
            self.result["warnings"].append(
                f"speedup capped at {clock['cap']:.3g}x by the judge's clock over back-to-back "
                f"calls (claimed {clock['claimed_speedup']:.3g}x)")

    def eager_reference(self) -> Any:
        """The reference's forward, eager, no grad (the wall blocks when the
        reference's timing came from the cache)."""
        model = self.ref_model
        loader.set_mode(model, "train")

        def call(args: Any) -> Any:
            with torch.no_grad():
                return model(*args)
        return call

    def prewarm(self, ref_call: Any, cached: dict | None, plan: list[dict]) -> None:
        """The timing phase's full warm-up, each side in turn (num_warmup
        calls and WARMUP_MIN_MS of synchronised time: first calls, caches,
        clocks), before the exclusive section and under the shared lock: it
        measures nothing, so it need not keep other evaluations off the
        device. Its inputs come from a seed of their own (timing seed,
        label prewarm) and are never timed. The exclusive section then
        re-warms each block with one call, as later blocks always did. On
        the H200 the exclusive hold of the 16-task bench went from 5.5 s
        to 4.4 s."""
        n = self.req["num_warmup"]
        if n <= 0:
            return
        seed = loader.derive_seed(self.timing_seed, "prewarm")
        # each side leaves the memory of its first timed block cached
        # (timing.reserve): allocating it from the driver inside the
        # exclusive section waited on other processes' driver work
        first = plan[0]["n_iter"] if os.environ.get("KGYM_TIMING_RESERVE", "1") != "0" else 0
        reserved = {}
        if ref_call is not None:  # timed in full, or probed against a cached time
            def inputs(i: int) -> list:
                return self.draw(loader.derive_seed(seed, f"iter:{i}"))
            with self.marker.mark("reference:forward"):
                r = timing.time_forward(ref_call, inputs, n, 0, self.device,
                                        warmup_ms=timing.WARMUP_MIN_MS, reserve_for=first)
            reserved["reference"] = r["reserved"]
        c = self.remote.time(n, 0, seed, 0, timing.WARMUP_MIN_MS, n, 0, reserve=(first, self.spot_checks()))
        reserved["kernel"] = c["reserved"]
        if first and timing.is_cuda(self.device):
            self.result["checks"]["timing_reserved"] = reserved  # bytes; the kernel's is its claim

    def spot_checks(self) -> int:
        """Timed outputs the candidate keeps for the spot checks: one when
        an output is large (each copy kept is a whole output, and three of
        KernelBench's 6 GiB ones left no room for the reference's recheck)."""
        if not self.req["run_hack_checks"]:
            return 0
        return timing.SPOT_CHECKS_LARGE if self.large_output else timing.SPOT_CHECKS

    def _time_blocks(self, plan: list[dict], ref_call: Any, cached: dict | None) -> dict:
        """One pass over the interleaved blocks; what each side measured and
        what the judge saw of the candidate's blocks."""
        ref = {"samples_ms": [], "prep_ms": 0.0, "warmup_ms": 0.0, "wall_ms": 0.0}
        run: dict = {"ref": ref, "ref_side": 0, "cand": [], "side": [], "wall_ms": 0.0,
                     "queued_ms": 0.0,  # of wall_ms: the candidate waiting for a CPU
                     "ran_ms": 0.0,  # the candidate's main thread on a CPU
                     "call_queued_ms": 0.0,  # of queued_ms: after each command's wake-up
                     "launches": 0, "warmups": 0,
                     "claims": [],  # (input index, the candidate's fingerprint)
                     "excess": {"kernel": [], "reference": []},
                     "latency": {"kernel": [], "reference": []},
                     "lead": {"kernel": [0.0, 0, None], "reference": [0.0, 0, None]},  # us, late, fit
                     # where each side's wall time went (diagnostics, timing.time_forward)
                     "host": {"kernel": {}, "reference": {}},
                     "spots": self.spot_checks(),
                     "timed": set(), "l2_found": None, "l2_report": None}
        cand = run["cand"]
        run["probe"] = []  # the reference's calls timed against a cached time
        run["ref_wall_ms"] = 0.0  # the reference's blocks (full or probe) in this pass
        for b, blk in enumerate(plan):
            for who in (("ref", "cand") if b % 2 == 0 else ("cand", "ref")):
                if who == "ref":
                    if ref_call is None:  # "always": the cached time stands in
                        continue
                    # against a cached time, a probe of PROBE_CALLS calls
                    probing = cached is not None
                    mine = run["probe"] if probing else ref["samples_ms"]
                    with self.marker.mark("reference:forward"):  # the block, not each call
                        r = timing.time_forward(ref_call, self.timing_inputs,
                                                timing.rewarm(blk, mine),
                                                min(timing.PROBE_CALLS, blk["n_iter"])
                                                if probing else blk["n_iter"],
                                                self.device, start=blk["start"],
                                                warmup_ms=blk["warmup_ms"],
                                                timed_start=blk["timed_start"])
                    mine += r["samples_ms"]
                    run["ref_wall_ms"] += r["wall_ms"]
                    if probing:
                        continue
                    run["ref_side"] += len(r["side_stream"])
                    run["excess"]["reference"].append(r["sync_excess_ms"])
                    run["latency"]["reference"].append(r["sync_latency_ms"])
                    run["lead"]["reference"] = [r["lead_us"] or 0.0,
                                                run["lead"]["reference"][1] + r["lead_short"],
                                                r["lead_fit"]]
                    for k in ("prep_ms", "warmup_ms", "wall_ms"):
                        ref[k] += r[k]
                    _add_host(run["host"]["reference"], r, r["wall_ms"])
                    continue
                w = timing.rewarm(blk, cand)
                run["warmups"] += w
                pid = self.remote.pid
                s0 = quiet.main_sched(pid) if pid else None
                t1 = now()
                c = self.remote.time(w, blk["n_iter"], self.timing_seed, blk["start"],
                                     blk["warmup_ms"], blk["timed_start"], run["spots"])
                wall_ms = (now() - t1) * 1e3
                run["wall_ms"] += wall_ms
                _add_host(run["host"]["kernel"], c, wall_ms)
                s1 = quiet.main_sched(pid) if s0 is not None else None
                if s1 is not None and s0 is not None:
                    if s1[1] >= s0[1]:
                        run["queued_ms"] += (s1[1] - s0[1]) / 1e6
                    # its CPU time: with call_queued_ms, the load it ran under
                    run["ran_ms"] += (s1[0] - s0[0]) / 1e6
                    run["call_queued_ms"] += trustclock.command_queued_ms(
                        s1[1] - s0[1], s1[2] - s0[2])
                run["timed"].update(range(blk["timed_start"], blk["timed_start"] + blk["n_iter"]))
                if c["l2"] is not None:
                    run["l2_report"] = c["l2"]
                    run["l2_found"] = run["l2_found"] or timing.l2_finding(
                        c["l2"]["baseline"], c["l2"]["limit"], c["l2"]["window"])
                run["side"] += [len(cand) + i for i in c["side_stream"]]
                run["excess"]["kernel"].append(c["sync_excess_ms"])
                run["latency"]["kernel"].append(c["sync_latency_ms"])
                run["lead"]["kernel"] = [c["lead_us"], run["lead"]["kernel"][1] + c["lead_short"],
                                         c["lead_fit"]]
                cand += c["samples_ms"]
                run["launches"] += c["launches"]["count"]
                run["claims"].append((blk["timed_start"], c["inputs"]))  # checked after the lock
        if cached is not None:
            run["ref"] = cached
        return run

    def _unexplained(self, run: dict, plan: list[dict]) -> float:
        """timing.tamper_excess of one pass: positive when the candidate's
        claimed kernel times cannot explain the judge's wall time of its
        blocks. Time its timing thread sat runnable, waiting for a CPU (a
        loaded machine), explains wall time too: not a forward call's."""
        wall = run["wall_ms"] - min(run["queued_ms"], run["wall_ms"])
        return timing.tamper_excess(sum(run["cand"]), self.req["num_perf_trials"],
                                    run["warmups"], wall, run["ref"]["prep_ms"],
                                    timing.flush_cost_ms(self.device), blocks=len(plan),
                                    warmup_ms=plan[0]["warmup_ms"])

    def timing_checks(self) -> None:
        """What timing() left to check once the device is no longer held
        exclusively (the candidate's timed outputs and the judge's own input
        draws stay where they are meanwhile): the inputs the candidate timed
        itself on, then the spot checks of timed outputs. Neither needs a
        quiet device, and each draw or reference forward here would
        otherwise keep every other evaluation of the device waiting."""
        pending, self.pending_checks = self.pending_checks, None
        if pending is None:
            return
        self.phase = "timing"
        self.lock_device(exclusive=False, label="timing_checks")
        checks = self.result["checks"]
        for index, claim in pending["claims"]:
            mine = loader.fingerprint(self.timing_inputs(index))
            if not loader.fingerprints_match(mine, claim):
                self.hack("timer_tamper", "TIMER_TAMPER",
                          "the candidate timed itself on inputs other than the problem's",
                          stop=False)
                break
        if pending.get("wall_mismatch"):  # after the inputs: other inputs are timer_tamper first
            self.hack("call_count_switch", "CALL_COUNT_SWITCH",
                      "outputs of back-to-back calls timed by the judge's clock differ from "
                      f"the reference's ({pending['wall_mismatch']})", stop=False)
        spots, timed = pending["spots"], pending["timed"]
        if spots:  # last: a kernel timed on other inputs is timer_tamper first
            t0 = now()
            try:
                # which elements are compared is drawn only now, after the timed calls
                seed = int.from_bytes(os.urandom(8), "little") >> 1
                self.spot_check(self.remote.spots(spots, seed, compare.SPOT_SAMPLE), timed,
                                min(spots, len(timed)), seed)
            finally:
                if "spot_checks" in checks:
                    checks["spot_checks"]["ms"] = round((now() - t0) * 1e3, 2)

    def spot_check(self, spots: list, timed: set[int], want: int, seed: int) -> None:
        """The spot checks of timed outputs (timing.SpotSampler): each kept
        output is compared with the reference on the same timing inputs
        (the judge draws them itself), on compare.SPOT_SAMPLE elements per
        output tensor at positions drawn from seed after the timed calls
        (whole outputs crossing the channel cost ~200 ms each at 256 MB). A
        mismatch is call_count_switch: the kernel computes something else
        when it is being timed. The reference's buffers (running
        statistics) are put back afterwards."""
        if len(spots) != want or any(i not in timed for i, _, _ in spots):
            raise ProtocolError(f"the spot-check report has {len(spots)} outputs of timed "
                                f"calls, {want} were asked for")
        checks = self.result["checks"]
        checks["spot_checks"] = {"n": len(spots), "indices": [i for i, _, _ in spots][:16]}
        state = {k: v.detach().clone() for k, v in self.ref_model.named_buffers()}
        try:
            for i, out, why in spots:
                if why is not None:
                    fail: dict | None = {"code": "OUTPUT_TYPE", "message": why,
                                         "output_index": 0, "max_abs_err": None,
                                         "max_rel_err": None, "bad_fraction": None}
                else:
                    expected = self.reference_forward(self.timing_inputs(i), "train", False)
                    fail = compare.compare_sampled(expected, out, seed, self.req["atol"],
                                            self.req["rtol"])
                if fail is not None:
                    checks["spot_checks"]["failed"] = i
                    self.result["mismatch"] = dict(fail, trial=f"timed call {i}")
                    self.hack("call_count_switch", "CALL_COUNT_SWITCH",
                              f"the output of timed call {i} (a spot check drawn after it "
                              f"returned) is wrong: {fail['message']}; the kernel computes "
                              "something else when it is timed", stop=False)
                    return
        finally:
            with torch.no_grad():
                for k, v in self.ref_model.named_buffers():
                    if k in state:
                        v.copy_(state[k])

    def speedup_recheck(self) -> None:
        """A speedup above speedup_recheck_bound is evaluated again before it
        is reported: fresh secret inputs, then timing with a new timing
        seed. A failure there is output_cache; otherwise the lower of the
        two speedups is reported, with its runtimes (checks.speedups holds
        both, checks.speedup_rechecked says it happened)."""
        self.phase = "speedup_recheck"
        first = {k: self.result[k] for k in ("speedup", "kernel_runtime", "reference_runtime",
                                             "runtime_stats")}
        checks = self.result["checks"]
        checks["speedup_rechecked"] = True
        checks["speedups"] = [first["speedup"]]
        self.fresh_trials("speedup_recheck")
        self.timing_seed = loader.derive_seed(self.req["seed"], "timing:speedup_recheck")
        self.timing()
        self.timing_checks()
        self.phase = "speedup_recheck"
        second = self.result["speedup"]
        checks["speedups"].append(second)
        if second is None or first["speedup"] <= second:
            self.result.update(first)
        if second is None or second < first["speedup"] / 2:
            self.result["warnings"].append(
                f"the speedup did not reproduce: {first['speedup']:.2f}x, then "
                + (f"{second:.2f}x" if second is not None else "no time")
                + " on new inputs; the lower one is reported")

    def needs_speedup_recheck(self) -> bool:
        s = self.result["speedup"]
        return (s is not None and s > self.req["speedup_recheck_bound"]
                and not self.result["hack_reasons"])


def _add_host(into: dict, r: dict, wall_ms: float) -> None:
    """One timing command's share of checks.timing_host_ms: its wall (the
    judge's clock for the candidate's), input draws, warm-up and the
    timed loop's parts (timing.time_forward's host_ms)."""
    parts = {"wall": wall_ms, "draw": r.get("prep_ms", 0.0), "warmup": r.get("warmup_ms", 0.0)}
    parts.update(r.get("host_ms") or {})
    for k, v in parts.items():
        into[k] = into.get(k, 0.0) + float(v)
