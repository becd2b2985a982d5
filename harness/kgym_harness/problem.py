"""The reference (the problem) as the judge runs it: what its code must
produce, and how its failures are told from the candidate's.

A failure in the reference's own code or data is verdict problem_error
(PROBLEM_ERROR; error.phase `reference:<what>`), never the candidate's:
importing it, get_init_inputs() / get_inputs() raising or returning
something that is not a list or tuple, inputs the channel cannot carry
(check_inputs: the limits below), Model(...) or forward raising or
returning something no candidate could match (check_output), and the
reference ending the judge's process (os._exit, a crash): the judge writes
the phase it is in to a marker file (Marker) before it runs reference code
and clears it after, and the worker (src/worker/engine_result.c) or the launcher
that finds the judge gone without a result frame reads it (read_mark).

Not problem_error: a CUDA error or an allocation failure in reference code
(the device and the judge's memory are shared with what the candidate
sends and does, so it does not prove the problem broken: infra_error /
REFERENCE_ERROR, retried), and a reference too slow for the time limit
(timeout, as before).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import Any, Iterator

import torch

from . import loader, schema
from .frame import MARK_FILE, MARK_SIZE, read_mark  # noqa: F401 - read_mark: the readers'
from .channel import DTYPES, MAX_MESSAGE_BYTES, MAX_NDIM, MAX_TENSORS

# What one run message can carry (channel.py, remote.py): at most 256
# tensors and a JSON header of at most 1 MiB. The bounds on arguments,
# values and text keep the header well inside it (4096 numbers of at most
# ~25 characters, 64 KiB of text even if every character is escaped).
MAX_ARGS = 256           # top-level arguments (remote.MAX_INPUTS: the guard's indices)
MAX_VALUES = 4096        # values in all: tensors, numbers, strings, None, nested lists
MAX_DEPTH = 16           # nesting of lists and tuples (channel.unpack allows 32)
MAX_TEXT = 64 * 1024     # characters of strings in all
MAX_INT = 2 ** 63        # ints must fit 64 bits (the candidate's JSON parser)

BLAME = schema.PROBLEM_BLAME


class ReferenceFailed(Exception):
    """The reference's code or data failed in phase (reference:<what>).
    infra: the failure does not prove the problem broken (a CUDA error, an
    allocation failure): infra_error / REFERENCE_ERROR instead."""

    def __init__(self, phase: str, etype: str, message: str, tb: str = "",
                 frames: list | None = None, infra: bool = False):
        super().__init__(message)
        self.phase, self.type, self.message = phase, etype, message
        self.traceback, self.frames, self.infra = tb, frames or [], infra


def failed(phase: str, exc: BaseException, what: str) -> ReferenceFailed:
    """ReferenceFailed for an exception raised by reference code (what: the
    call, e.g. "get_inputs()")."""
    if isinstance(exc, ReferenceFailed):
        return exc
    infra = _not_proof(exc)
    if isinstance(exc, SystemExit):
        text = f"{what} exited (SystemExit: {exc.code!r})"
    else:
        text = f"{what} raised {type(exc).__name__}: {loader.safe_str(exc)}"
    if infra:
        message = (f"the reference failed: {text} (a device error or an allocation failure, "
                   "which the device and memory shared with the candidate can cause: not "
                   "taken as proof that the problem is broken)")
    else:
        message = f"{BLAME}: {text}"
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # noqa: BLE001 - an exception whose text fights back
        tb = ""
    return ReferenceFailed(phase, type(exc).__name__, message[:loader.MAX_MESSAGE],
                           tb[-loader.MAX_TRACEBACK:], loader.frames_of(exc, None), infra)


_ALLOC_FAILED = ("can't allocate memory", "Cannot allocate memory")


def _not_proof(exc: BaseException) -> bool:
    """A CUDA error or an allocation failure (host or device): the device
    and the judge's address space are shared with what the candidate sends
    and does, so the reference's failure does not prove it broken."""
    chain = loader._chain(exc)
    if loader._cuda_error(chain) is not None:
        return True
    return any(isinstance(e, (MemoryError, torch.OutOfMemoryError))
               or any(t in loader.safe_str(e) for t in _ALLOC_FAILED) for e in chain)


def bad(phase: str, etype: str, text: str) -> ReferenceFailed:
    """ReferenceFailed for something the reference returned."""
    return ReferenceFailed(phase, etype, f"{BLAME}: {text}"[:loader.MAX_MESSAGE])


