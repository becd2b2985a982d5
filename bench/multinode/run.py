#!/usr/bin/env python3
"""bench/multinode/run.py - one `kgym serve` and many remote workers over
network namespaces (tests/integration/netns.py, imported): end-to-end
tasks/s and lease latency, SQLite store against Redis store, the same load
for each, side by side.

    sudo bench/multinode/run.py [--tasks 20000] [--nodes 8] [--per-node 8]
        [--stores sqlite,redis] [--eval-ms 0] [--batch 100]

Layout: node "srv" runs `kgym serve --listen ADDR:10907` (a token file,
as on a network) and, for the Redis store, its redis-server (AOF,
appendfsync always, loopback: deploy/redis-kgym.conf's promise; SQLite
gets synchronous=full, the same promise: nothing acknowledged is lost);
node "cli" the client; nodes m1..mNODES one simworker process each with
PER_NODE workers (a machine with PER_NODE GPUs: devices cpu:0..). Each
store gets a fresh server, store and set of workers on the same network.

The workers are simulated: bench/multinode/simworker.c, built here
against the kgym build (KGYM_BIN's directory: libkgym-app.a, libkgym.a),
one thread per worker speaking `kgym worker`'s protocol through kgym's own
HTTP client (register, heartbeats, long-poll leases, results, unregister)
with a result of every contract field and nothing evaluated (64 real
workers, each a warm torch zygote, do not fit on a 2-CPU machine and would
measure the evaluations, not the server).

The load: once every worker is registered, the client submits TASKS
distinct trivial tasks (POST /evaluate/batch, BATCH a request, as fast as
the server takes them) and polls GET /queue/status until all are
completed. Measured:

* end-to-end tasks/s: TASKS / (first submission sent .. last completed);
* lease latency: from a worker's POST /worker/lease to its reply, as the
  worker sees it, for the leases that got a task (200) while tasks were
  queued; result latency likewise (POST /worker/result);
* the server's own time per route (kgym_http_request_duration_seconds,
  sum / count over the run; a lease's includes any long-poll park);
* CPU seconds of kgym serve, redis-server and the workers over the run
  (/proc/PID/stat), per task: what one task costs the server.

Prints the table and writes it to --out (default: stdout only). Needs root
(namespaces), iproute2, redis-server for the Redis store. Cleans up every
namespace and process it made, also on failure or SIGINT.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "python"))
import netns  # noqa: E402
from kgym.client import Client  # noqa: E402

PORT = 10907
TOKEN = "bench-multinode-token-0123456789abcdef"
TICK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"multinode: {msg}", file=sys.stderr, flush=True)


def cpu_s(pid: int) -> float:
    """utime + stime of pid (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def build_simworker(kgym: str, out: str) -> str:
    bdir = os.path.dirname(os.path.abspath(kgym))
    libs = [os.path.join(bdir, "libkgym-app.a"), os.path.join(bdir, "libkgym.a")]
    for lib in libs:
        if not os.path.exists(lib):
            raise SystemExit(f"{lib} missing: build kgym first (make BUILD={bdir})")
    pkgs = "jansson libmicrohttpd libcurl sqlite3 hiredis libseccomp"
    cflags = subprocess.run(["pkg-config", "--cflags", *pkgs.split()], capture_output=True,
                            text=True).stdout.split()
    ldlibs = subprocess.run(["pkg-config", "--libs", *pkgs.split()], capture_output=True,
                            text=True).stdout.split()
    exe = os.path.join(out, "simworker")
    cmd = [os.environ.get("CC", "cc"), "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
           "-D_GNU_SOURCE", f"-I{ROOT}/include", f"-I{ROOT}/src", *cflags,
           os.path.join(HERE, "simworker.c"), *libs, "-Wl,--as-needed", *ldlibs, "-lm",
           "-lpthread", "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def histo(text: str, routes: list[str]) -> dict[str, tuple[float, int]]:
    """route -> (sum seconds, count) of kgym_http_request_duration_seconds."""
    out = {r: [0.0, 0] for r in routes}
    for ln in text.splitlines():
        for r in routes:
            if ln.startswith(f'kgym_http_request_duration_seconds_sum{{route="{r}"}}'):
                out[r][0] = float(ln.split()[-1])
            elif ln.startswith(f'kgym_http_request_duration_seconds_count{{route="{r}"}}'):
                out[r][1] = int(ln.split()[-1])
    return {r: (s, n) for r, (s, n) in out.items()}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


class Bench:
    def __init__(self, a: argparse.Namespace, kgym: str, simworker: str,
                 redis_exe: str | None) -> None:
        self.a, self.kgym, self.simworker, self.redis_exe = a, kgym, simworker, redis_exe
        self.net = netns.Net()
        self.base = self.net.scratch(a.tmp)
        os.chmod(self.base, 0o755)
        self.token_file = os.path.join(self.base, "tokens")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(self.token_file, 0o600)
        self.srv = self.net.add("srv")
        self.cli = self.net.add("cli")
        self.machines = [self.net.add(f"m{i + 1}") for i in range(a.nodes)]
        self.url = f"http://{self.srv.addr}:{PORT}"

    def close(self) -> None:
        try:
            self.net.close()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _answers(self, port: int, hello: bytes, want: bytes) -> bool:
        with self.net.enter(self.srv):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(hello)
                    return s.recv(64).startswith(want)
            except OSError:
                return False

    def wait(self, cond, timeout: float, what: str, step: float = 0.1):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            v = cond()
            if v:
                return v
            time.sleep(step)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")

    def stop(self, p: subprocess.Popen, timeout: float = 15) -> None:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def run_store(self, store: str) -> dict:
        a = self.a
        d = os.path.join(self.base, store)
        os.mkdir(d)
        redis = None
        if store == "redis":
            redis = self.srv.run(
                [self.redis_exe, "--port", "6379", "--bind", "127.0.0.1", "--dir", d,
                 "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "redis.log"), "w"))
            self.wait(lambda: self._answers(6379, b"PING\r\n", b"+PONG"), 15, "redis-server")
            url = "redis://127.0.0.1:6379/0"
        else:
            url = f"sqlite:{d}/kgym.db"
        server = self.srv.run(
            [self.kgym, "serve", "--listen", f"{self.srv.addr}:{PORT}", "--store", url,
             "--token-file", self.token_file],
            stdout=subprocess.PIPE, stderr=open(os.path.join(d, "serve.log"), "w"), text=True,
            env=dict(os.environ, TMPDIR=d))
        line = server.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"kgym serve did not start: {line!r} "
                               f"{open(os.path.join(d, 'serve.log')).read()[-2000:]}")
        said: list[str] = []
        threading.Thread(target=lambda: [said.append(ln) for ln in server.stdout],
                         daemon=True).start()
        sims = []
        for m in self.machines:
            out = os.path.join(d, f"{m.name}.samples")
            p = m.run([self.simworker, "--server", self.url, "--token-file", self.token_file,
                       "--workers", str(a.per_node), "--eval-ms", str(a.eval_ms), "--out", out],
                      stdout=subprocess.DEVNULL, stderr=open(out + ".err", "w"))
            p.out = out
            sims.append(p)
        nw = a.nodes * a.per_node
        try:
            with self.net.enter(self.cli):
                c = Client(self.url, token=TOKEN, timeout=60)
                self.wait(lambda: c.request("GET", "/workers/status")[1].get("alive") == nw,
                          60, f"{nw} workers to register", 0.2)
                time.sleep(1.5)  # every worker parked in its first long poll
                res = self._load(c, store, server.pid, redis, sims)
                res["phased"] = self._phased(c, store, server.pid, redis, sims)
                c.close()
        finally:
            for p in sims:
                self.stop(p)
            self.stop(server)
            if redis is not None:
                self.stop(redis)
        res.update(self._samples(sims, res["t_first_ms"], res["t_done_ms"]))
        ph = res["phased"]
        ph.update(self._samples(sims, ph["t_cont_ms"], ph["t_done_ms"]))
        res["store"] = next((ln.split(": store ", 1)[1].strip() for ln in said
                             if ": store " in ln), url)
        return res

    def _load(self, c: Client, store: str, spid: int, redis, sims) -> dict:
        a = self.a
        tag = f"{store}-{os.getpid()}"
        reqs = [{"task_id": f"mn-{tag}-{i}", "reference_code": f"# ref {tag} {i}\n",
                 "kernel_code": f"# kernel {tag} {i}\n", "backend": "cpu"}
                for i in range(a.tasks)]
        routes = ["worker_lease", "worker_result", "evaluate_batch", "worker_heartbeat"]
        h0 = histo(c.request("GET", "/metrics")[1], routes)
        done0 = c.request("GET", "/queue/status")[1]["tasks"].get("completed", 0)
        pids = {"serve": [spid], "redis": [redis.pid] if redis else [],
                "workers": [p.pid for p in sims]}
        cpu0 = {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
        t0 = time.monotonic()
        sub_done, first = [0.0], [0.0]

        def submit() -> None:
            with Client(self.url, token=TOKEN, timeout=60) as sc:
                for i in range(0, len(reqs), a.batch):
                    r = sc.batch(reqs[i:i + a.batch])
                    if r["accepted"] != len(reqs[i:i + a.batch]):
                        raise RuntimeError(f"batch refused in part: {json.dumps(r)[:500]}")
                    first[0] = first[0] or time.monotonic()
            sub_done[0] = time.monotonic()
        th = threading.Thread(target=submit)  # started here: in node cli's namespace
        th.start()
        done = self.wait(lambda: (n := c.request("GET", "/queue/status")[1]["tasks"]
                                  .get("completed", 0) - done0) >= a.tasks and n,
                         a.timeout, f"{a.tasks} tasks to complete", 0.05)
        t_done = time.monotonic()
        th.join()
        cpu1 = {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
        h1 = histo(c.request("GET", "/metrics")[1], routes)
        q = c.request("GET", "/queue/status")[1]
        wall = t_done - t0
        return {"tasks": done, "wall_s": wall, "tasks_per_s": a.tasks / wall,
                "submit_s": sub_done[0] - t0, "t_first_ms": first[0] * 1e3,
                "t_done_ms": t_done * 1e3,
                "left": (q["queue_depth"], q["running"]),
                "cpu": {k: cpu1[k] - cpu0[k] for k in cpu0},
                "server_ms": {r: ((h1[r][0] - h0[r][0]) / max(1, h1[r][1] - h0[r][1]) * 1e3,
                                  h1[r][1] - h0[r][1]) for r in routes}}

    def _phased(self, c: Client, store: str, spid: int, redis, sims) -> dict:
        """The same load again, its two halves apart: TASKS submitted while
        every worker is stopped (SIGSTOP: their parked leases take at most
        one task each), then the workers resumed (SIGCONT) and the queue
        drained. CPU per task of each half: submission alone, and a lease
        plus a result post (and the heartbeats meanwhile)."""
        a = self.a
        tag = f"{store}-phased-{os.getpid()}"
        reqs = [{"task_id": f"mn-{tag}-{i}", "reference_code": f"# ref {tag} {i}\n",
                 "kernel_code": f"# kernel {tag} {i}\n", "backend": "cpu"}
                for i in range(a.tasks)]
        pids = {"serve": [spid], "redis": [redis.pid] if redis else []}

        def cpu() -> dict[str, float]:
            return {k: sum(cpu_s(p) for p in v) for k, v in pids.items()}
        done0 = c.request("GET", "/queue/status")[1]["tasks"].get("completed", 0)
        for p in sims:
            os.kill(p.pid, signal.SIGSTOP)
        try:
            c0, t0 = cpu(), time.monotonic()
            for i in range(0, len(reqs), a.batch):
                r = c.batch(reqs[i:i + a.batch])
                if r["accepted"] != len(reqs[i:i + a.batch]):
                    raise RuntimeError(f"batch refused in part: {json.dumps(r)[:500]}")
            c1, t1 = cpu(), time.monotonic()
        finally:
            for p in sims:
                os.kill(p.pid, signal.SIGCONT)
        self.wait(lambda: c.request("GET", "/queue/status")[1]["tasks"]
                  .get("completed", 0) - done0 >= a.tasks, a.timeout,
                  f"{a.tasks} tasks to complete", 0.05)
        c2, t2 = cpu(), time.monotonic()
        return {"submit_per_s": a.tasks / (t1 - t0), "drain_per_s": a.tasks / (t2 - t1),
                "submit_cpu": {k: (c1[k] - c0[k]) / a.tasks for k in c0},
                "drain_cpu": {k: (c2[k] - c1[k]) / a.tasks for k in c0},
                "t_cont_ms": t1 * 1e3, "t_done_ms": t2 * 1e3}

    def _samples(self, sims, t0: float, t1: float) -> dict:
        """The calls that started after the first batch was accepted (so no
        lease counted here was parked waiting for work to be submitted)
        and ended by the last completion."""
        lease200, lease204, result, other = [], 0, [], {}
        for p in sims:
            with open(p.out) as f:
                for ln in f:
                    kind, st, tend, ms = ln.split()
                    st, tend, ms = int(st), float(tend), float(ms)
                    if not (t0 <= tend - ms and tend <= t1 + 1):
                        continue
                    if kind == "lease" and st == 200:
                        lease200.append(ms)
                    elif kind == "lease" and st == 204:
                        lease204 += 1
                    elif kind == "result" and st == 200:
                        result.append(ms)
                    else:
                        other[f"{kind} {st}"] = other.get(f"{kind} {st}", 0) + 1
        return {"lease": lease200, "lease204": lease204, "result": result, "other": other}


def table(rows: dict[str, dict], a: argparse.Namespace) -> str:
    names = list(rows)
    w = 18
    out = []

    def line(label: str, fn) -> None:
        out.append(f"{label:<46}" + "".join(f"  {fn(rows[n]):>{w}}" for n in names))
    out.append(f"{'':<46}" + "".join(f"  {n:>{w}}" for n in names))
    out.append("submission and the workers at once:")
    line("tasks completed", lambda r: f"{r['tasks']}")
    line("end-to-end tasks/s", lambda r: f"{r['tasks_per_s']:.0f}")
    line("  wall s (first submission .. last completed)", lambda r: f"{r['wall_s']:.2f}")
    line("  all submitted after s", lambda r: f"{r['submit_s']:.2f}")
    line("lease latency p50 ms (got a task; worker side)", lambda r: f"{pct(r['lease'], 50):.2f}")
    line("lease latency p99 ms", lambda r: f"{pct(r['lease'], 99):.2f}")
    line("  mean ms / leases with a task", lambda r: f"{statistics.fmean(r['lease']):.2f}"
         f"/{len(r['lease'])}")
    line("  leases answered 204 (nothing queued)", lambda r: f"{r['lease204']}")
    line("result post p50 ms (worker side)", lambda r: f"{pct(r['result'], 50):.2f}")
    line("result post p99 ms", lambda r: f"{pct(r['result'], 99):.2f}")
    for route in ("worker_lease", "worker_result", "evaluate_batch", "worker_heartbeat"):
        line(f"server-side mean ms, {route}" + (" (with parks)" if route == "worker_lease"
                                                 else ""),
             lambda r, x=route: f"{r['server_ms'][x][0]:.2f}")
    line("CPU ms per task: kgym serve", lambda r: f"{r['cpu']['serve'] / r['tasks'] * 1e3:.3f}")
    line("CPU ms per task: redis-server", lambda r: f"{r['cpu']['redis'] / r['tasks'] * 1e3:.3f}"
         if r["cpu"]["redis"] else "-")
    line(f"CPU ms per task: the {a.nodes * a.per_node} simulated workers",
         lambda r: f"{r['cpu']['workers'] / r['tasks'] * 1e3:.3f}")
    line("CPU s over the run: serve/redis/workers", lambda r: "/".join(
        f"{r['cpu'][k]:.1f}" for k in ("serve", "redis", "workers")))
    out.append("the same load in two halves (submission with the workers stopped, then "
               "the drain):")
    line("submission alone, tasks/s", lambda r: f"{r['phased']['submit_per_s']:.0f}")
    line("  CPU ms per task: kgym serve / redis-server", lambda r: "{:.3f} / {}".format(
        r["phased"]["submit_cpu"]["serve"] * 1e3,
        f"{r['phased']['submit_cpu']['redis'] * 1e3:.3f}" if r["cpu"]["redis"] else "-"))
    line(f"drain by the {a.nodes * a.per_node} workers, tasks/s",
         lambda r: f"{r['phased']['drain_per_s']:.0f}")
    line("  lease latency p50 / p99 ms", lambda r: "{:.2f} / {:.2f}".format(
        pct(r["phased"]["lease"], 50), pct(r["phased"]["lease"], 99)))
    line("  result post p50 / p99 ms", lambda r: "{:.2f} / {:.2f}".format(
        pct(r["phased"]["result"], 50), pct(r["phased"]["result"], 99)))
    line("  CPU ms per lease + result: serve / redis", lambda r: "{:.3f} / {}".format(
        r["phased"]["drain_cpu"]["serve"] * 1e3,
        f"{r['phased']['drain_cpu']['redis'] * 1e3:.3f}" if r["cpu"]["redis"] else "-"))
    line("left pending/running at the end", lambda r: f"{r['left'][0]}/{r['left'][1]}")
    line("other calls in the window (kind status: n)",
         lambda r: ",".join(f"{k}:{v}" for k, v in sorted(r["other"].items())) or "-")
    out.append("")
    for n in names:
        out.append(f"{n}: {rows[n]['store']}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--stores", default="sqlite,redis")
    ap.add_argument("--eval-ms", type=int, default=0, help="a simulated evaluation's sleep")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="scratch parent directory")
    ap.add_argument("--out", help="also write the report here")
    a = ap.parse_args()
    why = netns.unavailable()
    if why:
        raise SystemExit(f"multinode: {why}")
    stores = a.stores.split(",")
    kgym = os.path.abspath(os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym")))
    redis_exe = shutil.which("redis-server")
    if "redis" in stores and not redis_exe:
        raise SystemExit("multinode: redis-server not installed")
    for gone in netns.sweep(a.tmp):
        log(f"swept {gone}")
    work = tempfile.mkdtemp(prefix="simworker-", dir=a.tmp)
    rows: dict[str, dict] = {}
    load0 = open("/proc/loadavg").read().split()[:3]
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        simworker = build_simworker(kgym, work)
        bench = Bench(a, kgym, simworker, redis_exe)
        try:
            for s in stores:
                log(f"{s}: {a.nodes} nodes x {a.per_node} workers, {a.tasks} tasks")
                t = time.monotonic()
                rows[{"sqlite": "sqlite-full", "redis": "redis-always"}.get(s, s)] = \
                    bench.run_store(s)
                log(f"{s}: done in {time.monotonic() - t:.0f} s")
        finally:
            bench.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    left = [ns for ns in netns.namespaces() if ns.startswith(bench.net.tag)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--", HERE], cwd=ROOT,
                      capture_output=True, text=True).stdout.strip():
        commit += " + uncommitted changes in bench/multinode"
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.machine())
    head = [
        f"# bench/multinode, started {started:%Y-%m-%d %H:%M} UTC",
        f"# machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), "
        f"{platform.system()} {platform.release()}; load at start {' '.join(load0)} "
        f"(the server, redis-server, the workers and the client share these CPUs)",
        f"# command: {' '.join(['bench/multinode/run.py', *sys.argv[1:]])}; "
        f"KGYM_BIN={os.path.relpath(kgym, ROOT)}; commit {commit}",
        f"# {a.nodes} nodes (network namespaces joined by a bridge, tests/integration/netns.py)"
        f" x {a.per_node} simulated workers = {a.nodes * a.per_node} remote workers: "
        f"bench/multinode/simworker.c, kgym worker's HTTP protocol through kgym's HTTP "
        f"client, one keep-alive connection and one thread each, no evaluation "
        f"(result after {a.eval_ms} ms); {a.tasks} distinct trivial tasks submitted in "
        f"batches of {a.batch} from node cli; kgym serve defaults (--threads 4 per CPU, "
        f"lease 60 s, ttl 30 s) with a token",
        f"# whole run {time.monotonic() - t_start:.0f} s; namespaces left: {len(left)}",
        "",
    ]
    text = "\n".join(head) + table(rows, a) + "\n"
    print(text, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
