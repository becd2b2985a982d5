"""POST /results/batch: the results of many tasks in one request, and a
long poll until one of them finishes, against a real `kgym serve` on both
stores (the fixtures of test_server_api.py, a fake worker written there),
real `kgym worker`s completing cpu tasks (kgym_env.Env), and two servers
sharing one Redis. docs/api.md is the contract."""
from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

from kgym_env import Env, cheap_task, free_port
from test_server_api import (assert_error, lease_task, post_result, register,  # noqa: F401
                             server, sqlite_server, start_server, task, uid,
                             write_tokens)

MAX_IDS = 1000


def submit(s, n: int = 1) -> list[str]:
    ids = []
    for _ in range(n):
        code, _, body = s.request("POST", "/evaluate", task())
        assert code == 200 and body["status"] == "pending", body
        ids.append(body["task_id"])
    return ids


def poll(s, ids: list[str], wait_s: float | None = None, **kw) -> tuple[int, dict, float]:
    """One POST /results/batch: (status, body, seconds it took)."""
    body: dict = {"task_ids": ids}
    if wait_s is not None:
        body["wait_s"] = wait_s
    t0 = time.monotonic()
    code, _, out = s.request("POST", "/results/batch", body, **kw)
    return code, out, time.monotonic() - t0


def in_background(fn) -> dict:
    """Runs fn in a thread; the dict gets "out" (its value) and "t" (when
    it returned, monotonic) once it is done, and "thread"."""
    box: dict = {}

    def run() -> None:
        box["out"] = fn()
        box["t"] = time.monotonic()
    box["thread"] = threading.Thread(target=run, daemon=True)
    box["thread"].start()
    return box


def metric(s, name: str) -> float:
    code, _, text = s.request("GET", "/metrics")
    assert code == 200
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def wait_parked(s, n: int, timeout: float = 5) -> None:
    t0 = time.monotonic()
    while metric(s, "kgym_result_polls_waiting") != n:
        assert time.monotonic() - t0 < timeout, f"never {n} parked result polls"
        time.sleep(0.05)


def test_answers_at_once_with_what_is_final(server):
    done, running, pending = submit(server, 3)
    wid = register(server)
    lease_task(server, wid, done)
    post_result(server, wid, done, "mismatch")
    lease_task(server, wid, running)
    ghost = uid("never-submitted")
    code, body, took = poll(server, [pending, done, ghost, running], wait_s=30)
    assert code == 200, body
    assert took < 2, f"a final task in the list, yet it waited {took:.2f} s"
    assert [r["task_id"] for r in body["results"]] == [done]
    r = body["results"][0]
    # the same object GET /results/{id} gives
    code, _, single = server.request("GET", f"/results/{done}")
    assert code == 200 and r == single and r["verdict"] == "mismatch"
    assert r["status"] == "completed" and r["speedup"] is None
    assert body["pending"] == [{"task_id": pending, "status": "pending"},
                               {"task_id": running, "status": "running"}]
    assert body["unknown"] == [ghost]
    post_result(server, wid, running, "pass")


def test_unknown_ids_alone_answer_at_once(server):
    ghosts = [uid("ghost"), uid("ghost")]
    code, body, took = poll(server, ghosts, wait_s=30)
    assert code == 200 and took < 2
    assert body == {"results": [], "pending": [], "unknown": ghosts}


def test_parks_until_a_result_arrives(server):
    ids = submit(server, 3)
    wid = register(server)
    lease_task(server, wid, ids[0])  # the oldest: the others are not leased
    before = metric(server, "kgym_result_polls_waiting")
    box = in_background(lambda: poll(server, ids, wait_s=30))
    wait_parked(server, before + 1)
    time.sleep(0.3)
    assert "out" not in box, "answered while nothing was final"
    t_post = time.monotonic()
    post_result(server, wid, ids[0], "pass", speedup=3.0)
    box["thread"].join(10)
    code, body, took = box["out"]
    assert code == 200, body
    # woken by the result through this server, not by a periodic re-check
    assert box["t"] - t_post < 0.5, f"answered {box['t'] - t_post:.2f} s after the result"
    assert [r["task_id"] for r in body["results"]] == [ids[0]]
    assert body["results"][0]["speedup"] == 3.0
    assert {p["task_id"] for p in body["pending"]} == set(ids[1:])
    assert metric(server, "kgym_result_polls_waiting") == before
    for t in ids[1:]:
        lease_task(server, wid, t)
        post_result(server, wid, t, "pass")


