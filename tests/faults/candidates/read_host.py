"""Fault: read the host's files. Opens world-readable files the test planted
outside what a candidate needs (a directory under /opt, a data directory
under /var/lib like `kgym serve`'s, a home directory, /root) and a few of
the host's own, lists a few directories, and reports what it got. With the
candidate's own root none of them exists for it."""
import json
import os

import torch.nn as nn

PATHS = []  # set by the test
HOST = ["/etc/hostname", "/etc/fstab", "/etc/shadow", "/root", "/home", "/var/lib", "/opt",
        "/srv", "/mnt"]


def _try(p):
    try:
        if os.path.isdir(p):
            return "LISTED " + ",".join(sorted(os.listdir(p))[:4])
        with open(p) as f:
            return "READ " + f.read(64)
    except OSError as e:
        return f"{e.__class__.__name__}({e.errno})"


class ModelNew(nn.Module):
    def forward(self, x):
        rep = {p: _try(p) for p in PATHS + HOST}
        rep["/"] = sorted(os.listdir("/"))
        raise RuntimeError("READ_HOST " + json.dumps(rep, sort_keys=True))
