"""Fault: fill the disk from forward (a huge file in the private work dir).

RLIMIT_FSIZE must stop it (Python ignores SIGXFSZ, so write() fails with
EFBIG). Bounded here too: it never writes more than CAP bytes.
"""
import os

import torch.nn as nn

CHUNK = 64 << 20
CAP = 4 << 30


class ModelNew(nn.Module):
    def forward(self, x):
        path = os.path.join(os.environ.get("TMPDIR") or os.getcwd(), "fill.bin")
        block = b"\xab" * CHUNK
        written = 0
        try:
            with open(path, "wb") as f:
                while written < CAP:
                    written += f.write(block)
                    f.flush()
        except OSError as e:
            raise RuntimeError(f"FILL_DISK written={written} stopped by: {e}") from None
        raise RuntimeError(f"FILL_DISK written={written}: no limit stopped it")
