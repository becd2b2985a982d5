"""An out of memory beside others (docs/worker.md, "Out of memory beside
others"), with a real `kgym serve` and `kgym worker` on the CPU.

The device is a lock file: a "hog" problem's reference holds it shared
while it runs, and a "victim" problem's reference raises torch's CUDA out
of memory (torch.OutOfMemoryError, what torch raises on a full device)
exactly when it cannot take the lock alone, that is when another task
holds it at that moment. The victim's judge runs out beside the hog, the
worker runs it once more alone, and that run passes with checks.rerun. A
reference that runs out whatever it shares the device with is rerun once
and then reported; one that runs out alone is reported at once, naming
the sizes; a candidate that runs out is its own verdict, never rerun.
Each reference notes the judge processes that imported it (the judge sees
the shared directory; the sandboxed candidate does not)."""
from __future__ import annotations

import os
import tempfile

import pytest
from kgym_env import KGYM, Env, eval_json, uid, wait_for

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")

FAST = {"backend": "cpu", "num_correct_trials": 1, "num_perf_trials": 1, "num_warmup": 0,
        "enable_profiling": False, "run_hack_checks": False, "timeout": 120}

# Every reference: notes its judge's pid at import (runs-<name>).
HEAD = '''import fcntl
import os
import time

import torch

D = {d!r}
NAME = {name!r}
if os.access(D, os.W_OK):
    with open(os.path.join(D, "runs-" + NAME), "a") as f:
        f.write(f"{{os.getpid()}}\\n")


def oom(why):
    open(os.path.join(D, "oomed-" + NAME), "w").close()
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB "
                                 f"(GPU 0; {{why}})")


def get_inputs():
    return [torch.ones(4)]


def get_init_inputs():
    return []
'''

# Holds the device (the lock, shared) from its first forward until every
# problem named in WAIT_FOR has run out of memory (at most 60 s).
HOG = HEAD + '''
WAIT_FOR = {wait_for!r}


class Model(torch.nn.Module):
    held = False

    def forward(self, x):
        if not Model.held and os.access(D, os.W_OK):
            Model.held = True
            fd = os.open(os.path.join(D, "device.lock"), os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(fd, fcntl.LOCK_SH)
            open(os.path.join(D, "hog-holds"), "w").close()
            end = time.monotonic() + 60
            while time.monotonic() < end and not all(
                    os.path.exists(os.path.join(D, "oomed-" + n)) for n in WAIT_FOR):
                time.sleep(0.05)
            os.close(fd)
        return x + 1
'''

# Runs out of memory exactly when another task holds the device.
VICTIM = HEAD + '''

class Model(torch.nn.Module):
    def forward(self, x):
        if os.access(D, os.W_OK):
            fd = os.open(os.path.join(D, "device.lock"), os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                oom("another task holds the device")
            finally:
                os.close(fd)
        return x * 2
'''

# Runs out of memory whatever else runs: it does not fit the device.
GREEDY = HEAD + '''

class Model(torch.nn.Module):
    def forward(self, x):
        if os.access(D, os.W_OK):
            oom("the problem does not fit")
        return x * 2
'''

# Notes the first input each judge process sees (runs it draws: the seed's).
PLAIN = HEAD + '''

def get_inputs():
    return [torch.randn(4)]


class Model(torch.nn.Module):
    seen = False

    def forward(self, x):
        if not Model.seen and os.access(D, os.W_OK):
            Model.seen = True
            with open(os.path.join(D, "inputs-" + NAME), "a") as f:
                f.write(f"{{float(x[0]):.9g}}\\n")
        return x - 1
'''

CAND = '''import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return {expr}
'''
CAND_OOM = '''import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
'''


def shared_dir(base: str) -> str:
    d = tempfile.mkdtemp(prefix="oom-", dir=base)
    os.chmod(d, 0o777)
    return d


def runs(d: str, name: str) -> int:
    """How many judge processes imported the reference of name."""
    try:
        with open(os.path.join(d, "runs-" + name)) as f:
            return len(set(f.read().split()))
    except FileNotFoundError:
        return 0


def task(d: str, name: str, ref: str, cand: str, **fmt) -> dict:
    return {"task_id": uid(name), "reference_code": ref.format(d=d, name=name, **fmt),
            "kernel_code": cand, **FAST}


def warnings_of(r: dict) -> str:
    return " | ".join(r.get("warnings") or [])


