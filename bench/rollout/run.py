#!/usr/bin/env python3
"""The rollout benchmark: how much of an RL step's wall time is the
environment's.

K samples x T turns x P problems through `kgym serve --workers auto` (or a
server given with --server). Each turn is one synchronous RL step: the
policy answers every open trajectory (K x P chat requests at once), then
every answer is evaluated (one POST /evaluate/batch, then the results'
long poll), and the next turn begins when the last result is in. Printed
per turn: the policy's time, the environment's (batch sent to last result
in), the environment's share of the turn's wall time and evaluations per
second; the same over the run.

The policy is a STAND-IN for a language model: a small OpenAI-compatible
server in this script (POST /v1/chat/completions) that answers each
request with the problem's honest solution made distinct per problem,
sample, turn and run (bench/variants.py: a comment line opening each Triton
kernel's body, so every sample compiles its own kernel as a real policy's
would; a comment line at the top for a cpu solution). No two evaluations
of a run have the same code, so none is answered from the result cache
(checked: any result with "cached" true is counted and printed).

    bench/rollout/run.py --mode cpu                # problems/cpu, backend cpu
    bench/rollout/run.py --mode gpu                # problems/gpu, backend triton
    bench/rollout/run.py --mode cpu --samples 2 --turns 2 --problems 1 --fast

--kgym BIN picks the build (default $KGYM_BIN, else build/kgym of this
tree); its tree (BIN/../..) is KGYM_ROOT unless KGYM_ROOT is set.
--json F writes the figures. Exit status 1 when an evaluation failed to
complete or was answered from the cache.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import glob
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from variants import distinct  # noqa: E402

MODES = {  # problem tree, solution suffix, backend
    "cpu": ("problems/cpu", ".cpu.py", "cpu"),
    "gpu": ("problems/gpu", ".triton.py", "triton"),
}
TAG = re.compile(r"kgym-bench problem=(\S+) sample=(\d+) turn=(\d+)")


def problem_set(mode: str, n: int) -> list[tuple[str, str, str]]:
    """(name, reference source, solution source) of the first n problems
    of the mode's tree with a solution, level by level."""
    tree, suffix, _ = MODES[mode]
    out = []
    for ref in sorted(glob.glob(os.path.join(ROOT, tree, "level*", "*.py"))):
        stem = os.path.splitext(os.path.basename(ref))[0]
        sol = os.path.join(os.path.dirname(ref), "solutions", stem + suffix)
        if os.path.exists(sol):
            name = os.path.relpath(ref, os.path.join(ROOT, tree))[:-3]
            out.append((name, open(ref).read(), open(sol).read()))
    if len(out) < n:
        raise SystemExit(f"--problems {n}: only {len(out)} problems with a {suffix} "
                         f"solution under {tree}")
    return out[:n]


def variant(src: str, tag: str) -> str:
    try:
        return distinct(src, tag)
    except ValueError:  # no Triton kernel (a cpu solution): a comment line on top
        return f"# kgym variant {tag}\n{src}"