def test_a_cancellation_wakes_the_poll(server):
    (tid,) = submit(server)
    box = in_background(lambda: poll(server, [tid], wait_s=30))
    wait_parked(server, 1)
    t0 = time.monotonic()
    assert server.request("DELETE", f"/tasks/{tid}")[0] == 200
    box["thread"].join(10)
    code, body, _ = box["out"]
    assert code == 200 and box["t"] - t0 < 0.5
    assert body["results"][0]["task_id"] == tid
    assert body["results"][0]["status"] == "cancelled"


def test_a_result_for_another_task_does_not_answer(server):
    mine, other = submit(server, 2)
    wid = register(server)
    box = in_background(lambda: poll(server, [mine], wait_s=1.5))
    wait_parked(server, 1)
    lease_task(server, wid, mine)  # the older one comes first
    lease_task(server, wid, other)
    post_result(server, wid, other, "pass")
    box["thread"].join(10)
    code, body, took = box["out"]
    assert code == 200 and 1.4 < took < 3, took
    assert body["results"] == [] and body["pending"] == [{"task_id": mine, "status": "running"}]
    post_result(server, wid, mine, "pass")


def test_times_out_with_the_pending_answer(server):
    ids = submit(server, 2)
    code, body, took = poll(server, ids, wait_s=0.6)
    assert code == 200 and 0.55 < took < 2, took
    assert body == {"results": [], "pending": [{"task_id": i, "status": "pending"} for i in ids],
                    "unknown": []}
    # wait_s 0 (and none) is a plain read
    for w in (0, None):
        code, body, took = poll(server, ids, wait_s=w)
        assert code == 200 and took < 0.5 and len(body["pending"]) == 2


@pytest.mark.parametrize("body, status, field", [
    ({}, 400, "task_ids"),
    ({"task_ids": "a"}, 400, "task_ids"),
    ({"task_ids": None}, 400, "task_ids"),
    ({"task_ids": ["a", 7]}, 400, "task_ids"),
    ({"task_ids": []}, 422, "task_ids"),
    ({"task_ids": ["a/b"]}, 422, "task_ids"),
    ({"task_ids": ["ok", ""]}, 422, "task_ids"),
    ({"task_ids": ["x" * 101]}, 422, "task_ids"),
    ({"task_ids": ["a\u0000b"]}, 400, None),  # the JSON layer refuses a NUL
    ({"task_ids": ["a", "b", "a"]}, 422, "task_ids"),
    ({"task_ids": [f"t{i}" for i in range(MAX_IDS + 1)]}, 413, "task_ids"),
    ({"task_ids": ["a"], "wait_s": "soon"}, 400, "wait_s"),
    ({"task_ids": ["a"], "wait_s": True}, 400, "wait_s"),
    ({"task_ids": ["a"], "wait_s": 121}, 422, "wait_s"),
    ({"task_ids": ["a"], "wait_s": -1}, 422, "wait_s"),
])
def test_bad_input_is_a_clear_4xx(sqlite_server, body, status, field):
    code, _, out = sqlite_server.request("POST", "/results/batch", body)
    e = assert_error((code, {}, out), status, field)
    if body.get("task_ids") == ["a", "b", "a"]:
        assert e["code"] == "duplicate_task_id"


def test_bodies_that_are_no_request(sqlite_server):
    s = sqlite_server
    for raw in (b"", b"not json", b"[1, 2]", b'{"task_ids": ["a"]', b'"a"'):
        assert_error(s.request("POST", "/results/batch", raw=raw), 400)
    # the cap itself is accepted
    code, _, body = s.request("POST", "/results/batch",
                              {"task_ids": [f"cap-{i}" for i in range(MAX_IDS)]})
    assert code == 200 and len(body["unknown"]) == MAX_IDS


def test_auth_and_routing(sqlite_server):
    s = sqlite_server
    body = {"task_ids": ["a"]}
    assert_error(s.request("POST", "/results/batch", body, token=None), 401)
    assert_error(s.request("POST", "/results/batch", body, token="wrong-token-0123456789"), 401)
    assert_error(s.request("POST", "/results/batch", body, token="worker-token-0123456789abcdef"),
                 401)
    # GET /results/batch is still the result of a task named "batch"
    assert_error(s.request("GET", "/results/batch"), 404, "task_id")
    code, hdrs, _ = s.request("DELETE", "/results/batch")
    assert code == 405 and "POST" in hdrs["allow"] and "GET" in hdrs["allow"]


