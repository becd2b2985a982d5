"""Fault: look around the file system. Lists /tmp, /var/tmp, /dev/shm and the
directory that holds its own work dir, and tries to write in places anyone
may write on a normal machine. With a private /tmp it sees only the way to
its own work dir and the cache; the rest of the file system is read-only.
Files it manages to write are named kgymfaults-escape-<pid> (the test finds
and removes them)."""
import json
import os

import torch.nn as nn

WORLD = ["/run/lock", "/var/lock", "/var/crash", "/var/mail"]


def _ls(d):
    try:
        return sorted(os.listdir(d))
    except OSError as e:
        return f"{e.__class__.__name__}({e.errno})"


class ModelNew(nn.Module):
    def forward(self, x):
        cwd = os.getcwd()
        rep = {"cwd": cwd, "uid": os.getuid(), "tmp": _ls("/tmp"), "var_tmp": _ls("/var/tmp"),
               "shm": _ls("/dev/shm"), "parent": _ls(os.path.dirname(cwd)), "writes": {}}
        for d in WORLD:
            if not os.path.isdir(d):
                continue
            p = os.path.join(d, f"kgymfaults-escape-{os.getpid()}")
            try:
                with open(p, "w") as f:
                    f.write("left behind by a candidate\n")
                rep["writes"][d] = "WRITTEN"
            except OSError as e:
                rep["writes"][d] = f"{e.__class__.__name__}({e.errno})"
        raise RuntimeError("LIST_TMP " + json.dumps(rep, sort_keys=True))
