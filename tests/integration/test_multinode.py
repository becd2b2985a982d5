"""kgym on several machines, made on one host with network namespaces
(tests/integration/netns.py): a real redis-server (AOF, appendfsync
always) and `kgym serve --store redis://...` on node "srv", one `kgym
worker --device cpu` on each of nodes n1, n2, n3 (each its own hostname),
and the test's client on node "cli", all joined by one switch on a
/24 of a documentation range. One cluster serves the whole module; each test does one
fault to it and checks, for the tasks it submitted, that every one
acknowledged got exactly one final result and that none is stuck:

* completed, verdict runtime_error (cheap_task: a real evaluation of
  under a second, plus a sleep in the candidate to keep one running);
* exactly one result post accepted for it in the workers' logs ("result
  posted (..., task completed)"), any other refused ("lease lost": 409);
* the server's completed counter grew by exactly the number of tasks;
* afterwards nothing pending or running on the server.

Leases are short (--lease-s 6, --worker-ttl-s 3: a silent worker's
tasks are back in the queue ~4 s after its last heartbeat).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import Iterator

import pytest

import netns
from kgym_env import (KGYM, TOKEN, cheap_task, posted, read, registered_id, uid, wait_for,
                      with_tmpdir)
from kgym.client import Client, KgymUnavailable

pytestmark = [pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)"),
              pytest.mark.needs_root("network namespaces for the nodes")]

LEASE_S, TTL_S = 6, 3
PORT = 10907


class Cluster:
    """The machines and the processes on them. Every process is started
    on a node (Node.run) and killed by close(), which also deletes the
    namespaces; so does netns.sweep() for a run that died first."""

    def __init__(self, redis_exe: str) -> None:
        self.net = netns.Net()
        try:
            self._setup(redis_exe)
        except BaseException:
            self.net.close()
            raise

    def _setup(self, redis_exe: str) -> None:
        self.base = self.net.scratch()
        os.chmod(self.base, 0o755)  # candidates (uid nobody) enter dirs below it
        self.token_file = os.path.join(self.base, "tokens")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(self.token_file, 0o600)
        self.redis_dir = os.path.join(self.base, "redis")
        os.mkdir(self.redis_dir)
        self.redis_exe = redis_exe
        self.srv = self.net.add("srv")
        self.cli = self.net.add("cli")
        self.nodes = [self.net.add(f"n{i}") for i in (1, 2, 3)]
        self.url = f"http://{self.srv.addr}:{PORT}"
        self.redis: subprocess.Popen | None = None
        self.server: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}  # node name -> its worker now
        self.logs: list[str] = []

    def log(self, what: str) -> str:
        path = os.path.join(self.base, f"{what}-{len(self.logs)}.log")
        self.logs.append(path)
        return path

    def _answers(self, host: str, port: int, node: netns.Node, hello: bytes,
                 want: bytes) -> bool:
        with self.net.enter(node):
            try:
                with socket.create_connection((host, port), timeout=0.5) as s:
                    s.sendall(hello)
                    return s.recv(64).startswith(want)
            except OSError:
                return False

    def start_redis(self) -> None:
        self.redis = self.srv.run(
            [self.redis_exe, "--port", "6379", "--bind", "127.0.0.1", "--dir", self.redis_dir,
             "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._answers("127.0.0.1", 6379, self.srv, b"PING\r\n", b"+PONG"),
                 15, "redis-server to answer")

    def start_server(self) -> None:
        """kgym serve on srv, always the same address (a restart is found
        again by the workers)."""
        for attempt in range(50):
            log = self.log("serve")
            p = self.srv.run([KGYM, "serve", "--listen", f"{self.srv.addr}:{PORT}",
                              "--store", "redis://127.0.0.1:6379/0",
                              "--token-file", self.token_file, "--lease-s", str(LEASE_S),
                              "--worker-ttl-s", str(TTL_S)],
                             stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
                             env=dict(os.environ, TMPDIR=self.base))
            line = p.stdout.readline()
            if "listening on" in line:
                break
            p.wait(timeout=10)
            if "cannot listen" not in read(log) or attempt == 49:
                raise AssertionError(f"kgym serve did not start: {line!r} {read(log)}")
            time.sleep(0.2)  # the port of a server killed a moment ago
        threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
        p.log = log
        self.server = p

    def start_worker(self, node: netns.Node, *extra: str) -> subprocess.Popen:
        log = self.log(f"worker-{node.name}")
        p = node.run([KGYM, "worker", "--server", self.url, "--token-file", self.token_file,
                      "--device", "cpu", "--drain-timeout", "20", *extra],
                     stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                     env=dict(os.environ, TMPDIR=self.base))
        p.log = log
        self.workers[node.name] = p
        return p

    def wait_registered(self, ws: list[subprocess.Popen], timeout: float = 120) -> None:
        try:
            wait_for(lambda: all(registered_id(w.log) for w in ws), timeout,
                     "the workers to register")
        except AssertionError as e:
            logs = "\n".join(f"--- {w.log} (exit {w.poll()}):\n{read(w.log)[-2000:]}"
                             for w in ws)
            raise AssertionError(f"{e}\n{logs}\n--- server:\n"
                                 f"{read(self.server.log)[-3000:]}") from None

    def worker_logs(self) -> str:
        return "".join(read(p) for p in self.logs if "/worker-" in p)

    def holder(self, worker_id: str) -> netns.Node:
        for n in self.nodes:
            w = self.workers.get(n.name)
            if w is not None and registered_id(w.log) == worker_id:
                return n
        raise AssertionError(f"no node runs worker {worker_id}")

    def close(self) -> None:
        try:
            self.net.close()
        finally:
            for pid in with_tmpdir(self.base):  # sandboxed children, if any
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(redis_server: str) -> Iterator[Cluster]:
    why = netns.unavailable()  # root is checked first (needs_root)
    if why:
        pytest.fail(why, pytrace=False)  # root without iproute2: install-deps has it
    for left in netns.sweep():  # a run killed before its finalizer
        for pid in with_tmpdir(left) if left.startswith("/") else []:
            os.kill(pid, signal.SIGKILL)  # its sandboxed children, if any
    cl = Cluster(redis_server)
    try:
        cl.start_redis()
        cl.start_server()
        cl.wait_registered([cl.start_worker(n) for n in cl.nodes])
        yield cl
    finally:
        cl.close()
    assert not [ns for ns in netns.namespaces() if ns.startswith(cl.net.tag)]


@pytest.fixture
def c(cluster: Cluster) -> Iterator[Client]:
    """A client on node cli (this thread in its namespace meanwhile); after
    the test, every node's cable is plugged in and unshaped."""
    with cluster.net.enter(cluster.cli):
        cl = Client(cluster.url, token=TOKEN, timeout=10)
        try:
            yield cl
        finally:
            cl.close()
            for n in cluster.net.nodes.values():
                n.plug()
                n.unshape()
                netns.tc("-n", cluster.net.switch, "qdisc", "del", "dev", n.port, "root",
                         check=False)


