"""`kgym serve --workers`: the server starts and supervises its own real
`kgym worker` processes. A worker killed with -9 is restarted and the queue
keeps draining; SIGTERM to the server stops every worker and leaves no
process behind; a worker that cannot start is given up after repeated
fast crashes; the local workers' token; what /health and /metrics show."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from kgym_env import (KGYM, TOKEN, Env, alive, cheap_task, descendants, posted, read,
                      uid, wait_for, with_tmpdir)
from kgym.client import Client

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")


def started(env: Env) -> dict[str, int]:
    """device -> pid, from the server's "worker i/n on DEV started" lines."""
    out = {}
    for line in env.server_out:
        m = re.search(r"worker \d+/\d+ on (\S+) started \(pid (\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def health(c: Client) -> dict:
    return c.request("GET", "/health")[1]


def test_kill9_local_worker_is_restarted_and_sigterm_leaves_nothing() -> None:
    env = Env("sqlite")
    try:
        serve = env.start_server("--workers", "2")
        c = env.client()
        pids = wait_for(lambda: len(s := started(env)) == 2 and s, 10, "two worker lines")
        assert set(pids) == {"cpu:0", "cpu:1"}, env.server_out
        wait_for(lambda: c.request("GET", "/workers/status")[1]["alive"] == 2, 60,
                 "both local workers to register")
        ids = [uid("sup") for _ in range(30)]
        for tid in ids[:15]:
            c.submit_raw(cheap_task(tid, sleep=0.2))
        wait_for(lambda: c.request("GET", "/queue/status")[1]["running"] >= 1, 30,
                 "work to start")
        victim = pids["cpu:0"]
        os.kill(victim, signal.SIGKILL)
        for tid in ids[15:]:
            c.submit_raw(cheap_task(tid))
        log = serve.log
        wait_for(lambda: "worker cpu:0 restarted" in read(log), 20, "the restart")
        text = read(log)
        assert "killed by signal 9" in text and "restarting it in" in text, text
        # the dead worker was released at once: its task is pending again
        assert "had not unregistered: released it" in text, text
        wait_for(lambda: health(c)["local_workers"]["running"] == 2, 10,
                 "two running workers")
        h = health(c)["local_workers"]
        assert h == {"configured": 2, "running": 2, "restarts": 1, "given_up": 0}, h
        metrics = c.request("GET", "/metrics")[1]
        assert 'kgym_local_workers{state="running"} 2' in metrics
        assert "kgym_local_worker_restarts_total 1" in metrics
        for tid in ids:
            r = c.wait(tid, timeout=120)
            assert r["status"] == "completed" and r["verdict"] == "runtime_error", r
        # every result accepted once (the server log holds the workers' lines).
        # The server stores a result before its reply reaches the worker, which
        # logs the post only then: the log is read once every task's post is in
        # it, or after 10 s (read at once, a task's line was missing once, CI)
        t0 = time.monotonic()
        while (not all(posted(read(log), tid) for tid in ids)
               and time.monotonic() - t0 < 10):
            time.sleep(0.1)
        text = read(log)
        for tid in ids:
            p = posted(text, tid)
            assert p.count("completed") == 1, (tid, p)
        # SIGTERM: the workers drain, unregister and exit; nothing is left
        family = descendants(serve.pid)
        assert len(family) >= 4  # two workers and their zygotes at least
        t0 = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0, read(log)
        assert time.monotonic() - t0 < 15
        wait_for(lambda: not any(alive(p) for p in family), 10,
                 "every process of the server to be gone")
        assert with_tmpdir(env.base) == []
        text = read(log)
        assert len(re.findall(r"kgym worker \S+: unregistered$", text, re.M)) == 2, text
        assert "stopping 2 local worker(s)" in text, text
        c.close()
    finally:
        env.close()


def test_a_worker_that_cannot_start_is_given_up() -> None:
    env = Env("sqlite")
    try:
        serve = env.start_server("--workers", "1", env={"KGYM_PYTHON": "/nonexistent"})
        c = env.client()
        # restarts after 1, 2, 4 and 8 s, then no more
        wait_for(lambda: health(c)["local_workers"]["given_up"] == 1, 40,
                 "the supervisor to give up")
        text = read(serve.log)
        assert "interpreter '/nonexistent' not found" in text, text
        assert "5 crashes in a row" in text and "giving up on it" in text, text
        h = health(c)
        assert h["status"] == "ok" and h["local_workers"] == {
            "configured": 1, "running": 0, "restarts": 4, "given_up": 1}, h
        # the server goes on without it
        tid = uid("nobody")
        assert c.submit_raw(cheap_task(tid))["status"] == "pending"
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=15) == 0
        c.close()
    finally:
        env.close()


def test_local_worker_tokens() -> None:
    """Without --worker-token-file the local workers get a token of their
    own (kept in memory, handed over a pipe); the client file's tokens stay
    valid for workers started by hand. With --worker-token-file the local
    workers use that file."""
    env = Env("sqlite")
    try:
        env.start_server("--workers", "1")
        c = env.client()
        wait_for(lambda: c.request("GET", "/workers/status")[1]["alive"] == 1, 60,
                 "the local worker to register")
        ws = c.request("GET", "/workers/status")[1]["workers"]
        assert ws[0]["device"] == "cpu:0" and "-local-" in ws[0]["worker_id"], ws
        out = "".join(env.server_out)
        assert "2 worker token(s)" in out, out  # the file's and the local one
        # the token is nowhere on disk and in no process's command line
        for p in descendants(env.server.pid):
            assert TOKEN not in read(f"/proc/{p}/cmdline")
        s, body = c.request("POST", "/worker/register", {"device": "cpu:9"})
        assert s == 200, body  # the client file's token: a worker by hand
        env.server.send_signal(signal.SIGTERM)
        assert env.server.wait(timeout=20) == 0

        wfile = os.path.join(env.base, "worker-tokens")
        with open(wfile, "w") as f:
            f.write("worker-file-token-0123456789\n")
        os.chmod(wfile, 0o600)
        env.start_server("--workers", "1", "--worker-token-file", wfile)
        wait_for(lambda: any(w["alive"] and w["device"] == "cpu:0" and "-local-" in
                             w["worker_id"] for w in
                             c.request("GET", "/workers/status")[1]["workers"]), 60,
                 "the local worker to register with the file's token")
        assert "1 worker token(s)" in "".join(env.server_out)
        s, body = c.request("POST", "/worker/register", {"device": "cpu:8"})
        assert s == 401, body  # client tokens are not worker tokens now
        tid = uid("wtok")
        c.submit_raw(cheap_task(tid))
        assert c.wait(tid, timeout=60)["verdict"] == "runtime_error"
        c.close()
    finally:
        env.close()


@pytest.mark.parametrize("spec", ["0", "65", "two", "-1"])
def test_bad_workers_value(spec: str) -> None:
    p = subprocess.run([KGYM, "serve", "--listen", "127.0.0.1:0", "--workers", spec],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--workers" in p.stderr, p
