"""Fault: close every fd (the channel to the judge included) inside forward,
then return normally."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.closerange(0, 1024)
        return x * 2 + 1
