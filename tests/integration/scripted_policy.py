"""A scripted OpenAI-compatible chat server for the agent's tests: the one
stand-in allowed, since no model ships with kgym. It replays replies we
wrote, chosen by the request's X-Kgym-Tag header (`kgym rollout` sends
{"problem", "turn", "samples"}), and misbehaves on request: malformed JSON,
a reply slower than the client's deadline, 429s before an answer.

    srv = ScriptedPolicy(script)   # script[problem][sample][turn] -> Step
    srv.url                        # http://127.0.0.1:PORT
    srv.requests                   # every chat request: (tag, body, headers)
    srv.starts, srv.max_in_flight  # arrival times; most requests at once
    srv.close()

A Step is a dict: {"text": reply} answers it; "status429": N first answers
429 N times (with Retry-After: 0), "status500": N 500 N times; "status400":
MESSAGE always refuses it with that message; "slow": S sleeps S seconds first;
"malformed": True answers 200 with a body that is not JSON. A request for
several samples (n > 1) is one reply with a choice per sample; its first
sample's step decides the misbehaviour. Standard library only, threaded.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any]


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "scripted", "object": "model"}]}).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.path != "/v1/chat/completions":
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        tag = json.loads(self.headers.get("X-Kgym-Tag", "{}"))
        owner = self.server.owner
        owner.record(tag, body, dict(self.headers))
        with owner._lock:
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            self._answer(tag, body)
        finally:
            with owner._lock:
                owner.in_flight -= 1

    def _answer(self, tag: dict, body: dict) -> None:
        steps = [self.server.owner.step(tag["problem"], s, tag["turn"])
                 for s in tag["samples"]]
        first = steps[0]
        key = (tag["problem"], tag["samples"][0], tag["turn"])
        if self.server.owner.take_429(key, first.get("status429", 0)):
            self._send(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "0"})
            return
        if self.server.owner.take_429(key + ("5xx",), first.get("status500", 0)):
            self._send(500, b'{"error": {"message": "engine restarting"}}')
            return
        if first.get("status400"):
            self._send(400, json.dumps({"error": {"message": first["status400"]}}).encode())
            return
        if first.get("slow"):
            time.sleep(first["slow"])
        if first.get("malformed"):
            self._send(200, b'{"id": "x", "choices": [{"message": {"content": "tru')
            return
        self._send(200, json.dumps(_reply(body, steps)).encode())


def _reply(body: dict, steps: list[Step]) -> dict:
    """An OpenAI chat.completion with one choice per step; token ids and
    logprobs (one per word, made up) when the request asked for them."""
    choices = []
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    completion = 0
    for i, st in enumerate(steps):
        text = st.get("text", "")
        words = text.split()
        completion += len(words)
        ch: dict[str, Any] = {"index": i, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": text}}
        if body.get("logprobs"):
            ch["logprobs"] = {"content": [{"token": w, "logprob": -0.25 * (k % 4),
                                           "bytes": None, "top_logprobs": []}
                                          for k, w in enumerate(words)]}
        if body.get("return_token_ids"):
            ch["token_ids"] = [1000 + k for k in range(len(words))]
        choices.append(ch)
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "model": body["model"],
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "ScriptedPolicy"


class ScriptedPolicy:
    def __init__(self, script: dict[str, dict[int, dict[int, Step]]]) -> None:
        self.script = script
        self.requests: list[tuple[dict, dict, dict]] = []
        self._429: dict[tuple, int] = {}
        self.starts: list[float] = []  # when each chat request arrived
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._srv = _Server(("127.0.0.1", 0), _Handler)
        self._srv.owner = self
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._thread.start()

    def step(self, problem: str, sample: int, turn: int) -> Step:
        return self.script[problem][sample][turn]

    def record(self, tag: dict, body: dict, headers: dict) -> None:
        with self._lock:
            self.requests.append((tag, body, headers))
            self.starts.append(time.monotonic())

    def take_429(self, key: tuple, times: int) -> bool:
        """True while key has had fewer than `times` 429s."""
        with self._lock:
            k = self._429.get(key, 0)
            if k < times:
                self._429[key] = k + 1
                return True
            return False

    def close(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
