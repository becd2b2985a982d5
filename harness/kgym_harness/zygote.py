"""The warm zygote: imports torch/triton/the harness once, forks children.

Started by the C worker (src/worker/zygote.c) as
``python -m kgym_harness.zygote --ctl-fd 3``. CUDA is never initialised
here: each child initialises it after the fork. Protocol (one JSON object
per SOCK_SEQPACKET message, fds by SCM_RIGHTS) is described in
src/worker/zygote.h.

Each child enters the sandbox (C code in libkgym_sandbox.so, through
ctypes) before it runs any role. The seccomp filter is compiled here, once,
before any fork.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any

MAX_MSG = 2 << 20
MAX_FDS = 8


class Sandbox:
    """ctypes front of libkgym_sandbox.so (see src/worker/sandbox_py.c)."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path) if path else None
        if self.lib is not None:
            self.lib.kg_sandbox_py_enter.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
            self.lib.kg_sandbox_py_enter.restype = ctypes.c_int
            self.lib.kg_sandbox_py_prepare.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
            self.lib.kg_sandbox_py_prepare.restype = ctypes.c_int
            self.lib.kg_sandbox_py_subreaper.restype = ctypes.c_int

    def prepare(self, profile: dict[str, Any]) -> None:
        if self.lib is None:
            return
        err = ctypes.create_string_buffer(256)
        if self.lib.kg_sandbox_py_prepare(json.dumps(profile).encode(), err, 256) != 0:
            raise RuntimeError("sandbox prepare: " + err.value.decode(errors="replace"))
        self.lib.kg_sandbox_py_subreaper()

    def enter(self, cfg: dict[str, Any]) -> None:
        if self.lib is None:
            if cfg.get("required", True):
                raise RuntimeError("no sandbox library (KGYM_SANDBOX_LIB) but the sandbox is required")
            os.setsid()
            return
        err = ctypes.create_string_buffer(256)
        if self.lib.kg_sandbox_py_enter(json.dumps(cfg).encode(), err, 256) != 0:
            raise RuntimeError("sandbox enter: " + err.value.decode(errors="replace"))


def _send(sock: socket.socket, obj: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        os._exit(0)  # the worker is gone: so are we


def _run_role(req: dict[str, Any], fds: dict[str, int]) -> int:
    role = req["role"]
    if role == "judge" and "task" not in req and "task" in fds:
        from kgym_harness.spare import run_warm_judge  # a spare: its task comes later
        run_warm_judge(fds["task"], fds["chan"], fds["result"], req.get("device_lock"))
    elif role == "judge":
        from kgym_harness.judge import run_judge
        run_judge(req["task"], fds["chan"], fds["result"])
    elif role == "candidate":
        from kgym_harness.candidate import run_candidate
        run_candidate(fds["chan"])
    elif role == "probe":
        from kgym_harness.probe import run_probe
        return run_probe(req.get("device", "cpu"))
    else:
        raise ValueError(f"unknown role {role!r}")
    return 0


def _child(req: dict[str, Any], fds: dict[str, int], sandbox: Sandbox, closers: list[int]) -> None:
    """Runs in the forked child; never returns."""
    code = 70
    try:
        from kgym_harness import cpustat
        cpustat.mark_fork()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closers:
            os.close(fd)
        cfg = dict(req.get("sandbox") or {})
        cfg["keep_fds"] = [fds[n] for n in ("chan", "result", "task") if n in fds]
        cfg["stdout_fd"] = fds.get("log", -1)
        cfg["stderr_fd"] = fds.get("log", -1)
        sandbox.enter(cfg)
        env = req.get("env")
        if env is not None:
            os.environ.clear()
            os.environ.update({k: str(v) for k, v in env.items()})
        if cfg.get("workdir"):
            os.environ["TMPDIR"] = cfg["workdir"]
            os.environ["HOME"] = cfg["workdir"]
        # tempfile caches its directory at first use: one the zygote's
        # imports chose (its own TMPDIR, e.g. under ahead.warm_meta) is not
        # this child's, and the candidate (uid nobody) may not write there
        tempfile.tempdir = None
        from kgym_harness.role import prepare_process
        prepare_process()
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        code = _run_role(req, fds) or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - report anything, then die
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code)