class StandInPolicy:
    """An OpenAI-compatible chat endpoint that is not a model: it reads the
    problem, sample and turn from the request's last message and answers
    with that problem's solution made distinct (variant)."""

    def __init__(self, solutions: dict[str, str], run_tag: str):
        self.solutions, self.run_tag = solutions, run_tag
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                m = TAG.search(body["messages"][-1]["content"])
                name, sample, turn = m.group(1), int(m.group(2)), int(m.group(3))
                code = variant(outer.solutions[name],
                               f"{outer.run_tag}-{name.replace('/', '-')}-{sample}-{turn}")
                reply = {"id": "standin", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "finish_reason": "stop", "message": {
                             "role": "assistant", "content": f"```python\n{code}```"}}],
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1/chat/completions"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def ask(url: str, name: str, sample: int, turn: int) -> str:
    """One chat request; the code block of its answer."""
    req = {"model": "standin", "messages": [
        {"role": "user", "content": f"kgym-bench problem={name} sample={sample} turn={turn}"}]}
    r = urllib.request.Request(url, json.dumps(req).encode(),
                               {"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=60) as f:
        text = json.loads(f.read())["choices"][0]["message"]["content"]
    return text.split("```python\n", 1)[1].rsplit("```", 1)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """`kgym serve --workers ...` on a free loopback port, its data in a
    temp dir; stopped (SIGTERM, then its workers drain) by close()."""

    def __init__(self, kgym: str, workers: str, extra: list[str], log: str):
        self.tmp = tempfile.mkdtemp(prefix="kgym-rollout-bench-")
        os.chmod(self.tmp, 0o755)  # the candidates' uids reach their dirs below
        self.url = f"http://127.0.0.1:{free_port()}"
        env = dict(os.environ, TMPDIR=self.tmp)
        env.setdefault("KGYM_ROOT", os.path.dirname(os.path.dirname(os.path.abspath(kgym))))
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [kgym, "serve", "--listen", self.url[7:], "--data-dir", os.path.join(self.tmp, "data"),
             "--workers", workers, *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, client, timeout: float = 180) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise SystemExit(f"kgym serve exited {self.proc.returncode}: see {self.log.name}")
            try:
                st = client.request("GET", "/workers/status")[1]
                if st.get("alive", 0) >= 1:
                    return int(st["alive"])
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.2)
        raise SystemExit(f"no local worker registered in {timeout} s: see {self.log.name}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def fields(mode: str, fast: bool) -> dict:
    f = {"backend": MODES[mode][2], "timeout": 300}
    if fast:  # CI: the loop, not the figures
        f.update(num_correct_trials=1, num_perf_trials=3, num_warmup=1, enable_profiling=False)
    return f


def run_turn(client, policy_url: str, probs, samples: int, turn: int, req_fields: dict,
             pool: cf.ThreadPoolExecutor) -> dict:
    t0 = time.monotonic()
    keys = [(name, ref, s) for name, ref, _ in probs for s in range(samples)]
    codes = list(pool.map(lambda k: ask(policy_url, k[0], k[2], turn), keys))
    t1 = time.monotonic()
    reqs = [{**req_fields, "reference_code": ref, "kernel_code": code}
            for (name, ref, s), code in zip(keys, codes)]
    reply = client.batch(reqs)
    ids, cached, rejected = [], 0, 0
    for e in reply["tasks"]:
        if "task_id" not in e or e.get("status_code"):
            rejected += 1
            continue
        ids.append(e["task_id"])
        cached += bool(e.get("cached"))
    res = client.wait_all(ids, timeout=1800)
    t2 = time.monotonic()
    verdicts: dict[str, int] = {}
    eval_s = []
    for r in res.values():
        body = r.get("result") or r
        cached += bool(r.get("cached"))
        v = body.get("verdict") or r.get("status")
        verdicts[v] = verdicts.get(v, 0) + 1
        t = (body.get("timings") or {}).get("total")
        if t:
            eval_s.append(t / 1e3)
    incomplete = sum(1 for r in res.values() if r.get("status") != "completed")
    policy_s, env_s, wall = t1 - t0, t2 - t1, t2 - t0
    return {"turn": turn, "evals": len(ids), "policy_s": round(policy_s, 3),
            "env_s": round(env_s, 3), "wall_s": round(wall, 3),
            "env_share": round(env_s / wall, 4) if wall else None,
            "evals_per_s": round(len(ids) / env_s, 3) if env_s else None,
            "verdicts": verdicts, "cached": cached, "rejected": rejected,
            "incomplete": incomplete,
            "eval_s_median": round(sorted(eval_s)[len(eval_s) // 2], 3) if eval_s else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=sorted(MODES), default="cpu")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--problems", type=int, default=None,
                    help="how many problems (default: gpu 5, cpu 2)")
    ap.add_argument("--kgym", default=os.environ.get("KGYM_BIN")
                    or os.path.join(ROOT, "build", "kgym"))
    ap.add_argument("--workers", default="auto", help="kgym serve --workers")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for kgym serve (repeat)")
    ap.add_argument("--server", help="use this kgym server instead of starting one")
    ap.add_argument("--fast", action="store_true",
                    help="1 correctness and 3 timed trials, no profiling (CI)")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--log", help="kgym serve's log (default: a temp file)")
    a = ap.parse_args(argv)
    from kgym.client import Client

    nprob = a.problems or (5 if a.mode == "gpu" else 2)
    probs = problem_set(a.mode, nprob)
    run_tag = secrets.token_hex(4)
    policy = StandInPolicy({n: sol for n, _, sol in probs}, run_tag)
    serve = None
    log = a.log or tempfile.mktemp(prefix="kgym-rollout-serve-", suffix=".log")
    try:
        if a.server:
            client = Client(a.server, timeout=120)
            workers = "(given server)"
        else:
            serve = Serve(os.path.abspath(a.kgym), a.workers, a.serve_arg, log)
            client = Client(serve.url, timeout=120)
            workers = serve.wait_ready(client)
        label = f" [{a.label}]" if a.label else ""
        print(f"# rollout{label}: {a.samples} samples x {a.turns} turns x {nprob} problems "
              f"({', '.join(n for n, _, _ in probs)}), mode {a.mode}, kgym {a.kgym}, "
              f"local workers {workers}; the policy is a stand-in (not a model)", flush=True)
        print(f"{'turn':>4} {'evals':>5} {'policy_s':>9} {'env_s':>8} {'wall_s':>8} "
              f"{'env%':>6} {'evals/s':>8} {'med_eval_s':>10}  verdicts", flush=True)
        turns = []
        t_start = time.monotonic()
        with cf.ThreadPoolExecutor(max_workers=64) as pool:
            for t in range(a.turns):
                row = run_turn(client, policy.url, probs, a.samples, t, fields(a.mode, a.fast),
                               pool)
                turns.append(row)
                print(f"{t:>4} {row['evals']:>5} {row['policy_s']:>9.3f} {row['env_s']:>8.3f} "
                      f"{row['wall_s']:>8.3f} {100 * row['env_share']:>5.1f}% "
                      f"{row['evals_per_s']:>8.2f} {row['eval_s_median'] or 0:>10.3f}  "
                      f"{row['verdicts']}" + (f" CACHED {row['cached']}" if row["cached"] else ""),
                      flush=True)
        wall = time.monotonic() - t_start
        env = sum(r["env_s"] for r in turns)
        n = sum(r["evals"] for r in turns)
        total = {"evals": n, "wall_s": round(wall, 3), "env_s": round(env, 3),
                 "env_share": round(env / wall, 4) if wall else None,
                 "evals_per_s": round(n / env, 3) if env else None,
                 "env_s_per_problem_turn": round(env / (a.turns * nprob), 3),
                 "cached": sum(r["cached"] for r in turns),
                 "incomplete": sum(r["incomplete"] + r["rejected"] for r in turns)}
        print(f" all {n:>5} {'':>9} {env:>8.3f} {wall:>8.3f} {100 * total['env_share']:>5.1f}% "
              f"{total['evals_per_s']:>8.2f}   env s per problem-turn "
              f"{total['env_s_per_problem_turn']:.2f}; cached {total['cached']}, "
              f"incomplete {total['incomplete']}", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"label": a.label, "mode": a.mode, "samples": a.samples,
                           "turns": a.turns, "problems": [p[0] for p in probs],
                           "kgym": a.kgym, "workers": workers, "per_turn": turns,
                           "total": total}, f, indent=1)
        return 1 if total["cached"] or total["incomplete"] else 0
    finally:
        policy.close()
        if serve:
            serve.close()


if __name__ == "__main__":
    sys.exit(main())
