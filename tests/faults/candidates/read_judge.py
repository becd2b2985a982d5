"""Fault: read the judge's secrets.

Tries /proc/<pid>/environ, mem, maps, cwd, root and fd/ of the judge (its
siblings) and the parent, every other task's work dir (kgym-*) next to
its own and under /tmp, and the judge's cache dir. Everything of the judge
(root) must be refused; a readable dir owned by this same uid (another
candidate's) is reported apart. Everything must be refused.
"""
import glob
import os

import torch.nn as nn


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _try(what, fn):
    try:
        data = fn()
    except OSError as e:
        return f"{what}: {e.__class__.__name__}({e.errno})", False
    return f"{what}: READ {len(data)}", True


def _owner(path):
    try:
        return os.stat(path).st_uid
    except OSError:
        return -1


class ModelNew(nn.Module):
    def forward(self, x):
        me, parent = os.getpid(), os.getppid()
        pids = {parent}
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != me:
                try:
                    if _ppid(int(d)) == parent:
                        pids.add(int(d))
                except (OSError, ValueError, IndexError):
                    pass
        report, leaks, same_uid = [], [], []
        for pid in sorted(pids):
            probes = [
                ("environ", lambda p=pid: open(f"/proc/{p}/environ", "rb").read()),
                ("mem", lambda p=pid: open(f"/proc/{p}/mem", "rb").read(16)),
                ("maps", lambda p=pid: open(f"/proc/{p}/maps", "rb").read()),
                ("cwd", lambda p=pid: os.listdir(f"/proc/{p}/cwd")),
                ("root", lambda p=pid: os.listdir(f"/proc/{p}/root/root")),
                ("fd", lambda p=pid: os.listdir(f"/proc/{p}/fd")),
            ]
            for name, fn in probes:
                line, ok = _try(f"{pid}/{name}", fn)
                report.append(line)
                if ok:
                    leaks.append(line)
        mine = os.path.realpath(os.getcwd())
        dirs = set(glob.glob(os.path.join(os.path.dirname(mine), "kgym-*")))
        dirs |= set(glob.glob("/tmp/kgym-*"))
        for d in sorted(dirs):
            if os.path.realpath(d) == mine or not os.path.isdir(d):
                continue
            if d.endswith("kgym-cache"):  # shared caches: only the judge's is private
                d = os.path.join(d, "judge")
            line, ok = _try(d, lambda d=d: os.listdir(d))
            report.append(line)
            if ok and _owner(d) == os.getuid():
                same_uid.append(line)  # another candidate's: same uid (see the test)
            elif ok:
                leaks.append(line)
        raise RuntimeError(f"READ_JUDGE leaks={len(leaks)} [{'; '.join(leaks)}] "
                           f"same_uid={len(same_uid)} [{'; '.join(same_uid)}] "
                           f"tried: {'; '.join(report)}")
