"""Every verdict path on backend cpu, end to end through the launcher."""

from __future__ import annotations

import pytest

import kit
from kgym_harness import timing


def test_honest_kernel_passes():
    r = kit.run(kit.cpu_kernel())
    assert r["verdict"] == "pass", r["feedback"]
    assert r["correctness"] is True and r["compiled"] is True
    assert r["status"] == "completed"
    assert r["hack_reasons"] == [] and r["decoy_kernel"] is False
    assert r["checks"]["custom_kernels"] == ["add_relu_scale"]
    assert all(v > 0 for v in r["checks"]["launches"].values())
    for side in ("kernel", "reference"):
        s = r["runtime_stats"][side]
        assert s["n"] == 3 and 0 < s["min"] <= s["median"] <= s["max"]
    assert r["speedup"] == r["reference_runtime"] / r["kernel_runtime"]
    assert r["kgym_version"] == "0.1.0"
    assert r["device"]["backend"] == "cpu" and r["device"]["name"].startswith("cpu")
    phases = {"queued", "setup", "compile", "correctness", "timing", "profiling",
              "timing_checks", "recheck", "total"}
    assert set(r["timings"]) - phases == {"load_detail", "trials_detail", "quiescence", "close",
                                          "ablation", "coverage_ablation", "channel",
                                          "sched_judge", "timing_detail",
                                          "imported_judge", "device_span"}, r["timings"]
    # from correctness on, by CLOCK_MONOTONIC (no gate: the task was not staged)
    start, end = r["timings"]["device_span"]
    assert 0 < start < end and "gate" not in r["timings"]
    # the channel's own time on each side; a CPU task has no device regions
    ch = r["timings"]["channel"]
    assert set(ch["judge"]) == set(ch["candidate"]) == {
        "dev_create", "dev_open", "shm_create", "shm_open", "place", "take"}
    assert ch["judge"]["dev_create"] == ch["candidate"]["dev_create"] == 0.0
    # where the trials' time went, by the judge's clock and the candidate's claim
    assert {"inputs", "candidate", "reference", "compare", "cand_forward"} <= set(
        r["timings"]["trials_detail"])
    assert {"backend", "import", "build"} <= set(r["timings"]["load_detail"])
    assert r["error"] is None and r["error_code"] is None


def test_syntax_error():
    code = kit.cpu_kernel(kit.model_new("return a +* b"))
    r = kit.run(code)
    assert (r["verdict"], r["error_code"]) == ("compile_error", "SYNTAX_ERROR")
    assert r["compiled"] is False and r["correctness"] is False
    assert f"line {kit.line_of(code, 'return a +* b')}" in r["feedback"]


def test_import_error():
    r = kit.run(kit.cpu_kernel(top="import kgym_no_such_module\n\n"))
    assert (r["verdict"], r["error_code"]) == ("compile_error", "IMPORT_ERROR")
    assert "kgym_no_such_module" in r["error_message"]


def test_missing_model_new():
    r = kit.run(kit.CPU_PRELUDE + "class Model2(nn.Module):\n    pass\n")
    assert (r["verdict"], r["error_code"]) == ("compile_error", "MISSING_MODEL_NEW")


def test_build_error_load_inline():
    bad = ('import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n'
           'ext = load_inline("kgym_test_broken", cpp_sources=["int f( { return 0; }"],'
           ' no_implicit_headers=True)\n' + kit.HONEST_MODEL)
    r = kit.run(bad)
    assert (r["verdict"], r["error_code"]) == ("compile_error", "BUILD_ERROR")
    assert "kgym_test_broken" in r["error_message"] and "error" in r["error_message"]


def test_build_error_load_from_file():
    bad = ('import os, tempfile\nimport torch\nimport torch.nn as nn\n'
           'from torch.utils.cpp_extension import load\n'
           'src = os.path.join(tempfile.mkdtemp(), "k.cpp")\n'
           'open(src, "w").write("#error kgym deliberate build failure\\n")\n'
           'ext = load("kgym_test_broken_file", [src])\n' + kit.HONEST_MODEL)
    r = kit.run(bad)
    assert (r["verdict"], r["error_code"]) == ("compile_error", "BUILD_ERROR")
    assert "kgym deliberate build failure" in r["error_message"]


