"""A warm spawner for the plain launcher: import torch once, fork each role.

    spawner = WarmSpawner()          # starts python -m kgym_harness.warm
    evaluate(task, spawner=spawner)  # roles are forked, not started cold

The server imports torch, triton (if present) and both roles, never touches
CUDA or runs a torch op, and forks one child per request: the child starts a
new session, points stdout/stderr at the log fd, changes to its own cwd,
replaces its environment, and calls run_judge or run_candidate with the fds
it was sent (SCM_RIGHTS). This is a development convenience (tests, batch
runs) with no sandbox; the worker's zygote.py is the production path.

Protocol on a SOCK_SEQPACKET pair, one JSON object per message:
  {"op": "spawn", "role", "cwd", "env", "task_file"} + fds [chan, log(, result)]
      -> {"pid"}
  {"op": "poll", "pid"} -> {"status": null | returncode (negative: signal)}
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

MAX_MSG = 1 << 20


def _recv(sock: socket.socket) -> tuple[dict | None, list[int]]:
    fds = array.array("i")
    msg, anc, _flags, _addr = sock.recvmsg(MAX_MSG, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    if not msg:
        return None, list(fds)
    return json.loads(msg.decode()), list(fds)


def _child(req: dict, fds: list[int], ctl: socket.socket) -> None:
    """In the forked child: become the role; never returns."""
    code = 70
    try:
        os.setsid()
        ctl.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[1], 1)
        os.dup2(fds[1], 2)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in req["env"].items()})
        import tempfile
        tempfile.tempdir = None
        sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        from .role import prepare_process
        prepare_process()
        if req["role"] == "judge":
            from .judge import run_judge
            from .role import _read_task
            run_judge(_read_task(req.get("task_file")), fds[0], fds[2])
        else:
            from .candidate import run_candidate
            run_candidate(fds[0])
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = os.waitstatus_to_exitcode(status)


def serve(ctl: socket.socket) -> None:
    import torch  # noqa: F401  (the point of being warm)
    try:
        import triton  # noqa: F401
    except Exception:
        pass
    from . import candidate, judge  # noqa: F401
    statuses: dict[int, int] = {}
    children: set[int] = set()
    while True:
        req, fds = _recv(ctl)
        if req is None:
            return
        _reap(statuses)
        if req.get("op") == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(req, fds, ctl)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            ctl.send(json.dumps({"pid": pid}).encode())
        elif req.get("op") == "poll":
            pid = int(req.get("pid", -1))
            ctl.send(json.dumps({"status": statuses.get(pid)}).encode())
        else:
            for fd in fds:
                os.close(fd)
            ctl.send(json.dumps({"error": "unknown op"}).encode())


class WarmProc:
    """A role process forked by the warm server (not our child)."""

    def __init__(self, spawner: "WarmSpawner", pid: int):
        self.spawner = spawner
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.spawner.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.01)
        return self.returncode


class WarmSpawner:
    """Client side: owns the server process and the control socket."""

    def __init__(self, python: str | None = None):
        self._lock = threading.Lock()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        from .launcher import HARNESS_DIR
        env = dict(os.environ)
        env["PYTHONPATH"] = HARNESS_DIR + (os.pathsep + env["PYTHONPATH"]
                                           if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "kgym_harness.warm", "--ctl-fd",
             str(theirs.fileno())], pass_fds=(theirs.fileno(),), env=env,
            stdin=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self.ctl = mine

    def _ask(self, req: dict, fds: list[int] = ()) -> dict:
        with self._lock:
            data = json.dumps(req).encode()
            if fds:
                self.ctl.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                           array.array("i", fds))])
            else:
                self.ctl.send(data)
            return json.loads(self.ctl.recv(MAX_MSG).decode())

    def spawn(self, role: str, chan_fd: int, log_fd: int, cwd: str, env: dict[str, str],
              result_fd: int = -1, task_file: str | None = None) -> WarmProc:
        fds = [chan_fd, log_fd] + ([result_fd] if result_fd >= 0 else [])
        reply = self._ask({"op": "spawn", "role": role, "cwd": cwd, "env": env,
                           "task_file": task_file}, fds)
        return WarmProc(self, int(reply["pid"]))

    def poll(self, pid: int) -> int | None:
        return self._ask({"op": "poll", "pid": pid}).get("status")

    def close(self) -> None:
        self.ctl.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="kgym_harness.warm")
    parser.add_argument("--ctl-fd", type=int, required=True)
    args = parser.parse_args(argv)
    serve(socket.socket(fileno=args.ctl_fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
