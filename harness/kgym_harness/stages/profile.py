"""Profiling: the coverage the judge stands behind.

The candidate runs the profiler and sends rows (a claim, kept as
profile.claimed); the judge attributes custom time only to kernels the
candidate compiled and launched (coverage.attribute) and bounds it by its
own clock (coverage.bound): a profile it cannot explain is profile_forgery.
Tested by tests/harness/test_coverage.py and test_profproc.py (the profile taken
in the profiler's own process, profproc.py).
"""

from __future__ import annotations

from .. import coverage, loader, profiling, timing
from ..remote import CandidateFailed
from . import now

PROFILE_ITERS = 3
# the CPU profile's iterations: the judged coverage reads its fastest, and on
# a loaded machine three in a row can all stall (coverage.bound)
CPU_PROFILE_ITERS = 8


class Profiling:
    """The profiling stage of Judge: reads self.launched and
    self.records_complete (from correctness) and checks.trusted_clock (from
    timing); writes profile and checks.coverage_bound."""

    def profile(self) -> None:
        self.phase = "profiling"
        t0 = now()
        try:
            n = PROFILE_ITERS if timing.is_cuda(self.device) else CPU_PROFILE_ITERS
            # inputs no timed call had: a kernel may keep the outputs it made,
            # and replayed with its custom kernel run on scratch, a profile
            # of seen inputs read as all custom (test_coverage.py)
            raw = self.remote.profile(n, loader.derive_seed(self.timing_seed, "profile"))
        except CandidateFailed as e:
            self.result["warnings"].append(f"profiling failed: {e.info['message']}"[:500])
            return
        prof = profiling.sanitize_profile(raw)
        if prof is not None:
            detail = prof.pop("detail_ms", {})
            detail["command"] = (now() - t0) * 1e3  # the judge's clock, all of it
            self.result["timings"]["profiling_detail"] = detail
        if prof is None:
            self.result["warnings"].append("the candidate sent a malformed profile")
        else:
            prof = self.judged_profile(prof)
        self.result["profile"] = prof

    def judged_profile(self, prof: dict) -> dict:
        """The coverage the judge stands behind (coverage.py): custom rows
        by names the candidate compiled and launched, custom time capped by
        the judge's clock for a timed call; the candidate's own figures are
        kept under profile.claimed."""
        claimed = {k: prof[k] for k in ("coverage", "custom_device_us", "total_device_us",
                                        "num_custom_kernels")}
        prof = coverage.attribute(prof, self.req["kernel_code"], self.launched,
                                  self.records_complete)
        if prof["method"] == "cuda_profiler" and prof["total_device_us"] > 0 \
                and prof["custom_device_us"] == 0:
            self.result["decoy_kernel"] = self.req["run_hack_checks"]
            self.hack("no_custom_kernel", "NO_CUSTOM_KERNEL",
                      "the profiler saw device kernels, none of them yours (no @triton.jit "
                      "or __global__ kernel of kernel_code ran)", stop=False)
        clock = self.result["checks"].get("trusted_clock") or {}
        b = coverage.bound(prof, clock.get("kernel_ms"), self.result.get("kernel_runtime"),
                           timing.is_cuda(self.device))
        self.result["checks"]["coverage_bound"] = b["check"]
        if b["forgery"]:
            self.hack("profile_forgery", "PROFILE_FORGERY", b["forgery"], stop=False)
        prof = b["profile"]
        prof["kernels"] = prof["kernels"][:profiling.MAX_ROWS]
        prof["claimed"] = claimed
        return prof
