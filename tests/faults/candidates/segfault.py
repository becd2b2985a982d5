"""Fault: a segmentation fault inside forward (ctypes write to address 0)."""
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.memset(0, 1, 8)  # SIGSEGV
        return x