def test_exception_in_forward_points_at_candidate_line():
    code = kit.cpu_kernel(kit.model_new('ext.fail("kgym boom in C")'))
    r = kit.run(code)
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "FORWARD_EXCEPTION")
    assert r["compiled"] is True
    assert r["error"]["phase"] == "run" and r["error"]["type"] == "RuntimeError"
    assert "kgym boom in C" in r["error_message"]
    line = kit.line_of(code, 'ext.fail("kgym boom in C")')
    frames = [f for f in r["error"]["frames"] if f["candidate"]]
    assert frames and frames[-1]["line"] == line and frames[-1]["file"] == "kernel.py"
    assert f'line {line}, in forward: ext.fail("kgym boom in C")' in r["feedback"]


def test_exception_in_init():
    code = kit.cpu_kernel(kit.HONEST_MODEL.replace("self.scale = scale",
                                                   "raise ValueError('kgym bad init')"))
    r = kit.run(code)
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "INIT_EXCEPTION")


def test_value_mismatch():
    r = kit.run(kit.cpu_kernel(kit.model_new("return add_relu_scale(a, b, self.scale * 1.5)")))
    assert (r["verdict"], r["error_code"]) == ("mismatch", "VALUE_MISMATCH")
    m = r["mismatch"]
    assert m["max_abs_err"] > 0.1 and 0 < m["bad_fraction"] <= 1
    assert m["trial"] == "trial 0"
    assert "max abs err" in r["feedback"]


def test_nan_output():
    body = """
    out = add_relu_scale(a, b, self.scale)
    ext.fill(out.data_ptr(), 3, float("nan"))
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    assert (r["verdict"], r["error_code"]) == ("mismatch", "NONFINITE_OUTPUT")
    assert "3 of 64" in r["error_message"]


def test_wrong_shape():
    r = kit.run(kit.cpu_kernel(kit.model_new("return add_relu_scale(a, b, self.scale).t()")))
    assert (r["verdict"], r["error_code"]) == ("mismatch", "SHAPE_MISMATCH")
    assert "(4, 16)" in r["error_message"] and "(16, 4)" in r["error_message"]


def test_wrong_dtype():
    r = kit.run(kit.cpu_kernel(kit.model_new("return add_relu_scale(a, b, self.scale).double()")))
    assert (r["verdict"], r["error_code"]) == ("mismatch", "DTYPE_MISMATCH")


def test_non_tensor_output():
    r = kit.run(kit.cpu_kernel(kit.model_new("return {'out': add_relu_scale(a, b, self.scale)}")))
    assert (r["verdict"], r["error_code"]) == ("mismatch", "OUTPUT_TYPE")
    assert "dict" in r["error_message"]


def test_decoy_kernel_is_hacked():
    # Builds the extension, never calls it: the output comes from PyTorch.
    r = kit.run(kit.cpu_kernel(kit.model_new("return torch.relu(a + b) * self.scale")))
    assert r["verdict"] == "hacked" and r["decoy_kernel"] is True
    assert r["hack_reasons"] == ["no_custom_kernel"] and r["error_code"] == "NO_CUSTOM_KERNEL"
    assert r["correctness"] is False
    assert r["checks"]["launches"] == {"train/no_grad": 0, "train/grad": 0, "eval/no_grad": 0}


def test_decoy_allowed_when_hack_checks_off():
    r = kit.run(kit.cpu_kernel(kit.model_new("return torch.relu(a + b) * self.scale")),
                run_hack_checks=False)
    assert r["verdict"] == "pass" and r["decoy_kernel"] is False


def test_mode_branch_kernel_only_in_eval():
    body = """
    if not self.training:
        return add_relu_scale(a, b, self.scale)
    return torch.relu(a + b) * self.scale
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["mode_branch"]
    assert r["error_code"] == "MODE_BRANCH" and r["decoy_kernel"] is False
    assert r["checks"]["launches"]["eval/no_grad"] > 0
    assert r["checks"]["launches"]["train/no_grad"] == 0