def retrying(fn, *args, timeout: float = 30):
    """fn(*args), asked again while the server answers 503 or not at
    all, as a client must (docs/api.md: every write is idempotent by task
    id; the task ids here are the client's). After a Redis restart each
    of the server's pooled Redis connections fails its next call once
    (503 "Server closed the connection") before it is made again."""
    t0 = time.monotonic()
    while True:
        try:
            return fn(*args)
        except KgymUnavailable:
            if time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.2)


def submit(c: Client, req: dict) -> dict:
    return retrying(c.submit_raw, req)


def get(c: Client, path: str):
    """GET path's body (200), retried on 503."""
    def once():
        s, body = c.request("GET", path)
        if s == 503:
            raise KgymUnavailable(s, "store_unavailable", str(body))
        assert s == 200, (path, s, body)
        return body
    return retrying(once)


def completed_count(c: Client) -> int:
    return get(c, "/queue/status")["tasks"].get("completed", 0)


def finish(c: Client, ids: list[str], timeout: float) -> dict[str, dict]:
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
    wait_for(done, timeout, f"{len(ids)} tasks to finish ({len(ids) - len(out)} left)", 0.3)
    return out


def check_exactly_once(cluster: Cluster, c: Client, ids: list[str], before: int,
                       timeout: float = 90, lost_reply_ok: bool = False) -> dict[str, list]:
    """Every id completed (runtime_error) with exactly one accepted result
    post, the completed counter grew by len(ids), nothing left pending or
    running. lost_reply_ok: a post whose reply was lost in a server kill
    and whose retry was refused counts as the one (0 accepted + dropped).
    Returns each id's posts."""
    statuses = finish(c, ids, timeout)

    def logged() -> str | None:  # a post is logged once its reply is read
        logs = cluster.worker_logs()
        return logs if all(posted(logs, t) for t in ids) else None
    logs = wait_for(logged, 15, "every post to be logged")
    posts = {t: posted(logs, t) for t in ids}
    bad = {}
    for t in ids:
        st, p = statuses[t], posts[t]
        once = p.count("completed") == 1 or (lost_reply_ok and p.count("completed") == 0
                                             and "dropped" in p)
        if st["status"] != "completed" or st["verdict"] != "runtime_error" or not once:
            bad[t] = (st, p)
    assert not bad, f"{len(bad)} of {len(ids)} not completed exactly once: " \
        f"{list(bad.items())[:4]}"
    assert completed_count(c) - before == len(ids)
    q = get(c, "/queue/status")
    assert q["queue_depth"] == 0 and q["running"] == 0, q
    return posts


