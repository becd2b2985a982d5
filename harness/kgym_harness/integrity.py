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

import os
import sys
import time
import types
from typing import Any

import torch

_HARNESS_MODULES = ("kgym_harness.timing", "kgym_harness.lead", "kgym_harness.hooks",
                    "kgym_harness.candidate", "kgym_harness.channel",
                    "kgym_harness.profiling", "kgym_harness.integrity",
                    "kgym_harness.loader", "kgym_harness.guards",
                    "kgym_harness.quiet", "kgym_harness.wallclock", "kgym_harness.cupti")
# Instance attributes of quiet.LEDGER: the thread-start hook and what it
# looks for must stay; a method shadowed on the instance is a replacement.
_LEDGER_ATTRS = ("forward_code", "original", "joinable")
_LEDGER_METHODS = ("report", "_record", "_ended", "_on_main_stack", "install")


def _targets() -> list[tuple[str, Any, str]]:
    """(display name, owner, attribute) triples to watch."""
    out: list[tuple[str, Any, str]] = []
    import _thread
    import threading
    for owner, name in ((_thread, "start_new_thread"), (threading, "_start_new_thread"),
                        (_thread, "start_joinable_thread"),
                        (threading, "_start_joinable_thread")):
        if hasattr(owner, name):
            out.append((f"{owner.__name__}.{name}", owner, name))
    quiet = sys.modules.get("kgym_harness.quiet")
    ledger = getattr(quiet, "LEDGER", None)
    if ledger is not None:
        out += [(f"quiet.LEDGER.{a}", ledger, a) for a in _LEDGER_ATTRS]
        out += [(f"quiet.LEDGER.{m} (instance)", vars(ledger), m) for m in _LEDGER_METHODS]
    for attr in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                 "time", "time_ns", "process_time_ns"):
        out.append((f"time.{attr}", time, attr))
    out.append(("os.urandom", os, "urandom"))  # the spot checks' and ablation's CSPRNG
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
    out += _profiler_targets()
    # what the candidate's replies (timing samples included) are written
    # with: a wrapped json.dumps or socket send could rewrite the numbers
    import json
    import json.encoder
    import socket
    for attr in ("dumps", "loads", "_default_encoder"):
        out.append((f"json.{attr}", json, attr))
    for attr in ("encode", "iterencode", "default"):
        out.append((f"json.JSONEncoder.{attr}", json.JSONEncoder, attr))
    for attr in ("c_make_encoder", "encode_basestring", "encode_basestring_ascii"):
        if hasattr(json.encoder, attr):
            out.append((f"json.encoder.{attr}", json.encoder, attr))
    for attr in ("sendall", "send", "sendmsg", "recv", "recv_into", "recvmsg"):
        out.append((f"socket.socket.{attr}", socket.socket, attr))
    for attr in ("randn", "rand", "randint", "randn_like", "rand_like", "randint_like",
                 "normal", "randperm", "zeros", "ones", "empty", "full", "arange",
                 "linspace", "tensor", "as_tensor", "from_numpy"):
        out.append((f"torch.{attr}", torch, attr))
    ref = sys.modules.get("kgym_reference")
    if ref is not None:
        for attr, value in list(vars(ref).items()):
            if callable(value) and not isinstance(value, types.ModuleType):
                out.append((f"reference.{attr}", ref, attr))
    for modname in _HARNESS_MODULES:
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if isinstance(value, types.ModuleType):
                continue
            if callable(value) or attr in ("RECORDER", "LEDGER"):
                out.append((f"{modname}.{attr}", mod, attr))
            if isinstance(value, type) and value.__module__.startswith("kgym_harness"):
                for name, member in list(vars(value).items()):
                    if isinstance(member, types.FunctionType):
                        out.append((f"{modname}.{attr}.{name}", value, name))
            if isinstance(value, dict) and attr.isupper():
                for key in list(value):
                    if isinstance(key, str) and callable(value[key]):
                        out.append((f"{modname}.{attr}[{key}]", value, key))
    return out


PROFILER_PREFIX = "torch.profiler:"


def _profiler_targets() -> list[tuple[str, Any, str]]:
    """What profiling.profile_cuda reads its rows through: the profiler
    classes' methods (along their bases) and autograd's start/stop
    functions; a replaced one can forge the profile (profile_forgery)."""
    import torch.autograd.profiler as ap
    out: list[tuple[str, Any, str]] = []
    for cls in (getattr(torch.profiler, "profile", None), getattr(ap, "profile", None)):
        for klass in getattr(cls, "__mro__", ())[:-1]:
            for name, member in list(vars(klass).items()):
                if isinstance(member, types.FunctionType):
                    out.append((f"{PROFILER_PREFIX}{klass.__module__}.{klass.__name__}.{name}",
                                klass, name))
    for attr in ("_enable_profiler", "_disable_profiler", "_prepare_profiler",
                 "_supported_activities", "_kineto_step"):
        if hasattr(ap, attr):
            out.append((f"{PROFILER_PREFIX}torch.autograd.profiler.{attr}", ap, attr))
    return out


def _get(owner: Any, attr: str) -> Any:
    if isinstance(owner, dict):
        return owner.get(attr)
    if isinstance(owner, type):
        return owner.__dict__.get(attr)
    return getattr(owner, attr, None)


def _code(obj: Any) -> Any:
    return getattr(obj, "__code__", None) if isinstance(obj, types.FunctionType) else None


class Snapshot:
    """Identities (and code objects) captured at one moment; see changed()."""

    def __init__(self) -> None:
        self._items = []
        for name, owner, attr in _targets():
            obj = _get(owner, attr)
            self._items.append((name, owner, attr, obj, _code(obj)))

    def changed(self) -> list[str]:
        out = []
        for name, owner, attr, obj, code in self._items:
            now = _get(owner, attr)
            if now is not obj or _code(now) is not code:
                out.append(name)
        return out