def test_mode_branch_on_grad_mode():
    body = """
    if torch.is_grad_enabled():
        return torch.relu(a + b) * self.scale
    return add_relu_scale(a, b, self.scale)
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["mode_branch"]
    assert r["checks"]["launches"]["train/grad"] == 0


BF16_BODY = "return add_relu_scale(a.bfloat16().float(), b.bfloat16().float(), self.scale)"


def test_bf16_operands_pass_loose_tolerance_only_without_hack_checks():
    # inside 1e-2, so the comparison alone passes it; the rounding
    # fingerprint (hack checks) names it
    r = kit.run(kit.cpu_kernel(kit.model_new(BF16_BODY)), run_hack_checks=False)
    assert r["verdict"] == "pass", r["feedback"]
    r = kit.run(kit.cpu_kernel(kit.model_new(BF16_BODY)))
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["precision_downgrade"]


def test_bf16_rejected_by_strict_tolerance():
    r = kit.run(kit.cpu_kernel(kit.model_new(BF16_BODY)), strict=True)
    assert (r["verdict"], r["error_code"]) == ("mismatch", "VALUE_MISMATCH")
    assert "atol=0.0001" in r["error_message"]
    assert 1e-4 < r["mismatch"]["max_abs_err"] < 1e-1


def test_tuple_outputs():
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "return torch.relu(a + b) * self.scale, a - b")
    good = kit.cpu_kernel(kit.model_new("return add_relu_scale(a, b, self.scale), a - b"))
    assert kit.run(good, reference_code=ref)["verdict"] == "pass"
    short = kit.cpu_kernel(kit.model_new("return (add_relu_scale(a, b, self.scale),)"))
    r = kit.run(short, reference_code=ref)
    assert (r["verdict"], r["error_code"]) == ("mismatch", "OUTPUT_TYPE")


def test_crash_in_forward_is_child_died():
    r = kit.run(kit.cpu_kernel(kit.model_new("ext.crash()\nreturn a")))
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "CHILD_DIED")
    assert "SIGSEGV" in r["error_message"]


def test_output_cache_caught_by_recheck():
    # Honest for the first four calls (the correctness trials and the two
    # hack-check modes), then replays its first output.
    body = """
    self.calls += 1
    if self.calls > 4:
        return self.first
    out = add_relu_scale(a, b, self.scale)
    if self.calls == 1:
        self.first = out.clone()
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body, "self.calls = 0")))
    # The timed calls launched nothing either (mode_branch, found first: the
    # recheck runs after timing and profiling), and their replayed outputs
    # fail the spot checks (call_count_switch).
    assert r["verdict"] == "hacked"
    assert sorted(r["hack_reasons"]) == ["call_count_switch", "mode_branch", "output_cache"]
    assert r["mismatch"]["trial"] == "recheck 0"


def test_replaced_clock_is_timer_tamper():
    top = "import time\n_real = time.perf_counter_ns\ntime.perf_counter_ns = lambda: _real() // 1000\n\n"
    r = kit.run(kit.cpu_kernel(top=top))
    assert r["verdict"] == "hacked" and "timer_tamper" in r["hack_reasons"]
    assert "time.perf_counter_ns" in r["checks"]["replaced_functions"]


def test_forged_timing_reply_caught_by_judge_clock():
    # Rewrites the samples in its own timing reply (json.dumps is not a
    # measuring function, so identity checks cannot see it); the forward
    # really takes 60 ms, which only the judge's clock knows.
    top = '''import json, time
_dumps = json.dumps


def _forge(obj, *args, **kw):
    if isinstance(obj, dict) and isinstance(obj.get("timing"), dict):
        t = obj["timing"]
        t["samples_ms"] = [0.001] * len(t["samples_ms"])
        t["warmup_ms"] = 0.001
    return _dumps(obj, *args, **kw)


json.dumps = _forge


'''
    body = "time.sleep(0.06)\nreturn add_relu_scale(a, b, self.scale)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=top), num_perf_trials=8)
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["timer_tamper"], r["feedback"]
    assert r["checks"]["timing_unexplained_ms"] > 100


