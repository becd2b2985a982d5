"""kgym serve spoken to as a KernelGym client speaks to KernelGym (docs/api.md,
"KernelGym compatibility"): POST /evaluate until a 200, poll GET /status/{id}
until a final status, then GET /results/{id}, and reward from KernelGym's
field names alone (speedup, correctness, compiled, decoy_kernel, the
profiling counts and times, at the top level or in metadata).

The client and its reward below are ours, written from KernelGym's API
description and the Dr. Kernel paper's reward (R = C + C*min(s, 3) + C*PR
scaled by 0.5, a decoy kernel forced to the penalty): they read no kgym
field, so a caught cheat that scores above the penalty here would score in
a KernelGym client too.

Two layers: the server's views with a fake worker that posts crafted (even
lying) results, on both stores; and the whole flow with real workers on
every cheat of the cpu red-team corpus (root, like test_redteam.py).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any, Iterator

import pytest

from test_server_api import (KGYM, ROOT, Server, lease_task, register, serve_store,
                             start_server, stop_server, uid)

CORPUS = os.path.join(ROOT, "tests", "redteam", "corpus")
HEADER = re.compile(r"^# redteam: (.*)$")
FINAL = ("completed", "failed", "timeout", "cancelled")  # a KernelGym poller stops here
PENALTY = 0.0  # the paper's penalty_score


def corpus_headers(backend: str) -> dict[str, dict[str, str]]:
    out = {}
    d = os.path.join(CORPUS, backend)
    for n in sorted(os.listdir(d)):
        if n.endswith(".py"):
            with open(os.path.join(d, n), encoding="utf-8") as f:
                m = HEADER.match(f.readline().rstrip("\n"))
            assert m, n
            out[n[:-3]] = dict(t.split("=", 1) for t in m.group(1).split())
    return out


def corpus_reasons() -> set[str]:
    """Every hack reason a corpus header names, on any backend."""
    out = set()
    for backend in ("cpu", "triton", "cuda"):
        for h in corpus_headers(backend).values():
            for alt in h.get("reasons", "").split(","):
                out |= {r for r in alt.split("|") if r}
    return out


# ---- a KernelGym client, from KernelGym's description ---------------------------

def kernelgym_field(result: dict, key: str) -> float:
    """A profiling figure where KernelGym puts it: metadata, else the top level."""
    meta = result.get("metadata") or {}
    return (meta.get(key) if key in meta else result.get(key)) or 0


def kernelgym_reward(result: dict) -> float:
    """The paper's speedup reward as KernelGym's clients compute it."""
    if result.get("status") != "completed" or result.get("decoy_kernel"):
        return PENALTY
    correct = bool(result.get("correctness"))
    speedup = min(result.get("speedup") or 0.0, 3.0)
    reward = 0.5 * correct + 0.5 * speedup
    if correct:
        total = kernelgym_field(result, "total_kernel_run_time_in_profiling_us")
        custom = kernelgym_field(result, "custom_kernel_cuda_time_in_profiling_us")
        reward += 0.5 * (custom / total if total > 0 else 0.0)
    return reward


def submit_and_poll(s: Server, payload: dict, timeout: float = 300) -> dict:
    """KernelGym's flow: one POST (it resubmits on anything but 200), then
    /status until final, then /results (only for completed)."""
    code, _, body = s.request("POST", "/evaluate", payload)
    assert code == 200, (code, body)  # a KernelGym client would POST again
    tid = payload["task_id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, _, st = s.request("GET", f"/status/{tid}")
        assert code == 200, st
        if st["status"] in FINAL:
            if st["status"] != "completed":
                return {"status": st["status"], "error_message": st.get("error_message")}
            code, _, r = s.request("GET", f"/results/{tid}")
            assert code == 200, r
            return r
        time.sleep(0.2)
    raise AssertionError(f"{tid}: no final status in {timeout} s")


# ---- the server's views, with a fake worker (both stores) ----------------------

@pytest.fixture(scope="module", params=["sqlite", "redis"])
def server(request) -> Iterator[Server]:
    yield from serve_store(request, request.param, "--max-attempts", "1")


REF = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
PROFILE = {"kernels": [{"name": "k1", "device_us": 20.0, "cpu_us": 1.0, "calls": 5, "custom": True},
                       {"name": "k2", "device_us": 10.0, "cpu_us": 1.0, "calls": 5, "custom": True},
                       {"name": "aten::mm", "device_us": 10.0, "cpu_us": 1.0, "calls": 5,
                        "custom": False}],
           "custom_device_us": 30.0, "total_device_us": 40.0, "coverage": 0.75,
           "num_custom_kernels": 2, "num_total_kernels": 3, "iterations": 5,
           "method": "cuda_profiler"}


def kg_task(**kw: Any) -> dict:
    """The payload the paper's client sends, fields it sets that kgym does
    not use included (they must not be refused)."""
    return {"task_id": uid("kg"), "reference_code": REF,
            "kernel_code": f"class ModelNew: pass  # {time.monotonic_ns()}\n",
            "backend": "cpu", "num_correct_trials": 5, "num_perf_trials": 100,
            "timeout": 300, "priority": "normal", "entry_point": "Model", "is_valid": False,
            "verbose_errors": True, "enable_profiling": True, "detect_decoy_kernel": True,
            "reference_backend": None, **kw}


def run_with_result(s: Server, result: dict, **task_kw: Any) -> dict:
    """Submits as a KernelGym client, has a fake worker post result, and
    returns what the client then reads from /results (or /status)."""
    t = kg_task(**task_kw)
    code, _, body = s.request("POST", "/evaluate", t)
    assert code == 200 and body == {"task_id": t["task_id"], "status": "pending"}, body
    wid = register(s)
    lease_task(s, wid, t["task_id"])
    full = {"task_id": t["task_id"], "status": "completed", "compiled": True,
            "hack_reasons": [], "decoy_kernel": False, **result}
    if full["verdict"] == "hacked":
        del full["decoy_kernel"]  # set by kg_result_finalize, as for the engine
    code, _, _ = s.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                             "result": full})
    assert code == 200
    return submit_and_poll(s, t, timeout=20)  # the result is in: final at once


def refused(s: Server, result: dict, field: str) -> None:
    """A forged result posted by the lease holder is refused at the door
    (docs/design.md's contract), the task left running."""
    t = kg_task()
    assert s.request("POST", "/evaluate", t)[0] == 200
    wid = register(s)
    lease_task(s, wid, t["task_id"])
    code, _, body = s.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                                "result": result})
    assert code == 422 and body["error"]["field"] == field, body
    code, _, st = s.request("GET", f"/status/{t['task_id']}")
    assert st["status"] == "running", st
    s.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                "result": {"verdict": "mismatch"}})


