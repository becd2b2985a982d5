#!/usr/bin/env python3
"""How much of one evaluation keeps the GPU busy, phase by phase (issue 4).

A worker's --concurrency can only overlap what does not need the device:
processes without MPS time-slice the GPU, so the kernel time of every
evaluation adds up whatever the concurrency. This runs one evaluation
(judge and candidate as two forked children, as the worker runs them, but
with no sandbox or lock) under torch.profiler in both processes and prints,
per process and per judge phase, the wall time and the CUDA kernel time
that ran inside it, then the kernels and host ops that cost the most.

    bench/diag/eval_profile.py --ref R.py --cand C.py [--backend triton]
                               [--device cuda:0] [--runs 2] [--top 15]

The first runs warm the caches (Triton, extensions) unprofiled; the last
is profiled. Each run forks fresh children from this process, which never
touches CUDA itself.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "harness"))

PHASES = ("setup", "compile", "correctness", "timing", "profile", "timing_checks",
          "recheck", "speedup_recheck", "quiescence", "ablation")


def _profiled(role: str, body, out_dir: str, top: int) -> None:
    """Run body() under torch.profiler; write this process's report."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        body()
    wall = (time.perf_counter() - t0) * 1e3
    events = prof.events()
    cuda_t = torch.autograd.DeviceType.CUDA
    marks = [e for e in events if e.name.startswith(("phase:", "cmd:", "fn:"))]
    kernels = [(e.time_range.start, e.time_range.end) for e in events
               if e.device_type == cuda_t and not e.name.startswith(("phase:", "cmd:", "fn:"))]
    syncs = [e.time_range.start for e in events if e.device_type != cuda_t
             and e.name in ("cudaDeviceSynchronize", "cudaStreamSynchronize",
                            "cudaEventSynchronize", "cudaMemcpyAsync", "cudaMemcpy")]
    busy = sum(b - a for a, b in kernels) / 1e3
    lines = [f"## {role}: wall {wall:.1f} ms, CUDA kernel time {busy:.1f} ms "
             f"({len(kernels)} kernels, {len(syncs)} host waits: synchronize or memcpy)"]
    agg: dict = {}
    for e in marks:
        if e.device_type == cuda_t:
            continue
        a, b = e.time_range.start, e.time_range.end
        d = agg.setdefault(e.name, [0, 0.0, 0.0, 0, 0])
        d[0] += 1
        d[1] += (b - a) / 1e3
        d[2] += sum(min(y, b) - max(x, a) for x, y in kernels if x < b and y > a) / 1e3
        d[3] += sum(1 for x, y in kernels if a <= x < b)
        d[4] += sum(1 for x in syncs if a <= x < b)
    for name, (n, w, k, nk, ns) in agg.items():
        lines.append(f"   {name:22s} x{n:<4d} wall {w:8.1f} ms   kernels {k:8.1f} ms "
                     f"({nk:5d})   host waits {ns:5d}")
    # the first checked call against the second (--first-trial): what the
    # first one pays for once (module loads, allocations, library start-up)
    for label in FIRST_TRIAL_RANGES:
        spans = [e for e in marks if e.name == label and e.device_type != cuda_t]
        if not spans:
            continue
        a, b = spans[0].time_range.start, spans[0].time_range.end
        inside: dict = {}
        for e in events:
            if e.device_type == cuda_t or e is spans[0] or not (a <= e.time_range.start < b):
                continue
            d = inside.setdefault(e.name, [0, 0.0])
            d[0] += 1
            d[1] += (e.self_cpu_time_total if not e.name.startswith(("fn:", "cmd:"))
                     else (e.time_range.end - e.time_range.start)) / 1e3
        lines.append(f"   {label}: wall {(b - a) / 1e3:.1f} ms; inside, by self time "
                     "(fn:/cmd: ranges: wall):")
        for name, (n, ms) in sorted(inside.items(), key=lambda kv: -kv[1][1])[:top]:
            lines.append(f"      {name[:60]:60s} x{n:<5d} {ms:8.2f} ms")
    lines.append(prof.key_averages().table(sort_by="self_cuda_time_total" if kernels
                                           else "self_cpu_time_total", row_limit=top))
    lines.append(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
    with open(os.path.join(out_dir, f"{role}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


FIRST_TRIAL_RANGES: list[str] = []  # filled by --first-trial


def _trial_marks() -> None:
    """Judge: each trial in a range trial:LABEL; candidate: each run
    command in cmd:run#N (N from 1)."""
    import functools
    from torch.profiler import record_function
    from kgym_harness import candidate, judge
    fn = judge.Judge.trial

    def trial(self, label, *a, **k):
        with record_function("trial:" + label):
            return fn(self, label, *a, **k)
    judge.Judge.trial = functools.wraps(fn)(trial)
    run = candidate.HANDLERS["run"]
    seen = [0]

    def cmd_run(*a, **k):
        seen[0] += 1
        with record_function(f"cmd:run#{seen[0]}"):
            return run(*a, **k)
    candidate.HANDLERS["run"] = cmd_run


def _phase_marks() -> None:
    """Wrap the judge's phases in record_function ranges named phase:NAME."""
    import functools
    from torch.profiler import record_function
    from kgym_harness import judge
    for name in PHASES:
        fn = getattr(judge.Judge, name, None)
        if fn is None:
            continue

        def wrapped(self, *a, _fn=fn, _name=name, **k):
            with record_function("phase:" + _name):
                return _fn(self, *a, **k)
        setattr(judge.Judge, name, functools.wraps(fn)(wrapped))


JUDGE_FNS = [("loader", "draw_inputs"), ("guards", "digests"), ("remote", "Remote.run"),
             ("judge", "Judge.reference_forward"), ("compare", "compare_outputs"),
             ("audit", "stale"), ("audit", "mutation"), ("audit", "shared_storage"),
             ("audit", "copies_of_inputs"), ("audit", "downgrade"),
             ("judge", "Judge.rounding_fingerprint"), ("judge", "Judge.mode_dependent"),
             ("channel", "Channel.send"), ("channel", "Channel.recv")]
CAND_FNS = [("loader", "to_device"), ("guards", "Poisoned.__enter__"),
            ("guards", "Poisoned.__exit__"), ("candidate", "_pack_output"),
            ("candidate", "_guard_report"), ("guards", "digests"),
            ("channel", "Channel.send"), ("channel", "Channel.recv")]


def _fn_marks(names: list) -> None:
    """Wrap functions (module attribute or Class.method) in ranges fn:NAME."""
    import functools
    import importlib
    from torch.profiler import record_function
    for mod, dotted in names:
        owner = importlib.import_module("kgym_harness." + mod)
        parts = dotted.split(".")
        for p in parts[:-1]:
            owner = getattr(owner, p)
        fn = getattr(owner, parts[-1])

        def wrapped(*a, _fn=fn, _name=dotted, **k):
            with record_function("fn:" + _name):
                return _fn(*a, **k)
        setattr(owner, parts[-1], functools.wraps(fn)(wrapped))


def _command_marks() -> None:
    """Wrap the candidate's command handlers in ranges named cmd:NAME."""
    from torch.profiler import record_function
    from kgym_harness import candidate
    for name, fn in list(candidate.HANDLERS.items()):
        def wrapped(*a, _fn=fn, _name=name, **k):
            with record_function("cmd:" + _name):
                return _fn(*a, **k)
        candidate.HANDLERS[name] = wrapped


def one_run(task: dict, device: str, out_dir: str | None, top: int) -> dict:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r_fd, w_fd = os.pipe()
    pids = []
    for role in ("candidate", "judge"):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.environ["TMPDIR"] = tempfile.mkdtemp(prefix=f"kgym-diag-{role}-")
                tempfile.tempdir = None
                os.environ["KGYM_DEVICE"] = device
                os.close(r_fd)
                if role == "candidate":
                    a.close()
                    os.close(w_fd)
                    from kgym_harness.candidate import run_candidate
                    if out_dir:
                        _command_marks()
                        _fn_marks(CAND_FNS)
                        if FIRST_TRIAL_RANGES:
                            _trial_marks()
                    body = lambda: run_candidate(b.detach())  # noqa: E731
                else:
                    b.close()
                    from kgym_harness.judge import run_judge
                    if out_dir:
                        _phase_marks()
                        _fn_marks(JUDGE_FNS)
                        if FIRST_TRIAL_RANGES:
                            _trial_marks()
                    body = lambda: run_judge(task, a.detach(), w_fd)  # noqa: E731
                if out_dir:
                    _profiled(role, body, out_dir, top)
                else:
                    body()
                code = 0
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)
        pids.append(pid)
    a.close()
    b.close()
    os.close(w_fd)
    data = bytearray()
    reader = threading.Thread(target=lambda: data.extend(_read_all(r_fd)))
    reader.start()
    for pid in pids:
        os.waitpid(pid, 0)
    reader.join()
    from kgym_harness.frame import decode_result
    return decode_result(bytes(data))


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        c = os.read(fd, 1 << 16)
        if not c:
            break
        chunks.append(c)
    os.close(fd)
    return b"".join(chunks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--cand", required=True)
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--enable-profiling", default="false")
    ap.add_argument("--first-trial", action="store_true",
                    help="break the first checked call down against the second")
    args = ap.parse_args()
    if args.first_trial:
        FIRST_TRIAL_RANGES.extend(["trial:trial:0", "trial:trial:1", "cmd:run#1", "cmd:run#2"])
    with open(args.ref) as f:
        ref = f.read()
    with open(args.cand) as f:
        cand = f.read()
    task = {"reference_code": ref, "kernel_code": cand, "backend": args.backend,
            "device": args.device, "enable_profiling": args.enable_profiling == "true"}
    out_dir = tempfile.mkdtemp(prefix="kgym-diag-prof-")
    for i in range(args.runs):
        last = i == args.runs - 1
        t0 = time.perf_counter()
        res = one_run(dict(task), args.device, out_dir if last else None, args.top)
        wall = time.perf_counter() - t0
        t = res.get("timings") or {}
        print(f"# run {i + 1}{' (profiled)' if last else ''}: {res.get('verdict')} "
              f"in {wall:.2f} s; timings "
              + json.dumps({k: round(v, 1) for k, v in t.items()
                            if isinstance(v, (int, float))}))
        if t.get("trials_detail"):
            print("#   trials_detail " + json.dumps({k: round(v, 1) for k, v in
                                                    t["trials_detail"].items()}))
        if res.get("error_message"):
            print("#   error: " + str(res.get("error_message"))[:500])
    for role in ("judge", "candidate"):
        path = os.path.join(out_dir, f"{role}.txt")
        if os.path.exists(path):
            with open(path) as f:
                print(f.read())


if __name__ == "__main__":
    main()
