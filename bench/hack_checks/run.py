#!/usr/bin/env python3
"""bench/hack_checks: what one guarded call costs, per example problem.

bench/hackcost.py measures whole evaluations with run_hack_checks on and
off through the worker; on a shared machine its per-problem ratios are
dominated by timing noise. This isolates the checks themselves: for each
problem of problems/<set>/level*/ and its solution
(solutions/<name>.<backend>.py) it starts one candidate role on a
socketpair (no sandbox), loads the solution, then alternates `run`
commands with guard off and on over the same inputs, and measures

  call_off, call_on   the judge's round trip of one run command (median, ms)
  judge               the judge's own audit of one checked call: digests
                      of what it sends, the reference's facts, the
                      findings (median, ms; the reference call itself is
                      not counted: it runs either way)
  first_on            the first guarded call (a pool made in it costs the
                      50 + 10 ms settle once)

and the estimate per evaluation: 9 checked calls x (call_on - call_off +
judge) + the first call's settle. Not included: the judge's final idle
window, run when no gap between commands was long enough (as on these CPU
problems): at most 70 ms, ending after 10 ms once the candidate is quiet.

usage: PYTHONPATH=harness bench/hack_checks/run.py [--set cpu] [--backend cpu]
           [--device cpu] [--n 30]
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "harness"))

import torch  # noqa: E402

from kgym_harness import audit, guards, loader  # noqa: E402
from kgym_harness.channel import Channel  # noqa: E402
from kgym_harness.remote import Remote  # noqa: E402

CHECKED_CALLS = 9  # 5 trials, 2 mode checks, 2 rechecks (request defaults)


def problems(pset: str, backend: str) -> list[tuple[str, str]]:
    out = []
    for ref in sorted(glob.glob(os.path.join(ROOT, "problems", pset, "level*", "*.py"))):
        name = os.path.splitext(os.path.basename(ref))[0]
        sol = os.path.join(os.path.dirname(ref), "solutions", f"{name}.{backend}.py")
        if os.path.exists(sol):
            out.append((ref, sol))
    return out


def judge_audit(model, inputs: list, reply, facts: audit.ReferenceFacts) -> float:
    """ms the judge spends on one checked call beyond the reference call and
    the comparison (which run either way)."""
    t0 = time.perf_counter()
    sent = guards.digests(inputs)
    t1 = time.perf_counter()
    clones = loader.clone_inputs(inputs)
    out = model(*clones)
    t2 = time.perf_counter()
    facts.learn(out, clones, sent)
    found = (audit.deferred(reply) + audit.stale(reply.output)
             + audit.mutation(reply, sent, facts) + audit.shared_storage(reply, facts)
             + audit.copies_of_inputs(out, reply.output, inputs, sent)
             + audit.downgrade(out, reply.output))
    t3 = time.perf_counter()
    assert not found, found
    return ((t1 - t0) + (t3 - t2)) * 1e3


def measure(ref: str, sol: str, backend: str, device: str, n: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="kgym-bench-")
    a, b = socket.socketpair()
    env = dict(os.environ, TMPDIR=tmp, PYTHONPATH=os.path.join(ROOT, "harness"))
    p = subprocess.Popen([sys.executable, "-m", "kgym_harness.role", "candidate", "--chan-fd",
                          str(b.fileno())], pass_fds=(b.fileno(),), env=env)
    b.close()
    remote = Remote(Channel(a.detach()))
    remote.chan.deadline = time.monotonic() + 900
    ref_code, sol_code = open(ref).read(), open(sol).read()
    remote.send_load(reference_code=ref_code, kernel_code=sol_code, backend=backend,
                     entry_point="Model", init_seed=1, device=device)
    remote.finish_load()
    ref_module = loader.import_file(loader.write_source(tmp, "reference_bench.py", ref_code),
                                    "kgym_bench_reference")
    model = loader.build_model(ref_module.Model, loader.init_inputs(ref_module, 1), 1, device)
    facts = audit.ReferenceFacts()
    inputs = loader.draw_inputs(ref_module, 7, device)
    remote.run(inputs, "train", False, False)  # builds, first calls
    t0 = time.perf_counter()
    remote.run(inputs, "train", False, True)
    first = (time.perf_counter() - t0) * 1e3
    off, on, judge = [], [], []
    with torch.no_grad():
        for i in range(n):
            for guard in (False, True) if i % 2 == 0 else (True, False):
                t0 = time.perf_counter()
                r = remote.run(inputs, "train", False, guard)
                (on if guard else off).append((time.perf_counter() - t0) * 1e3)
                if guard:
                    judge.append(judge_audit(model, inputs, r, facts))
    remote.exit()
    p.wait(10)
    remote.chan.close()
    shutil.rmtree(tmp, ignore_errors=True)
    sys.modules.pop("kgym_bench_reference", None)
    return {"off": statistics.median(off), "on": statistics.median(on),
            "judge": statistics.median(judge), "first": first}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="cpu")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=30)
    a = ap.parse_args()
    if a.backend == "triton" and a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    print(f"# bench/hack_checks set={a.set} backend={a.backend} device={a.device} n={a.n} "
          f"date={time.strftime('%Y-%m-%d %H:%M:%S')} host={os.uname().nodename} "
          f"cpus={os.cpu_count()}")
    print(f"{'problem':38s} {'call_off':>9s} {'call_on':>8s} {'judge':>7s} {'first_on':>9s} "
          f"{'per_eval_ms':>12s}")
    for ref, sol in problems(a.set, a.backend):
        m = measure(ref, sol, a.backend, a.device, a.n)
        settle = max(0.0, m["first"] - m["on"])
        per_eval = CHECKED_CALLS * (m["on"] - m["off"] + m["judge"]) + settle
        name = os.path.relpath(ref, os.path.join(ROOT, "problems"))
        print(f"{name:38s} {m['off']:9.2f} {m['on']:8.2f} {m['judge']:7.2f} {m['first']:9.1f} "
              f"{per_eval:12.1f}", flush=True)


if __name__ == "__main__":
    main()