def _reap(sock: socket.socket, live: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in live:
            live.discard(pid)
            _send(sock, {"event": "exit", "pid": pid, "status": status})
    # orphans of finished tasks were reparented to us (we are a subreaper)


def _kill_orphans(live: set[int]) -> None:
    """Kills our children that we did not spawn: processes a task left
    behind (double-forked daemons reparent to us, the subreaper)."""
    me = os.getpid()
    try:
        tids = os.listdir(f"/proc/{me}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        for pid in kids:
            if pid not in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def driver_fds() -> int:
    """How many of this process's fds are open on a GPU driver's device
    (/dev/nvidia*): 0 unless the CUDA driver was started (cuInit, or NVML),
    which the zygote must never do before it forks."""
    n = 0
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return -1
    for fd in names:
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia")
        except OSError:
            continue
    return n


def _import_cpp_extension() -> None:
    """torch.utils.cpp_extension, imported here once instead of in every
    spare's candidate (prewarm.warm_prep; the extension hooks need it):
    105-133 modules, which a child compiles from source where the
    installed packages have no .pyc files, since children cannot write any
    (the H200's image: 0.4-0.5 s of each spare's CPU). At import it calls
    torch.cuda.is_available() only to decide whether to print a warning
    about CUDA_HOME, and that call starts the driver (cuInit), which must
    never happen before a fork: the question is answered without asking
    for the length of the import."""
    import importlib
    import torch
    if not (torch.cuda._is_compiled() and torch.version.cuda):
        importlib.import_module("torch.utils.cpp_extension")  # asks nothing of CUDA
        return
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    try:
        importlib.import_module("torch.utils.cpp_extension")
    finally:
        torch.cuda.is_available = real  # type: ignore[assignment]


def import_for_children(info: dict[str, Any]) -> None:
    """What every spare's candidate would otherwise import after its fork,
    imported here (info gets cpp_extension_ms and any import_errors): the
    extension machinery (_import_cpp_extension) and, when triton imported
    (info["triton"]), its code generator, which a spare's tiny Triton
    kernel (prewarm.warm_prep) and every candidate's first compile import,
    with triton.experimental.gluon (about 40 modules, compiled from source
    in each child without .pyc files, H200). Python code only; the driver
    is first asked for at a compile, in the child."""
    t1 = time.perf_counter()
    try:
        _import_cpp_extension()
    except Exception as e:  # noqa: BLE001 - each spare then imports it (and reports)
        info.setdefault("import_errors", {})["cpp_extension"] = str(e)[:200]
    info["cpp_extension_ms"] = round((time.perf_counter() - t1) * 1e3, 1)
    if info.get("triton"):
        try:
            __import__("triton.compiler.code_generator")
        except Exception as e:  # noqa: BLE001
            info.setdefault("import_errors", {})["triton.compiler"] = str(e)[:200]


def _preimport() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0]}
    t0 = time.perf_counter()
    import torch  # noqa: F401
    info["torch"] = torch.__version__
    try:
        import triton  # noqa: F401
        info["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001 - triton is optional on cpu
        info["triton"] = None
        info["triton_error"] = str(e)[:200]
    for mod in ("kgym_harness.spare", "kgym_harness.candidate"):  # spare imports the judge
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001
            info.setdefault("import_errors", {})[mod] = str(e)[:200]
    import_for_children(info)
    info["driver_fds"] = driver_fds()
    if os.environ.get("KGYM_COMPILE_AHEAD") == "1":
        # what ahead.py's meta forwards import at first use (torch._dynamo,
        # sympy: 1.6-3.3 s per candidate on the H200), once here
        t1 = time.perf_counter()
        try:
            from kgym_harness import ahead
            ahead.warm_meta()
        except Exception as e:  # noqa: BLE001
            info.setdefault("import_errors", {})["meta"] = str(e)[:200]
        info["meta_ms"] = round((time.perf_counter() - t1) * 1e3, 1)
    info["import_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgym_harness.zygote")
    ap.add_argument("--ctl-fd", type=int, required=True)
    args = ap.parse_args(argv)
    sock = socket.socket(fileno=args.ctl_fd)
    info = _preimport()
    sandbox = Sandbox(os.environ.get("KGYM_SANDBOX_LIB", ""))
    profile = json.loads(os.environ.get("KGYM_SANDBOX_PROFILE", "{}") or "{}")
    try:
        sandbox.prepare(profile)
    except Exception as e:  # noqa: BLE001
        _send(sock, {"event": "fatal", "message": str(e)})
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    _send(sock, {"event": "ready", "pid": os.getpid(), **info})
    import select
    while True:
        r, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in r:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            _reap(sock, live)
            _kill_orphans(live)
        if sock not in r:
            continue
        try:
            data, fdlist, _flags, _addr = socket.recv_fds(sock, MAX_MSG, MAX_FDS)
        except OSError:
            return 0
        if not data:
            return 0  # worker closed the socket
        try:
            req = json.loads(data)
            names = req.get("fds", [])
            if len(names) != len(fdlist):
                raise ValueError(f"{len(fdlist)} fds for names {names}")
            fds = dict(zip(names, fdlist))
        except Exception as e:  # noqa: BLE001
            for fd in fdlist:
                os.close(fd)
            _send(sock, {"event": "error", "id": None, "message": f"bad request: {e}"})
            continue
        pid = os.fork()
        if pid == 0:
            _child(req, fds, sandbox, [sock.fileno(), wake_r, wake_w])
        live.add(pid)
        for fd in fdlist:
            os.close(fd)
        _send(sock, {"event": "spawned", "id": req.get("id"), "pid": pid})


if __name__ == "__main__":
    sys.exit(main())
