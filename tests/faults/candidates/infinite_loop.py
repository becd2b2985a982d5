"""Fault: a busy infinite loop inside forward (burns a core until killed)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        n = 0
        while True:
            n += 1