def refused_results(c: Client) -> int:
    """kgym_http_requests_total{route="worker_result",code="409"}."""
    text = get(c, "/metrics")
    key = 'kgym_http_requests_total{route="worker_result",code="409"} '
    return sum(int(ln[len(key):]) for ln in text.splitlines() if ln.startswith(key))


def running_on(c: Client, ids: list[str], n: int) -> dict[str, str]:
    """Waits until n of ids run; task id -> worker id."""
    def ask() -> dict[str, str] | None:
        out = {}
        for t in ids:
            st = c.status(t)
            if st["status"] == "running":
                out[t] = st["worker"]
        return out if len(out) >= n else None
    return wait_for(ask, 60, f"{n} tasks to run")


def test_link_cut_mid_evaluation_runs_elsewhere_and_late_result_refused(
        cluster: Cluster, c: Client) -> None:
    before, refused = completed_count(c), refused_results(c)
    ids = [uid("cut") for _ in range(3)]
    for t in ids:
        submit(c, cheap_task(t, sleep=5))
    held = running_on(c, ids, 3)
    victim_task = ids[0]
    node = cluster.holder(held[victim_task])
    w = cluster.workers[node.name]
    node.cut()  # mid-evaluation: the candidate sleeps 5 s
    t0 = time.monotonic()
    # its leases lapse (ttl 3 s, no heartbeat) and the task runs elsewhere
    moved = wait_for(lambda: (s := c.status(victim_task))["attempts"] >= 2 and s, 30,
                     "the cut node's task to be leased again")
    assert moved["worker"] != held[victim_task], moved
    # the evaluation ends on the cut node meanwhile; its result waits
    wait_for(lambda: f"task {victim_task}: finished" in read(w.log), 30,
             "the cut node to finish its evaluation")
    assert f"task {victim_task}: result posted" not in read(w.log)
    cut_s = time.monotonic() - t0
    node.plug()
    # back on the network: the late result is refused (409) and dropped
    text = wait_for(lambda: f"task {victim_task}: lease lost" in (x := read(w.log)) and x,
                    40, "the late result to be refused")
    assert "not_lease_holder" in text or "409" in text, text[-2000:]
    posts = check_exactly_once(cluster, c, ids, before)
    assert sorted(posts[victim_task]) == ["completed", "dropped"], posts
    assert refused_results(c) - refused == 1  # what docs/deploy.md says to watch
    r = retrying(c.result, victim_task)
    assert r["device"]["worker_id"] != held[victim_task], r
    # the node works again: it leases and posts
    wait_for(lambda: registered_id(w.log) and w.poll() is None, 5, "the worker alive")
    more = [uid("after-cut") for _ in range(6)]
    before = completed_count(c)
    for t in more:
        submit(c, cheap_task(t, sleep=0.5))
    check_exactly_once(cluster, c, more, before)
    print(f"link cut {cut_s:.1f} s; late result refused")


def test_worker_kill9_its_task_completes_on_another(cluster: Cluster, c: Client) -> None:
    before = completed_count(c)
    ids = [uid("k9") for _ in range(4)]
    for t in ids:
        submit(c, cheap_task(t, sleep=3))
    held = running_on(c, ids, 3)
    task, wid = next(iter(held.items()))
    node = cluster.holder(wid)
    w = cluster.workers[node.name]
    w.kill()
    w.wait()
    st = wait_for(lambda: (s := c.status(task))["attempts"] >= 2 and s, 30,
                  "the killed worker's task to be leased again")
    assert st["worker"] != wid, st
    check_exactly_once(cluster, c, ids, before)
    # a new worker process on that node takes over its device once the
    # dead one's claim lapses (ttl)
    cluster.wait_registered([cluster.start_worker(node)])


def test_server_kill9_and_restart_loses_nothing(cluster: Cluster, c: Client) -> None:
    before = completed_count(c)
    ids = [uid("srv") for _ in range(9)]
    for t in ids:
        submit(c, cheap_task(t, sleep=1.5))
    running_on(c, ids, 2)
    cluster.server.kill()  # -9 with leases held and evaluations running
    cluster.server.wait()
    time.sleep(2)
    cluster.start_server()
    more = [uid("srv2") for _ in range(3)]
    for t in more:
        submit(c, cheap_task(t))
    check_exactly_once(cluster, c, ids + more, before, lost_reply_ok=True)
    for n in cluster.nodes:  # the workers rode it out
        assert cluster.workers[n.name].poll() is None, read(cluster.workers[n.name].log)