def test_honest_slow_kernel_is_not_timer_tamper():
    body = "time.sleep(0.06)\nreturn add_relu_scale(a, b, self.scale)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top="import time\n\n"), num_perf_trials=8)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["timing_unexplained_ms"] == 0.0
    assert r["kernel_runtime"] >= 60.0


def test_profile_attribution_and_coverage():
    # The custom call sleeps 20 ms in C-free Python? No: it sleeps inside a
    # wrapped extension function, so coverage must be close to 1; a torch
    # op adds a library row.
    body = "out = add_relu_scale(a, b, self.scale)\nreturn out + torch.zeros_like(out)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), enable_profiling=True)
    assert r["verdict"] == "pass", r["feedback"]
    p = r["profile"]
    custom = [k for k in p["kernels"] if k["custom"]]
    library = [k for k in p["kernels"] if not k["custom"]]
    assert [k["name"] for k in custom] == ["add_relu_scale"] and custom[0]["calls"] == 8
    assert [k["name"] for k in library] == ["other (library ops)"]
    assert library[0]["device_us"] == pytest.approx(p["total_device_us"] - p["custom_device_us"])
    assert set(r["timings"]["profiling_detail"]) >= {"inputs", "run", "command"}
    assert 0 < p["custom_device_us"] <= p["total_device_us"]
    assert p["coverage"] == p["custom_device_us"] / p["total_device_us"]
    assert p["summary"] == (f"Custom kernel CUDA time: {p['custom_device_us']:.2f} us / "
                            f"Total time: {p['total_device_us']:.2f} us, "
                            f"Coverage: {100 * p['coverage']:.2f}%")
    assert p["summary"] in r["feedback"]


def test_profile_coverage_tracks_where_time_goes():
    # 30 ms inside the extension vs 30 ms of Python sleep outside it.
    slow_ext = "import time\n\n"
    half = kit.model_new("time.sleep(0.03)\nreturn add_relu_scale(a, b, self.scale)")
    r = kit.run(kit.cpu_kernel(half, top=slow_ext), enable_profiling=True)
    assert r["verdict"] == "pass"
    assert r["profile"]["coverage"] < 0.2


