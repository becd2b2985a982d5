"""Fault: kill every other process it can find, over and over for a few
seconds, while another task runs next to it (`kgym eval --concurrency 2`).

Each judge+candidate pair has its own uid, so every kill of another task's
process (the other candidate, the judges, the zygote, the worker) must fail
with EPERM, and kill(-1) reaches only its own uid (its own processes); the other task must
still pass. It reports the candidate uids it saw, which proves the other
task was running next to it under another uid. It refuses to run as root or
as a uid outside kgym's candidate range: there it would hit the machine.
"""
import os
import signal
import time

import torch.nn as nn

LO, HI = 65401, 65499  # kgym's candidate uids (src/worker/engine_impl.h)
SECONDS = 6


def _uid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        me = os.getuid()
        if not LO <= me <= HI:
            raise RuntimeError(f"KILL_OTHERS refused: uid={me} is not a candidate uid")
        mine, self_pid = os.getpgrp(), os.getpid()
        killed, eperm, others, minus_one = set(), 0, set(), 0
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            try:  # everything this uid may signal, but itself
                os.kill(-1, signal.SIGKILL)
                minus_one += 1
            except OSError:
                pass
            for d in os.listdir("/proc"):
                if not d.isdigit() or int(d) == self_pid:
                    continue
                pid = int(d)
                try:
                    if os.getpgid(pid) == mine:
                        continue
                except OSError:
                    continue
                u = _uid(pid)
                if u is not None and u != me and LO <= u <= HI:
                    others.add(u)
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add((pid, u))
                except PermissionError:
                    eperm += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"KILL_OTHERS uid={me} killed={sorted(killed)} kill_minus_1={minus_one} "
                           f"eperm={eperm} other_candidate_uids={sorted(others)}")
