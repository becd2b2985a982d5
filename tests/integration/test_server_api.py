"""kgym serve's HTTP API, driven as clients and workers drive it: a real
`kgym serve` on a free loopback port over a real store (SQLite in a temp
dir; Redis through a real redis-server when the store supports it), a fake
worker written here. Standard library only. docs/api.md is the contract."""
from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))

CLIENT_TOKENS = ["client-token-old-0123456789", "client-token-new-0123456789"]
WORKER_TOKEN = "worker-token-0123456789abcdef"

REF = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
TASK = {"reference_code": REF, "kernel_code": "class ModelNew: pass\n", "backend": "cpu"}


def task(**kw: Any) -> dict:
    """A task of its own (a unique kernel), so the result cache stays out
    of tests that are not about it."""
    return {**TASK, "kernel_code": f"class ModelNew: pass  # {time.monotonic_ns()}\n", **kw}


class Server:
    """A running `kgym serve` and a small HTTP client for it."""

    def __init__(self, proc: subprocess.Popen, port: int, tmp: str):
        self.proc, self.port, self.tmp = proc, port, tmp
        self.token: str | None = CLIENT_TOKENS[0]
        self.secrets: dict[str, str] = {}  # worker_id -> its worker_secret

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = "",
                raw: bytes | None = None, headers: dict | None = None,
                timeout: float = 30) -> tuple[int, dict, Any]:
        """One request; token "" means the client token, None none at all.
        Returns (status, headers, parsed JSON or text or None)."""
        h = dict(headers or {})
        tok = self.token if token == "" else token
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            payload = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()
        if not payload:
            return r.status, hdrs, None
        if hdrs.get("content-type", "").startswith("application/json"):
            return r.status, hdrs, json.loads(payload)
        return r.status, hdrs, payload.decode()

    def worker(self, path: str, body: Any, *, secret: bool = True,
               **kw: Any) -> tuple[int, dict, Any]:
        """A worker call with the worker token. As a real worker does, it
        sends the worker_secret its worker_id registered with (secret=False:
        as given, for tests of another holder of the token), and keeps the
        one a registration returns."""
        if (secret and isinstance(body, dict) and "worker_secret" not in body
                and body.get("worker_id") in self.secrets):
            body = {**body, "worker_secret": self.secrets[body["worker_id"]]}
        code, hdrs, got = self.request("POST", path, body, token=WORKER_TOKEN, **kw)
        if path == "/worker/register" and code == 200:
            self.secrets[got["worker_id"]] = got["worker_secret"]
        return code, hdrs, got


