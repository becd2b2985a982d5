"""A speedup above speedup_recheck_bound is evaluated again (fresh secret
inputs, timing on a new seed) before it is reported."""

from __future__ import annotations

import pytest

import kit
from kgym_harness import schema

# The reference sleeps 3 ms per call: any kernel is more than 10x faster.
SLOW_REF = kit.REF.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
    "return torch.relu(a + b) * self.scale",
    "time.sleep(0.003)\n        return torch.relu(a + b) * self.scale")

def test_big_speedup_is_rechecked_and_the_lower_one_reported():
    r = kit.run(kit.cpu_kernel(), reference_code=SLOW_REF)
    assert r["verdict"] == "pass", r["feedback"]
    c = r["checks"]
    assert c["speedup_rechecked"] is True and len(c["speedups"]) == 2
    assert all(s > 10 for s in c["speedups"])
    assert r["speedup"] == min(c["speedups"])
    assert r["speedup"] == r["reference_runtime"] / r["kernel_runtime"]
    assert r["timings"]["speedup_recheck"] > 0


def test_small_speedup_is_not_rechecked():
    r = kit.run(kit.cpu_kernel())
    assert r["verdict"] == "pass"
    assert "speedup_rechecked" not in r["checks"] and "speedup_recheck" not in r["timings"]


def test_bound_comes_from_the_request():
    r = kit.run(kit.cpu_kernel(), reference_code=SLOW_REF, speedup_recheck_bound=1e5)
    assert "speedup_rechecked" not in r["checks"]


def test_wrong_on_the_recheck_inputs_is_output_cache():
    # Right in the correctness trials and the first recheck, wrong once the
    # speedup recheck asks again.
    body = """
    if being_timed():
        self.timed = True
    elif self.timed:
        self.after += 1
        if self.after > 2:
            return add_relu_scale(a, b, self.scale * 3)
    return add_relu_scale(a, b, self.scale)
    """
    # honest in the judge's wall blocks too (run_block), which would see the
    # wrong outputs first (call_count_switch)
    timed = kit.BEING_TIMED.replace('== "time_forward"', 'in ("time_forward", "run_block")')
    code = kit.cpu_kernel(kit.model_new(body, "self.timed = False\nself.after = 0"),
                          top=timed)
    r = kit.run(code, reference_code=SLOW_REF)
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["output_cache"], r["feedback"]
    assert r["mismatch"]["trial"] == "speedup recheck 0"
    assert r["checks"]["speedup_rechecked"] is True


def test_speedup_that_does_not_reproduce_reports_the_second():
    # Fast while it is timed the first time; slow once it has been rechecked.
    body = """
    if being_timed():
        if self.after >= 2:
            time.sleep(0.02)
    elif self.seen_timing:
        self.after += 1
    self.seen_timing = self.seen_timing or being_timed()
    return add_relu_scale(a, b, self.scale)
    """
    code = kit.cpu_kernel(kit.model_new(body, "self.seen_timing = False\nself.after = 0"),
                          top="import time\n" + kit.BEING_TIMED)
    r = kit.run(code, reference_code=SLOW_REF)
    assert r["verdict"] == "pass", r["feedback"]
    first, second = r["checks"]["speedups"]
    assert first > 10 and second < 1 and r["speedup"] == second
    assert r["kernel_runtime"] >= 20.0
    assert any("did not reproduce" in w for w in r["warnings"])


def test_speedup_recheck_bound_is_validated():
    base = {"reference_code": kit.REF, "kernel_code": "x"}
    assert schema.normalize_request(base)["speedup_recheck_bound"] == 10.0
    assert schema.normalize_request(dict(base, speedup_recheck_bound=11))[
        "speedup_recheck_bound"] == 11.0
    for bad in (0.5, "10", True, 2e6):
        with pytest.raises(ValueError, match="speedup_recheck_bound"):
            schema.normalize_request(dict(base, speedup_recheck_bound=bad))
