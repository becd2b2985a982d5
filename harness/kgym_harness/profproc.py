"""The profiler's own process: CUPTI never attaches to the process that is timed.

CUPTI's first start costs about 5 s of CPU in a process, and once started
it stays attached: every later launch of that process pays its callbacks,
and host-bound models timed slower than themselves with it (docs/worker.md).
So a candidate for a task that profiles (the worker's KGYM_PROFILE_CHILD=1)
forks, at its start and before CUDA exists in it, a child that makes its
own CUDA context and pays CUPTI's first start at once. While the
candidate loads the kernel, the child loads it too, from the candidate's
own source files (same paths: Triton's and the extensions' caches are
hit), without calling it. At the profiling phase it warms the kernel up,
profiles it, replies and exits; the candidate reaps it before it answers
the judge. Any trouble (the child died, was not ready, the
device lacks the memory for a second copy) and the candidate profiles
itself as before.

The child is the candidate's process too: its rows are claims, attributed
and bounded by the judge like the candidate's own (stages/profile.py).
It is idle (blocked on its pipe) whenever the judge watches the candidate
for work after a reply: the candidate waits for its start and its load
before the load reply (wait_loaded).

Messages: 4-byte big-endian length + JSON. Child -> parent: the ready
message {ok, ms | error}, then one reply per request. Parent -> child:
{cmd: "load", load: <the load header>, workdir} -> {ok, ms | failure};
{cmd: "profile", n_iter, seed (, load, workdir when not loaded)} ->
candidate.cmd_profile's reply, then the child exits.
Tested by tests/harness/test_profproc.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import struct
import time
from typing import Any

MAX_MSG = 16 << 20
READY_TIMEOUT_S = 90.0   # CUDA's context and CUPTI's first start: 5-6 s on the H200
LOAD_WAIT_MIN_S = 10.0   # its load beyond that: at least this, or twice the candidate's
PROFILE_TIMEOUT_S = 600.0  # the judge's own deadline ends a task long before
WARMUP_CALLS = 3         # Triton's compile (cached) and autotuning before the profile
MEM_MARGIN = 512 << 20   # beyond the candidate's own peak, for the child's copy
_PR_SET_PDEATHSIG = 1


def wanted() -> bool:
    """The worker (or the launcher) asked this candidate for a profiler process."""
    return os.environ.get("KGYM_PROFILE_CHILD") == "1"


def child_wanted(device: str) -> bool:
    """The worker's (or launcher's) side, for a task that profiles: from
    its KGYM_PROFILE_PROC. "auto" (the default): on a GPU only with
    torch's profiler (KGYM_PROFILER=torch), whose first start costs
    seconds; CUPTI's activity API starts in a millisecond, in the
    candidate after its timing. "1": on a GPU; "0": never; "cpu" also on
    the CPU, where it gains nothing but tests the process itself.
    engine_env.c's profile_child_wanted is the same rule."""
    v = os.environ.get("KGYM_PROFILE_PROC", "auto")
    if v == "0":
        return False
    if v == "cpu":
        return True
    if not device.startswith("cuda"):
        return False
    return v == "1" or os.environ.get("KGYM_PROFILER") == "torch"


