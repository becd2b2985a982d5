"""Fault: forward blocks forever without using the CPU (no CPU-time limit
helps here: only the wall clock does)."""
import threading

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        threading.Event().wait()
        return x
