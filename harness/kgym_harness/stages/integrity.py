"""Integrity: findings become hack reasons; the checks that end an evaluation.

hack() and report() turn a finding into hack_reasons and, with hack checks
on, stop the evaluation; the ablation forward (no_custom_kernel), the
per-kernel ablation behind the judged coverage, the judge's quiescence
watch (work left running) and the replaced-function findings run after
every other stage. Tested by tests/harness/test_integrity_*.py,
test_coverage_ablation.py and test_cpu_verdicts.py.
"""

from __future__ import annotations

import time
from typing import Any

from .. import audit, compare, coverage, loader, quiet, schema
from ..channel import ChannelTimeout, PeerClosed
from ..remote import CandidateFailed
from . import Stop

ABLATION_TIMEOUT_S = 30.0


class Integrity:
    """The integrity stage of Judge: every other stage reports through
    hack()/report(); ablation(), quiescence() and tamper() run last."""

    def report(self, found: list[audit.Finding]) -> None:
        """Every finding becomes a hack reason; any stops the evaluation
        (with run_hack_checks off they are only noted, see hack())."""
        for reason, code, message in found:
            self.hack(reason, code, message, stop=False)
        if found and self.req["run_hack_checks"]:
            raise Stop()

    def hack(self, reason: str, code: str, message: str, stop: bool = True) -> None:
        """Record a hacking finding; with run_hack_checks off it is only noted."""
        if not self.req["run_hack_checks"]:
            self.result["checks"].setdefault("unenforced", []).append(reason)
            return
        if reason not in self.result["hack_reasons"]:
            self.result["hack_reasons"].append(reason)
        if stop:
            self.fail("hacked", code, "HackDetected", message)
        schema.set_error(self.result, "hacked", code, self.phase, "HackDetected", message)

    def ablation(self) -> None:
        """The ablation forward (no_custom_kernel, guards.Ablation): one
        call in which every custom kernel's results are replaced by large
        finite random values right after it returns. An output that still
        matches the reference came from PyTorch ops, whatever was
        launched. Run last (after timing, profiling and the rechecks), in
        the first no-grad mode that launched custom kernels, with at most
        30 s of the deadline; a forward that raises, dies or overruns says
        the kernels mattered (or nothing) and is never a finding."""
        if not self.req["run_hack_checks"] or self.result["hack_reasons"]:
            return
        self.phase = "ablation"
        if self.launches["train/no_grad"]:
            mode = "train"
        elif self.launches["eval/no_grad"]:
            mode = "eval"
        else:
            return
        info: dict[str, Any] = {"mode": mode}
        self.result["checks"]["ablation"] = info
        inputs = self.draw(loader.derive_seed(self.req["seed"], "ablation"), send=True)
        self.lock_device(exclusive=False, label="ablation")
        saved = self.chan.deadline
        if saved is not None:
            self.chan.deadline = min(saved, time.monotonic() + ABLATION_TIMEOUT_S)
        try:
            reply = self.remote.run(inputs, mode, False, ablate=True)
        except CandidateFailed:
            info["outcome"] = "raised"
            return
        except (PeerClosed, ChannelTimeout) as e:
            info["outcome"] = "died" if isinstance(e, PeerClosed) else "timeout"
            self.result["warnings"].append(f"the ablation forward {info['outcome']}; "
                                           "no_custom_kernel was not checked by ablation")
            return
        finally:
            self.chan.deadline = saved
        info.update(reply.ablation or {})
        if reply.problem is not None:
            info["outcome"] = "contributed"
            return
        expected = self.reference_forward(inputs, mode, False)
        # a yes/no that is usually no: outputs_match settles a mismatch on a
        # sample, without the full comparison's statistics
        if not compare.outputs_match(expected, reply.output, self.req["atol"], self.req["rtol"]):
            info["outcome"] = "contributed"
        elif info.get("unresolved"):
            info["outcome"] = "inconclusive"
        else:
            info["outcome"] = "no_effect"
            self.result["decoy_kernel"] = True
            self.hack("no_custom_kernel", "NO_CUSTOM_KERNEL",
                      f"the output stayed correct when every custom kernel's results were "
                      f"replaced by random values ({info.get('calls', 0)} custom calls): it "
                      "came from PyTorch ops, the kernels only ran alongside", stop=False)

    def coverage_ablation(self) -> None:
        """The per-kernel ablation behind the judged coverage: for each
        custom kernel carrying the profile's custom time
        (coverage.ablation_units: >= 5 % of it, at most 4), one forward in
        which only that kernel's results are replaced (guards.Ablation with
        only), in the profile's mode (train, no grad). An output that still
        matches the reference got nothing from it: its time leaves the
        custom total (coverage.drop_rows), with a warning; busy work whose
        result enters the output times zero pads the coverage without a
        wrong answer, so it is no hack reason. Every other answer keeps the
        time. The forward runs in the candidate's process, which can spoil
        its output when ablated: that keeps the profile's figure (the
        bound's), never raises it. At most ABLATION_TIMEOUT_S in all."""
        prof = self.result.get("profile")
        if not self.req["run_hack_checks"] or self.result["hack_reasons"] or not prof:
            return
        whole = self.result["checks"].get("ablation") or {}
        if whole.get("outcome") in ("died", "timeout"):
            return
        units = coverage.ablation_units(prof, self.req["kernel_code"], self.launched,
                                        self.records_complete)
        if not units:
            return
        self.phase = "coverage_ablation"
        found: dict[str, str] = {}
        self.result["checks"]["coverage_ablation"] = found
        inputs = self.draw(loader.derive_seed(self.req["seed"], "coverage_ablation"),
                           send=True)
        self.lock_device(exclusive=False, label="coverage_ablation")
        saved = self.chan.deadline
        end = time.monotonic() + ABLATION_TIMEOUT_S
        expected: Any = None
        unreached: list[dict] = []
        try:
            for u in units:
                self.chan.deadline = end if saved is None else min(saved, end)
                try:
                    reply = self.remote.run(inputs, "train", False, ablate=True,
                                            only=u["names"])
                except CandidateFailed:
                    found[u["label"]] = "raised"
                    continue
                except (PeerClosed, ChannelTimeout) as e:
                    found[u["label"]] = "died" if isinstance(e, PeerClosed) else "timeout"
                    break
                report = reply.ablation or {}
                if reply.problem is not None:
                    found[u["label"]] = "contributed"
                    continue
                if not report.get("calls"):  # the profile's kernel did not run here
                    found[u["label"]] = "not_called"
                    continue
                if expected is None:
                    expected = self.reference_forward(inputs, "train", False)
                if not compare.outputs_match(expected, reply.output, self.req["atol"],
                                             self.req["rtol"]):
                    found[u["label"]] = "contributed"
                elif report.get("unresolved"):
                    found[u["label"]] = "inconclusive"
                else:
                    found[u["label"]] = "no_effect"
                    unreached.append(u)
        finally:
            self.chan.deadline = saved
        if unreached:
            self.result["profile"] = coverage.drop_rows(
                prof, {row for u in unreached for row in u["rows"]})
        for u in unreached:
            self.result["warnings"].append(
                f"custom kernel {u['label']} ran but its results did not reach the output "
                f"(the output stayed correct when they were replaced): its time "
                f"({u['us']:.1f} us) is not counted as custom")

    def quiescence(self) -> None:
        """The judge's own verdict on work left running by the candidate
        (quiet.ProcWatch over the gaps between commands, one explicit
        window if no gap was long enough; the candidate's thread ledger)."""
        watch = self.remote.watch
        if not self.req["run_hack_checks"]:
            return
        if watch is not None:
            if watch.window_ms < quiet.FINAL_WINDOW_S * 1e3:
                watch.final_window("last")
            self.result["checks"]["idle_watch"] = {"windows": watch.windows,
                                                   "ms": round(watch.window_ms, 1)}
        else:
            self.result["checks"]["idle_watch"] = None
        for reason, code, message in audit.watched(self.remote):
            self.hack(reason, code, message, stop=False)

    def tamper(self) -> None:
        """Functions the candidate replaced that measure it (remote.tamper:
        the harness's own functions, seen from the judge's side of the
        channel): timer_tamper, and profile_forgery for the profiler's."""
        if self.remote.tamper:
            self.result["checks"]["replaced_functions"] = sorted(self.remote.tamper)[:20]
            forged = sorted(n for n in self.remote.tamper
                            if n.startswith(("torch.profiler:", "kgym_harness.cupti.")))
            if forged:
                self.hack("profile_forgery", "PROFILE_FORGERY", "the profiler's functions "
                          "were replaced: " + ", ".join(forged[:3]), stop=False)
            self.hack("timer_tamper", "TIMER_TAMPER", "measuring functions were replaced: "
                      + ", ".join(sorted(self.remote.tamper)[:5]), stop=False)
