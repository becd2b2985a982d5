"""Fault: kill the parent (the zygote, or the worker in fresh mode), the
worker itself and the judge.

Targets are limited to this task's own process tree (ancestors whose command
line mentions kgym, and the siblings: the judge), so that even if the uid
switch failed this could not hit anything else on the machine. Every kill
must fail with EPERM: the candidate runs as another uid.
"""
import os
import signal

import torch.nn as nn


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _targets():
    me = os.getpid()
    parent = os.getppid()
    out = {parent: "parent"}
    pid = parent
    while pid > 1:  # ancestors that are kgym's
        pid = _ppid(pid)
        if pid > 1 and "kgym" in _cmdline(pid):
            out.setdefault(pid, "ancestor")
    for d in os.listdir("/proc"):  # siblings: the judge, other tasks' children
        if d.isdigit() and int(d) != me:
            try:
                if _ppid(int(d)) == parent:
                    out.setdefault(int(d), "sibling")
            except (OSError, ValueError, IndexError):
                pass
    return out


SIBLINGS_LISTED = 4  # the rest are counted: a fault before this one may
                     # leave hundreds of zombies, and the message is capped


def _report(outcomes):
    """Every kill that worked, the parent and ancestors, a few siblings and
    the other siblings counted by outcome: what the test reads stays within
    the harness's message cap however many siblings there are."""
    first = [f"{w} {p} {o}" for p, w, o in outcomes if o == "KILLED"]
    first += [f"{w} {p} {o}" for p, w, o in outcomes if o != "KILLED" and w != "sibling"]
    sibs = [(p, o) for p, w, o in outcomes if o != "KILLED" and w == "sibling"]
    first += [f"sibling {p} {o}" for p, o in sibs[:SIBLINGS_LISTED]]
    rest = {}
    for _, o in sibs[SIBLINGS_LISTED:]:
        rest[o] = rest.get(o, 0) + 1
    first += [f"{n} more siblings {o}" for o, n in sorted(rest.items())]
    return "; ".join(first)


class ModelNew(nn.Module):
    def forward(self, x):
        outcomes = []
        for pid, what in sorted(_targets().items()):
            try:
                os.kill(pid, signal.SIGKILL)
                outcomes.append((pid, what, "KILLED"))
            except OSError as e:
                outcomes.append((pid, what, f"{e.__class__.__name__}({e.errno})"))
        raise RuntimeError("KILL_PARENT " + _report(outcomes))