def start_server(args: list[str], tmp: str, listen: str = "127.0.0.1:0") -> Server:
    """kgym serve on listen (port 0: a free one), its stderr in
    tmp/serve.log; s.host is the address to reach it on."""
    log = open(os.path.join(tmp, "serve.log"), "w+")
    p = subprocess.Popen([KGYM, "serve", "--listen", listen, *args],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    line = p.stdout.readline()
    if "listening on http://" not in line:
        p.kill()
        p.wait()
        log.seek(0)
        raise RuntimeError(f"kgym serve did not start: {line!r} {log.read()}")
    port = int(line.rsplit(":", 1)[1])
    threading.Thread(target=p.stdout.read, daemon=True).start()  # drain
    s = Server(p, port, tmp)
    s.host = "::1" if listen.startswith("[::1]") else "127.0.0.1"
    return s


def stop_server(s: Server) -> None:
    s.proc.send_signal(signal.SIGTERM)
    try:
        assert s.proc.wait(timeout=15) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def write_tokens(tmp: str) -> tuple[str, str]:
    cf, wf = os.path.join(tmp, "tokens"), os.path.join(tmp, "worker-tokens")
    with open(cf, "w") as f:
        f.write("# clients\n" + "\n".join(CLIENT_TOKENS) + "\n")
    with open(wf, "w") as f:
        f.write(WORKER_TOKEN + "\n")
    os.chmod(cf, 0o600)
    os.chmod(wf, 0o600)
    return cf, wf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_store(request, kind: str, *extra: str) -> Iterator[Server]:
    """A kgym serve with client and worker tokens over a store of kind
    "sqlite" or "redis" (a real redis-server of its own, AOF always), for
    a module fixture to yield from."""
    tmp = tempfile.mkdtemp(prefix="kgym-serve-")
    redis = None
    try:
        cf, wf = write_tokens(tmp)
        if kind == "sqlite":
            store = f"sqlite:{tmp}/kgym.db"
        else:
            # not installed: a skip, or a failure under KGYM_REQUIRE_REDIS=1
            # (CI; tests/conftest.py)
            exe = request.getfixturevalue("redis_server")
            rport = free_port()
            redis = subprocess.Popen([exe, "--port", str(rport), "--bind", "127.0.0.1",
                                      "--dir", tmp, "--save", "", "--appendonly", "yes",
                                      "--appendfsync", "always"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", rport), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise AssertionError(f"redis-server did not answer on port {rport}")
            store = f"redis://127.0.0.1:{rport}/0"
        # a store that does not open fails the tests (never a skip: it is
        # what they are here to catch)
        s = start_server(["--store", store, "--token-file", cf,
                          "--worker-token-file", wf, *extra], tmp)
        s.redis = redis
        yield s
        assert s.proc.poll() is None, "the server died during the tests"
        stop_server(s)
    finally:
        if redis:
            redis.terminate()
            redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def server(request) -> Iterator[Server]:
    yield from serve_store(request, request.param)


@pytest.fixture(scope="module")
def sqlite_server() -> Iterator[Server]:
    """Store-independent checks (bad input, auth, garbage) run once."""
    tmp = tempfile.mkdtemp(prefix="kgym-serve-")
    try:
        cf, wf = write_tokens(tmp)
        s = start_server(["--store", f"sqlite:{tmp}/kgym.db", "--token-file", cf,
                          "--worker-token-file", wf], tmp)
        yield s
        assert s.proc.poll() is None, "the server died during the tests"
        stop_server(s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{time.monotonic_ns()}-{random.randrange(1 << 30)}"


def assert_error(resp: tuple[int, dict, Any], status: int, field: str | None = None) -> dict:
    code, _, body = resp
    assert code == status, (code, body)
    assert isinstance(body, dict) and "error" in body, body
    e = body["error"]
    assert isinstance(e.get("code"), str) and isinstance(e.get("message"), str), e
    if field is not None:
        assert e.get("field") == field, e
        assert field.split(".")[-1] in e["message"], e
    return e


def register(s: Server, device: str | None = None) -> str:
    wid = uid("w")
    code, _, body = s.worker("/worker/register", {"worker_id": wid,
                                                  "device": device or f"cpu:{wid}"})
    assert code == 200, body
    assert body["worker_id"] == wid and body["lease_ms"] > 0
    return wid


def lease_task(s: Server, wid: str, task_id: str, wait_s: float = 5) -> dict:
    """Leases until task_id comes up (other tests' tasks are completed)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code, _, body = s.worker("/worker/lease", {"worker_id": wid, "wait_s": wait_s})
        assert code in (200, 204), body
        if code == 204:
            continue
        if body["task_id"] == task_id:
            return body
        post_result(s, wid, body["task_id"], "pass")
    raise AssertionError(f"never leased {task_id}")


def post_result(s: Server, wid: str, task_id: str, verdict: str, **extra: Any) -> dict:
    """A result as the contract has it: a pass with its runtimes and a
    speedup no larger than their quotient, anything else with no figures."""
    result = {"task_id": task_id, "status": "completed", "verdict": verdict,
              "compiled": True, "correctness": verdict == "pass", "speedup": None,
              "kernel_runtime": None, "hack_reasons": []}
    if verdict == "pass":
        result.update(speedup=1.5, kernel_runtime=1.0, reference_runtime=1.5)
        if "speedup" in extra:
            result["reference_runtime"] = extra["speedup"] * result["kernel_runtime"]
    result.update(extra)
    code, _, body = s.worker("/worker/result", {"worker_id": wid, "task_id": task_id,
                                                "result": result})
    assert code == 200, body
    return body


# ---- the KernelGym-compatible flow, on both stores --------------------------

def test_health_needs_no_token(server):
    code, _, body = server.request("GET", "/health", token=None)
    assert code == 200 and body["status"] == "ok"
    assert body["store"] in ("sqlite", "redis")


def test_submit_status_result_with_a_fake_worker(server):
    tid = uid()
    t = task(task_id=tid)
    code, _, body = server.request("POST", "/evaluate", t)
    assert code == 200 and body == {"task_id": tid, "status": "pending"}

    code, _, st = server.request("GET", f"/status/{tid}")
    assert code == 200 and st["task_id"] == tid and st["status"] == "pending"
    code, _, r = server.request("GET", f"/results/{tid}")
    assert code == 202 and r["status"] == "pending"

    wid = register(server)
    leased = lease_task(server, wid, tid)
    assert leased["request"]["kernel_code"] == t["kernel_code"]
    assert leased["request"]["num_perf_trials"] == 100  # defaults filled
    assert leased["lease_deadline_ms"] > 0 and leased["attempt"] == 1
    code, _, st = server.request("GET", f"/status/{tid}")
    assert st["status"] == "running" and st["worker"] == wid

    code, _, hb = server.worker("/worker/heartbeat", {"worker_id": wid})
    assert code == 200
    done = post_result(server, wid, tid, "pass", kernel_runtime=0.5)
    assert done == {"task_id": tid, "status": "completed"}

    code, _, st = server.request("GET", f"/status/{tid}")
    assert code == 200 and st["status"] == "completed" and st["verdict"] == "pass"
    code, _, r = server.request("GET", f"/results/{tid}")
    assert code == 200
    assert r["task_id"] == tid and r["status"] == "completed" and r["verdict"] == "pass"
    assert r["correctness"] is True and r["speedup"] == 1.5 and r["kernel_runtime"] == 0.5

    code, _, _ = server.worker("/worker/unregister", {"worker_id": wid})
    assert code == 200


def test_server_assigns_ids_and_resubmission_returns_the_stored_task(server):
    code, _, body = server.request("POST", "/evaluate", task(kernel_code=uid("k")))
    assert code == 200 and len(body["task_id"]) == 32
    tid = body["task_id"]
    code, _, again = server.request("POST", "/evaluate",
                                    task(kernel_code="other", task_id=tid))
    assert code == 200 and again["task_id"] == tid and again["existing"] is True

    wid = register(server)
    lease_task(server, wid, tid)
    post_result(server, wid, tid, "mismatch")
    code, _, again = server.request("POST", "/evaluate", task(task_id=tid))
    assert code == 200 and again["status"] == "completed"
    assert again["result"]["verdict"] == "mismatch"

    # force_refresh puts a finished task back in the queue
    code, _, again = server.request("POST", "/evaluate",
                                    task(task_id=tid, force_refresh=True))
    assert code == 200 and again["status"] == "pending"
    lease_task(server, wid, tid)
    post_result(server, wid, tid, "pass")


def test_result_cache_hit_completes_at_once(server):
    t = task(kernel_code=uid("cached-kernel"), seed=7)
    code, _, body = server.request("POST", "/evaluate", t)
    first = body["task_id"]
    wid = register(server)
    lease_task(server, wid, first)
    post_result(server, wid, first, "pass", speedup=3.25)

    code, _, body = server.request("POST", "/evaluate", t)
    assert code == 200 and body["status"] == "completed" and body["cached"] is True
    assert body["result"]["speedup"] == 3.25 and body["result"]["task_id"] == body["task_id"]
    code, _, st = server.request("GET", f"/status/{body['task_id']}")
    assert code == 200 and st["status"] == "completed" and st["verdict"] == "pass"
    code, _, r = server.request("GET", f"/results/{body['task_id']}")
    assert code == 200 and r["speedup"] == 3.25

    # force_refresh bypasses the cache
    code, _, body = server.request("POST", "/evaluate", {**t, "force_refresh": True})
    assert code == 200 and body["status"] == "pending"
    lease_task(server, wid, body["task_id"])
    post_result(server, wid, body["task_id"], "pass")


def metric(s: Server, name: str) -> float:
    code, _, text = s.request("GET", "/metrics")
    assert code == 200, text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


FORGED = [  # (result, the field the refusal names)
    ({"verdict": "pass", "speedup": 1e308, "correctness": False, "kernel_runtime": -1},
     "result.correctness"),
    ({"verdict": "pass", "speedup": 50, "correctness": True, "kernel_runtime": 1.0,
      "reference_runtime": 2.0}, "result.speedup"),
    ({"verdict": "pass", "speedup": 2, "correctness": True, "kernel_runtime": float("inf"),
      "reference_runtime": 2.0}, None),  # not JSON: Infinity is refused as a body
    ({"verdict": "pass", "correctness": True}, "result.kernel_runtime"),
    ({"verdict": "hacked", "speedup": 20.6, "correctness": False}, "result.speedup"),
    ({"verdict": "mismatch", "correctness": True}, "result.correctness"),
    ({"verdict": "splendid"}, "result.verdict"),
    ({"status": "completed"}, "result.verdict"),
]


def test_a_result_is_checked_on_arrival_and_the_cache_serves_only_checked_ones(server):
    """A lease holder's result that breaks docs/design.md's contract is
    refused (422, naming the field), counted, and neither stored nor
    cached: the task stays with its worker, whose honest result is then
    the one a later identical submission is answered with."""
    t = task(kernel_code=uid("forged-kernel"), seed=11)
    code, _, body = server.request("POST", "/evaluate", t)
    tid = body["task_id"]
    wid = register(server)
    lease_task(server, wid, tid)
    before = metric(server, "kgym_results_refused_total")
    refused = 0
    for result, field in FORGED:
        resp = server.worker("/worker/result", {"worker_id": wid, "task_id": tid,
                                                "result": result})
        if field is None:
            assert resp[0] == 400, resp
            continue
        e = assert_error(resp, 422, field)
        assert e["code"] == "invalid_result"
        refused += 1
    assert metric(server, "kgym_results_refused_total") == before + refused
    code, _, st = server.request("GET", f"/status/{tid}")
    assert code == 200 and st["status"] == "running", st
    # the same submission again: no cached answer from the forgeries
    code, _, again = server.request("POST", "/evaluate", t)
    assert code == 200 and again.get("cached") is not True, again
    post_result(server, wid, tid, "pass", speedup=2.0)
    code, _, hit = server.request("POST", "/evaluate", {**t, "task_id": uid()})
    assert code == 200 and hit["cached"] is True
    assert hit["result"]["speedup"] == 2.0 and hit["result"]["correctness"] is True


def test_a_worker_id_is_bound_to_its_registration(server):
    """Another holder of the worker token can neither post for, heartbeat,
    lease or unregister as, nor re-register, a live worker's id: each call
    needs the worker_secret that id's registration returned."""
    tid = uid()
    server.request("POST", "/evaluate", task(task_id=tid))
    wid = register(server)
    lease_task(server, wid, tid)
    real = server.secrets[wid]
    assert len(real) == 64
    pas = {"verdict": "pass", "correctness": True, "speedup": 50.0,
           "kernel_runtime": 1.0, "reference_runtime": 50.0}
    for secret in (None, "0" * 64, real[:-1] + ("0" if real[-1] != "0" else "1")):
        extra = {} if secret is None else {"worker_secret": secret}
        status = 400 if secret is None else 403
        calls = [("/worker/result", {"task_id": tid, "result": pas}),
                 ("/worker/heartbeat", {"tasks": [tid]}),
                 ("/worker/lease", {"wait_s": 0}),
                 ("/worker/unregister", {})]
        for path, body in calls:
            e = assert_error(server.worker(path, {"worker_id": wid, **extra, **body},
                                           secret=False), status, "worker_secret")
            assert e["code"] == ("missing_field" if secret is None else "wrong_worker_secret")
        # re-registering the live id: refused, its task left alone
        e = assert_error(server.worker("/worker/register",
                                       {"worker_id": wid, "device": f"cpu:{uid()}", **extra},
                                       secret=False), 409, "worker_id")
        assert e["code"] == "worker_id_taken"
        code, _, st = server.request("GET", f"/status/{tid}")
        assert code == 200 and st["status"] == "running", st
    # an id never registered: register first
    assert_error(server.worker("/worker/result", {"worker_id": uid("w"), "task_id": tid,
                                                  "worker_secret": real, "result": pas},
                               secret=False), 404, "worker_id")
    # the real worker, with its secret, goes on
    post_result(server, wid, tid, "pass", speedup=2.0)
    code, _, r = server.request("GET", f"/results/{tid}")
    assert code == 200 and r["speedup"] == 2.0
    # re-registering with its own secret rotates it: the old one stops working
    code, _, body = server.worker("/worker/register", {"worker_id": wid, "device": f"cpu:{wid}"})
    assert code == 200 and body["worker_secret"] != real
    assert_error(server.worker("/worker/heartbeat", {"worker_id": wid, "worker_secret": real},
                               secret=False), 403, "worker_secret")
    assert server.worker("/worker/heartbeat", {"worker_id": wid})[0] == 200


def test_batch_one_bad_task_does_not_sink_the_others(server):
    good = [task(task_id=uid(), priority=p) for p in ("low", "high", "normal")]
    tasks = [good[0], task(backend="fortran"), good[1], "not an object",
             task(num_perf_trials=0), good[2], {"kernel_code": "x"},
             task(task_id=good[0]["task_id"])]
    code, _, body = server.request("POST", "/evaluate/batch", {"tasks": tasks})
    assert code == 200, body
    assert body["accepted"] == 3 and body["rejected"] == 5
    e = body["tasks"]
    assert [x.get("task_id") for x in (e[0], e[2], e[5])] == [g["task_id"] for g in good]
    assert all(e[i]["status"] == "pending" for i in (0, 2, 5))
    assert e[1]["status_code"] == 400 and e[1]["error"]["field"] == "backend"
    assert e[3]["status_code"] == 400 and e[3]["index"] == 3
    assert e[4]["status_code"] == 422 and e[4]["error"]["field"] == "num_perf_trials"
    assert e[6]["status_code"] == 400 and e[6]["error"]["field"] == "reference_code"
    assert e[7]["status_code"] == 422 and e[7]["error"]["code"] == "duplicate_task_id"

    # high before normal before low
    wid = register(server)
    order = []
    for _ in range(40):
        code, _, t = server.worker("/worker/lease", {"worker_id": wid})
        if code == 204:
            break
        if t["task_id"] in {g["task_id"] for g in good}:
            order.append(t["task_id"])
        post_result(server, wid, t["task_id"], "pass")
    assert order == [good[1]["task_id"], good[2]["task_id"], good[0]["task_id"]]

    code, _, body = server.request("POST", "/evaluate/batch", {"tasks": []})
    assert code == 200 and body["tasks"] == []


def test_cancel(server):
    tid = uid()
    server.request("POST", "/evaluate", task(task_id=tid))
    code, _, body = server.request("DELETE", f"/tasks/{tid}")
    assert code == 200 and body["status"] == "cancelled"
    code, _, body = server.request("DELETE", f"/tasks/{tid}")  # idempotent
    assert code == 200
    code, _, r = server.request("GET", f"/results/{tid}")
    assert code == 200 and r["status"] == "cancelled"
    assert_error(server.request("DELETE", f"/tasks/{uid()}"), 404, "task_id")

    # a running task: its holder's result is then refused
    tid = uid()
    server.request("POST", "/evaluate", task(task_id=tid))
    wid = register(server)
    lease_task(server, wid, tid)
    assert server.request("DELETE", f"/tasks/{tid}")[0] == 200
    code, _, body = server.worker("/worker/result", {"worker_id": wid, "task_id": tid,
                                                     "result": {"verdict": "pass"}})
    assert_error((code, _, body), 409, "worker_id")


def test_heartbeat_tells_a_worker_which_tasks_it_no_longer_holds(server):
    tid, other = uid(), uid()
    server.request("POST", "/evaluate", task(task_id=tid))
    wid = register(server)
    lease_task(server, wid, tid)
    hb = {"worker_id": wid, "tasks": [tid, other]}
    code, _, body = server.worker("/worker/heartbeat", hb)
    assert code == 200 and body["cancel"] == [other], body  # unknown: stop it
    code, _, body = server.worker("/worker/heartbeat", {"worker_id": wid})
    assert code == 200 and body["cancel"] == [], body
    assert server.request("DELETE", f"/tasks/{tid}")[0] == 200
    code, _, body = server.worker("/worker/heartbeat", hb)
    assert code == 200 and sorted(body["cancel"]) == sorted([tid, other]), body
    # a task held by another worker is not this one's either
    tid2 = uid()
    server.request("POST", "/evaluate", task(task_id=tid2))
    w2 = register(server)
    lease_task(server, w2, tid2)
    code, _, body = server.worker("/worker/heartbeat", {"worker_id": wid, "tasks": [tid2]})
    assert code == 200 and body["cancel"] == [tid2], body
    code, _, body = server.worker("/worker/heartbeat", {"worker_id": w2, "tasks": [tid2]})
    assert code == 200 and body["cancel"] == [], body
    post_result(server, w2, tid2, "pass")
    # a worker that holds a lease it does not report never got the lease's
    # reply: the task goes back to pending (else its heartbeats would keep
    # the lease alive for ever)
    tid3 = uid()
    server.request("POST", "/evaluate", task(task_id=tid3))
    lease_task(server, w2, tid3)
    code, _, body = server.worker("/worker/heartbeat", {"worker_id": w2, "tasks": []})
    assert code == 200 and body["cancel"] == [], body
    code, _, st = server.request("GET", f"/status/{tid3}")
    assert st["status"] == "pending" and st["attempts"] == 1, st
    code, _, body = server.worker("/worker/heartbeat", {"worker_id": w2})
    assert code == 200, body  # a worker that reports nothing: no such check
    lease_task(server, w2, tid3)
    code, _, body = server.worker("/worker/heartbeat", {"worker_id": w2})
    code, _, st = server.request("GET", f"/status/{tid3}")
    assert st["status"] == "running" and st["attempts"] == 2, st
    post_result(server, w2, tid3, "pass")
    for bad, status in (("x", 400), ([1], 400), (["a/b"], 422), ([tid] * 65, 422)):
        assert_error(server.worker("/worker/heartbeat", {"worker_id": wid, "tasks": bad}),
                     status, "tasks")


def test_long_poll_wakes_on_submission(server):
    wid = register(server)
    while server.worker("/worker/lease", {"worker_id": wid})[0] == 200:
        pass  # drain what earlier tests left
    t0 = time.monotonic()
    code, _, _ = server.worker("/worker/lease", {"worker_id": wid, "wait_s": 0.6})
    assert code == 204 and 0.5 <= time.monotonic() - t0 < 5

    got: dict = {}

    def poll() -> None:
        got["t0"] = time.monotonic()
        got["resp"] = server.worker("/worker/lease", {"worker_id": wid, "wait_s": 20})
        got["t1"] = time.monotonic()

    th = threading.Thread(target=poll)
    th.start()
    time.sleep(0.5)
    tid = uid()
    server.request("POST", "/evaluate", task(task_id=tid))
    th.join(30)
    code, _, body = got["resp"]
    assert code == 200 and body["task_id"] == tid
    assert got["t1"] - got["t0"] < 5
    post_result(server, wid, tid, "pass")


def test_a_poll_whose_worker_hung_up_takes_no_task(server):
    """A parked poll whose worker disconnected must not lease the next task
    (it would sit unreceived until its lease expired)."""
    gone, live = register(server), register(server)
    for w in (gone, live):
        while server.worker("/worker/lease", {"worker_id": w})[0] == 200:
            pass
    body = json.dumps({"worker_id": gone, "wait_s": 30}).encode()
    c = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    c.sendall(f"POST /worker/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WORKER_TOKEN}"
              f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    time.sleep(0.5)  # parked now
    c.close()
    tid = uid()
    server.request("POST", "/evaluate", task(task_id=tid))
    code, _, leased = server.worker("/worker/lease", {"worker_id": live, "wait_s": 5})
    assert code == 200 and leased["task_id"] == tid
    post_result(server, live, tid, "pass")


def test_parked_polls_do_not_hold_threads(server):
    """More waiting workers than HTTP threads: the server still answers."""
    wids = [register(server) for _ in range(24)]
    for w in wids:
        while server.worker("/worker/lease", {"worker_id": w})[0] == 200:
            pass
    results = []
    threads = [threading.Thread(target=lambda w=w: results.append(
        server.worker("/worker/lease", {"worker_id": w, "wait_s": 3})[0])) for w in wids]
    for t in threads:
        t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    for _ in range(20):
        assert server.request("GET", "/health", token=None)[0] == 200
    assert time.monotonic() - t0 < 2
    code, _, text = server.request("GET", "/metrics")
    assert "kgym_long_polls_waiting" in text
    for t in threads:
        t.join(30)
    assert results == [204] * len(wids)


def test_queue_workers_and_metrics_views(server):
    wid = register(server)
    code, _, q = server.request("GET", "/queue/status")
    assert code == 200 and set(q["pending"]) == {"high", "normal", "low"}
    assert q["workers_alive"] >= 1 and "lease_expiries" in q
    code, _, w = server.request("GET", "/workers/status", token=WORKER_TOKEN)
    assert code == 200 and wid in {x["worker_id"] for x in w["workers"]}
    mine = next(x for x in w["workers"] if x["worker_id"] == wid)
    assert mine["alive"] is True and mine["host"] == "127.0.0.1"
    code, hdrs, text = server.request("GET", "/metrics")
    assert code == 200 and hdrs["content-type"].startswith("text/plain")
    for series in ('kgym_queue_depth{priority="high"}', 'kgym_tasks_by_verdict{verdict="pass"}',
                   "kgym_lease_expiries_total", 'kgym_workers{state="alive"}',
                   'kgym_http_request_duration_seconds_bucket{route="evaluate",le="+Inf"}',
                   'kgym_tasks{status="completed"}', "kgym_store_up 1"):
        assert series in text, series
    server.worker("/worker/unregister", {"worker_id": wid})


# ---- bad input: the right status, the field named --------------------------

BAD_FIELDS = [
    ({"kernel_code": "x"}, 400, "reference_code"),
    ({"reference_code": "x"}, 400, "kernel_code"),
    ({**TASK, "kernel_code": 5}, 400, "kernel_code"),
    ({**TASK, "backend": "fortran"}, 400, "backend"),
    ({**TASK, "backend": 3}, 400, "backend"),
    ({**TASK, "priority": "urgent"}, 400, "priority"),
    ({**TASK, "num_perf_trials": "many"}, 400, "num_perf_trials"),
    ({**TASK, "num_perf_trials": 2.5}, 400, "num_perf_trials"),
    ({**TASK, "enable_profiling": "yes"}, 400, "enable_profiling"),
    ({**TASK, "atol": [1]}, 400, "atol"),
    ({**TASK, "num_perf_trials": 0}, 422, "num_perf_trials"),
    ({**TASK, "num_correct_trials": 101}, 422, "num_correct_trials"),
    ({**TASK, "atol": -1}, 422, "atol"),
    ({**TASK, "timeout": 0}, 422, "timeout"),
    ({**TASK, "task_id": "bad id/with slash"}, 422, "task_id"),
    ({**TASK, "task_id": "x" * 101}, 422, "task_id"),
    ({**TASK, "entry_point": "not an identifier"}, 422, "entry_point"),
    ({**TASK, "reference_code": ""}, 422, "reference_code"),
    ({**TASK, "kernel_code": "x" * (256 * 1024 + 1)}, 413, "kernel_code"),
]


@pytest.mark.parametrize("body,status,field", BAD_FIELDS)
def test_bad_fields_are_named(sqlite_server, body, status, field):
    assert_error(sqlite_server.request("POST", "/evaluate", body), status, field)


def test_bad_bodies(sqlite_server):
    s = sqlite_server
    assert_error(s.request("POST", "/evaluate", raw=b'{"reference_code": '), 400)
    assert_error(s.request("POST", "/evaluate", raw=b""), 400)
    assert_error(s.request("POST", "/evaluate", raw=b"[1, 2]"), 400)
    assert_error(s.request("POST", "/evaluate", raw=b'{"a": 1, "a": 2}'), 400)
    bad_utf8 = b'{"reference_code": "\xff\xfe", "kernel_code": "x"}'
    e = assert_error(s.request("POST", "/evaluate", raw=bad_utf8), 400)
    assert "utf" in e["message"].lower() or "decode" in e["message"].lower()
    # over 1 MiB: the server answers 413 from the headers, without reading
    # the body (so the client may see its send fail)
    big = b'{"reference_code": "' + b"x" * (1024 * 1024) + b'", "kernel_code": "x"}'
    head = (f"POST /evaluate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CLIENT_TOKENS[0]}"
            f"\r\nContent-Length: {len(big)}\r\n\r\n").encode()
    reply = raw_send(s.port, head + big)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b'"payload_too_large"' in reply
    assert_error(s.request("POST", "/evaluate/batch", {"tasks": "no"}), 400, "tasks")
    assert_error(s.request("POST", "/evaluate/batch", {}), 400, "tasks")
    assert_error(s.request("POST", "/evaluate/batch", {"tasks": [{}] * 10001}), 413, "tasks")


def test_chunked_body_over_the_limit_is_413(sqlite_server):
    c = http.client.HTTPConnection("127.0.0.1", sqlite_server.port, timeout=30)
    chunks = (b"x" * 65536 for _ in range(20))
    c.request("POST", "/evaluate", body=chunks, encode_chunked=True,
              headers={"Authorization": f"Bearer {CLIENT_TOKENS[0]}",
                       "Transfer-Encoding": "chunked"})
    r = c.getresponse()
    assert r.status == 413 and json.loads(r.read())["error"]["code"] == "payload_too_large"
    c.close()


def test_unknown_things(sqlite_server):
    s = sqlite_server
    assert_error(s.request("GET", f"/status/{uid()}"), 404, "task_id")
    assert_error(s.request("GET", f"/results/{uid()}"), 404, "task_id")
    assert_error(s.request("GET", "/status/bad%20id"), 404, "task_id")
    assert_error(s.request("GET", "/nope"), 404)
    assert_error(s.request("GET", "/status/a/b"), 404)
    code, hdrs, _ = s.request("GET", "/evaluate")
    assert code == 405 and "POST" in hdrs["allow"]
    assert_error(s.worker("/worker/lease", {"worker_id": "never-registered"}), 404, "worker_id")
    assert_error(s.worker("/worker/heartbeat", {"worker_id": "never-registered"}), 404,
                 "worker_id")
    assert_error(s.worker("/worker/unregister", {"worker_id": "never-registered"}), 404,
                 "worker_id")
    wid = register(s)
    assert_error(s.worker("/worker/result", {"worker_id": wid, "task_id": uid(),
                                             "result": {"verdict": "pass"}}), 404, "task_id")


def test_worker_bad_input_and_conflicts(sqlite_server):
    s = sqlite_server
    assert_error(s.worker("/worker/register", {"worker_id": "w"}), 400, "device")
    assert_error(s.worker("/worker/register", {"device": 7}), 400, "device")
    assert_error(s.worker("/worker/register", {"worker_id": "a b", "device": "cpu:0"}), 422,
                 "worker_id")
    assert_error(s.worker("/worker/heartbeat", {}), 400, "worker_id")
    wid = register(s, device="cuda:7")
    # another live worker cannot claim the same device
    assert_error(s.worker("/worker/register", {"worker_id": uid("w"), "device": "cuda:7"}),
                 409, "device")
    assert_error(s.worker("/worker/lease", {"worker_id": wid, "wait_s": "soon"}), 400, "wait_s")
    assert_error(s.worker("/worker/lease", {"worker_id": wid, "wait_s": 1000}), 422, "wait_s")
    assert_error(s.worker("/worker/result", {"worker_id": wid, "task_id": "x"}), 400, "result")
    assert_error(s.worker("/worker/result", {"worker_id": wid, "task_id": "x",
                                             "result": {"verdict": 3}}), 400, "result.verdict")
    # a result from a worker that does not hold the task
    tid = uid()
    s.request("POST", "/evaluate", task(task_id=tid))
    other = register(s)
    lease_task(s, wid, tid)
    assert_error(s.worker("/worker/result", {"worker_id": other, "task_id": tid,
                                             "result": {"verdict": "pass"}}), 409, "worker_id")
    post_result(s, wid, tid, "pass")


# ---- auth ------------------------------------------------------------------

def test_auth(sqlite_server):
    s = sqlite_server
    e = assert_error(s.request("POST", "/evaluate", TASK, token=None), 401)
    assert e["code"] == "unauthorized"
    code, hdrs, _ = s.request("GET", "/queue/status", token=None)
    assert code == 401 and hdrs["www-authenticate"].startswith("Bearer")
    assert_error(s.request("GET", "/queue/status", token="wrong-token-0123456789"), 401)
    assert_error(s.request("GET", "/queue/status", token=CLIENT_TOKENS[0] + "x"), 401)
    assert_error(s.request("GET", "/queue/status", token=CLIENT_TOKENS[0][:-1]), 401)
    assert_error(s.request("GET", "/queue/status",
                           headers={"Authorization": f"Basic {CLIENT_TOKENS[0]}"},
                           token=None), 401)
    # both rotation tokens work
    for tok in CLIENT_TOKENS:
        assert s.request("POST", "/evaluate", task(task_id=uid()), token=tok)[0] == 200
    # a worker token is not a client token, and the reverse
    assert_error(s.request("POST", "/evaluate", TASK, token=WORKER_TOKEN), 401)
    assert_error(s.request("POST", "/worker/register", {"device": "cpu:x"},
                           token=CLIENT_TOKENS[0]), 401)
    assert_error(s.request("POST", "/worker/lease", {"worker_id": "w"},
                           token=CLIENT_TOKENS[1]), 401)
    # operator views take either
    assert s.request("GET", "/metrics", token=WORKER_TOKEN)[0] == 200
    assert s.request("GET", "/workers/status", token=CLIENT_TOKENS[1])[0] == 200
    assert s.request("GET", "/health", token=None)[0] == 200


def test_token_rotation_on_sighup():
    tmp = tempfile.mkdtemp(prefix="kgym-serve-")
    try:
        cf, wf = write_tokens(tmp)
        s = start_server(["--store", f"sqlite:{tmp}/kgym.db", "--token-file", cf], tmp)
        try:
            # no worker file: workers use the clients' tokens
            assert s.request("POST", "/worker/register", {"device": "cpu:0"})[0] == 200
            new = "rotated-token-abcdefghijkl"
            with open(cf, "w") as f:
                f.write(new + "\n")
            s.proc.send_signal(signal.SIGHUP)
            for _ in range(50):
                if s.request("GET", "/queue/status", token=new)[0] == 200:
                    break
                time.sleep(0.05)
            assert s.request("GET", "/queue/status", token=new)[0] == 200
            assert s.request("GET", "/queue/status", token=CLIENT_TOKENS[0])[0] == 401
            # a broken file keeps the old tokens in force
            with open(cf, "w") as f:
                f.write("short\n")
            s.proc.send_signal(signal.SIGHUP)
            time.sleep(0.3)
            assert s.request("GET", "/queue/status", token=new)[0] == 200
        finally:
            stop_server(s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_no_token_is_loopback_only():
    tmp = tempfile.mkdtemp(prefix="kgym-serve-")
    try:
        p = subprocess.run([KGYM, "serve", "--listen", "0.0.0.0:0", "--data-dir", tmp],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "loopback" in p.stderr
        s = start_server(["--data-dir", tmp, "--workers", "auto"], tmp)
        try:
            assert s.request("POST", "/evaluate", TASK, token=None)[0] == 200
            assert os.path.exists(os.path.join(tmp, "kgym.db"))
            code, _, body = s.request("GET", "/health", token=None)
            assert code == 200 and body["local_workers"]["configured"] >= 1, body
            # clients stay open, but the local workers got a token of their
            # own: nobody else may pose as a worker and post results
            for tok in (None, WORKER_TOKEN):
                assert_error(s.request("POST", "/worker/register", {"device": "cpu"},
                                       token=tok), 401)
        finally:
            stop_server(s)
        with open(os.path.join(tmp, "serve.log")) as f:
            log = f.read()
        assert "no token configured: loopback only" in log
        assert "stopping 1 local worker" in log or "stopping 2 local worker" in log, log
        p = subprocess.run([KGYM, "serve", "--token-file", os.path.join(tmp, "missing")],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "missing" in p.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- garbage ---------------------------------------------------------------

def raw_send(port: int, data: bytes, close_early: bool = False) -> bytes:
    """Sends data on a fresh connection; returns what came back (the server
    may answer and close before reading everything)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        try:
            try:
                c.sendall(data)
            except OSError:
                pass
            if close_early:
                return b""
            try:
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            out = b""
            while len(out) < 1 << 16:
                b = c.recv(65536)
                if not b:
                    break
                out += b
            return out
        except OSError:
            return b""


def test_survives_garbage(sqlite_server):
    s = sqlite_server
    rng = random.Random(1234)
    auth = f"Authorization: Bearer {CLIENT_TOKENS[0]}\r\n".encode()
    cases = [
        bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))) for _ in range(60)
    ] + [
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\n" + b"X-H: y\r\n" * 20000 + b"\r\n",
        b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 1000\r\n\r\n{\"re",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: -5\r\n\r\n",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth +
        b"Content-Length: 99999999999999999999999\r\n\r\n",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth +
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth +
        b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc",
        b"POST /evaluate/batch HTTP/1.1\r\nHost: x\r\n" + auth +
        b"Content-Length: 20\r\n\r\n{\"tasks\": [[[[[[[[[",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 4000\r\n\r\n" +
        b"[" * 4000,
        b"GET /status/%00%ff HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n",
        # encoded separators, NULs and control bytes in paths and headers
        b"DELETE /tasks%2fx%00.html HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n",
        b"POST /evaluate%00.png HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 2\r\n\r\n{}",
        b"GET /status%2F%2e%2e%2fhealth HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n",
        b"GET /status/a\x00b HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + CLIENT_TOKENS[0].encode() + b"\x00junk\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x01\x7fb\r\n\r\n",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth +
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"POST /evaluate HTTP/1.1\r\nHost: x\r\n" + auth +
        b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
        b"\r\n\r\n\r\n",
        b"GET /health HTTP/9.9\r\n\r\n",
        b"BREW /coffee HTCPCP/1.0\r\n\r\n",
    ]
    for i, data in enumerate(cases):
        raw_send(s.port, data, close_early=(i % 3 == 0))
    # many half-open connections at once
    socks = []
    for _ in range(100):
        c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        c.sendall(b"POST /evaluate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        socks.append(c)
    assert s.request("GET", "/health", token=None)[0] == 200
    for c in socks:
        c.close()
    assert s.proc.poll() is None
    code, _, body = s.request("GET", "/health", token=None)
    assert code == 200 and body["status"] == "ok"
    code, _, body = s.request("POST", "/evaluate", task(task_id=uid()))
    assert code == 200


def test_redis_down_is_503_and_service_resumes(redis_server):
    exe = redis_server
    tmp = tempfile.mkdtemp(prefix="kgym-serve-")
    rport = free_port()
    args = [exe, "--port", str(rport), "--bind", "127.0.0.1", "--dir", tmp, "--save", "",
            "--appendonly", "yes", "--appendfsync", "always"]

    def start_redis() -> subprocess.Popen:
        r = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", rport), timeout=0.1).close()
                return r
            except OSError:
                time.sleep(0.05)
        return r

    redis = start_redis()
    try:
        s = start_server(["--store", f"redis://127.0.0.1:{rport}/0"], tmp)
        try:
            tid = uid()
            assert s.request("POST", "/evaluate", task(task_id=tid), token=None)[0] == 200
            redis.terminate()
            redis.wait()
            assert_error(s.request("POST", "/evaluate", task(), token=None), 503)
            assert_error(s.request("GET", f"/status/{tid}", token=None), 503)
            code, _, body = s.request("GET", "/health", token=None)
            assert code == 503 and body["status"] == "unavailable"
            redis = start_redis()  # AOF: the acknowledged task is still there
            for _ in range(50):
                if s.request("GET", "/health", token=None)[0] == 200:
                    break
                time.sleep(0.1)
            code, _, st = s.request("GET", f"/status/{tid}", token=None)
            assert code == 200 and st["status"] == "pending"
            assert s.request("POST", "/evaluate", task(), token=None)[0] == 200
        finally:
            stop_server(s)
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)
