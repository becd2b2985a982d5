"""kgym worker against a real kgym serve, driven as a user would: the CLI
client (`kgym submit --wait`) and python/kgym/client.py submit the cpu
example GELU with its honest Triton solution (pass) and a decoy (hacked);
a worker killed with -9 while it holds a lease loses the task to a second
worker once the lease expires; a SIGTERM'd worker finishes its task,
posts the result and unregisters; a worker started before its server
keeps retrying and works once the server is up. Standard library only.

Every process started here is stopped by pid in the fixtures' finalizers,
also when a test fails; sandboxed children left behind are found through
the run's TMPDIR in their environment and killed by pid."""
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
from typing import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from kgym.client import Client, KgymError  # noqa: E402

REF = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
HONEST = os.path.join(ROOT, "problems", "cpu", "level1", "solutions", "1_GELU.triton.py")
DECOY = os.path.join(ROOT, "tests", "redteam", "cpu", "gelu_decoy.triton.py")
TOKEN = "worker-server-test-token-0123456789"
FIELDS = {"backend": "triton", "num_correct_trials": 2, "num_perf_trials": 3,
          "num_warmup": 1, "enable_profiling": False, "timeout": 120}
FLAGS = [x for k, v in FIELDS.items()
         for x in (f"--{k.replace('_', '-')}", json.dumps(v) if not isinstance(v, str) else v)]
