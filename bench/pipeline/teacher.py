"""The pipeline's teacher: a scripted OpenAI-compatible chat server that
answers with prepared kernels, honest ones and the wrong and cheating
kernels a weak teacher also writes. A stand-in for a language model (a
strong model served by vLLM would take its place); standard library only.

    python3 teacher.py make PROBLEMS BACKEND DIR   # writes DIR/<problem>/*.py
    python3 teacher.py serve DIR [--port P]        # prints "listening on URL"

`make` takes a KernelBench tree (PROBLEMS/levelN/<name>.py, with the
honest solutions in PROBLEMS/levelN/solutions/<name>.<BACKEND>.py) and
writes, per problem `levelN/<name>`, the teacher folder's three kernels:
`honest.py` (the solution), `wrong.py` (the solution with its output
halved: a mismatch) and `cheat.py` (the reference's own PyTorch
module renamed ModelNew: no custom kernel, which kgym calls hacked).

`serve` picks a kernel by the request's X-Kgym-Tag (`kgym rollout` sends
{"problem", "turn", "samples"}): sample s follows plan s mod 4 of PLANS,
turn t its t-th entry (the last one after it). A request for n samples
gets one choice per sample. Other fields are ignored.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# what each sample's turns answer: honest throughout; wrong then fixed;
# a cheat then fixed; a cheat throughout (kgym collect drops that one)
PLANS = [("honest", "honest", "honest"), ("wrong", "honest", "honest"),
         ("cheat", "honest", "honest"), ("cheat", "cheat", "cheat")]
SAYS = {"honest": "I write the whole forward pass as one custom kernel.",
        "wrong": "I fold the scale into the kernel's output for speed.",
        "cheat": "PyTorch already has a fast implementation; I call it directly."}


def make(problems: str, backend: str, out: str) -> list[str]:
    made = []
    for ref in sorted(glob.glob(os.path.join(problems, "level*", "*.py"))):
        level = os.path.basename(os.path.dirname(ref))
        name = os.path.splitext(os.path.basename(ref))[0]
        sol = os.path.join(os.path.dirname(ref), "solutions", f"{name}.{backend}.py")
        if not os.path.exists(sol):
            raise SystemExit(f"teacher: {sol}: no {backend} solution for {level}/{name}")
        with open(sol) as f:
            honest = f.read()
        with open(ref) as f:
            reference = f.read()
        if not re.search(r"^class Model\(", reference, re.M):
            raise SystemExit(f"teacher: {ref}: no `class Model(`")
        d = os.path.join(out, level, name)
        os.makedirs(d, exist_ok=True)
        wrong = honest.rstrip("\n") + (
            "\n\n\n_TeacherHonest = ModelNew\n\n\nclass ModelNew(_TeacherHonest):\n"
            "    def forward(self, *args):\n"
            "        return super().forward(*args) * 0.5\n")
        cheat = re.sub(r"^class Model\(", "class ModelNew(", reference, flags=re.M)
        for kind, code in (("honest", honest), ("wrong", wrong), ("cheat", cheat)):
            with open(os.path.join(d, f"{kind}.py"), "w") as f:
                f.write(code)
        made.append(f"{level}/{name}")
    if not made:
        raise SystemExit(f"teacher: {problems}: no level*/*.py problem")
    return made


class Teacher:
    def __init__(self, folder: str):
        self.folder = folder
        self.lock = threading.Lock()
        self.requests = 0

    def kernel(self, problem: str, sample: int, turn: int) -> tuple[str, str]:
        plan = PLANS[sample % len(PLANS)]
        kind = plan[min(turn, len(plan) - 1)]
        d = os.path.join(self.folder, problem)
        path = os.path.join(d, f"{kind}.py")
        if not os.path.exists(path):  # a folder of other kernels: cycle through them
            files = sorted(glob.glob(os.path.join(d, "*.py")))
            if not files:
                raise KeyError(f"no kernels for problem {problem!r} in {self.folder}")
            path = files[(sample + turn) % len(files)]
            kind = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            return kind, f.read()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    teacher: Teacher

    def log_message(self, fmt, *args) -> None:
        pass

    def _send(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": "teacher", "object": "model"}]})
        elif self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
            tag = json.loads(self.headers.get("X-Kgym-Tag") or "{}")
            problem = tag.get("problem", "")
            samples = tag.get("samples") or list(range(int(body.get("n") or 1)))
            turn = int(tag.get("turn", 0))
            choices = []
            for i, s in enumerate(samples):
                kind, code = self.teacher.kernel(problem, int(s), turn)
                text = f"{SAYS.get(kind, 'My kernel.')}\n\n```python\n{code.rstrip()}\n```\n"
                choices.append({"index": i, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text}})
        except (ValueError, KeyError, TypeError) as e:
            self._send(400, {"error": {"message": f"teacher: {e}"}})
            return
        with self.teacher.lock:
            self.teacher.requests += 1
        words = sum(len(c["message"]["content"].split()) for c in choices)
        self._send(200, {"id": "chatcmpl-teacher", "object": "chat.completion",
                         "model": body.get("model", "teacher"), "choices": choices,
                         "usage": {"prompt_tokens": 0, "completion_tokens": words,
                                   "total_tokens": words}})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="teacher.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("problems")
    m.add_argument("backend")
    m.add_argument("dir")
    s = sub.add_parser("serve")
    s.add_argument("dir")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0)
    a = ap.parse_args(argv)
    if a.cmd == "make":
        for p in make(a.problems, a.backend, a.dir):
            print(p)
        return 0
    if not os.path.isdir(a.dir):
        print(f"teacher: {a.dir}: not a folder", file=sys.stderr)
        return 2
    Handler.teacher = Teacher(a.dir)
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    print(f"teacher: listening on http://{a.host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
