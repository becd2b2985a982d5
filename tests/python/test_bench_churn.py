"""bench/diag/churn.py's process handling, on a machine without a GPU:
every background starts, its processes (and a churn's children, which
come back to churn.py as their subreaper) are killed and reaped, the
probe reports that it made no context, and nothing is left running."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHURN = os.path.join(ROOT, "bench", "diag", "churn.py")


def _churn_processes() -> list[int]:
    """Processes still running churn.py (its forks keep its command line)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if CHURN.encode() in f.read():
                        out.append(int(d))
            except OSError:
                continue
    return out


def test_every_background_starts_and_leaves_nothing_behind():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no device even where there is one
    env["PYTHONPATH"] = os.path.join(ROOT, "harness")
    # proc and fork's children outlive the probe (asleep for good, and
    # 600 s): churn.py's output ends, and they are gone, only if it killed
    # them (a child left behind holds its stdout open)
    modes = ("idle,live:2,gpu:1,alloc:1,ctx:2,ctxsmall:1,spare:2:0,pair:1:0,ipc:2,"
             "ctx:1+ipc:1,proc:2,fork:3:600,proc:1+fork:2:600")
    try:
        p = subprocess.run([sys.executable, CHURN, "--modes", modes, "--secs", "0.5"],
                           capture_output=True, text=True, timeout=120, env=env)
    finally:
        left = _churn_processes()
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    assert left == [], "churn.py left processes running"
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == [f"{m}: the probe made no context (no CUDA device?)"
                                     for m in modes.split(",")], p.stdout
    bad = subprocess.run([sys.executable, CHURN, "--modes", "nonsense:1"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert bad.returncode != 0 and "unknown background 'nonsense:1'" in bad.stderr
