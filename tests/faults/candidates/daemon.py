"""Fault: leave a background process behind.

Double fork and setsid: the grandchild leaves the task's process group and
session and is reparented (to the zygote, the worker, or init); it then
sleeps. Its pid is in the error message, so the test can check that it is
gone after the task: no process of a task may remain.
"""
import os
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if os.fork() == 0:
                    os.close(r)
                    os.write(w, str(os.getpid()).encode())
                    os.close(w)
                    for fd in (0, 1, 2):
                        try:
                            os.close(fd)
                        except OSError:
                            pass
                    time.sleep(600)
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        daemon = int(os.read(r, 64) or b"0")
        os.close(r)
        raise RuntimeError(f"DAEMON pid={daemon} left behind")
