"""Processes for the fault tests (test_server_faults.py, test_serve_workers.py):
a real redis-server on a loopback port, a real `kgym serve`, real `kgym
worker`s, and ways to look at what a process left behind. Standard library
only. Every process started through an Env is stopped by pid in close(),
also when a test fails; processes found through the run's TMPDIR in their
environment (sandboxed children of a worker killed with -9) likewise."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from kgym.client import Client  # noqa: E402

TOKEN = "fault-test-token-0123456789abcdef"

# A task that is cheap to evaluate for real: the reference is the identity;
# the candidate defines no usable ModelNew, so the judge ends it with
# runtime_error after a fraction of a second. `sleep` puts a wait in the
# candidate's import (an evaluation that is still running).
REF = ("import torch\n"
       "class Model(torch.nn.Module):\n"
       "    def forward(self, x):\n"
       "        return x\n"
       "def get_inputs():\n"
       "    return [torch.ones(4)]\n"
       "def get_init_inputs():\n"
       "    return []\n")


def cheap_task(task_id: str, sleep: float = 0, **fields) -> dict:
    cand = (f"import time\ntime.sleep({sleep})\n" if sleep else "") + \
        f"class ModelNew: pass  # {task_id}\n"
    return {"task_id": task_id, "reference_code": f"{REF}# {task_id}\n", "kernel_code": cand,
            "backend": "cpu", "num_correct_trials": 1, "num_perf_trials": 1,
            "num_warmup": 0, "enable_profiling": False, "timeout": 120, **fields}


def eval_json(args: list[str], env: dict | None = None,
              timeout: float = 600) -> tuple[list[dict], subprocess.CompletedProcess]:
    """`kgym eval --json ARGS` run to its end (env: the whole environment,
    None: this one's): its result objects in the order printed, and the
    finished process (returncode, stderr) for the caller's checks."""
    p = subprocess.run([KGYM, "eval", "--json", *args], capture_output=True, text=True,
                       env=env, timeout=timeout)
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")], p


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred: Callable, timeout: float, what: str, step: float = 0.1):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def alive(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children(pid: int) -> set[int]:
    """The live direct children of pid."""
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.add(int(d))
    return out


def descendants(pid: int) -> set[int]:
    """Every live process below pid (children, grandchildren...)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            kids.setdefault(int(fields[1]), []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


def task_processes(worker_pid: int, task_id: str, base: str) -> set[int]:
    """The processes below a worker evaluating task_id: its judge and its
    candidate, whose work dirs (under base) hold the reference and kernel
    files, which cheap_task makes name the task. Spares the engine keeps
    warm have no code yet. Read through /proc/PID/cwd: the sandbox's mount
    namespace is the one that counts."""
    out = set()
    for p in descendants(worker_pid):
        try:
            if not os.readlink(f"/proc/{p}/cwd").startswith(base + "/"):
                continue
        except OSError:
            continue
        for d, _, files in os.walk(f"/proc/{p}/cwd"):
            if any(task_id in read(os.path.join(d, f)) for f in files
                   if f.endswith(".py")):
                out.add(p)
                break
    return out


def with_tmpdir(base: str) -> list[int]:
    """Live processes whose environment has TMPDIR=base (what a worker and
    its zygote inherit from the run)."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"TMPDIR={base}".encode() in env and alive(int(d)):
            out.append(int(d))
    return out


class Redis:
    """redis-server on a loopback port with its AOF in dir (appendfsync
    always): restart() brings it back on the same data."""

    def __init__(self, dir: str):
        exe = shutil.which("redis-server")
        if not exe:
            raise FileNotFoundError("redis-server not installed")
        self.port, self.dir = free_port(), dir
        self.args = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", dir,
                     "--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    return c.recv(16).startswith(b"+PONG")
            except OSError:
                return False
        wait_for(up, 10, "redis-server to answer")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait()


class Env:
    """A temp dir reachable by uid nobody (candidates enter their work dirs
    below it), a token file, and every process started for a test."""

    def __init__(self, store: str = "sqlite") -> None:
        self.base = tempfile.mkdtemp(prefix="kgym-ft-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.token_file = os.path.join(self.base, "tokens")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(self.token_file, 0o600)
        self.procs: list[subprocess.Popen] = []
        self.redis = Redis(self.base) if store == "redis" else None
        self.store = self.redis.url if self.redis else f"sqlite:{self.base}/kgym.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: subprocess.Popen | None = None
        self.server_out: list[str] = []
        self.nlogs = 0

    def log_path(self, what: str) -> str:
        self.nlogs += 1
        return os.path.join(self.base, f"{what}-{self.nlogs}.log")

    def start_server(self, *extra: str, lease_s: int = 6, ttl_s: int = 3,
                     env: dict | None = None) -> subprocess.Popen:
        """kgym serve on self.port (the same port after a restart, so the
        workers find it again)."""
        for attempt in range(50):
            log = self.log_path("serve")
            p = subprocess.Popen([KGYM, "serve", "--listen", f"127.0.0.1:{self.port}",
                                  "--store", self.store, "--token-file", self.token_file,
                                  "--lease-s", str(lease_s), "--worker-ttl-s", str(ttl_s),
                                  *extra],
                                 stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
                                 env=dict(os.environ, TMPDIR=self.base, **(env or {})))
            self.procs.append(p)
            p.log = log
            line = p.stdout.readline()
            if "listening on" in line:
                break
            p.wait(timeout=10)
            if "cannot listen" not in read(log) or attempt == 49:
                raise AssertionError(f"kgym serve did not start: {line!r} {read(log)}")
            time.sleep(0.2)  # the port of a server killed a moment ago
        out = self.server_out = [line]

        def drain() -> None:
            for ln in p.stdout:
                out.append(ln)
        threading.Thread(target=drain, daemon=True).start()
        self.server = p
        return p

    def start_worker(self, device: str, *extra: str) -> subprocess.Popen:
        log = self.log_path("worker")
        p = subprocess.Popen([KGYM, "worker", "--server", self.url, "--token-file",
                              self.token_file, "--device", device, "--drain-timeout", "30",
                              *extra],
                             stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                             env=dict(os.environ, TMPDIR=self.base))
        p.log = log
        self.procs.append(p)
        return p

    def client(self, timeout: float = 30) -> Client:
        return Client(self.url, token_file=self.token_file, timeout=timeout)

    def worker_logs(self) -> str:
        return "".join(read(p.log) for p in self.procs
                       if os.path.basename(p.log).startswith("worker"))

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid in with_tmpdir(self.base):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.redis:
            self.redis.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def registered_id(log: str) -> str:
    """A worker's id, from its "registered" log line ("" before)."""
    for line in read(log).splitlines():
        if ": registered device" in line:
            return line.split("kgym worker ", 1)[1].rsplit(": registered", 1)[0]
    return ""


def posted(logs: str, task_id: str) -> list[str]:
    """What became of the results workers posted for task_id, in order:
    the server's answer when it accepted one ("completed", "failed",
    "pending"), "dropped" when it refused one (409: the worker no longer
    held the task; also a retry of a post whose reply was lost)."""
    out = []
    for line in logs.splitlines():
        if f"task {task_id}: result posted (" in line:
            out.append(line.rsplit("task ", 1)[1].rstrip(")"))
        elif f"task {task_id}: lease lost (" in line:
            out.append("dropped")
    return out


def env_probe(src_path: str, dest, want: str | None,
              var: str = "CUDA_DEVICE_MAX_CONNECTIONS") -> None:
    """Writes src_path's code to dest (a pathlib.Path) behind a check that
    the process loading it sees the environment variable var as want (None:
    unset): a reference so made fails in the judge, a candidate in the
    candidate (test_eval_cli.py, tests/harness/test_worker_env_gpu.py)."""
    with open(src_path) as f:
        src = f.read()
    dest.write_text("import os as _os\n"
                    f"assert _os.environ.get({var!r}) == {want!r}, "
                    f"({var!r}, _os.environ.get({var!r}))\n"
                    + src)
    os.chmod(dest, 0o644)
