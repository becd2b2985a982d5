"""Fault: fill the disk with many files, each under RLIMIT_FSIZE.

RLIMIT_FSIZE bounds one file, not the total: this writes 512 MiB files in
the private work dir until CAP (3 GiB, more than the 2 GiB per-file limit)
and reports how much it got. Bounded by CAP whatever happens. The work dir
is removed after the task, so the damage lasts as long as the task.
"""
import os

import torch.nn as nn

CHUNK = 64 << 20
PER_FILE = 512 << 20
CAP = 3 << 30


class ModelNew(nn.Module):
    def forward(self, x):
        d = os.environ.get("TMPDIR") or os.getcwd()
        block = b"\xcd" * CHUNK
        written, err = 0, None
        try:
            i = 0
            while written < CAP:
                with open(os.path.join(d, f"fill{i}.bin"), "wb") as f:
                    for _ in range(PER_FILE // CHUNK):
                        written += f.write(block)
                i += 1
        except OSError as e:
            err = e
        raise RuntimeError(f"FILL_DISK_FILES written={written} stopped by: {err}")
