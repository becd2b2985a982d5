"""Fault: leave files outside the private work dir, where the next task (or
anyone) finds them: /tmp, /var/tmp, /dev/shm (tmpfs: memory). Each file is
small and named kgymfaults-escape-<pid> so that the test can find and remove
it. Ideally every write fails or nothing survives the task."""
import os

import torch.nn as nn

PLACES = ["/tmp", "/var/tmp", "/dev/shm"]


class ModelNew(nn.Module):
    def forward(self, x):
        report = []
        for d in PLACES:
            path = os.path.join(d, f"kgymfaults-escape-{os.getpid()}")
            try:
                with open(path, "w") as f:
                    f.write("left behind by a candidate\n")
                report.append(f"{path} WRITTEN")
            except OSError as e:
                report.append(f"{path} {e.__class__.__name__}({e.errno})")
        raise RuntimeError("ESCAPE_FILES " + "; ".join(report))