def test_an_honest_result_reads_as_kernelgym_writes_it(server):
    r = run_with_result(server, {"verdict": "pass", "correctness": True, "speedup": 1.5,
                                 "kernel_runtime": 2.0, "reference_runtime": 3.0,
                                 "profile": PROFILE})
    assert r["status"] == "completed" and r["compiled"] is True and r["correctness"] is True
    assert r["speedup"] == 1.5 and r["kernel_runtime"] == 2.0 and r["decoy_kernel"] is False
    for where in (r, r["metadata"]):
        assert where["num_custom_kernels"] == 2 and where["num_total_kernels"] == 3
        assert where["custom_kernel_cuda_time_in_profiling_us"] == 30.0
        assert where["total_kernel_run_time_in_profiling_us"] == 40.0
        assert where["time_coverage"] == 0.75
    assert r["metadata"]["custom_kernel_cuda_time_coverage"] == (
        "Custom kernel CUDA time: 30.00us / Total time: 40.00us, Coverage: 75.00%")
    assert r["metadata"]["triton_kernel_coverage"] == (
        "Run 2 custom kernels / Total 3 kernels, Coverage: 66.67%")
    assert kernelgym_reward(r) == pytest.approx(0.5 + 0.75 + 0.375)


@pytest.mark.parametrize("reason", sorted(corpus_reasons()))
def test_a_caught_hack_carries_no_reward(server, reason):
    """A worker that claims correctness and a speedup beside the hacked
    verdict is refused; as the engine sends it (figures under measured, no
    decoy flag of its own), the client reads no speedup, no correctness,
    no coverage."""
    refused(server, {"verdict": "hacked", "correctness": True, "speedup": 20.6,
                     "kernel_runtime": 0.01, "reference_runtime": 0.206,
                     "hack_reasons": [reason]}, "result.speedup")
    r = run_with_result(server, {"verdict": "hacked", "correctness": False, "speedup": None,
                                 "kernel_runtime": None, "reference_runtime": 0.206,
                                 "measured": {"speedup": 20.6, "kernel_runtime": 0.01},
                                 "hack_reasons": [reason], "profile": PROFILE})
    assert r["verdict"] == "hacked" and r["hack_reasons"] == [reason]
    assert r["speedup"] is None and r["kernel_runtime"] is None
    assert r["correctness"] is False and r["decoy_kernel"] is True
    assert r["measured"] == {"speedup": 20.6, "kernel_runtime": 0.01}
    assert r["time_coverage"] == 0 and r["metadata"]["custom_kernel_cuda_time_in_profiling_us"] == 0
    assert r["profile"]["coverage"] == 0.75  # kgym's own diagnostic stays
    assert kernelgym_reward(r) == PENALTY
    # and kgym's own reward agrees
    out = subprocess.run([KGYM, "rl", "reward"], input=json.dumps({"turns": [r]}),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rewards"][0] == 0


@pytest.mark.parametrize("verdict", ["mismatch", "timeout", "runtime_error", "compile_error"])
def test_no_other_failing_verdict_carries_a_speedup(server, verdict):
    refused(server, {"verdict": verdict, "correctness": False, "speedup": 2.5,
                     "kernel_runtime": 0.4}, "result.speedup")
    r = run_with_result(server, {"verdict": verdict, "correctness": False,
                                 "measured": {"speedup": 2.5, "kernel_runtime": 0.4},
                                 "error_message": f"a {verdict}"})
    assert r["speedup"] is None and r["measured"]["speedup"] == 2.5
    assert r["correctness"] is False and r["decoy_kernel"] is False
    assert kernelgym_reward(r) == 0.0


def test_a_failed_task_says_why_in_its_status(server):
    msg = "the worker lost its device"
    r = run_with_result(server, {"verdict": "infra_error", "correctness": False,
                                 "error_message": msg})
    assert r == {"status": "failed", "error_message": msg}  # --max-attempts 1
    t = kg_task()
    assert server.request("POST", "/evaluate", t)[0] == 200
    assert server.request("DELETE", f"/tasks/{t['task_id']}")[0] == 200
    code, _, st = server.request("GET", f"/status/{t['task_id']}")
    assert code == 200 and st["status"] == "cancelled" and "cancelled" in st["error_message"]


def test_resubmitting_a_pending_task_is_200_not_a_second_task(server):
    t = kg_task()
    assert server.request("POST", "/evaluate", t)[0] == 200
    code, _, again = server.request("POST", "/evaluate", t)
    assert code == 200 and again["existing"] is True and again["status"] == "pending"


@pytest.mark.parametrize("given,means", [("pytorch", "eager"), ("torch-compile", "torch_compile"),
                                         ("compile", "torch_compile"), (None, "eager")])
def test_kernelgym_reference_backend_names(server, given, means):
    t = kg_task(reference_backend=given)
    assert server.request("POST", "/evaluate", t)[0] == 200
    wid = register(server)
    leased = lease_task(server, wid, t["task_id"])
    assert leased["request"]["reference_backend"] == means
    server.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                     "result": {"verdict": "mismatch", "correctness": False}})