# ---- the phase marker ------------------------------------------------------

class Marker:
    """The phase the judge is in while it runs reference code, in the file
    MARK_FILE of directory (the judge's TMPDIR), for whoever finds the judge
    dead without a result frame. One fixed-size record written in place
    (pwrite on a descriptor kept open: a few microseconds), never inside a
    timed call. A directory that cannot take the file leaves the marker
    off (a death there stays the worker's CHILD_DIED)."""

    def __init__(self, directory: str | None):
        self.directory = directory  # the file is made at the first phase said
        self.fd = -1
        self.phase: str | None = None

    def _open(self) -> None:
        directory, self.directory = self.directory, None  # one try
        if not directory:
            return
        try:
            self.fd = os.open(os.path.join(directory, MARK_FILE),
                              os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError:
            self.fd = -1

    def set(self, phase: str | None) -> str | None:
        """Says phase (None: none); returns the phase it replaces."""
        prev, self.phase = self.phase, phase
        if phase is not None and self.fd < 0 and self.directory:
            self._open()
        if self.fd >= 0 and phase != prev:
            rec = (phase or "").encode("ascii", "replace")[:MARK_SIZE - 1]
            try:
                os.pwrite(self.fd, rec.ljust(MARK_SIZE, b"\0"), 0)
            except OSError:
                pass
        return prev

    @contextlib.contextmanager
    def mark(self, phase: str) -> Iterator[None]:
        prev = self.set(phase)
        try:
            yield
        finally:
            self.set(prev)

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = -1


@contextlib.contextmanager
def running(marker: Marker, phase: str, what: str) -> Iterator[None]:
    """Reference code runs inside: the marker says phase, and whatever it
    raises (SystemExit included) becomes ReferenceFailed."""
    prev = marker.set(phase)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise failed(phase, e, what) from None
    finally:
        marker.set(prev)


# ---- what the reference must produce ----------------------------------------

def _kind(v: Any) -> str:
    return "None" if v is None else f"a {type(v).__name__}"


def _where(path: list) -> str:
    return "args" + "".join(f"[{i}]" for i in path)


def as_list(value: Any, what: str, phase: str) -> list:
    """get_inputs() / get_init_inputs()'s value, which must be a list or a
    tuple (a dict, a string or None would otherwise be taken apart or
    fail somewhere later)."""
    if not isinstance(value, (list, tuple)):
        raise bad(phase, "ProblemError", f"{what} returned {_kind(value)}, "
                  "not a list or tuple")
    return list(value)


def _tensor_problem(t: torch.Tensor) -> str | None:
    if t.layout != torch.strided or t.is_nested:
        return f"a {t.layout} tensor; only dense (strided) tensors can be sent"
    if t.dtype not in DTYPES.values():
        return (f"a tensor of dtype {str(t.dtype).replace('torch.', '')}, which the channel "
                f"does not carry (it carries {', '.join(DTYPES)})")
    if t.dim() > MAX_NDIM:
        return f"a tensor of {t.dim()} dimensions (at most {MAX_NDIM})"
    if t.is_meta:
        return "a meta tensor (a shape without data)"
    return None


_EXIT = object()  # on _walk's stack: the container below is done


def _walk(value: Any, phase: str, what: str, leaf_check: Any) -> int:
    """Checks a structure of lists/tuples and leaves against the channel's
    limits (no cycle, depth, counts, types; leaf_check(tensor) says what is
    wrong with a tensor, or None). Returns the number of tensors. Stops at
    the first limit passed, before looking at the rest."""
    tensors = values = text = 0
    on_path: set[int] = set()  # the containers from the top down to here
    stack: list[Any] = [(value, [])]
    while stack:
        item = stack.pop()
        if item[0] is _EXIT:
            on_path.discard(item[1])
            continue
        v, path = item
        if isinstance(v, (list, tuple)):
            if id(v) in on_path:
                raise bad(phase, "ProblemError", f"{what} returned a structure that contains "
                          f"itself ({_where(path)})")
            if len(path) >= MAX_DEPTH:
                raise bad(phase, "ProblemError", f"{what} returned lists nested more than "
                          f"{MAX_DEPTH} deep ({_where(path)})")
            values += len(v)
            if values > MAX_VALUES:
                raise bad(phase, "ProblemError", f"{what} returned more than {MAX_VALUES} "
                          f"values in all (tensors, numbers, strings, nested lists); at most "
                          f"{MAX_VALUES} can be sent to the candidate")
            on_path.add(id(v))
            stack.append((_EXIT, id(v)))
            for i in range(len(v) - 1, -1, -1):
                stack.append((v[i], path + [i]))
            continue
        if isinstance(v, torch.Tensor):
            tensors += 1
            if tensors > MAX_TENSORS:
                raise bad(phase, "ProblemError", f"{what} returned more than {MAX_TENSORS} "
                          f"tensors; at most {MAX_TENSORS} can be sent to the candidate")
            problem = leaf_check(v)
            if problem:
                raise bad(phase, "ProblemError", f"{what} returned {problem} ({_where(path)})")
            continue
        if v is None or isinstance(v, (bool, float)):
            continue
        if isinstance(v, int):
            if not -MAX_INT <= v < MAX_INT:
                raise bad(phase, "ProblemError", f"{what} returned an int that does not fit "
                          f"64 bits ({_where(path)})")
            continue
        if isinstance(v, str):
            text += len(v)
            if text > MAX_TEXT:
                raise bad(phase, "ProblemError", f"{what} returned more than {MAX_TEXT} "
                          "characters of strings")
            continue
        raise bad(phase, "ProblemError", f"{what} returned a {type(v).__name__} at "
                  f"{_where(path)}, which cannot be sent to the candidate (tensors, numbers, "
                  "strings, None and lists or tuples of them can)")
    return tensors


def check_inputs(inputs: Any, what: str = "get_inputs()") -> None:
    """Raises ReferenceFailed (reference:get_inputs) unless the channel can
    carry inputs to the candidate as they are: a list or tuple of at most
    MAX_ARGS arguments; at most MAX_TENSORS tensors and MAX_VALUES values
    in all, nested at most MAX_DEPTH deep, no structure containing itself;
    tensors dense, of an allowed dtype, at most MAX_NDIM dimensions, not
    meta, MAX_MESSAGE_BYTES in all; ints of 64 bits; MAX_TEXT characters."""
    phase = "reference:get_inputs"
    if not isinstance(inputs, (list, tuple)):
        raise bad(phase, "ProblemError", f"{what} returned {_kind(inputs)}, "
                  "not a list or tuple")
    if len(inputs) > MAX_ARGS:
        n = sum(1 for v in inputs if isinstance(v, torch.Tensor))
        raise bad(phase, "ProblemError", f"{what} returned {len(inputs)} arguments ({n} "
                  f"tensors); at most {MAX_ARGS} arguments, {MAX_TENSORS} tensors and "
                  f"{MAX_VALUES} values in all can be sent to the candidate")
    _walk(inputs, phase, what, _tensor_problem)
    total = sum(t.numel() * t.element_size() for t in _tensors(inputs))
    if total > MAX_MESSAGE_BYTES:
        raise bad(phase, "ProblemError", f"{what} returned {total / 2**30:.1f} GiB of tensors "
                  f"(at most {MAX_MESSAGE_BYTES / 2**30:.0f} GiB can be sent to the candidate)")


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors of a structure check_inputs has accepted (no cycle)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def check_output(out: Any, device: str) -> None:
    """Raises ReferenceFailed (reference:forward) unless out is what a
    candidate could return and the judge compare: a tensor, or lists and
    tuples of tensors and plain values (at least one tensor), every tensor
    a plain dense one on the device (guards.output_problem's rule for
    candidates), of a dtype the channel carries, within the same counts
    as inputs."""
    from .guards import output_problem
    phase, what = "reference:forward", "forward"

    def leaf(t: torch.Tensor) -> str | None:
        found = output_problem(t, device)
        if found is not None:
            return found[1].removeprefix("forward returned ")
        return _tensor_problem(t)
    if isinstance(out, torch.Tensor):
        problem = leaf(out)
        if problem:
            raise bad(phase, "ProblemError", f"{what} returned {problem}")
        return
    if not isinstance(out, (list, tuple)):
        raise bad(phase, "ProblemError", f"{what} returned {_kind(out)}, not a tensor "
                  "or a tuple of tensors: no tensor to compare a kernel's output with")
    if _walk(out, phase, what, leaf) == 0:
        raise bad(phase, "ProblemError", f"{what} returned no tensor (a {type(out).__name__} "
                  "of plain values): nothing to compare a kernel's output with")
