"""Where a process's time went, for diagnostics: CPU time and time spent
runnable but waiting for a CPU (the run queue), since the process began
(a forked child's counters start at its fork).

A warm spare or a task that takes longer at --concurrency 4 than alone is
either waiting for a CPU (run-queue time grows: the machine's CPUs are
oversubscribed), doing more work (CPU time grows), or blocked (neither
grows: a lock, the driver, the device). Wall minus CPU minus run queue is
the time blocked. The modules imported since the fork count too: on the
H200 the installed packages have no .pyc files and children write none,
so each module a child imports is compiled from source."""

from __future__ import annotations

import os
import resource
import sys

_BASE = [0]  # modules already imported at the fork (the zygote's)
_NAMES: list[frozenset] = [frozenset()]  # and their names


def mark_fork() -> None:
    """Called in a freshly forked child: what it imports from now on is its own."""
    _BASE[0] = len(sys.modules)
    _NAMES[0] = frozenset(sys.modules)


def imported(limit: int = 24) -> dict[str, int]:
    """The modules this process imported since mark_fork, counted by
    package (their first two name parts), most first, at most limit
    packages: what a zygote-side import would spare the children
    (zygote._preimport)."""
    by: dict[str, int] = {}
    for name in set(sys.modules) - _NAMES[0]:
        key = ".".join(name.split(".")[:2])
        by[key] = by.get(key, 0) + 1
    return dict(sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:limit])


def sample() -> list[float]:
    """[CPU ms, run-queue ms, modules imported] of this process so far: CPU
    from getrusage (every thread, exited ones too), run-queue wait summed
    over the live threads' /proc/self/task/*/schedstat (-1 where the kernel
    does not keep it), modules since mark_fork (all of them without it)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r.ru_utime + r.ru_stime) * 1e3
    mods = float(len(sys.modules) - _BASE[0])
    runq = 0.0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return [round(cpu, 1), -1.0, mods]
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                runq += int(f.read().split()[1]) / 1e6
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return [round(cpu, 1), round(runq, 1), mods]