def _write_msg(fd: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("the profiler process did not answer in time")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _read_msg(fd: int, deadline: float | None = None) -> dict | None:
    """One message, None at end of file."""
    head = _read_exact(fd, 4, deadline)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > MAX_MSG:
        raise ValueError(f"profiler process message of {n} bytes")
    body = _read_exact(fd, n, deadline)
    if body is None:
        return None
    obj = json.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("profiler process message is not an object")
    return obj


class ProfChild:
    """The parent's handle on its profiler process."""

    def __init__(self, pid: int, rfd: int, wfd: int) -> None:
        self.pid, self.rfd, self.wfd = pid, rfd, wfd
        self.ready: dict | None = None  # its ready message, once read
        self.loading = False  # a load request is out, its reply unread
        self.loaded = False   # the kernel is loaded there
        self.load_ms: float | None = None  # what its load took, by its word
        self.why_not = ""  # why it can no longer be used

    def usable(self) -> bool:
        return not self.why_not

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Blocks until the child has its context and CUPTI started (or has
        failed: then it is given up)."""
        if self.why_not or self.ready is not None:
            return not self.why_not
        try:
            msg = _read_msg(self.rfd, time.monotonic() + timeout)
        except (OSError, ValueError, TimeoutError) as e:
            return self.give_up(f"not ready: {e}")
        if msg is None:
            return self.give_up("it exited before it was ready")
        self.ready = msg
        if msg.get("ok") is not True:
            return self.give_up(f"its start failed: {str(msg.get('error'))[:200]}")
        return True

    def start_load(self, load: dict, workdir: str) -> None:
        """Asks the child to load the kernel now (it reads the request once
        its start is over); wait_loaded reads the reply."""
        if self.why_not or self.loading or self.loaded:
            return
        try:
            _write_msg(self.wfd, {"cmd": "load", "load": load, "workdir": workdir})
            self.loading = True
        except OSError as e:
            self.give_up(f"load: {e}")

    def wait_loaded(self, own_load_s: float) -> bool:
        """Blocks until the child's start and its load are over (at most
        READY_TIMEOUT_S, then max(LOAD_WAIT_MIN_S, twice own_load_s), the
        candidate's own load time); a child that failed or is late is given
        up: the candidate profiles itself."""
        if not self.wait_ready():
            return False
        if not self.loading:
            return not self.why_not
        self.loading = False
        try:
            msg = _read_msg(self.rfd, time.monotonic() + max(LOAD_WAIT_MIN_S, 2 * own_load_s))
        except (OSError, ValueError, TimeoutError) as e:
            return self.give_up(f"load: {e}")
        if msg is None:
            return self.give_up("it exited while loading")
        if msg.get("ok") is not True:
            return self.give_up("its load failed: " + str(
                (msg.get("failure") or {}).get("message"))[:200])
        self.loaded = True
        ms = msg.get("ms")
        self.load_ms = float(ms) if isinstance(ms, (int, float)) else None
        return True

    def profile(self, load: dict, workdir: str, n_iter: int, seed: int) -> dict | None:
        """The child's reply to one profile request ({ok, profile} or
        {ok: false, failure}); None when it could not answer (why_not).
        The child exits after it; it is reaped here."""
        if not self.wait_loaded(0.0):
            return None
        req: dict[str, Any] = {"cmd": "profile", "n_iter": n_iter, "seed": seed}
        if not self.loaded:
            req.update(load=load, workdir=workdir)
        try:
            _write_msg(self.wfd, req)
            msg = _read_msg(self.rfd, time.monotonic() + PROFILE_TIMEOUT_S)
        except (OSError, ValueError, TimeoutError) as e:
            self.give_up(f"profile: {e}")
            return None
        self.close()
        if msg is None:
            self.why_not = "it died while profiling"
            return None
        self.why_not = "it has profiled"  # one task, one profile
        return msg

    def give_up(self, why: str) -> bool:
        self.why_not = why
        self.close()
        return False

    def close(self) -> None:
        """Ends the child (if alive) and reaps it."""
        for fd in (self.wfd, self.rfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.wfd = self.rfd = -1
        if self.pid > 0:
            for sig in (None, signal.SIGKILL):
                if sig is not None:
                    try:
                        os.kill(self.pid, sig)
                    except OSError:
                        pass
                try:
                    # a child told to profile exits at once; a closed pipe ends one that waits
                    t_end = time.monotonic() + (2.0 if sig is None else 10.0)
                    while time.monotonic() < t_end:
                        if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                            self.pid = -1
                            return
                        time.sleep(0.005)
                except ChildProcessError:
                    self.pid = -1
                    return


CHILD: ProfChild | None = None


def start(close_fds: tuple[int, ...] = ()) -> ProfChild | None:
    """Forks the profiler process when wanted(); call before CUDA is made
    in this process. close_fds: closed in the child (the channel
    must close when this process dies, whatever the child does)."""
    global CHILD
    if not wanted() or CHILD is not None:
        return CHILD
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            _bind_to_parent(close_fds)
            code = _serve(to_child_r, to_parent_w)
        finally:
            os._exit(code)
    os.close(to_child_r)
    os.close(to_parent_w)
    CHILD = ProfChild(pid, to_parent_r, to_child_w)
    return CHILD


def _bind_to_parent(close_fds: tuple[int, ...]) -> None:
    """The child holds none of the parent's channel and dies with it (the
    worker ends the task's processes too): it never outlives the candidate."""
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the parent reaps it; the engine kills the task's processes anyway
    if os.getppid() == 1:
        os._exit(0)