def test_output_cache_is_a_mismatch_when_hack_checks_are_off():
    body = """
    self.calls += 1
    if self.calls > 4:
        return self.first
    out = add_relu_scale(a, b, self.scale)
    if self.calls == 1:
        self.first = out.clone()
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body, "self.calls = 0")), run_hack_checks=False)
    assert (r["verdict"], r["hack_reasons"]) == ("mismatch", [])
    assert r["mismatch"]["trial"] == "recheck 0"


def test_reference_timing_is_cached_per_config(monkeypatch):
    monkeypatch.setenv("KGYM_REFTIME_CACHE", "1")  # opt-in
    code = kit.cpu_kernel()
    first = kit.run(code, num_perf_trials=7)
    again = kit.run(code, num_perf_trials=7, seed=5)
    other = kit.run(code, num_perf_trials=6)
    fresh = kit.run(code, num_perf_trials=7, force_refresh=True)
    assert [r["checks"]["reference_cached"] for r in (first, again, other, fresh)] == \
        [False, True, False, False]
    assert again["runtime_stats"]["reference"] == first["runtime_stats"]["reference"]


SLEEPY_REF = kit.REF.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
    "        return torch.relu", "        time.sleep(0.02)\n        return torch.relu")


def test_fresh_reference_time_stands_in_only_while_its_probe_agrees(monkeypatch, tmp_path):
    """KGYM_REFTIME_CACHE=fresh: a recent, tight reference time of this
    device stands in once PROBE_CALLS reference calls per block agree with
    it; one that has moved is timed again in full (and re-cached); one too
    old is not probed. A 20 ms sleep on both sides keeps the CPU's times
    tight."""
    import glob
    import json
    monkeypatch.setenv("KGYM_REFTIME_CACHE", "fresh")
    monkeypatch.setenv("KGYM_CACHE_DIR", str(tmp_path))
    code = kit.cpu_kernel(kit.model_new("time.sleep(0.02)\nreturn add_relu_scale(a, b, self.scale)"),
                          top="import time\n\n")
    kw = {"reference_code": SLEEPY_REF, "num_perf_trials": 20}
    first = kit.run(code, **kw)
    assert first["verdict"] == "pass", first["feedback"]
    assert first["checks"]["reference_cached"] is False
    assert "reference_probe" not in first["checks"]
    (entry,) = glob.glob(str(tmp_path / "**" / "reftime" / "*.json"), recursive=True)
    again = kit.run(code, seed=5, **kw)
    probe = again["checks"]["reference_probe"]
    assert again["checks"]["reference_cached"] is True and probe["used"] is True, probe
    assert probe["calls"] == 5 * timing.PROBE_CALLS and abs(probe["ratio"] - 1) <= timing.PROBE_TOL
    assert again["runtime_stats"]["reference"] == first["runtime_stats"]["reference"]

    obj = json.load(open(entry))
    obj["samples_ms"] = [x * 1.5 for x in obj["samples_ms"]]  # the device has sped up since
    json.dump(obj, open(entry, "w"))
    moved = kit.run(code, seed=6, **kw)
    probe = moved["checks"]["reference_probe"]
    assert probe["used"] is False and probe["ratio"] < 1 - timing.PROBE_TOL, probe
    assert moved["checks"]["reference_cached"] is False
    ref = moved["runtime_stats"]["reference"]
    assert ref["n"] == 20 and 19 < ref["median"] < 1.3 * 20, ref  # timed now, in full
    assert json.load(open(entry))["samples_ms"] != obj["samples_ms"]  # cached again

    obj = json.load(open(entry))
    obj["t"] -= timing.REFTIME_FRESH_S + 1
    json.dump(obj, open(entry, "w"))
    stale = kit.run(code, seed=7, **kw)
    assert stale["checks"]["reference_probe"] == {"used": False, "why": "stale"}
    assert stale["checks"]["reference_cached"] is False
    assert stale["verdict"] == "pass", stale["feedback"]


def test_torch_compile_reference_backend():
    r = kit.run(kit.cpu_kernel(), reference_backend="torch_compile", timeout=300)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["reference_backend"] == "torch_compile"
    assert r["runtime_stats"]["reference"]["n"] == 3


def test_shrinking_the_timing_inputs_is_timer_tamper():
    # Times itself on 1-element inputs by patching the reference's get_inputs
    # in its own process (the judge's correctness inputs are unaffected).
    top = ("import kgym_reference\n"
           "kgym_reference.get_inputs = lambda: [torch.randn(1, 1), torch.randn(1, 1)]\n\n")
    r = kit.run(kit.cpu_kernel(top=top))
    # its timed outputs (of other inputs) also fail the spot checks
    assert r["verdict"] == "hacked" and r["error_code"] == "TIMER_TAMPER"
    assert set(r["hack_reasons"]) == {"timer_tamper", "call_count_switch"}
    assert "reference.get_inputs" in r["checks"]["replaced_functions"]


FIRST_CALL_OF_A_PHASE = '''import sys
import time


def first_call_of_a_phase():
    """The first call of a measured timing phase (not of the warm-up
    before it, which times nothing: n_iter 0)."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "time_forward":
            loc = f.f_locals
            return loc.get("n_iter", 0) > 0 and loc.get("start") == 0 and loc.get("done") == 0
        f = f.f_back
    return False


