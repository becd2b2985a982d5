"""Identity checks of the functions the harness measures with (timer_tamper).

snapshot() records the identity of every clock, synchronisation and
comparison function the harness relies on, plus every function of the
harness's own candidate-side modules. changed() lists the names whose object
is no longer the same. The candidate side takes the snapshot after its hooks
are installed and before the candidate's code is imported, then checks it
around each phase.

This is the basic version: it catches replacement at the Python level. Code
that patches C functions or this module's own copy is the job of the
trusted-side cross-checks (the judge's wall clock) and of later hardening.
"""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import torch

_HARNESS_MODULES = ("kgym_harness.timing", "kgym_harness.hooks",
                    "kgym_harness.candidate", "kgym_harness.channel",
                    "kgym_harness.profiling", "kgym_harness.integrity",
                    "kgym_harness.loader")


def _targets() -> list[tuple[str, Any, str]]:
    """(display name, owner, attribute) triples to watch."""
    out: list[tuple[str, Any, str]] = []
    for attr in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                 "time", "time_ns", "process_time_ns"):
        out.append((f"time.{attr}", time, attr))
    for attr in ("allclose", "isclose", "equal", "isfinite"):
        out.append((f"torch.{attr}", torch, attr))
    out.append(("torch.Tensor.cpu", torch.Tensor, "cpu"))
    cuda = torch.cuda
    for attr in ("Event", "synchronize", "current_stream", "Stream"):
        out.append((f"torch.cuda.{attr}", cuda, attr))
    event_cls = getattr(cuda, "Event", None)
    if isinstance(event_cls, type):
        for attr in ("record", "elapsed_time", "synchronize", "query"):
            if attr in event_cls.__dict__:
                out.append((f"torch.cuda.Event.{attr}", event_cls, attr))
    out.append(("torch.profiler.profile", torch.profiler, "profile"))
    for modname in _HARNESS_MODULES:
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for attr, value in vars(mod).items():
            if isinstance(value, (types.FunctionType, type)) or attr == "RECORDER":
                out.append((f"{modname}.{attr}", mod, attr))
    return out


def _get(owner: Any, attr: str) -> Any:
    if isinstance(owner, type):
        return owner.__dict__.get(attr)
    return getattr(owner, attr, None)


class Snapshot:
    """Identities captured at one moment; compare later with changed()."""

    def __init__(self) -> None:
        self._items = [(name, owner, attr, _get(owner, attr))
                       for name, owner, attr in _targets()]

    def changed(self) -> list[str]:
        return [name for name, owner, attr, obj in self._items
                if _get(owner, attr) is not obj]
