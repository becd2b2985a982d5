"""Fault: a fork bomb inside forward.

Every child sleeps (it never returns into the harness) so that the processes
pile up until RLIMIT_NPROC or the pids cgroup refuses the next fork. Bounded
here too: if the limits failed, it would stop after MAX_FORKS forks and the
children die on their own after a minute.
"""
import os
import time

import torch.nn as nn

MAX_FORKS = 2000


class ModelNew(nn.Module):
    def forward(self, x):
        n, err = 0, None
        while n < MAX_FORKS:
            try:
                pid = os.fork()
            except OSError as e:
                err = e
                break
            if pid == 0:
                try:
                    time.sleep(60)
                finally:
                    os._exit(0)
            n += 1
        raise RuntimeError(f"FORKBOMB forks={n} stopped by: {err}")