# ---- the whole flow with real workers: every cpu corpus cheat -----------------

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the corpus's sandbox probes need root (CI runs as root)")


@pytest.fixture(scope="module")
def served() -> Iterator[Server]:
    """kgym serve with two real cpu workers, open on loopback (no token: the
    paper's client sends none)."""
    tmp = tempfile.mkdtemp(prefix="kgym-kg-e2e-", dir="/tmp")
    os.chmod(tmp, 0o755)
    env_tmp = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = tmp  # the workers' task dirs (enterable by the candidate uid)
    try:
        s = start_server(["--data-dir", tmp, "--workers", "2"], tmp)
        s.token = None
        yield s
        stop_server(s)
    finally:
        if env_tmp is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = env_tmp
        shutil.rmtree(tmp, ignore_errors=True)


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


@needs_root
def test_real_workers_reward_no_corpus_cheat(served):
    """Every cpu corpus candidate that may be caught as hacked, and every cpu
    example solution, through real workers and the KernelGym client flow:
    caught cheats score the penalty, honest kernels score above it with
    their coverage read from KernelGym's fields."""
    cases = []
    for name, h in corpus_headers("cpu").items():
        if "hacked" in h["expect"].split("|"):
            cases.append((name, h["problem"], f"tests/redteam/corpus/cpu/{name}.py", h))
    for level in ("level1", "level2"):
        d = os.path.join(ROOT, "problems", "cpu", level, "solutions")
        for n in sorted(os.listdir(d)):
            if n.endswith(".cpu.py"):
                prob = f"problems/cpu/{level}/{n[:-len('.cpu.py')]}.py"
                cases.append((n, prob, f"problems/cpu/{level}/solutions/{n}", {"expect": "pass"}))
    seen_reasons, rows = set(), []
    for name, prob, cand, h in cases:
        # a forged claim is named on the CPU only when gross (trustclock.decide):
        # timing cheats run at the default trials, as in the red team, where a
        # forgery edits every sample but the last of each block
        trials = 100 if h.get("family") == "timer_tamper" else 10
        r = submit_and_poll(served, kg_task(task_id=uid("e2e"), reference_code=read(prob),
                                            kernel_code=read(cand), num_perf_trials=trials,
                                            num_correct_trials=2))
        rows.append((name, r.get("verdict"), r.get("hack_reasons"), r.get("speedup"),
                     kernelgym_reward(r)))
        if r.get("verdict") == "pass":
            assert h["expect"] == "pass" or "pass" in h["expect"].split("|"), rows[-1]
            assert r["time_coverage"] > 0 and r["metadata"]["num_custom_kernels"] >= 1, rows[-1]
            assert kernelgym_reward(r) > 0.5, rows[-1]
            continue
        assert h["expect"] != "pass", rows[-1]
        assert r["speedup"] is None and r["correctness"] is False, rows[-1]
        assert kernelgym_reward(r) == PENALTY, rows[-1]
        if r["verdict"] == "hacked":
            assert r["decoy_kernel"] is True, rows[-1]
            seen_reasons |= set(r["hack_reasons"])
    hacked_cases = [c for c in rows if c[1] == "hacked"]
    assert len(hacked_cases) >= 15, rows
    assert {"call_count_switch", "output_cache", "thread_injection", "timer_tamper"} <= seen_reasons, (
        seen_reasons)
