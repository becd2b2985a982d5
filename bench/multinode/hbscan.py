#!/usr/bin/env python3
"""bench/multinode/hbscan.py - what one worker heartbeat costs kgym serve
as the number of registered workers grows, loopback only, both stores.

    bench/multinode/hbscan.py [--workers 64,512,2048] [--calls 300]
        [--stores sqlite,redis]

A heartbeat that carries "tasks" (kgym worker always sends the list, an
empty one when idle) is checked against the count of tasks the store says
the worker holds; only a worker that holds more than it reports makes the
server list every worker (api_worker.c, release_unknown). Its cost should
not grow with the fleet; this bench shows whether it does. For each store and fleet
size: register that many workers (one per host, device cpu:0), then one
client sends CALLS heartbeats of one worker back to back, with and
without "tasks": mean latency and CPU ms per call of kgym serve (and
redis-server). KGYM_BIN picks the build (default build/kgym).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SECRETS: dict[str, str] = {}  # worker_id -> the worker_secret it registered with


def post(conn: http.client.HTTPConnection, path: str, body: dict) -> int:
    """A worker call, with the worker_secret of its id's registration."""
    if body.get("worker_id") in SECRETS:
        body = {**body, "worker_secret": SECRETS[body["worker_id"]]}
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    got = r.read()
    if path == "/worker/register" and r.status == 200:
        reply = json.loads(got)
        SECRETS[reply["worker_id"]] = reply["worker_secret"]
    return r.status


def scan(store: str, sizes: list[int], calls: int, kgym: str, tmp: str) -> list[tuple]:
    procs, rows = [], []
    try:
        redis_pid = None
        if store == "redis":
            port = free_port()
            rp = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--dir", tmp, "--save", "", "--appendonly", "yes",
                                   "--appendfsync", "always"], stdout=subprocess.DEVNULL)
            procs.append(rp)
            redis_pid = rp.pid
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            url = f"redis://127.0.0.1:{port}/0"
        else:
            url = f"sqlite:{tmp}/kgym.db"
        sp = subprocess.Popen([kgym, "serve", "--listen", "127.0.0.1:0", "--store", url],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(sp)
        line = sp.stdout.readline()
        addr = line.rsplit("listening on ", 1)[1].strip().replace("http://", "")
        host, port = addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        have = 0
        for n in sizes:
            for i in range(have, n):
                st = post(conn, "/worker/register",
                          {"worker_id": f"hb-{i}", "device": "cpu:0", "host": f"h{i}"})
                assert st == 200, st
            have = n
            for label, body in (("with tasks", {"worker_id": "hb-0", "tasks": []}),
                                ("without", {"worker_id": "hb-0"})):
                c0 = (cpu_s(sp.pid), cpu_s(redis_pid) if redis_pid else 0.0)
                t0 = time.monotonic()
                for _ in range(calls):
                    assert post(conn, "/worker/heartbeat", body) == 200
                dt = time.monotonic() - t0
                c1 = (cpu_s(sp.pid), cpu_s(redis_pid) if redis_pid else 0.0)
                rows.append((store, n, label, dt / calls * 1e3, (c1[0] - c0[0]) / calls * 1e3,
                             (c1[1] - c0[1]) / calls * 1e3 if redis_pid else None))
        conn.close()
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="64,512,2048")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--stores", default="sqlite,redis")
    a = ap.parse_args()
    kgym = os.path.abspath(os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym")))
    sizes = [int(x) for x in a.workers.split(",")]
    rows = []
    for store in a.stores.split(","):
        tmp = tempfile.mkdtemp(prefix="hbscan-")
        try:
            rows += scan(store, sizes, a.calls, kgym, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'store':<8} {'workers':>8} {'heartbeat':<11} {'ms/call':>8} "
          f"{'serve CPU ms':>13} {'redis CPU ms':>13}")
    for store, n, label, ms, scpu, rcpu in rows:
        print(f"{store:<8} {n:>8} {label:<11} {ms:>8.3f} {scpu:>13.3f} "
              f"{'-' if rcpu is None else f'{rcpu:.3f}':>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
