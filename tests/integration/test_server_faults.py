"""Faults of the service, with real processes on both stores (SQLite in a
temp dir; a real redis-server on a loopback port with its AOF in the temp
dir): a real `kgym serve` killed with -9 under load and restarted on the
same store; a real `kgym worker` killed with -9 while it holds a lease;
Redis frozen (SIGSTOP) or killed mid-run and brought back; a cancellation
reaching an evaluation in progress on a worker.

The accounting is the workers' own: each posted result the server accepted
is a "result posted (..., task completed)" line in a worker's log, so
"completes exactly once" is counted per task id from the logs, and the
store's final status must agree. Evaluations are real but cheap (the
candidate has no usable ModelNew: runtime_error in a fraction of a second).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Iterator

import pytest

from kgym_env import (KGYM, Env, alive, cheap_task, descendants, posted, read,
                      registered_id, task_processes, uid, wait_for)
from kgym.client import Client, KgymError, KgymUnavailable

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")


@pytest.fixture(params=["sqlite", "redis"])
def env(request) -> Iterator[Env]:
    if request.param == "redis":
        request.getfixturevalue("redis_server")  # a skip, or a failure in CI
    e = Env(request.param)
    try:
        yield e
    finally:
        e.close()


def start_workers(env: Env, n: int) -> list[subprocess.Popen]:
    ws = [env.start_worker(f"cpu:{i}") for i in range(n)]
    try:
        wait_for(lambda: all(registered_id(w.log) for w in ws), 120,
                 "the workers to register")
    except AssertionError as e:
        logs = "\n".join(f"--- {w.log} (exit {w.poll()}):\n{read(w.log)}" for w in ws)
        raise AssertionError(f"{e}\n{logs}\n--- server:\n{read(env.server.log)[-3000:]}")
    return ws


def final_statuses(c: Client, ids: list[str], timeout: float) -> dict[str, dict]:
    """Polls /status of every id until none is pending or running."""
    out: dict[str, dict] = {}

    def done() -> bool:
        for tid in ids:
            if tid in out:
                continue
            try:
                st = c.status(tid)
            except KgymUnavailable:
                return False
            if st["status"] not in ("pending", "running"):
                out[tid] = st
        return len(out) == len(ids)
    wait_for(done, timeout, f"{len(ids)} tasks to finish ({len(ids) - len(out)} left)", 0.5)
    return out


def assert_exactly_once(env: Env, ids: list[str], statuses: dict[str, dict]) -> None:
    """Each task completed, with one accepted result. A post whose reply was
    lost (the server killed after the write) is retried and refused: then
    the store's result is that post's, and no post was accepted twice.

    The server stores a result before its reply reaches the worker, which
    logs the post only then: the logs are read once every completed task's
    post is in them, or after 10 s (a task may be seen completed a moment
    before its line is written; that race failed this test once)."""
    def logged() -> str | None:
        logs = env.worker_logs()
        done = [t for t in ids if statuses[t]["status"] == "completed"]
        return logs if all(posted(logs, t) for t in done) else None
    t0 = time.monotonic()
    logs = logged()
    while logs is None and time.monotonic() - t0 < 10:
        time.sleep(0.1)
        logs = logged()
    logs = logs if logs is not None else env.worker_logs()
    bad = {}
    for tid in ids:
        p = posted(logs, tid)
        st = statuses[tid]
        once = p.count("completed") == 1 or (p.count("completed") == 0 and "dropped" in p)
        if st["status"] != "completed" or not once or st["verdict"] != "runtime_error":
            bad[tid] = (st, p)
    assert not bad, f"{len(bad)} of {len(ids)} tasks not completed exactly once: " \
        f"{list(bad.items())[:5]}"


def test_kill9_server_under_load_loses_no_acknowledged_task(env: Env) -> None:
    env.start_server()
    workers = start_workers(env, 2)
    acked: list[tuple[str, str]] = []  # (task id, phase)
    tried: list[str] = []
    phase = ["before"]
    lock = threading.Lock()
    stop = threading.Event()

    def client_loop(k: int) -> None:
        c = env.client(timeout=5)
        n = 0
        while not stop.is_set():
            tid = f"load-{k}-{n}"
            n += 1
            with lock:
                tried.append(tid)
            try:
                r = c.submit_raw(cheap_task(tid))
                assert r["task_id"] == tid
                with lock:
                    acked.append((tid, phase[0]))
            except (KgymUnavailable, OSError):
                pass  # the server is down: not acknowledged
            time.sleep(0.05)
        c.close()

    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.2)
        env.server.kill()  # -9, with submissions, leases and results in flight
        env.server.wait()
        phase[0] = "down"
        time.sleep(0.5)
        env.start_server()
        phase[0] = "after"
        time.sleep(1.2)
    finally:
        stop.set()
        for t in threads:
            t.join()
    before = [t for t, ph in acked if ph == "before"]
    after = [t for t, ph in acked if ph == "after"]
    assert len(before) >= 10 and len(after) >= 10, (len(before), len(after))
    c = env.client()
    ids = [t for t, _ in acked]
    statuses = final_statuses(c, ids, 240)
    assert_exactly_once(env, ids, statuses)
    # a submission whose reply was lost in the kill may exist; then it too
    # completes once
    maybe = []
    for tid in set(tried) - set(ids):
        try:
            c.status(tid)
            maybe.append(tid)
        except KgymError as e:
            assert e.status == 404, e
    assert_exactly_once(env, maybe, final_statuses(c, maybe, 120))
    # the workers rode it out (reconnected with backoff), never restarted
    for w in workers:
        assert w.poll() is None, read(w.log)
    c.close()


def test_kill9_lease_holder_task_completes_on_another_worker(env: Env) -> None:
    env.start_server()
    a, b = start_workers(env, 2)
    c = env.client()
    tid = uid("held")
    c.submit_raw(cheap_task(tid, sleep=4))
    st = wait_for(lambda: (s := c.status(tid))["status"] == "running" and s, 30,
                  "a worker to lease the task")
    holder, other = (a, b) if st["worker"] == registered_id(a.log) else (b, a)
    assert st["worker"] == registered_id(holder.log), (st, registered_id(holder.log))
    wait_for(lambda: len(descendants(holder.pid)) >= 3, 30,
             "the evaluation's children (zygote, judge, candidate)")
    kids = descendants(holder.pid)
    holder.kill()  # -9 while it holds the lease
    holder.wait()
    wait_for(lambda: not any(alive(p) for p in kids), 10,
             "the killed worker's zygote and sandboxed children to go")
    r = c.wait(tid, timeout=90)
    st = c.status(tid)
    assert r["verdict"] == "runtime_error" and r["device"]["worker_id"] == \
        registered_id(other.log), r
    assert st["attempts"] == 2, st
    assert posted(env.worker_logs(), tid) == ["completed"]
    c.close()


@pytest.mark.parametrize("how", ["sigstop", "kill"])
def test_redis_away_gives_503_and_service_resumes(how: str, redis_server: str) -> None:
    env = Env("redis")
    try:
        server = env.start_server()
        (worker,) = start_workers(env, 1)
        c = env.client(timeout=10)
        first = [uid("r1") for _ in range(6)]
        for tid in first:
            c.submit_raw(cheap_task(tid, sleep=0.3))
        wait_for(lambda: c.status(first[0])["status"] != "pending", 30, "work to start")
        if how == "sigstop":
            env.redis.proc.send_signal(signal.SIGSTOP)  # a hang, not a refusal
        else:
            env.redis.kill()
        t0 = time.monotonic()
        refused = 0
        while time.monotonic() - t0 < 4:
            s, body = c.request("POST", "/evaluate", cheap_task(uid("away")))
            assert s == 503, (s, body)
            assert body["error"]["code"] == "store_unavailable", body
            refused += 1
            s, body = c.request("GET", "/health")
            assert s == 503 and body["status"] == "unavailable", body
        assert refused >= 2
        if how == "sigstop":
            env.redis.proc.send_signal(signal.SIGCONT)
        else:
            env.redis.start()  # on the same AOF: everything acknowledged is there
        wait_for(lambda: c.request("GET", "/health")[0] == 200, 20, "the store to come back")
        second = [uid("r2") for _ in range(6)]
        for tid in second:
            c.submit_raw(cheap_task(tid))
        ids = first + second
        statuses = final_statuses(c, ids, 120)
        assert_exactly_once(env, ids, statuses)
        # nobody was restarted: the same server and worker processes
        assert server.poll() is None and worker.poll() is None, read(worker.log)
        c.close()
    finally:
        env.close()


def test_cancel_stops_the_evaluation_on_the_worker(env: Env) -> None:
    env.start_server()
    (w,) = start_workers(env, 1)
    c = env.client()
    tid = uid("cancel")
    c.submit_raw(cheap_task(tid, sleep=60))
    wait_for(lambda: c.status(tid)["status"] == "running", 30, "the task to start")
    procs = wait_for(lambda: len(p := task_processes(w.pid, tid, env.base)) >= 2 and p, 30,
                     "the evaluation's judge and candidate")
    t0 = time.monotonic()
    p = subprocess.run([KGYM, "cancel", tid, "--server", env.url, "--token-file",
                        env.token_file], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "cancelled" in p.stdout, p
    # the worker hears of it at its next heartbeat (every 2 s while busy)
    # and kills the judge and the candidate
    wait_for(lambda: not any(alive(p) for p in procs), 15,
             "the evaluation's judge and candidate to be killed")
    assert time.monotonic() - t0 < 15
    # logged once the kill returns (it waits for the process groups to go)
    text = wait_for(lambda: f"task {tid}: cancelled on the server" in (t := read(w.log)) and t,
                    10, "the worker to log the cancellation")
    assert "evaluation stopped" in text, text
    r = c.result(tid)
    assert r["status"] == "cancelled", r
    assert posted(text, tid) == []  # no result was posted for it
    # the slot is free again: the next task runs at once
    nxt = uid("next")
    c.submit_raw(cheap_task(nxt))
    assert c.wait(nxt, timeout=30)["verdict"] == "runtime_error"
    assert w.poll() is None
    c.close()