LEASE_S, TTL_S = 5, 3

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def sleeper(seconds: float) -> str:
    """The honest solution whose first forward call sleeps first."""
    return read(HONEST) + (
        "\nimport time as _kgym_t\n"
        "_kgym_fwd = ModelNew.forward\n"
        "_kgym_slept = []\n"
        "def _kgym_slow(self, *a, **k):\n"
        "    if not _kgym_slept:\n"
        "        _kgym_slept.append(1)\n"
        f"        _kgym_t.sleep({seconds})\n"
        "    return _kgym_fwd(self, *a, **k)\n"
        "ModelNew.forward = _kgym_slow\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Env:
    """A temp dir reachable by uid nobody, a token file, and every process
    started for the tests (stopped by pid in close())."""

    def __init__(self) -> None:
        self.base = tempfile.mkdtemp(prefix="kgym-ws-", dir="/tmp")
        os.chmod(self.base, 0o755)  # the candidate (nobody) enters its work dir below
        self.token_file = os.path.join(self.base, "tokens")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(self.token_file, 0o600)
        self.procs: list[subprocess.Popen] = []
        self.url = ""
        self.server: subprocess.Popen | None = None

    def start_server(self, port: int = 0) -> subprocess.Popen:
        log = open(os.path.join(self.base, f"serve-{len(self.procs)}.log"), "w")
        p = subprocess.Popen([KGYM, "serve", "--listen", f"127.0.0.1:{port}",
                              "--store", f"sqlite:{self.base}/kgym-{len(self.procs)}.db",
                              "--token-file", self.token_file, "--lease-s", str(LEASE_S),
                              "--worker-ttl-s", str(TTL_S)],
                             stdout=subprocess.PIPE, stderr=log, text=True)
        self.procs.append(p)
        line = p.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, f"kgym serve did not start: {line!r}"
        threading.Thread(target=p.stdout.read, daemon=True).start()
        self.url = "http://127.0.0.1:" + line.rsplit(":", 1)[1].strip()
        self.server = p
        return p

    def start_worker(self, url: str | None = None) -> tuple[subprocess.Popen, str]:
        logpath = os.path.join(self.base, f"worker-{len(self.procs)}.log")
        env = dict(os.environ, TMPDIR=self.base)
        p = subprocess.Popen([KGYM, "worker", "--server", url or self.url, "--token-file",
                              self.token_file, "--device", "cpu", "--drain-timeout", "60"],
                             stdout=subprocess.DEVNULL, stderr=open(logpath, "w"), env=env)
        self.procs.append(p)
        return p, logpath

    def client(self) -> Client:
        return Client(self.url, token_file=self.token_file, timeout=30)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([KGYM, *args, "--server", self.url, "--token-file",
                               self.token_file], capture_output=True, text=True,
                              timeout=timeout)

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        kill_leftovers(self.base)
        shutil.rmtree(self.base, ignore_errors=True)


def kill_leftovers(base: str) -> None:
    """Kills (by pid) any process whose environment names the run's TMPDIR:
    sandboxed children of a worker that was killed with -9."""
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"TMPDIR={base}".encode() in f.read():
                    os.kill(int(d), signal.SIGKILL)
        except OSError:
            pass


def wait_for(pred, timeout: float, what: str, step: float = 0.1):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def worker_id(logpath: str) -> str:
    """The worker's id, from its "registered" log line."""
    for line in read(logpath).splitlines():
        if "registered device" in line:
            return line.split("kgym worker ", 1)[1].split(":", 1)[0]
    return ""


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    e = Env()
    try:
        e.start_server()
        yield e
    finally:
        e.close()


@pytest.fixture(scope="module")
def worker(env: Env) -> Iterator[tuple[subprocess.Popen, str]]:
    p, log = env.start_worker()
    wait_for(lambda: worker_id(log), 60, "the worker to register")
    yield p, log
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, read(log)


def test_cli_submit_wait_pass_and_hacked(env: Env, worker) -> None:
    for cand, verdict in ((HONEST, "pass"), (DECOY, "hacked")):
        p = env.cli("submit", "--ref", REF, "--cand", cand, *FLAGS, "--seed", "11",
                    "--wait", "--json")
        assert p.returncode == 0, p.stderr + read(worker[1])
        r = json.loads(p.stdout.strip().splitlines()[-1])
        assert r["status"] == "completed" and r["verdict"] == verdict, r
        if verdict == "hacked":
            assert "no_custom_kernel" in r["hack_reasons"]
        else:
            assert r["correctness"] is True and r["device"]["worker_id"] == worker_id(worker[1])
        # the other client commands on the finished task
        s = env.cli("status", r["task_id"])
        assert s.returncode == 0 and s.stdout.split()[1:] == ["completed", verdict], s
        s = env.cli("result", r["task_id"], "--json")
        assert s.returncode == 0 and json.loads(s.stdout)["verdict"] == verdict
        s = env.cli("cancel", r["task_id"])
        assert s.returncode == 2 and "already_finished" in s.stderr
    p = env.cli("submit", "--ref", REF, "--cand", HONEST, "--num-perf-trials", "0")
    assert p.returncode == 2 and "num_perf_trials" in p.stderr
    p = env.cli("status", "no-such-task")
    assert p.returncode == 2 and "not_found" in p.stderr


def test_python_client_single_and_batch(env: Env, worker) -> None:
    c = env.client()
    ref = read(REF)
    tid = c.submit(ref, read(HONEST), seed=21, **FIELDS)
    assert c.status(tid)["status"] in ("pending", "running", "completed")
    r = c.wait(tid, timeout=120)
    assert r["verdict"] == "pass" and r["task_id"] == tid, r
    b = c.batch([{"reference_code": ref, "kernel_code": read(DECOY), "seed": 22, **FIELDS},
                 {"reference_code": ref, "kernel_code": read(HONEST), **FIELDS,
                  "backend": "fortran"}])
    assert b["accepted"] == 1 and b["rejected"] == 1
    assert b["tasks"][1]["error"]["field"] == "backend"
    r = c.wait(b["tasks"][0]["task_id"], timeout=120)
    assert r["verdict"] == "hacked" and "no_custom_kernel" in r["hack_reasons"], r
    with pytest.raises(KgymError) as ei:
        c.submit(ref, read(HONEST), num_perf_trials=0)
    assert ei.value.status == 422 and ei.value.field == "num_perf_trials"
    with pytest.raises(KgymError) as ei:
        c.status("no-such-task")
    assert ei.value.status == 404 and ei.value.code == "not_found"
    with pytest.raises(KgymError) as ei:
        Client(env.url, token="wrong-token-0123456789").status(tid)
    assert ei.value.status == 401
    c.close()


def test_sigterm_finishes_the_task_then_unregisters(env: Env, worker) -> None:
    p, log = worker
    wid = worker_id(log)
    c = env.client()
    tid = c.submit(read(REF), sleeper(3), seed=31, **FIELDS)
    # running on the server is not enough: a lease written for a long poll
    # the SIGTERM interrupts never reaches the worker (it is requeued when
    # the worker unregisters); wait until the worker says it holds the task
    wait_for(lambda: f"task {tid}: leased" in read(log), 30, "the worker to lease the task")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0, read(log)
    st = c.status(tid)
    assert st["status"] == "completed" and st["attempts"] == 1, (st, read(log))
    assert c.result(tid)["verdict"] == "pass"
    text = read(log)
    assert "draining 1 task" in text and "result posted" in text, text
    assert text.index("result posted") < text.index("unregistered"), text
    ws = c.request("GET", "/workers/status")[1]
    assert not [w for w in ws["workers"] if w["worker_id"] == wid and w["alive"]], ws
    c.close()


def test_kill9_holder_task_requeued_to_second_worker(env: Env) -> None:
    a, alog = env.start_worker()
    wait_for(lambda: worker_id(alog), 60, "worker A to register")
    c = env.client()
    tid = c.submit(read(REF), sleeper(8), seed=41, **FIELDS)
    wait_for(lambda: c.status(tid)["status"] == "running", 30, "worker A to lease")
    time.sleep(1)
    a.kill()  # -9 while it holds the lease
    a.wait()
    b, blog = env.start_worker()
    r = c.wait(tid, timeout=90)
    st = c.status(tid)
    bid = worker_id(blog)
    assert r["verdict"] == "pass", r
    assert st["attempts"] == 2 and bid and r["device"]["worker_id"] == bid, (st, read(blog))
    assert worker_id(alog) != bid
    # the client's seed (41) is not the retry's: no input the first attempt's
    # candidate saw comes again
    assert f"task {tid}: attempt 2, on inputs of a new seed" in read(blog), read(blog)
    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=30) == 0
    c.close()


def test_worker_started_before_the_server(env: Env) -> None:
    port = free_port()
    w, log = env.start_worker(f"http://127.0.0.1:{port}")
    wait_for(lambda: "server unreachable" in read(log), 30, "the worker to try")
    time.sleep(1)
    assert w.poll() is None, read(log)
    env.start_server(port)
    c = env.client()
    tid = c.submit(read(REF), read(HONEST), seed=51, **FIELDS)
    r = c.wait(tid, timeout=90)
    assert r["verdict"] == "pass", r
    assert "registered device cpu" in read(log)
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=30) == 0
    c.close()