def _serve(rfd: int, wfd: int) -> int:
    """The child's life: start, say ready, load when asked, answer one
    profile request, exit."""
    from . import profiling
    device = os.environ.get("KGYM_DEVICE", "cpu") or "cpu"
    ms: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        if device.startswith("cuda"):
            import torch
            torch.cuda.init()
            torch.cuda.set_device(torch.device(device if ":" in device else "cuda:0"))
            ms["context"] = round((time.monotonic() - t0) * 1e3, 1)
            ms["profiler"] = round(profiling.warm_profiler(device), 1)
        else:
            _stand_in_for_cupti()
        _write_msg(wfd, {"ok": True, "ms": ms})
    except BaseException as e:  # noqa: BLE001 - said to the parent, which profiles itself
        try:
            _write_msg(wfd, {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
        except OSError:
            pass
        return 1
    state = None
    while True:
        try:
            msg = _read_msg(rfd)
        except (OSError, ValueError):
            return 1
        if msg is None or msg.get("cmd") not in ("load", "profile"):
            return 0  # the parent closed the pipe: no profile is wanted
        try:
            reply: dict = {"ok": True}
            if state is None:  # the load request, or a profile request that carries it
                state, reply = _load(msg)
            if msg["cmd"] == "profile" and state is not None:
                reply = _profile(state, msg)
        except BaseException as e:  # noqa: BLE001 - the parent profiles itself then
            reply = {"ok": False, "failure": {"verdict": "infra_error", "code": "PROFILE_PROC",
                                              "message": f"{type(e).__name__}: {e}"[:500]}}
        try:
            _write_msg(wfd, reply)
        except (OSError, TypeError, ValueError):
            return 1
        if msg["cmd"] == "profile" or not reply.get("ok"):
            return 0  # one profile per task; a failed load ends it too


def _stand_in_for_cupti() -> None:
    """On the CPU (tests): KGYM_PROFILE_CHILD_SPIN_S seconds of busy CPU,
    as CUPTI's first start is on a GPU, so that CI sees the candidate wait
    for its child's start before it answers load."""
    try:
        spin = min(max(float(os.environ.get("KGYM_PROFILE_CHILD_SPIN_S", "0")), 0.0), 10.0)
    except ValueError:
        spin = 0.0
    end = time.monotonic() + spin
    while time.monotonic() < end:
        pass


def _load(msg: dict) -> tuple[Any, dict]:
    """Loads the kernel as the candidate did (its files, its init seed):
    (the state or None, the reply: cmd_load's)."""
    from . import candidate
    load = dict(msg.get("load") or {})
    load.pop("compile_ahead_s", None)  # the warm-up calls compile, unprofiled
    state = candidate.CandidateState()
    state.workdir = str(msg.get("workdir") or "") or candidate.make_workdir("kgym-prof-")
    t0 = time.monotonic()
    reply, _ = candidate.cmd_load(state, load, [])
    if not reply.get("ok"):
        return None, reply
    return state, {"ok": True, "ms": round((time.monotonic() - t0) * 1e3, 1)}


def _profile(state: Any, msg: dict) -> dict:
    """Warms the loaded kernel up and profiles it: candidate.cmd_profile's reply."""
    from . import candidate, timing
    call = candidate._forward(state, "train", False)
    make_args = candidate._make_args(state, int(msg.get("seed") or 0))
    for i in range(WARMUP_CALLS):
        call(make_args(-1 - i))  # inputs the profiled calls do not use
    timing.sync(state.device)
    return candidate.profile_here(state, int(msg.get("n_iter") or 1), int(msg.get("seed") or 0))


def fits(device: str) -> tuple[bool, str]:
    """Whether the device has room for the child's copy of the work: the
    candidate's own peak plus a margin, once this process's cached blocks
    are given back."""
    if not device.startswith("cuda"):
        return True, ""
    import torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info()
    need = torch.cuda.max_memory_allocated() + MEM_MARGIN
    if free < need:
        return False, f"device memory: {free >> 20} MiB free, {need >> 20} MiB wanted"
    return True, ""


def profile_in_child(load: dict | None, workdir: str | None, device: str, n_iter: int,
                     seed: int) -> tuple[dict | None, str]:
    """(the child's reply, "") or (None, why the candidate profiles itself)."""
    child = CHILD
    if child is None:
        return None, ""
    if load is None or not workdir:
        child.give_up("no kernel was loaded")
        return None, child.why_not
    ok, why = fits(device)
    if not ok:
        child.give_up(why)
        return None, why
    reply = child.profile(load, workdir, n_iter, seed)
    if reply is None or reply.get("ok") is not True:
        if reply is not None:
            child.why_not = "the kernel failed there: " + str(
                (reply.get("failure") or {}).get("message"))[:200]
        return None, child.why_not
    return reply, ""