'''


def test_one_stalled_timing_phase_is_timed_again_not_blamed():
    # An honest kernel whose first timed phase stalls once for 600 ms
    # outside its samples (as a device stalled by something else would):
    # the first phase leaves that time unexplained, the second does not.
    body = """
    if first_call_of_a_phase() and not self.stalled:
        self.stalled = True
        time.sleep(0.6)
    return add_relu_scale(a, b, self.scale)
    """
    code = kit.cpu_kernel(kit.model_new(body, "self.stalled = False"),
                          top=FIRST_CALL_OF_A_PHASE)
    r = kit.run(code)
    assert r["verdict"] == "pass", r["feedback"]
    retried = r["checks"]["timing_retried"]
    assert retried["unexplained_ms"] > 300 and retried["wall_ms"] > 600
    assert r["checks"]["timing_unexplained_ms"] == 0.0
    assert r["checks"]["timing_wall_ms"] < 600


def test_stalling_every_timing_phase_is_still_timer_tamper():
    # the same stall in the first call of every timing phase (the retry's too)
    body = """
    if first_call_of_a_phase():
        time.sleep(0.6)
    return add_relu_scale(a, b, self.scale)
    """
    code = kit.cpu_kernel(kit.model_new(body), top=FIRST_CALL_OF_A_PHASE)
    r = kit.run(code)
    assert r["verdict"] == "hacked" and "timer_tamper" in r["hack_reasons"], r["feedback"]
    assert r["checks"]["timing_retried"]["unexplained_ms"] > 300


def test_timing_inputs_are_checked_against_the_judges_own_draw():
    # The harness's CPU generator is an object, not a watched function:
    # swapped for an unseeded one, it draws other timing inputs, and only
    # the fingerprint of the timing inputs shows the difference.
    top = ("import kgym_harness.loader as _harness_loader\n"
           "_harness_loader._cpu_generator = torch.Generator()\n\n")
    r = kit.run(kit.cpu_kernel(top=top))
    assert r["verdict"] == "hacked" and set(r["hack_reasons"]) == {"timer_tamper",
                                                                   "call_count_switch"}
    assert "inputs other than the problem's" in r["error_message"]
    assert "replaced_functions" not in r["checks"]


def test_unusable_extension_cache_is_infra_error(monkeypatch, tmp_path):
    # The worker's build cache cannot be created: not the candidate's fault.
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KGYM_EXT_CACHE_DIR", str(blocker / "ext"))
    r = kit.run(kit.cpu_kernel())
    assert (r["verdict"], r["error_code"], r["status"]) == ("infra_error", "INFRA_ERROR", "failed")
    assert "extension build cache" in r["error_message"]


def test_unusable_tmpdir_is_infra_error_and_nothing_lands_in_tmp(tmp_path):
    # The candidate role started with a $TMPDIR it cannot use: load fails as
    # infra_error (no silent fallback to /tmp, which nobody would clean).
    import multiprocessing as mp
    import os
    import socket
    from kgym_harness.channel import Channel
    from kgym_harness.remote import CandidateFailed, Remote

    def child(fd):
        os.environ["TMPDIR"] = str(tmp_path / "missing")
        from kgym_harness.candidate import run_candidate
        run_candidate(fd)

    before = set(os.listdir("/tmp"))
    a, b = socket.socketpair()
    p = mp.get_context("fork").Process(target=child, args=(b.fileno(),))
    p.start()
    b.close()
    remote = Remote(Channel(a.detach()))
    remote.chan.deadline = __import__("time").monotonic() + 30
    remote.send_load(reference_code=kit.REF, kernel_code=kit.cpu_kernel(), backend="cpu",
                     entry_point="Model", init_seed=1, device="cpu")
    with pytest.raises(CandidateFailed) as e:
        remote.finish_load()
    assert (e.value.info["verdict"], e.value.info["code"]) == ("infra_error", "INFRA_ERROR")
    assert "TMPDIR" in e.value.info["message"]
    remote.exit()
    p.join(10)
    assert not [n for n in set(os.listdir("/tmp")) - before if n.startswith("kgym-cand-")]