def test_sigterm_answers_a_parked_poll(tmp_path):
    cf, wf = write_tokens(str(tmp_path))
    s = start_server(["--store", f"sqlite:{tmp_path}/kgym.db", "--token-file", cf,
                      "--worker-token-file", wf], str(tmp_path))
    try:
        (tid,) = submit(s)
        box = in_background(lambda: poll(s, [tid], wait_s=60))
        wait_parked(s, 1)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        box["thread"].join(15)
        code, body, _ = box["out"]
        assert code == 200 and box["t"] - t0 < 5
        assert body == {"results": [], "pending": [{"task_id": tid, "status": "pending"}],
                        "unknown": []}
        assert s.proc.wait(15) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_a_parked_poll_whose_client_left_is_dropped(sqlite_server):
    s = sqlite_server
    (tid,) = submit(s)
    body = json.dumps({"task_ids": [tid], "wait_s": 30}).encode()
    c = socket.create_connection(("127.0.0.1", s.port))
    c.sendall(f"POST /results/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {s.token}\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    wait_parked(s, 1)
    c.close()
    wait_parked(s, 0, timeout=4)  # dropped at its next re-check
    assert s.request("DELETE", f"/tasks/{tid}")[0] == 200


@pytest.mark.needs_root("real workers run candidates as uid nobody")
@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_real_worker_ends_the_wait(request, store):
    if store == "redis":
        request.getfixturevalue("redis_server")
    e = Env(store)
    try:
        e.start_server()
        c = e.client()
        ids = [c.submit_raw(cheap_task(uid("real"), sleep=1.5))["task_id"] for _ in range(2)]
        t0 = time.monotonic()
        out = c.request("POST", "/results/batch", {"task_ids": ids, "wait_s": 0})
        assert out[0] == 200 and not out[1]["results"]
        e.start_worker("cpu:0")
        got: dict[str, dict] = {}
        rounds = 0
        while len(got) < 2:
            assert time.monotonic() - t0 < 120, got
            code, body = c.request("POST", "/results/batch",
                                   {"task_ids": [i for i in ids if i not in got], "wait_s": 60},
                                   timeout=90)
            assert code == 200, body
            rounds += 1
            for r in body["results"]:
                got[r["task_id"]] = r
        assert rounds <= 2, rounds  # one answer per result, no polling
        for tid in ids:
            assert got[tid]["status"] == "completed"
            assert got[tid]["verdict"] == "runtime_error", got[tid]
        # the Python client's wait_all goes through the same endpoint
        assert c.wait_all(ids, timeout=10) == {tid: got[tid] for tid in ids}
    finally:
        e.close()


def test_a_result_through_another_server_on_the_same_redis(request):
    """Two servers share one Redis: a poll parked on B sees a result
    posted through A at B's next re-check of the store (about 1 s)."""
    request.getfixturevalue("redis_server")
    e = Env("redis")
    try:
        a = e.start_server()
        ca = e.client()
        e.port = free_port()  # a second server on the same store
        e.url = f"http://127.0.0.1:{e.port}"
        e.start_server()
        cb = e.client()
        tid = ca.submit_raw(cheap_task(uid("shared")))["task_id"]
        box = in_background(lambda: cb.request("POST", "/results/batch",
                                               {"task_ids": [tid], "wait_s": 30}))
        time.sleep(0.5)
        assert "out" not in box
        # a fake worker on A
        wid = uid("w")
        code, reg = ca.request("POST", "/worker/register", {"worker_id": wid, "device": "cpu:9"})
        assert code == 200
        sec = reg["worker_secret"]
        code, lease = ca.request("POST", "/worker/lease", {"worker_id": wid, "wait_s": 5,
                                                           "worker_secret": sec})
        assert code == 200 and lease["task_id"] == tid
        t0 = time.monotonic()
        code, _ = ca.request("POST", "/worker/result", {
            "worker_id": wid, "task_id": tid, "worker_secret": sec,
            "result": {"status": "completed", "verdict": "pass", "speedup": 2.0,
                       "correctness": True, "kernel_runtime": 1.0,
                       "reference_runtime": 2.0}})
        assert code == 200
        box["thread"].join(10)
        code, body = box["out"]
        assert code == 200 and body["results"][0]["task_id"] == tid
        assert box["t"] - t0 < 1.6, f"seen {box['t'] - t0:.2f} s after the result"
        assert a.poll() is None
    finally:
        e.close()


def requests_to(s, route: str) -> int:
    """kgym_http_requests_total of one route, all codes."""
    code, _, text = s.request("GET", "/metrics")
    assert code == 200
    return sum(int(float(ln.rsplit(" ", 1)[1])) for ln in text.splitlines()
               if ln.startswith("kgym_http_requests_total{") and f'route="{route}"' in ln)


def test_python_client_waits_by_long_poll(server):
    from kgym.client import Client, KgymError
    ids = submit(server, 2)
    wid = register(server)

    def finish() -> None:
        for tid in ids:
            time.sleep(0.4)
            lease_task(server, wid, tid)
            post_result(server, wid, tid, "pass")
    before = {r: requests_to(server, r) for r in ("results", "results_batch")}
    box = in_background(finish)
    c = Client(f"http://127.0.0.1:{server.port}", token=server.token)
    out = c.wait_all(ids, timeout=30)
    box["thread"].join(30)
    assert list(out) == ids and all(r["verdict"] == "pass" for r in out.values())
    assert c.wait(ids[0], timeout=5) == out[ids[0]]
    got = {r: requests_to(server, r) - before[r] for r in before}
    # one long poll per result, one for the wait of a finished task
    assert got == {"results": 0, "results_batch": 3}, got
    with pytest.raises(KgymError) as e:
        c.wait_all([ids[0], uid("ghost")], timeout=5)
    assert e.value.status == 404


def older_server(ready_after: int = 3):
    """A stub of a server from before POST /results/batch, which answers
    it 405 (the path is GET /results/{id}'s): GET /results/{id} is 202
    for the first ready_after - 1 GETs in all, then 200. Returns the
    server (shut it down) and the list of paths it was asked."""
    import http.server
    gets: list[str] = []

    class Old(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.reply(405, {"error": {"code": "method_not_allowed", "message": "no"}})

        def do_GET(self) -> None:
            gets.append(self.path)
            tid = self.path.rsplit("/", 1)[1]
            if len(gets) < ready_after:
                self.reply(202, {"task_id": tid, "status": "running"})
            else:
                self.reply(200, {"task_id": tid, "status": "completed", "verdict": "pass"})

        def log_message(self, *a) -> None:
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Old)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, gets


def test_python_client_falls_back_on_an_older_server():
    from kgym.client import Client
    srv, gets = older_server()
    try:
        c = Client(f"http://127.0.0.1:{srv.server_address[1]}", token="t" * 20)
        out = c.wait_all(["a", "b"], timeout=10, poll=0.01)
        assert {k: v["verdict"] for k, v in out.items()} == {"a": "pass", "b": "pass"}
        assert gets == ["/results/a"] * 3 + ["/results/b"]
    finally:
        srv.shutdown()


def test_kgym_wait_falls_back_on_an_older_server(tmp_path):
    import subprocess
    from test_server_api import KGYM
    srv, gets = older_server(ready_after=4)
    tokens = tmp_path / "tokens"
    tokens.write_text("t" * 20 + "\n")
    tokens.chmod(0o600)
    try:
        t0 = time.monotonic()
        p = subprocess.run([KGYM, "wait", "a", "--json", "--server",
                            f"http://127.0.0.1:{srv.server_address[1]}", "--token-file",
                            str(tokens)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["verdict"] == "pass"
        assert "no POST /results/batch" in p.stderr
        # GET every 0.1 s, then 0.15, 0.225: paced, not in a loop
        assert gets == ["/results/a"] * 4 and time.monotonic() - t0 > 0.2
    finally:
        srv.shutdown()


def kgym_cli(s, *args: str, timeout: float = 60):
    import os
    import subprocess
    from test_server_api import KGYM
    return subprocess.run([KGYM, *args, "--server", f"http://127.0.0.1:{s.port}",
                           "--token-file", os.path.join(s.tmp, "tokens")],
                          capture_output=True, text=True, timeout=timeout)


def test_kgym_wait_long_polls(server):
    """`kgym wait` (and `kgym submit --wait`) wait by POST /results/batch:
    one request for a result that comes 0.6 s later, no GET /results."""
    (tid,) = submit(server)
    wid = register(server)

    def finish() -> None:
        time.sleep(0.6)
        lease_task(server, wid, tid)
        post_result(server, wid, tid, "pass", speedup=1.25)
    before = {r: requests_to(server, r) for r in ("results", "results_batch")}
    box = in_background(finish)
    p = kgym_cli(server, "wait", tid, "--json")
    box["thread"].join(30)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["task_id"] == tid and r["verdict"] == "pass" and r["speedup"] == 1.25
    got = {r: requests_to(server, r) - before[r] for r in before}
    assert got == {"results": 0, "results_batch": 1}, got
    # unknown: refused at once; still pending: a timeout
    p = kgym_cli(server, "wait", uid("ghost"))
    assert p.returncode == 2 and "not_found" in p.stderr, p.stderr
    (late,) = submit(server)
    t0 = time.monotonic()
    p = kgym_cli(server, "wait", late, "--timeout", "1")
    assert p.returncode == 1 and "not finished after 1 s" in p.stderr, p.stderr
    assert 0.9 < time.monotonic() - t0 < 5
    assert server.request("DELETE", f"/tasks/{late}")[0] == 200
