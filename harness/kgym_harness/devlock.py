"""The per-device lock: shared for correctness work, exclusive for measuring.

The worker names one lock file per device (task["device_lock"]). Every judge
opens it itself and takes flock(LOCK_SH) around GPU correctness work (several
evaluations may share the device then) and flock(LOCK_EX) around timing and
profiling, so measurements see an otherwise idle device.

flock alone lets a stream of shared holders starve an exclusive waiter. A
turnstile orders them: a shared taker passes through it (takes it
exclusively, takes LOCK_SH, releases it at once); an exclusive taker holds
it while it waits for LOCK_EX. Once an exclusive taker is waiting, later
shared takers queue behind it. The turnstile is a POSIX record lock
(lockf) on byte 0 of the same file, which on Linux is independent of the
flock lock: no second file is left next to the lock file. (Record locks
belong to the process and go when it closes any descriptor of the file:
each judge opens the file once and is its only user in the process.)

A timing phase also says it is coming (intend): a shared record lock on
byte 1, from its warm-up (under the shared lock) until its exclusive hold
is granted. A warm spare's holds are work no task waits for, so before each
one it yields (yield_to_timing): it waits until no one intends to time,
YIELD_MAX_S in all over the lock's life (timing phases queued back to back
would otherwise keep a spare's 80 holds waiting one after another). An
exclusive taker then drains only what tasks hold.

Waits poll with LOCK_NB (short back-off) so that a deadline can end them.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Callable

POLL_MIN_S = 0.0005
POLL_MAX_S = 0.001  # a waiter sees a release within 1 ms (the device idles meanwhile)
YIELD_MAX_S = 2.0   # a spare waits for timing phases to start at most this long in all


class LockTimeout(Exception):
    """The device lock could not be had before the deadline."""


class DeviceLock:
    """Reader/writer lock on one lock file; a no-op when path is None."""

    def __init__(self, path: str | None):
        self.path = path or None
        self.fd = -1
        self.mode: str | None = None  # None, "shared" or "exclusive"
        self.waited_ms = 0.0
        # where the waits went: for shared, for the turnstile as an exclusive
        # taker (other exclusive takers ahead), for the shared holders to
        # finish once it was ours (the drain)
        self.waits_ms = {"shared": 0.0, "exclusive_queue": 0.0, "exclusive_drain": 0.0}
        self.held_ms = {"shared": 0.0, "exclusive": 0.0}  # time held, by mode
        self._since = 0.0
        self.error: str | None = None
        # KGYM_LOCK_TRACE=1 (diagnosis): every hold as [label, mode, asked,
        # got, released], ms of CLOCK_MONOTONIC (one clock for all processes)
        self.trace: list | None = [] if os.environ.get("KGYM_LOCK_TRACE") == "1" else None
        self.label = ""
        self._asked = 0.0
        self.intending = False
        self.yielded_ms = 0.0  # a spare's waits for timing phases (yield_to_timing)
        # called with True once an exclusive hold is granted, False as it ends
        # (the judge tells its worker: the timing pair's CPU priority)
        self.on_exclusive: Callable[[bool], None] | None = None

    def _open(self) -> bool:
        if self.path is None or self.error is not None:
            return False
        if self.fd >= 0:
            return True
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            self.error = f"device lock {self.path}: {e}"
            self.close()
            return False
        return True

    @staticmethod
    def _take(lock: Callable[[int], None], op: int, deadline: float | None) -> None:
        delay = POLL_MIN_S
        while True:
            try:
                lock(op | fcntl.LOCK_NB)
                return
            except (BlockingIOError, PermissionError):  # lockf says EACCES or EAGAIN
                pass
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout("the device stayed busy (lock held by other evaluations)")
            time.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)

    def shared(self, deadline: float | None = None, label: str = "") -> None:
        self._acquire("shared", deadline, label)

    def exclusive(self, deadline: float | None = None, label: str = "") -> None:
        self._acquire("exclusive", deadline, label)

    def _acquire(self, mode: str, deadline: float | None, label: str = "") -> None:
        if self.mode == mode or not self._open():
            return
        self.release()
        self.label = label
        self._asked = time.monotonic()
        t0 = time.perf_counter()
        fd = self.fd

        def turnstile(op: int) -> None:
            fcntl.lockf(fd, op, 1, 0)

        def main(op: int) -> None:
            fcntl.flock(fd, op)
        t1 = t0
        try:
            self._take(turnstile, fcntl.LOCK_EX, deadline)
            t1 = time.perf_counter()
            try:
                self._take(main, fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX,
                           deadline)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        finally:
            t2 = time.perf_counter()
            self.waited_ms += (t2 - t0) * 1e3
            if mode == "shared":
                self.waits_ms["shared"] += (t2 - t0) * 1e3
            else:
                self.waits_ms["exclusive_queue"] += (t1 - t0) * 1e3
                self.waits_ms["exclusive_drain"] += (t2 - t1) * 1e3
        self.mode = mode
        self._since = time.perf_counter()
        if mode == "exclusive":
            self.unintend()  # granted: later takers queue at the turnstile
            if self.on_exclusive is not None:
                self.on_exclusive(True)

    def intend(self) -> None:
        """Say a timing phase is coming (byte 1, shared; see the module's
        text). Ends at the next exclusive grant, or unintend()."""
        if self.intending or not self._open():
            return
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_SH, 1, 1)  # waits only for a spare's probe
            self.intending = True
        except OSError:
            pass

    def unintend(self) -> None:
        if self.intending and self.fd >= 0:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, 1)
            except OSError:
                pass
        self.intending = False

    def yield_to_timing(self, deadline: float | None = None) -> None:
        """Wait until no one intends to time (a probe of byte 1, taken
        exclusively and let go), not past deadline, and YIELD_MAX_S in all
        over this lock's calls (yielded_ms)."""
        if not self._open():
            return
        t0 = time.monotonic()
        left = YIELD_MAX_S - self.yielded_ms / 1e3
        if left <= 0:
            return
        end = t0 + left if deadline is None else min(deadline, t0 + left)
        fd = self.fd

        def probe(op: int) -> None:
            fcntl.lockf(fd, op, 1, 1)
        try:
            self._take(probe, fcntl.LOCK_EX, end)
            probe(fcntl.LOCK_UN)
        except (LockTimeout, OSError):  # waited long enough, or no probe: go on
            pass
        self.yielded_ms += (time.monotonic() - t0) * 1e3

    def release(self) -> None:
        if self.mode is not None and self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            if self.mode == "exclusive" and self.on_exclusive is not None:
                self.on_exclusive(False)
            held = time.perf_counter() - self._since
            self.held_ms[self.mode] += held * 1e3
            if self.trace is not None and len(self.trace) < 500:
                now = time.monotonic()
                self.trace.append([self.label, self.mode[0], round(self._asked * 1e3, 2),
                                   round((now - held) * 1e3, 2), round(now * 1e3, 2)])
        self.mode = None

    def close(self) -> None:
        """Release and close the file (closing alone would release too)."""
        self.release()
        self.unintend()
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = -1
