"""Fault: the process exits with status 0 in the middle of forward, as if it
had finished cleanly."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(0)
