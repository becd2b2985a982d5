"""How many tasks a worker keeps in flight: `kgym worker --concurrency
N|auto` and `kgym serve --workers ... --worker-concurrency N|auto`, whose
default is auto (4 on a GPU; on the CPU the host's CPUs / (2 x local
workers), 1 to 8). serve puts the resolved number on its workers' command
line, like the engine's other settings."""
from __future__ import annotations

import os
import subprocess
import time

import pytest
from kgym_env import KGYM, Env, cheap_task, uid, wait_for

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _auto_cpu(nworkers: int) -> int:
    return max(1, min(8, _cpus() // (2 * nworkers)))


def _worker_cmdlines(serve_pid: int) -> list[list[str]]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != serve_pid:
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv[1:2] == ["worker"]:
            out.append(argv)
    return out


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _serve_workers(env: Env, *extra: str) -> list[list[str]]:
    serve = env.start_server("--workers", "1", *extra)
    c = env.client()
    wait_for(lambda: c.request("GET", "/workers/status")[1]["alive"] == 1, 60,
             "the local worker to register")
    c.close()
    return _worker_cmdlines(serve.pid)


def test_serve_gives_its_workers_the_concurrency_and_they_use_it():
    """--worker-concurrency 2: on the worker's command line, and two tasks
    whose candidates each sleep 3 s in their import finish together."""
    env = Env("sqlite")
    try:
        workers = _serve_workers(env, "--worker-concurrency", "2")
        assert len(workers) == 1 and _flag(workers[0], "--concurrency") == "2", workers
        c = env.client()
        ids = [uid("wc") for _ in range(2)]
        t0 = time.monotonic()
        for t in ids:
            c.submit_raw(cheap_task(t, sleep=3))
        res = c.wait_all(ids, timeout=120)
        wall = time.monotonic() - t0
        c.close()
        assert all(r["status"] == "completed" for r in res.values()), res
        # one at a time would take two sleeps (6 s) and more
        assert wall < 5.8, f"two 3 s tasks took {wall:.1f} s: not run side by side"
    finally:
        env.close()


def test_serve_workers_default_to_auto():
    env = Env("sqlite")
    try:
        workers = _serve_workers(env)
        assert len(workers) == 1, workers
        assert _flag(workers[0], "--concurrency") == str(_auto_cpu(1)), workers
    finally:
        env.close()


def test_worker_concurrency_auto_resolves():
    env = Env("sqlite")
    try:
        env.start_server()
        env.start_worker("cpu", "--concurrency", "auto")
        wait_for(lambda: "concurrency" in env.worker_logs(), 60, "the worker to start")
        assert f"concurrency {_auto_cpu(1)}," in env.worker_logs(), env.worker_logs()
    finally:
        env.close()


@pytest.mark.parametrize("argv,msg", [
    (["serve", "--worker-concurrency", "2"],
     "--worker-concurrency is for the local workers: it needs --workers"),
    (["serve", "--workers", "1", "--worker-concurrency", "0"],
     "--worker-concurrency must be a number from 1 to 64, or auto, not '0'"),
    (["worker", "--device", "cpu", "--concurrency", "many"],
     "--concurrency must be a number from 1 to 64, or auto, not 'many'"),
])
def test_bad_concurrency_is_one_clear_line(argv, msg, tmp_path):
    p = subprocess.run([KGYM, *argv], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, HOME=str(tmp_path)))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert msg in p.stderr, p.stderr
