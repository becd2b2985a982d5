"""Process entry for one role: python -m kgym_harness.role {judge,candidate} ...

  candidate --chan-fd N
  judge --chan-fd M --result-fd R [--task-file F]   (task JSON on stdin if no file)
  probe --device D                                   (exit 0 when the device is healthy)

The task file is read and then deleted. Both roles end with os._exit so that
nothing registered by candidate code (atexit, threads) runs after the role.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _read_task(path: str | None) -> object:
    try:
        if path:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            try:
                os.unlink(path)
            except OSError:
                pass
        else:
            text = sys.stdin.read()
        return json.loads(text)
    except (OSError, ValueError):
        return None


def apply_cpu_threads() -> None:
    """Size torch's CPU thread pool as the worker asked (KGYM_CPU_THREADS:
    the machine's CPUs shared among the processes that may compute at
    once); nothing when it is unset or not a positive integer. Called in
    each role's process before its role starts (the zygote never runs a
    parallel op, so the pool is first made here)."""
    v = os.environ.get("KGYM_CPU_THREADS", "")
    if v.isdigit() and int(v) > 0:
        import torch
        torch.set_num_threads(int(v))


def apply_heap_policy() -> None:
    """The C heap keeps what it freed (heap.py), in each role's process
    before its role starts: a call's page faults then do not depend on
    which loop it runs in."""
    from .heap import keep_freed
    keep_freed()


def apply_precision_defaults() -> None:
    """cuDNN without TF32, as cuBLAS is by torch's default, in each role's
    process before its role starts (precision.process_defaults): an honest
    candidate that calls torch's convolution then computes in fp32, as the
    judge's reference does. A default only; precision is judged by the
    judge's measurement."""
    from .precision import process_defaults
    process_defaults()


def prepare_process() -> None:
    """What each role's process sets before its role starts, whichever
    way it was started (role.main, the zygote's fork, warm.py's)."""
    apply_heap_policy()
    apply_cpu_threads()
    apply_precision_defaults()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kgym_harness.role")
    sub = parser.add_subparsers(dest="role", required=True)
    cand = sub.add_parser("candidate")
    cand.add_argument("--chan-fd", type=int, required=True)
    judge = sub.add_parser("judge")
    judge.add_argument("--chan-fd", type=int, required=True)
    judge.add_argument("--result-fd", type=int, required=True)
    judge.add_argument("--task-file")
    probe = sub.add_parser("probe")  # the worker's device health check (probe.py)
    probe.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    prepare_process()
    if args.role == "probe":
        from .probe import run_probe
        return run_probe(args.device)
    if args.role == "candidate":
        from .candidate import run_candidate
        run_candidate(args.chan_fd)
    else:
        task = _read_task(args.task_file)
        from .judge import run_judge
        run_judge(task, args.chan_fd, args.result_fd)
    return 0


if __name__ == "__main__":
    code = 1
    try:
        code = main()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