def _slow(cluster: Cluster, node: netns.Node, kind: str) -> str:
    """Adds latency and loss to both directions of node's cable."""
    if kind == "netem":
        why = netns.netem_missing(node.ns, "eth0")
        if why:
            if os.environ.get("KGYM_REQUIRE_NETEM") == "1":
                pytest.fail(f"{why}, and KGYM_REQUIRE_NETEM=1", pytrace=False)
            pytest.skip(why)
        q = ("netem", "delay", "150ms", "40ms", "loss", "5%")
    else:
        # a thin, queueing link: 256 kbit/s, packets that would wait more
        # than 200 ms in its queue are dropped (loss under bursts)
        q = ("tbf", "rate", "256kbit", "burst", "4kb", "latency", "200ms")
    node.shape(*q)
    netns.tc("-n", cluster.net.switch, "qdisc", "replace", "dev", node.port, "root", *q)
    return " ".join(q)


@pytest.mark.parametrize("kind", ["netem", "tbf"])
def test_slow_node(cluster: Cluster, c: Client, kind: str) -> None:
    node = cluster.nodes[2]
    what = _slow(cluster, node, kind)
    before = completed_count(c)
    t0 = time.monotonic()
    ids = [uid(f"slow-{kind}") for _ in range(12)]
    for t in ids:
        submit(c, cheap_task(t, sleep=0.3))
    check_exactly_once(cluster, c, ids, before, timeout=120)
    logs = read(cluster.workers[node.name].log)
    mine = sum(f"task {t}: result posted" in logs for t in ids)
    print(f"slow node ({what}): 12 tasks in {time.monotonic() - t0:.1f} s; {mine} by it")
    assert mine >= 1, "the slow node evaluated none: the test saw no slow link at work"
    assert cluster.workers[node.name].poll() is None


def test_node_back_with_the_same_worker_id(cluster: Cluster, c: Client) -> None:
    node = cluster.nodes[1]
    old = cluster.workers[node.name]
    old.terminate()  # a clean stop first: it unregisters
    assert old.wait(timeout=30) == 0, read(old.log)[-2000:]
    wid = f"{node.name}-fixed-id"
    w = cluster.start_worker(node, "--worker-id", wid)
    cluster.wait_registered([w])
    assert registered_id(w.log) == wid
    # hold everyone else busy so that the fixed-id worker takes a task
    before = completed_count(c)
    ids = [uid("same") for _ in range(3)]
    for t in ids:
        submit(c, cheap_task(t, sleep=6))
    held = running_on(c, ids, 3)
    task = next(t for t, h in held.items() if h == wid)
    w.kill()  # the machine dies ...
    w.wait()
    w2 = cluster.start_worker(node, "--worker-id", wid)  # ... and comes back at once
    # the old process's task is leased again (registering the same id
    # puts it back, as the ttl would) and completes once: the new process
    # under the old id neither inherits the lease nor posts for the old run
    st = wait_for(lambda: (s := c.status(task))["attempts"] >= 2 and s, 60,
                  "the task held under that id to be leased again")
    assert st["status"] in ("running", "completed"), st
    posts = check_exactly_once(cluster, c, ids, before, timeout=120)
    assert posts[task] == ["completed"], posts
    assert w2.poll() is None and registered_id(w2.log) == wid


