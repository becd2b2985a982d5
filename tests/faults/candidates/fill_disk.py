"""Fault: fill the disk from forward (a huge file in the private work dir).

The task's private tmpfs (its disk quota, 1 GiB) must stop it with ENOSPC,
or RLIMIT_FSIZE with EFBIG (Python ignores SIGXFSZ). It reports the file
system its work dir is on: tmpfs means the host's disk was never touched.
Bounded here too: it never writes more than CAP bytes.
"""
import os

import torch.nn as nn

CHUNK = 64 << 20
CAP = 4 << 30


def _fs_of(path):
    """Type of the mount that holds path (longest mount point prefix)."""
    best, fs = "", "?"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, right = line.split(" - ", 1)
                point = left.split()[4]
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, fs = point, right.split()[0]
    except (OSError, ValueError, IndexError):
        pass
    return fs


class ModelNew(nn.Module):
    def forward(self, x):
        d = os.environ.get("TMPDIR") or os.getcwd()
        path = os.path.join(d, "fill.bin")
        fs = _fs_of(os.path.realpath(d))
        block = b"\xab" * CHUNK
        written = 0
        try:
            with open(path, "wb") as f:
                while written < CAP:
                    written += f.write(block)
                    f.flush()
        except OSError as e:
            raise RuntimeError(f"FILL_DISK written={written} fs={fs} stopped by: {e}") from None
        raise RuntimeError(f"FILL_DISK written={written} fs={fs}: no limit stopped it")