def test_oom_beside_others_is_rerun_alone_once():
    """Four at once on a worker of concurrency 4: the hog holds the device;
    the victim runs out beside it and passes when rerun alone; the greedy
    one runs out beside it, is rerun alone once, runs out again and is
    reported (infra_error, sizes named); a candidate that runs out beside
    it is rerun alone once too, and its runtime_error from there stands."""
    env = Env("sqlite")
    try:
        d = shared_dir(env.base)
        env.start_server("--max-attempts", "1")  # an infra_error is final: runs counted
        env.start_worker("cpu", "--concurrency", "4")
        c = env.client()
        hog = task(d, "hog", HOG, CAND.format(expr="x + 1"), wait_for=["victim", "greedy"])
        c.submit_raw(hog)
        wait_for(lambda: os.path.exists(os.path.join(d, "hog-holds")), 180,
                 "the hog to hold the device")
        victim = task(d, "victim", VICTIM, CAND.format(expr="x * 2"))
        greedy = task(d, "greedy", GREEDY, CAND.format(expr="x * 2"))
        # a seed of the user's: the rerun's inputs are new all the same
        cand_oom = dict(task(d, "candoom", PLAIN, CAND_OOM), seed=7)
        for t in (victim, greedy, cand_oom):
            c.submit_raw(t)
        res = c.wait_all([t["task_id"] for t in (hog, victim, greedy, cand_oom)],
                         timeout=300)
        c.close()
        logs = env.worker_logs()
        h, v = res[hog["task_id"]], res[victim["task_id"]]
        g, k = res[greedy["task_id"]], res[cand_oom["task_id"]]
        assert h["verdict"] == "pass", (h.get("error_message"), logs[-3000:])

        # beside others -> rerun alone -> pass, saying so
        assert v["verdict"] == "pass", (v.get("error_message"), logs[-3000:])
        rr = (v.get("checks") or {}).get("rerun")
        assert rr, v.get("checks")
        assert "device out of memory beside" in rr["reason"] and rr["others"] >= 1, rr
        assert rr["first_error"]["error_code"] == "REFERENCE_ERROR", rr
        assert "CUDA out of memory" in rr["first_error"]["message"], rr
        assert rr["alone"] is True, rr  # nothing ran beside the rerun
        assert "rerun alone" in warnings_of(v), v.get("warnings")
        assert runs(d, "victim") == 2
        assert "running it again, alone" in logs

        # runs out again alone: reported after one rerun, naming that it was alone
        assert g["verdict"] == "infra_error" and g["error_code"] == "REFERENCE_ERROR", g
        assert "CUDA out of memory" in g["error_message"], g["error_message"]
        assert "it ran alone on the device" in g["error_message"], g["error_message"]
        gr = (g.get("checks") or {}).get("rerun")
        assert gr and gr["alone"] is True, g.get("checks")
        assert runs(d, "greedy") == 2

        # the candidate's out of memory beside others: rerun alone once, where
        # it runs out again: that verdict stands
        assert k["verdict"] == "runtime_error" and k["error_code"] == "OUT_OF_MEMORY", k
        kr = (k.get("checks") or {}).get("rerun")
        assert kr and kr["alone"] is True, k.get("checks")
        assert kr["first_error"]["error_code"] == "OUT_OF_MEMORY", kr
        assert "rerun alone" in warnings_of(k)
        assert runs(d, "candoom") == 2
        # on inputs of a new seed: the first run's candidate could have kept
        # its outputs where the rerun's reads them
        with open(os.path.join(d, "inputs-candoom")) as f:
            firsts = f.read().split()
        assert len(firsts) == 2 and firsts[0] != firsts[1], firsts
    finally:
        env.close()


def test_oom_alone_is_reported_at_once_naming_sizes(tmp_path):
    """One task, nothing else on the device (kgym eval keeps no spare
    beyond its queue): the reference's out of memory goes out as it is,
    after one run, its message saying it ran alone and the device's size
    (the host's memory on the CPU)."""
    base = tempfile.mkdtemp(prefix="kgym-oom-", dir="/tmp")
    os.chmod(base, 0o755)
    d = shared_dir(base)
    ref = tmp_path / "greedy.py"
    ref.write_text(GREEDY.format(d=d, name="alone"))
    cand = tmp_path / "cand.py"
    cand.write_text(CAND.format(expr="x * 2"))
    os.chmod(tmp_path, 0o755)
    out, p = eval_json(["--ref", str(ref), "--cand", str(cand), "--backend", "cpu",
                        "--num-correct-trials", "1", "--num-perf-trials", "1",
                        "--num-warmup", "0", "--enable-profiling", "false",
                        "--run-hack-checks", "false", "--prewarm", "0"],
                       dict(os.environ, TMPDIR=base), timeout=300)
    assert len(out) == 1, p.stderr[-3000:]
    r = out[0]
    assert r["verdict"] == "infra_error" and r["error_code"] == "REFERENCE_ERROR", r
    assert "it ran alone on the device" in r["error_message"], r["error_message"]
    assert "the device " in r["error_message"] and "GiB" in r["error_message"], r
    assert "rerun" not in (r.get("checks") or {}), r.get("checks")
    assert runs(d, "alone") == 1
    assert "running it again" not in p.stderr
