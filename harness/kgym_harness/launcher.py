"""The plain launcher: both roles as separate subprocesses, one evaluation.

evaluate(task) makes a socketpair (judge <-> candidate) and a result pipe
(judge -> here), starts `python -m kgym_harness.role candidate` and
`... role judge` each in its own session (process group), its own private
temp dir as cwd and TMPDIR, gives the task only to the judge (a 0600 file it
deletes after reading), enforces task["timeout"] by killing both groups,
and returns the result read from the pipe. No complete frame means no pass.

Roles start cold (SubprocessSpawner, the default) or are forked from a warm
server that has torch imported (warm.WarmSpawner). The C worker replaces
all of this with its sandboxed zygote, which calls run_judge /
run_candidate directly; nothing here is needed by them.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from . import paths, profproc, schema
from .feedback import make_feedback
from .frame import FrameError, decode_result, read_mark

HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDIDATE_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "USER", "LOGNAME",
                      "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                      "CC", "CXX", "MAX_JOBS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                      "TORCH_CUDA_ARCH_LIST", "TRITON_INTERPRET", "TRITON_CACHE_DIR",
                      "TRITON_HOME", "NVIDIA_VISIBLE_DEVICES", "KGYM_WORKER_ID")
TAIL_BYTES = 4000
DEFAULT_TIMEOUT = float(schema.FIELDS["timeout"]["default"])


def _pythonpath(extra: str | None) -> str:
    return HARNESS_DIR + (os.pathsep + extra if extra else "")


def candidate_env(tmpdir: str, device: object = None, profiles: bool = False) -> dict[str, str]:
    """An allow-listed environment: nothing from the caller's secrets.
    KGYM_DEVICE (as the worker sets it) lets the candidate initialise CUDA
    before its first command; KGYM_PROFILE_CHILD (as the worker sets it)
    has it fork its profiler process (profproc.py) for a task that profiles."""
    env = {k: os.environ[k] for k in CANDIDATE_ENV_KEEP if k in os.environ}
    if isinstance(device, str) and device.startswith("cuda"):
        env["KGYM_DEVICE"] = device
    if profiles and profproc.child_wanted(str(device or "cpu")):
        env["KGYM_PROFILE_CHILD"] = "1"
        if "KGYM_PROFILE_CHILD_SPIN_S" in os.environ:  # tests: CUPTI's start on the CPU
            env["KGYM_PROFILE_CHILD_SPIN_S"] = os.environ["KGYM_PROFILE_CHILD_SPIN_S"]
    env.update(TMPDIR=tmpdir, PYTHONPATH=_pythonpath(os.environ.get("PYTHONPATH")),
               KGYM_EXT_CACHE_DIR=paths.ext_cache_root(), PYTHONDONTWRITEBYTECODE="1",
               KGYM_CPU_THREADS=cpu_threads())
    return env


def cpu_threads() -> str:
    """KGYM_CPU_THREADS for both roles, as the worker sizes it: the CPUs
    shared by the judge and the candidate (src/worker/engine_env.c), unless
    the caller's environment says."""
    v = os.environ.get("KGYM_CPU_THREADS", "")
    return v if v.isdigit() and int(v) > 0 else str(max(1, (os.cpu_count() or 1) // 2))


def judge_env(tmpdir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TMPDIR=tmpdir, PYTHONPATH=_pythonpath(os.environ.get("PYTHONPATH")),
               KGYM_CPU_THREADS=cpu_threads())
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", paths.cache_dir("inductor"))
    return env


def _timeout_of(task: object) -> float:
    t = task.get("timeout") if isinstance(task, dict) else None
    if isinstance(t, (int, float)) and not isinstance(t, bool) and 1.0 <= t <= schema.MAX_TIMEOUT:
        return float(t)
    return DEFAULT_TIMEOUT


def _read_until(fd: int, deadline: float, limit: int) -> tuple[bytes, bool]:
    """Read fd until EOF (True) or the deadline (False)."""
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        data = os.read(fd, 1 << 16)
        if not data:
            return b"".join(chunks), True
        size += len(data)
        if size > limit:
            return b"".join(chunks), True
        chunks.append(data)


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _exit_text(rc: int | None, verb: bool = False) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}" if verb else f"exit status {rc}"


def _synthetic(task: object, verdict: str, code: str, message: str, detail: str = "") -> dict:
    task_id = task.get("task_id") if isinstance(task, dict) else None
    backend = task.get("backend") if isinstance(task, dict) else None
    result = schema.new_result(task_id if isinstance(task_id, str) else None,
                               backend if isinstance(backend, str) else None)
    schema.set_error(result, verdict, code, "launcher", code.title(), message, detail)
    result["status"] = "failed" if verdict == "infra_error" else "completed"
    result["feedback"] = f"Verdict: {verdict} ({code})\n  {message}"
    return result


def result_from_bytes(task: object, data: bytes, eof: bool, judge_rc: int | None,
                      timeout: float, judge_log: str = "", mark: str | None = None) -> dict:
    """Turn what the judge wrote into a result; anything incomplete is not a
    pass. mark: the phase marker the judge left (problem.read_mark): a
    judge that ended by itself (not SIGKILL: the kernel's OOM killer, or
    us) while running reference code ended because of the reference."""
    try:
        return schema.check_result(decode_result(data))
    except (FrameError, ValueError) as e:
        why = str(e)
    if not eof:
        return _synthetic(task, "timeout", "TIMEOUT",
                          f"the evaluation exceeded its time limit of {timeout:g} s", why)
    if mark is not None and judge_rc is not None and judge_rc != -signal.SIGKILL:
        result = _synthetic(task, "problem_error", "PROBLEM_ERROR",
                            f"{schema.PROBLEM_BLAME}: the judge {_exit_text(judge_rc, True)} while "
                            f"running reference code ({mark})", judge_log)
        result["error"]["phase"] = mark
        result["feedback"] = make_feedback(result, "")
        return result
    return _synthetic(task, "runtime_error", "RESULT_INCOMPLETE",
                      f"the judge ended ({_exit_text(judge_rc)}) without a complete result: {why}",
                      judge_log)


class PopenProc:
    """A role started cold as `python -m kgym_harness.role ...` (our child)."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        self.pid = popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None


class SubprocessSpawner:
    """Starts each role as a fresh interpreter (cold: imports torch every time)."""

    def __init__(self, python: str | None = None, judge_argv: list[str] | None = None):
        self.python = python or sys.executable
        self.judge_argv = judge_argv

    def spawn(self, role: str, chan_fd: int, log_fd: int, cwd: str, env: dict[str, str],
              result_fd: int = -1, task_file: str | None = None) -> PopenProc:
        argv = [self.python, "-m", "kgym_harness.role", role, "--chan-fd", str(chan_fd)]
        fds = [chan_fd]
        if role == "judge":
            argv += ["--result-fd", str(result_fd), "--task-file", task_file or ""]
            fds.append(result_fd)
            if self.judge_argv:
                fill = {"{chan}": str(chan_fd), "{result}": str(result_fd),
                        "{task}": task_file or ""}
                argv = [fill.get(a, a) for a in self.judge_argv]
        return PopenProc(subprocess.Popen(
            argv, pass_fds=tuple(fds), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=log_fd, stderr=log_fd, start_new_session=True))


def _kill_group(proc: Any) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _write_task(task: object, path: str, timeout: float) -> None:
    body = dict(task) if isinstance(task, dict) else task
    if isinstance(body, dict):
        body["deadline"] = time.time() + timeout
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(body, f)


def evaluate(task: dict, *, spawner: Any = None,
             on_spawn: Callable[[int, int], None] | None = None,
             judge_argv: list[str] | None = None) -> dict:
    """Evaluate one task in two fresh processes and return the result dict.

    spawner: SubprocessSpawner (default) or warm.WarmSpawner. on_spawn(judge
    pid, candidate pid) is called once both exist (tests use it). judge_argv
    replaces the judge's command line (tests stand in a broken judge with
    it); arguments that are exactly "{chan}", "{result}" or "{task}" are
    replaced by the channel fd, the result fd and the task file.
    """
    if judge_argv is not None or spawner is None:
        spawner = SubprocessSpawner(judge_argv=judge_argv)
    timeout = _timeout_of(task)
    deadline = time.monotonic() + timeout
    base = tempfile.mkdtemp(prefix="kgym-eval-")
    jdir, cdir = os.path.join(base, "judge"), os.path.join(base, "candidate")
    os.mkdir(jdir, 0o700)
    os.mkdir(cdir, 0o700)
    task_file = os.path.join(jdir, "task.json")
    _write_task(task, task_file, timeout)
    j_sock, c_sock = socket.socketpair()
    r_read, r_write = os.pipe()
    logs = {n: os.open(os.path.join(base, f"{n}.log"), os.O_WRONLY | os.O_CREAT, 0o600)
            for n in ("judge", "candidate")}
    procs: list[Any] = []
    try:
        device = task.get("device") if isinstance(task, dict) else None
        profiles = isinstance(task, dict) and task.get(
            "enable_profiling", schema.FIELDS["enable_profiling"]["default"]) is True
        cand = spawner.spawn("candidate", c_sock.fileno(), logs["candidate"], cdir,
                             candidate_env(cdir, device, profiles))
        procs.append(cand)
        judge = spawner.spawn("judge", j_sock.fileno(), logs["judge"], jdir, judge_env(jdir),
                              result_fd=r_write, task_file=task_file)
        procs.append(judge)
        j_sock.close()
        c_sock.close()
        os.close(r_write)
        r_write = -1
        if on_spawn:
            on_spawn(judge.pid, cand.pid)
        data, eof = _read_until(r_read, deadline, 2 * (64 << 20))
        if eof:
            judge.wait(min(deadline, time.monotonic() + 5.0) - time.monotonic())
            cand.wait(min(deadline, time.monotonic() + 2.0) - time.monotonic())
        result = result_from_bytes(task, data, eof, judge.poll(), timeout,
                                   _tail(os.path.join(base, "judge.log")),
                                   read_mark(jdir))
        if result.get("error_code") == "CHILD_DIED":
            _note_candidate_exit(result, cand, base)
        return result
    finally:
        for p in procs:
            _kill_group(p)
        for p in procs:
            p.wait(5.0)
        for s in (j_sock, c_sock):
            s.close()
        for fd in logs.values():
            os.close(fd)
        os.close(r_read)
        if r_write >= 0:
            os.close(r_write)
        shutil.rmtree(base, ignore_errors=True)


def _note_candidate_exit(result: dict, cand: Any, base: str) -> None:
    """Add how the candidate process ended to a CHILD_DIED error."""
    how = _exit_text(cand.wait(1.0))
    err = result.get("error") or {}
    err["message"] = f"{err.get('message', '')}: {how}"
    err["traceback"] = _tail(os.path.join(base, "candidate.log"))[-2000:]
    result["error"] = err
    result["error_message"] = err["message"]
    result["feedback"] = result.get("feedback", "") + f"\n  The candidate process ended: {how}."
