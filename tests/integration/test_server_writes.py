"""Requests that write run on kgym serve's store threads while their
connections are suspended (src/server/http.c, "store jobs"): a write that
waits for the store holds no HTTP thread, so reads keep being answered,
many writes are in the store at once, and a stop lets the queued writes
finish. A real `kgym serve` over SQLite whose write lock an outside
connection holds (as a slow disk would), and over both stores for the
concurrency check. Standard library only."""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from typing import Iterator

import pytest

from test_server_api import (Server, register, server, start_server,  # noqa: F401
                             stop_server, task, uid, write_tokens)


@pytest.fixture()
def sqlite_tmp() -> Iterator[tuple[Server, str]]:
    tmp = tempfile.mkdtemp(prefix="kgym-writes-")
    try:
        cf_, wf = write_tokens(tmp)
        db = os.path.join(tmp, "kgym.db")
        s = start_server(["--store", f"sqlite:{db}", "--token-file", cf_,
                          "--worker-token-file", wf], tmp)
        try:
            yield s, db
        finally:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def hold_write_lock(db: str) -> sqlite3.Connection:
    """Takes SQLite's write lock from outside: the server's writes wait
    (its busy timeout is 5 s); WAL readers do not."""
    c = sqlite3.connect(db, isolation_level=None, timeout=5)
    c.execute("BEGIN IMMEDIATE")
    return c


def test_reads_answer_while_writes_wait(sqlite_tmp):
    s, db = sqlite_tmp
    code, _, body = s.request("POST", "/evaluate", task(task_id="seen"))
    assert code == 200, body
    lock = hold_write_lock(db)
    n = 40  # more than the HTTP threads (4 per CPU): each would hold one
    pool = cf.ThreadPoolExecutor(n)
    try:
        futs = [pool.submit(s.request, "POST", "/evaluate", task(task_id=uid("w")))
                for _ in range(n)]
        time.sleep(0.3)
        worst = 0.0
        for _ in range(30):
            t0 = time.monotonic()
            code, _, body = s.request("GET", "/status/seen", timeout=5)
            worst = max(worst, time.monotonic() - t0)
            assert code == 200 and body["status"] == "pending", body
        # the writes really were waiting for the store all along
        assert not any(f.done() for f in futs)
        assert worst < 1.0, f"a status read took {worst:.2f} s behind blocked writes"
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    ids = []
    for f in futs:
        code, _, body = f.result(timeout=30)
        assert code == 200 and body["status"] == "pending", body
        ids.append(body["task_id"])
    pool.shutdown()
    for tid in ids:
        code, _, body = s.request("GET", f"/status/{tid}")
        assert code == 200 and body["status"] == "pending", body
    stop_server(s)


def test_stop_finishes_queued_writes(sqlite_tmp):
    """SIGTERM while writes wait for the store: they are answered once the
    store lets them through, every acknowledged one is in the database, and
    the server exits cleanly."""
    s, db = sqlite_tmp
    lock = hold_write_lock(db)
    n = 12
    pool = cf.ThreadPoolExecutor(n)
    ids = [uid("stop") for _ in range(n)]
    futs = [pool.submit(s.request, "POST", "/evaluate", task(task_id=i), timeout=20)
            for i in ids]
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert s.proc.poll() is None, "the server quit with writes in flight"
    lock.execute("ROLLBACK")
    lock.close()
    assert s.proc.wait(timeout=15) == 0
    acked = []
    for i, f in zip(ids, futs):
        try:
            code, _, body = f.result(timeout=20)
        except OSError:
            continue  # not answered: not promised either
        assert code in (200, 503), body
        if code == 200:
            acked.append(i)
    pool.shutdown()
    assert acked, "no write was answered before the stop"
    with sqlite3.connect(db) as c:
        have = {r[0] for r in c.execute("SELECT id FROM tasks")}
    assert set(acked) <= have


def test_concurrent_writes_each_once(server):
    """64 submissions and then 64 leases by 16 workers, all at once: every
    task acknowledged, leased exactly once, with its own request."""
    n, nw = 64, 16
    kernels = {uid("k"): None for _ in range(n)}
    with cf.ThreadPoolExecutor(n) as pool:
        replies = list(pool.map(
            lambda k: server.request("POST", "/evaluate", task(kernel_code=k)), kernels))
    for k, (code, _, body) in zip(kernels, replies):
        assert code == 200, body
        kernels[k] = body["task_id"]
    workers = [register(server) for _ in range(nw)]
    got: dict[str, str] = {}
    mu = threading.Lock()

    def drain(wid: str) -> None:
        while True:
            code, hdrs, body = server.worker("/worker/lease", {"worker_id": wid, "wait_s": 0})
            if code == 204:
                return
            assert code == 200, body
            assert hdrs["content-type"].startswith("application/json")
            k = body["request"]["kernel_code"]
            with mu:
                if k in kernels:
                    assert k not in got, f"{k} leased twice"
                    got[k] = body["task_id"]
                    if len(got) == n:
                        return

    with cf.ThreadPoolExecutor(nw * 4) as pool:
        list(pool.map(drain, [w for w in workers for _ in range(4)]))
    assert got == kernels
    for wid in workers:
        server.worker("/worker/unregister", {"worker_id": wid})
    json.dumps(got)  # plain strings only
