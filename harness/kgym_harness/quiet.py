"""Work left running after a call returns (the thread_injection family).

A candidate can return from forward early and finish (or keep doing) work
in a thread or process of its own: after a timer stopped, while the judge
times the reference, or into an output already handed over. Two views:

* candidate side, CallWatch: around each checked call, which threads and
  child processes are new, how much CPU the candidate's other Python
  threads, its new native threads and its new children use after the call
  returned, and (through a callback) whether the output changed after it
  was copied. ThreadLedger: every Python thread started while a forward
  call was on its creator's stack, and whether it was still running after
  that call returned (timed calls included, at no cost per call). Their
  verdicts travel in the replies, so they can only accuse.
* judge side, ProcWatch: the candidate's process (learnt from the kernel,
  not from the candidate: SCM_CREDENTIALS of its first reply), its threads,
  its descendants and the members of its session, read from /proc while
  the candidate should be idle, i.e. between a reply and the next command.
  A background thread opens each long gap SETTLE_S after the reply (so a
  thread pool's spin-wait after its last parallel region has ended: libgomp
  spins ~10-25 ms here); the judge closes it before its next command.
  Threads that appeared during a timing command and are still alive after
  its reply are not pool threads (pools exist from the first checked call
  on): their CPU is measured over NEW_WINDOW_S right after the reply.

Both read /proc/<pid>/task/<tid>/schedstat (on-CPU nanoseconds per live
thread) and /proc/<pid>/stat utime+stime (clock ticks, including exited
threads), and never write anything.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

TICK_NS = 10**9 // (os.sysconf("SC_CLK_TCK") or 100)
SETTLE_S = 0.05        # pool spin-wait allowance after the last parallel region
WINDOW_S = 0.01        # the candidate's look at new native threads after settling
QUIET_MIN_S = 0.001    # the candidate's shortest look after every checked call
PY_BUSY_NS = 1_000_000  # CPU of other Python threads after the return that counts
KIDS_BUSY_NS = 2_000_000
NATIVE_BUSY_FRAC = 0.2  # of WINDOW_S, for new native threads after settling
GAP_ABS_MS = 5.0       # judge: idle-gap CPU beyond max(this, GAP_FRAC x gap) counts
GAP_FRAC = 0.1
RUNNABLE_FRAC = 0.5    # judge: or runnable (running or waiting for a CPU) this much of it,
RUNNABLE_MIN_MS = 1.0  # having run more than this: a spinner starved on a loaded machine
FINAL_WINDOW_S = 0.02  # judge: the one explicit window when no gap was long enough
QUIET_STEP_S = 0.005   # its sampling step; it ends early once QUIET_RUN steps
QUIET_RUN = 2          # used less than QUIET_IDLE_NS of CPU in all
QUIET_IDLE_NS = 500_000
NEW_WINDOW_S = 0.01    # judge: look at threads new since a timing command
NEW_BUSY_FRAC = 0.2    # of NEW_WINDOW_S
MIN_FRESH_S = 0.0005   # a gap shorter than this leaves new threads unjudged
LATE_LOOK_S = 0.002    # candidate: look at forward-started threads still alive
MAX_PROCS = 64
MAX_LEDGER = 4096
THREAD_CHECKS = ("watch", "ledger")


def thread_checks() -> frozenset[str]:
    """Which of the judge's two later looks count in the verdict: "watch"
    (ProcWatch, its own look at the candidate's process) and "ledger" (the
    candidate's ThreadLedger reports). Both, unless KGYM_THREAD_CHECKS
    (the judge's environment) names some (comma-separated; "none" or
    empty: neither): for tests that show each look catches the cheats
    on its own (tests/harness/test_integrity_threads.py). The worker
    passes no such variable to its children: in production both count."""
    raw = os.environ.get("KGYM_THREAD_CHECKS")
    if raw is None:
        return frozenset(THREAD_CHECKS)
    words = {w.strip() for w in raw.split(",")} - {"", "none"}
    bad = words - set(THREAD_CHECKS)
    if bad:
        raise ValueError(f"KGYM_THREAD_CHECKS={raw!r}: not one of {', '.join(THREAD_CHECKS)}: "
                         + ", ".join(sorted(bad)))
    return frozenset(words)


# ---- /proc readers -------------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def task_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


def thread_ns(pid: int, tid: int) -> int | None:
    """Nanoseconds thread tid of pid has run (None: gone)."""
    got = thread_sched(pid, tid)
    return got[0] if got is not None else None


def thread_sched(pid: int, tid: int) -> tuple[int, int] | None:
    """(ns run, ns spent runnable waiting for a CPU) of thread tid of pid
    (None: gone)."""
    text = _read(f"/proc/{pid}/task/{tid}/schedstat")
    try:
        f = text.split() if text else []
        return (int(f[0]), int(f[1])) if len(f) >= 2 else None
    except ValueError:
        return None


def proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, session id, utime + stime in ns) of pid, None when it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    f = text[text.rindex(")") + 2:].split()
    try:
        return int(f[1]), int(f[3]), (int(f[11]) + int(f[12])) * TICK_NS
    except (ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in task_ids(pid):
        text = _read(f"/proc/{pid}/task/{tid}/children")
        if text:
            out += [int(x) for x in text.split() if x.isdigit()]
    return out


def main_sched(pid: int) -> tuple[int, int, int] | None:
    """(ns run, ns runnable waiting for a CPU, times put on a CPU) of pid's
    main thread, by the kernel's account (/proc/PID/schedstat; the
    candidate cannot write it). None when it cannot be read."""
    text = _read(f"/proc/{pid}/schedstat")
    try:
        f = text.split() if text else []
        return (int(f[0]), int(f[1]), int(f[2])) if len(f) >= 3 else None
    except ValueError:
        return None


def run_delay_ns(pid: int) -> int | None:
    """How long (ns) the main thread of pid has spent runnable but waiting
    for a CPU (main_sched's second figure). None when it cannot be read."""
    got = main_sched(pid)
    return got[1] if got is not None else None


def descendants(pid: int) -> list[int]:
    """pid's children, grandchildren, ... (at most MAX_PROCS)."""
    out, todo = [], [pid]
    while todo and len(out) < MAX_PROCS:
        for c in children(todo.pop()):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out[:MAX_PROCS]


def session_members(sid: int, skip: int) -> list[int]:
    """Processes of session sid (orphans reparented away keep it)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) == skip:
            continue
        st = proc_stat(int(name))
        if st is not None and st[1] == sid:
            out.append(int(name))
            if len(out) >= MAX_PROCS:
                break
    return out


# ---- snapshots of CPU use ---------------------------------------------------------

class Usage:
    """CPU use of a set of processes at one moment: per thread (ns, live
    threads) and per process (ticks, exited threads included)."""

    def __init__(self, pids: list[int]):
        self.at = time.monotonic()
        self.threads: dict[tuple[int, int], int] = {}
        self.waits: dict[tuple[int, int], int] = {}
        self.procs: dict[int, int] = {}
        for pid in pids:
            st = proc_stat(pid)
            if st is None:
                continue
            self.procs[pid] = st[2]
            for tid in task_ids(pid):
                got = thread_sched(pid, tid)
                if got is not None:
                    self.threads[(pid, tid)], self.waits[(pid, tid)] = got

    def waited_since(self, before: "Usage") -> int:
        """ns the threads spent runnable but waiting for a CPU between
        before and self: on a loaded machine a spinning thread can be
        starved for the whole of a short window; it still waited."""
        return sum(ns - before.waits.get(k, 0) for k, ns in self.waits.items()
                   if ns >= before.waits.get(k, 0))

    def busy_since(self, before: "Usage") -> int:
        """ns of CPU used between before and self: the larger of the
        per-thread sum (new threads counted whole) and the per-process tick
        sum less one tick per process (ticks are coarse)."""
        fine = sum(ns - before.threads.get(k, 0) for k, ns in self.threads.items()
                   if ns >= before.threads.get(k, 0))
        coarse = 0
        for pid, ns in self.procs.items():
            if pid in before.procs:
                coarse += max(0, ns - before.procs[pid] - TICK_NS)
        return max(fine, coarse)


# ---- candidate side ------------------------------------------------------------------

def _python_threads() -> dict[int, int]:
    """ident -> native id of every live Python thread but this one."""
    me = threading.get_ident()
    return {t.ident: t.native_id for t in threading.enumerate()
            if t.ident != me and t.ident is not None and t.native_id is not None
            and t.is_alive()}


def _ns_of(pid: int, tids: set[int]) -> dict[int, int]:
    out = {}
    for tid in tids:
        ns = thread_ns(pid, tid)
        if ns is not None:
            out[tid] = ns
    return out


def _delta(after: dict[int, int], before: dict[int, int]) -> int:
    return sum(max(0, ns - before.get(t, 0)) for t, ns in after.items())


class CallWatch:
    """Around one checked call, in the candidate's own process: construct
    it right before the call, call settle() right after it returned and its
    output was copied."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.tids = set(task_ids(self.pid))
        self.py = set(_python_threads())
        self.kids = set(children(self.pid))

    def settle(self, changed: Callable[[], list[int]]) -> dict:
        """Wait for quiescence and report {deferred, changed, busy_ms,
        new_threads, new_children, waited_ms}. deferred: the output changed
        after it was copied (changed() lists the outputs that did), or work
        ran after the return: other Python threads used more than 1 ms,
        new child processes more than 2 ms, or new native threads were
        still busy after SETTLE_S (a new OpenMP pool spins until then).
        The wait is QUIET_MIN_S, or SETTLE_S + WINDOW_S when the call left
        new threads or processes alive or other Python threads running (a
        thread pool the kernel creates costs that once)."""
        t0 = time.monotonic()
        pid = self.pid
        py = _python_threads()
        py_tids = set(py.values())
        new_native = set(task_ids(pid)) - self.tids - py_tids - {threading.get_native_id()}
        new_kids = [k for k in descendants(pid) if k not in self.kids]
        new_py = set(py) - self.py
        py0 = _ns_of(pid, py_tids)
        kids0 = Usage(new_kids)
        time.sleep(QUIET_MIN_S)
        busy_py = _delta(_ns_of(pid, py_tids), py0)
        native = 0
        if new_native or new_py or new_kids or busy_py > PY_BUSY_NS // 4:
            # Something new exists or is running: let pools stop spinning,
            # then look at the new native threads over a short window.
            time.sleep(max(0.0, SETTLE_S - (time.monotonic() - t0)))
            a = _ns_of(pid, new_native)
            time.sleep(WINDOW_S)
            native = _delta(_ns_of(pid, new_native), a)
            busy_py = _delta(_ns_of(pid, py_tids), py0)
        kids = Usage(new_kids).busy_since(kids0) if new_kids else 0
        moved = changed()
        deferred = (bool(moved) or busy_py > PY_BUSY_NS or kids > KIDS_BUSY_NS
                    or native > NATIVE_BUSY_FRAC * WINDOW_S * 1e9)
        return {"deferred": deferred, "changed": moved[:16],
                "busy_ms": round((busy_py + kids + native) / 1e6, 3),
                "new_threads": len(new_native) + len(new_py),
                "new_children": len(new_kids),
                "waited_ms": round((time.monotonic() - t0) * 1e3, 3)}


class _Started:
    """One Python thread started from inside a forward call."""

    __slots__ = ("frame", "native_id", "late", "done")

    def __init__(self, frame: object) -> None:
        self.frame = frame          # the forward call's frame (kept until the thread ends)
        self.native_id: int | None = None
        self.late = False
        self.done = False


class ThreadLedger:
    """Which Python threads forward calls start, and whether they outlive
    their call. install() wraps _thread.start_new_thread (and threading's
    alias of it) before the candidate's code is imported; integrity.py
    watches both names, so restoring the originals is timer_tamper. A
    thread started while a frame running `forward_code` is on its creator's
    stack is recorded; when it ends, it is late if that frame is no longer
    on the main thread's stack. Nothing runs per forward call: the cost is
    paid when threads start and end."""

    def __init__(self) -> None:
        self.forward_code: object = None
        self.main = threading.main_thread().ident
        self.started: list[_Started] = []
        self.late = 0
        self.lock = threading.Lock()
        self.original: Callable | None = None
        self.joinable: Callable | None = None

    def install(self, forward_code: object) -> None:
        import _thread
        self.forward_code = forward_code
        if self.original is not None:
            return
        self.original = _thread.start_new_thread
        self.joinable = getattr(_thread, "start_joinable_thread", None)  # Python >= 3.13
        ledger = self

        def watched(function: Callable) -> Callable:
            rec = ledger._record()
            if rec is None:
                return function

            def run(*a: object, **k: object) -> object:
                rec.native_id = threading.get_native_id()
                try:
                    return function(*a, **k)
                finally:
                    ledger._ended(rec)
            return run

        def start_new_thread(function, args, kwargs=None):  # noqa: ANN001 - _thread's own signature
            return ledger.original(watched(function), args, kwargs or {})

        _thread.start_new_thread = start_new_thread
        if hasattr(threading, "_start_new_thread"):
            threading._start_new_thread = start_new_thread  # what Thread.start calls (<= 3.12)
        if self.joinable is not None:
            def start_joinable_thread(function, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
                return ledger.joinable(watched(function), *args, **kwargs)
            _thread.start_joinable_thread = start_joinable_thread
            if hasattr(threading, "_start_joinable_thread"):
                threading._start_joinable_thread = start_joinable_thread  # Thread.start, 3.13

    def _record(self) -> _Started | None:
        f = sys._getframe(1)
        depth = 0
        while f is not None and depth < 256:
            if f.f_code is self.forward_code:
                rec = _Started(f)
                with self.lock:
                    if len(self.started) < MAX_LEDGER:
                        self.started.append(rec)
                return rec
            f = f.f_back
            depth += 1
        return None

    def _on_main_stack(self, frame: object) -> bool:
        f = sys._current_frames().get(self.main)
        depth = 0
        while f is not None and depth < 256:
            if f is frame:
                return True
            f = f.f_back
            depth += 1
        return False

    def _ended(self, rec: _Started) -> None:
        late = not self._on_main_stack(rec.frame)
        with self.lock:
            rec.done, rec.late, rec.frame = True, late, None
            self.late += late

    def report(self) -> dict:
        """At the end of a command (no forward call on the stack any more):
        {late, running, busy_ms}. late: threads that ended after their call
        returned (since the last report); running: threads started by a
        forward that are still alive; busy_ms: their CPU over LATE_LOOK_S."""
        with self.lock:
            late, self.late = self.late, 0
            alive = [r for r in self.started if not r.done]
            self.started = alive
        tids = {r.native_id for r in alive if r.native_id is not None}
        busy = 0
        if tids:
            pid = os.getpid()
            a = _ns_of(pid, tids)
            time.sleep(LATE_LOOK_S)
            busy = _delta(_ns_of(pid, tids), a)
        return {"late": late, "running": len(alive), "busy_ms": round(busy / 1e6, 3)}


LEDGER = ThreadLedger()


# ---- judge side ---------------------------------------------------------------------------

def idle_finding(busy_ms: float, waited_ms: float, window_ms: float) -> bool:
    """Whether the candidate's processes worked in a window where they had
    nothing to do: CPU beyond max(GAP_ABS_MS, GAP_FRAC x window), or
    runnable (on a CPU or in a run queue, by the kernel's account) for
    more than RUNNABLE_FRAC of it with more than RUNNABLE_MIN_MS run. A
    sleeping process is neither; a spinning one starved beside busy
    processes runs little but waits the rest. A thread woken for a moment
    and delayed by the load runs under RUNNABLE_MIN_MS."""
    if busy_ms > max(GAP_ABS_MS, GAP_FRAC * window_ms):
        return True
    return busy_ms > RUNNABLE_MIN_MS and busy_ms + waited_ms > max(GAP_ABS_MS,
                                                                   RUNNABLE_FRAC * window_ms)


class ProcWatch:
    """The judge's watch on the candidate's process while it should be idle.

    busy() before each command, idle(phase) after each reply. A gap longer
    than SETTLE_S is measured from SETTLE_S after the reply to the next
    command; threads that appeared during a `time` command and are alive
    after its reply are measured over NEW_WINDOW_S from the reply. Windows
    whose CPU use exceeds max(GAP_ABS_MS, GAP_FRAC x window), and new
    threads busier than NEW_BUSY_FRAC of theirs, are findings. Owns one
    daemon thread (started at the first idle(), stopped by close())."""

    def __init__(self, pid: int):
        self.pid = pid
        st = proc_stat(pid)
        self.sid = st[1] if st else None
        self.cond = threading.Condition()
        self.gen = 0
        self.idle_at: float | None = None
        self.phase = ""
        self.opening: Usage | None = None
        self.opening_pids: list[int] = []
        self.sent_tids: set[int] = set()
        self.fresh: dict[int, int] = {}   # new threads after a time reply: tid -> ns
        self.windows = 0
        self.window_ms = 0.0
        self.findings: list[dict] = []
        self.closed = False
        self.thread: threading.Thread | None = None

    def pids(self) -> list[int]:
        found = [self.pid] + descendants(self.pid)
        if self.sid is not None and self.sid > 0:
            found += [p for p in session_members(self.sid, self.pid) if p not in found]
        return found[:MAX_PROCS]

    def tree(self) -> list[int]:
        return [self.pid] + descendants(self.pid)

    def idle(self, phase: str) -> None:
        """A reply arrived: the candidate has nothing to do until busy()."""
        fresh = {}
        if phase == "time":
            new = set(task_ids(self.pid)) - self.sent_tids
            fresh = _ns_of(self.pid, new)
        with self.cond:
            self.gen += 1
            self.idle_at = time.monotonic()
            self.phase = phase
            self.opening = None
            self.fresh = fresh
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="kgym-watch", daemon=True)
                self.thread.start()
            self.cond.notify()

    def busy(self) -> None:
        """Close the current gap (before a command goes out) and judge it."""
        with self.cond:
            opening, pids, phase = self.opening, self.opening_pids, self.phase
            fresh, since = self.fresh, self.idle_at
            self.gen += 1
            self.idle_at = None
            self.opening = None
            self.fresh = {}
        if fresh and since is not None and time.monotonic() - since >= MIN_FRESH_S:
            self._judge_fresh(fresh, phase, time.monotonic() - since)
        if opening is not None:
            self._judge(opening, Usage(pids + [p for p in self.tree() if p not in pids]), phase)
        self.sent_tids = set(task_ids(self.pid))

    def final_window(self, phase: str) -> None:
        """One explicit idle window at the end, for evaluations whose gaps
        were all too short to measure. It ends early, with no finding, as
        soon as the candidate's processes have used (or waited in a run
        queue for) less than QUIET_IDLE_NS over the last QUIET_RUN steps of
        QUIET_STEP_S (a starved spinner on a loaded machine is not quiet;
        spinning pools stop
        within SETTLE_S; a kernel without any is quiet at once); otherwise
        the last FINAL_WINDOW_S after SETTLE_S is judged as a gap is."""
        self.busy()
        start = time.monotonic()
        pids = self.pids()
        seen = [Usage(pids)]
        while True:
            time.sleep(QUIET_STEP_S)
            now = Usage(pids + [p for p in self.tree() if p not in pids])
            seen.append(now)
            ref = seen[-1 - QUIET_RUN] if len(seen) > QUIET_RUN else None
            if ref is not None and now.busy_since(ref) + now.waited_since(ref) < QUIET_IDLE_NS:
                self.windows += 1
                self.window_ms += (now.at - seen[-1 - QUIET_RUN].at) * 1e3
                return
            if now.at - start >= SETTLE_S + FINAL_WINDOW_S:
                before = next(u for u in seen if u.at - start >= SETTLE_S)
                self._judge(before, now, phase)
                return

    def _judge(self, before: Usage, after: Usage, phase: str) -> None:
        window_ms = (after.at - before.at) * 1e3
        busy_ms = after.busy_since(before) / 1e6
        waited_ms = after.waited_since(before) / 1e6
        self.windows += 1
        self.window_ms += window_ms
        if idle_finding(busy_ms, waited_ms, window_ms):
            self.findings.append({"phase": phase, "busy_ms": round(busy_ms, 2),
                                  "waited_ms": round(waited_ms, 2),
                                  "window_ms": round(window_ms, 2),
                                  "processes": len(after.procs), "what": "idle"})

    def _judge_fresh(self, fresh: dict[int, int], phase: str, window_s: float) -> None:
        busy = _delta(_ns_of(self.pid, set(fresh)), fresh)
        if busy > NEW_BUSY_FRAC * window_s * 1e9:
            self.findings.append({"phase": phase, "busy_ms": round(busy / 1e6, 2),
                                  "window_ms": round(window_s * 1e3, 2), "threads": len(fresh),
                                  "what": "new threads"})

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.closed and (self.idle_at is None or self.opening is not None):
                    self.cond.wait()
                if self.closed:
                    return
                gen, phase, fresh = self.gen, self.phase, self.fresh
                due = self.idle_at + (NEW_WINDOW_S if fresh else SETTLE_S)
                wait = due - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue  # re-check: the gap may have ended meanwhile
                if fresh:
                    self.fresh = {}
            if fresh:
                self._judge_fresh(fresh, phase, NEW_WINDOW_S)
                continue
            pids = self.pids()
            usage = Usage(pids)
            with self.cond:
                if self.gen == gen and self.idle_at is not None:
                    self.opening, self.opening_pids = usage, pids

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(1.0)
