"""Fault: open network connections from forward.

PORT is replaced by the test with a port it listens on at 127.0.0.1 in the
worker's network namespace; the candidate, in its own empty namespace, must
not reach it (nor anything else).
"""
import socket

import torch.nn as nn

PORT = 0  # set by the test
TARGETS = [("127.0.0.1", PORT), ("8.8.8.8", 53), ("1.1.1.1", 443)]


class ModelNew(nn.Module):
    def forward(self, x):
        report = []
        for host, port in TARGETS:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(3)
            try:
                s.connect((host, port))
                s.sendall(b"KGYM-NETWORK-ESCAPE\n")
                report.append(f"{host}:{port} CONNECTED")
            except OSError as e:
                report.append(f"{host}:{port} blocked ({e})")
            finally:
                s.close()
        raise RuntimeError("NETWORK " + "; ".join(report))