def test_resubmission_after_a_lost_reply_is_the_same_task(cluster: Cluster,
                                                          c: Client) -> None:
    """The request reaches the server, its reply does not (packets to the
    client larger than 100 bytes are dropped: the handshake and ACKs pass,
    the HTTP reply never does); the client times out and sends it again
    with the same task_id: one task, not two."""
    total = lambda: sum(get(c, "/queue/status")["tasks"].values())  # noqa: E731
    n0 = total()
    before = completed_count(c)
    tid = uid("retry")
    netns.tc("-n", cluster.net.switch, "qdisc", "replace", "dev", cluster.cli.port, "root",
             "tbf", "rate", "1mbit", "burst", "100", "limit", "100")
    lossy = Client(cluster.url, token=TOKEN, timeout=2)
    with pytest.raises(KgymUnavailable):
        lossy.submit_raw(cheap_task(tid, sleep=1))
    lossy.close()
    netns.tc("-n", cluster.net.switch, "qdisc", "del", "dev", cluster.cli.port, "root")
    st = wait_for(lambda: (s := c.request("GET", f"/status/{tid}"))[0] == 200 and s[1], 10,
                  "the unanswered submission to be there")
    again = submit(c, cheap_task(tid, sleep=1))
    assert again["task_id"] == tid and again.get("existing") is True, again
    assert st["submitted_ms"] == c.status(tid)["submitted_ms"]
    check_exactly_once(cluster, c, [tid], before)
    assert total() - n0 == 1
    # a batch resubmitted whole: the same tasks; a bad entry is named
    ids = [uid("b") for _ in range(3)]
    batch = [cheap_task(t) for t in ids] + [dict(cheap_task(uid("bad")), backend="nope")]
    r1 = retrying(c.batch, batch)
    assert (r1["accepted"], r1["rejected"]) == (3, 1), r1
    assert r1["tasks"][3]["index"] == 3 and r1["tasks"][3]["status_code"] == 400, r1
    assert r1["tasks"][3]["error"]["field"] == "backend", r1
    r2 = retrying(c.batch, batch[:3])
    assert [e["task_id"] for e in r2["tasks"]] == ids, r2
    assert all(e.get("existing") is True for e in r2["tasks"]), r2
    check_exactly_once(cluster, c, ids, before + 1)
    assert total() - n0 == 4


def test_nodes_are_sealed_and_leftovers_swept(cluster: Cluster) -> None:
    """The harness itself: no node has a route off the subnet, the root
    namespace has no link into it, and sweep() removes the namespaces (and
    their processes) of a run whose process is gone, never a live run's."""
    for n in [cluster.srv, cluster.cli, *cluster.nodes]:
        routes = subprocess.run(["ip", "-n", n.ns, "route", "show", "table", "all"],
                                capture_output=True, text=True, check=True).stdout
        assert "default" not in routes, (n.ns, routes)
    root = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert not re.search(rf"(^|\s){re.escape(cluster.net.subnet)}\.", root, re.M), root
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no run holds now
    stale = f"{netns.PREFIX}{dead.pid}x0badc0-n9"
    netns.ip("netns", "add", stale)
    stale_dir = f"/tmp/{stale[:-3]}-scratch"
    os.mkdir(stale_dir)
    try:
        p = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "60"])
        wait_for(lambda: str(p.pid) in netns.ip("netns", "pids", stale).stdout, 5,
                 "the leftover process in its namespace")
        swept = netns.sweep()
        assert stale in swept, swept
        assert p.wait(timeout=5) == -signal.SIGKILL
        assert stale not in netns.namespaces()
        assert stale_dir in swept and not os.path.exists(stale_dir), swept
        assert os.path.isdir(cluster.base)  # this run's scratch dir stays
        live = [ns for ns in netns.namespaces() if ns.startswith(cluster.net.tag)]
        assert len(live) == 6, live  # the switch and five nodes of this run stay
    finally:
        if stale in netns.namespaces():
            netns.ip("netns", "del", stale, check=False)
        shutil.rmtree(stale_dir, ignore_errors=True)


def test_redis_kill9_and_restart_on_its_aof(cluster: Cluster, c: Client) -> None:
    before = completed_count(c)
    ids = [uid("aof") for _ in range(9)]
    for t in ids:
        submit(c, cheap_task(t, sleep=1))
    running_on(c, ids, 2)
    cluster.redis.kill()
    cluster.redis.wait()
    s, body = c.request("POST", "/evaluate", cheap_task(uid("away")))
    assert s == 503 and body["error"]["code"] == "store_unavailable", (s, body)
    time.sleep(1)
    cluster.start_redis()  # the same dir: the AOF holds every acknowledged write
    wait_for(lambda: c.request("GET", "/health")[0] == 200, 20, "the store back")
    # once /health answers, so does every call: no connection of the
    # server's pool that Redis closed in dying fails a request (each did,
    # once, before store_redis_conn.c checked them)
    more = [uid("aof2") for _ in range(16)]
    refused: list[str] = []

    def post(chunk: list[str]) -> None:
        with Client(cluster.url, token=TOKEN, timeout=10) as cc:
            for t in chunk:
                try:
                    cc.submit_raw(cheap_task(t))
                except KgymUnavailable as e:
                    refused.append(f"{t}: {e}")
    threads = [threading.Thread(target=post, args=(more[i::8],)) for i in range(8)]
    for th in threads:  # started from this thread: in node cli's namespace
        th.start()
    for th in threads:
        th.join()
    assert not refused, refused
    check_exactly_once(cluster, c, ids + more, before, timeout=120)
    assert cluster.server.poll() is None
