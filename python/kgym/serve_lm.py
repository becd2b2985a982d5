"""A small OpenAI-compatible chat server for a local transformers model,
made for `kgym rollout` and the RL loop of bench/pipeline/run.sh, where
`transformers serve` falls short: it ignores `n` and `logprobs` and
refuses `return_token_ids` (tests/integration/test_real_policy.py), so
MRS would have nothing to check, and it cannot swap in a new checkpoint.

    python -m kgym.serve_lm MODEL_DIR [--host H] [--port P] [--device D]
                            [--max-batch N] [--batch-wait S] [--name NAME]

Endpoints:
- `GET /health`, `GET /v1/models`;
- `POST /v1/chat/completions`: `messages` rendered with the tokenizer's
  chat template and its generation prompt (train.py's rendering);
  `n`, `max_tokens`, `temperature`, `top_p`, `stop` (strings), `seed`;
  with `logprobs: true` each choice has `logprobs.content[].logprob`, the
  log-probability of each sampled token under the model at temperature 1
  (log_softmax of the raw logits, as `kgym train` computes them, so MRS
  compares the same function); with `return_token_ids: true` each choice
  has `token_ids`, the sampled ids, the EOS included when it stopped
  there (its logprob is in the list too). `finish_reason` is `stop` (EOS
  or a stop string) or `length`. NUL characters are left out of the
  text (JSON parsers such as kgym's refuse them); the ids keep them.
- `POST /v1/reload` `{"model": DIR}` (or SIGHUP: the last directory
  again): loads the checkpoint, and answers once requests are served by
  it; requests arriving meanwhile wait.

Requests that arrive within `--batch-wait` seconds of each other and ask
for the same sampling (temperature, top_p, max_tokens) are generated as
one left-padded batch of at most `--max-batch` sequences, so the 16
samples of a problem and the per-sample requests of later turns share
the GPU. A batch's random generator is seeded by its first request's
`seed` (when given): replies are reproducible only one request at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


class BadRequest(Exception):
    pass


def _num(body: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise BadRequest(f'"{key}" must be a number in [{lo}, {hi}]')
    return float(v)


def parse_request(body: Any, max_tokens_cap: int) -> dict:
    """The fields this server honours, checked; anything else is ignored."""
    if not isinstance(body, dict):
        raise BadRequest("the body is not a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest('"messages" must be a non-empty list')
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or \
                not isinstance(m.get("content"), str):
            raise BadRequest('each message needs a string "role" and "content"')
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest('"stop" must be a string or a list of non-empty strings')
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest('"seed" must be an integer')
    return {
        "messages": [{"role": m["role"], "content": m["content"]} for m in msgs],
        "n": int(_num(body, "n", 1, 1, 256)),
        "max_tokens": int(_num(body, "max_tokens", 256, 1, max_tokens_cap)),
        "temperature": _num(body, "temperature", 1.0, 0.0, 10.0),
        "top_p": _num(body, "top_p", 1.0, 1e-6, 1.0),
        "stop": stop,
        "seed": seed,
        "logprobs": bool(body.get("logprobs")),
        "token_ids": bool(body.get("return_token_ids")),
        "model": body.get("model"),
    }


class Job:
    def __init__(self, req: dict, prompt: list[int]):
        self.req = req
        self.prompt = prompt
        self.done = threading.Event()
        self.result: Optional[dict] = None
        self.error: Optional[str] = None

    def key(self) -> tuple:
        r = self.req
        return (r["temperature"], r["top_p"], r["max_tokens"])


class Engine:
    """The model, its tokenizer and the generation thread."""

    def __init__(self, path: str, device: str, max_batch: int, batch_wait: float,
                 name: Optional[str]):
        import torch
        self.torch = torch
        self.device = device
        self.max_batch = max_batch
        self.batch_wait = batch_wait
        self.name = name or path
        self.path = path
        self.lock = threading.Lock()
        self.jobs: "queue.Queue[Job]" = queue.Queue()
        self.reload_to: Optional[str] = None
        self.reloaded = threading.Condition()
        self.generation = 0
        self.stats = {"batches": 0, "sequences": 0, "tokens": 0, "seconds": 0.0}
        self._load(path)
        threading.Thread(target=self._loop, daemon=True).start()

    def _load(self, path: str) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=self.torch.float32)
        model.to(self.device).eval()
        self.tok, self.model, self.path = tok, model, path
        self.ctx = getattr(model.config, "max_position_embeddings", 4096)
        self.eos = tok.eos_token_id
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else (self.eos or 0)

    def render(self, messages: list[dict]) -> list[int]:
        from kgym.train import _render
        with self.lock:
            return _render(self.tok, messages, add_generation_prompt=True)

    # ---- reload ----
    def request_reload(self, path: str) -> int:
        """Queues a reload; returns the generation number to wait for."""
        with self.reloaded:
            self.reload_to = path
            target = self.generation + 1
        self.jobs.put(None)  # wake the loop
        return target

    def wait_generation(self, target: int, timeout: float) -> bool:
        with self.reloaded:
            return self.reloaded.wait_for(lambda: self.generation >= target, timeout)

    # ---- generation ----
    def _loop(self) -> None:
        pending: list[Job] = []
        while True:
            if not pending:
                j = self.jobs.get()
                if j is not None:
                    pending.append(j)
            deadline = time.monotonic() + self.batch_wait
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    j = self.jobs.get(timeout=left)
                except queue.Empty:
                    break
                if j is not None:
                    pending.append(j)
            if self.reload_to is not None:
                self._do_reload()
            if not pending:
                continue
            key = pending[0].key()
            batch, rest, seqs = [], [], 0
            for j in pending:
                if j.key() == key and (not batch or seqs + j.req["n"] <= self.max_batch):
                    batch.append(j)
                    seqs += j.req["n"]
                else:
                    rest.append(j)
            pending = rest
            try:
                self._generate(batch)
            except Exception as e:  # a failed batch fails its requests, not the server
                traceback.print_exc()
                for j in batch:
                    j.error = f"generation failed: {type(e).__name__}: {e}"
            for j in batch:
                j.done.set()

    def _do_reload(self) -> None:
        with self.reloaded:
            path, self.reload_to = self.reload_to, None
        t0 = time.monotonic()
        try:
            with self.lock:
                old = self.model
                self.model = None
                del old
                if self.device.startswith("cuda"):
                    self.torch.cuda.empty_cache()
                self._load(path)
            print(f"serve_lm: reloaded {path} in {time.monotonic() - t0:.1f} s",
                  file=sys.stderr, flush=True)
        except Exception:
            traceback.print_exc()
            print(f"serve_lm: reload of {path} failed; exiting", file=sys.stderr, flush=True)
            os._exit(1)
        with self.reloaded:
            self.generation += 1
            self.reloaded.notify_all()

    def _generate(self, batch: list[Job]) -> None:
        torch = self.torch
        t0 = time.monotonic()
        temp, top_p, max_new = batch[0].key()
        rows: list[tuple[Job, list[int]]] = []
        for j in batch:
            prompt = j.prompt[-max(1, self.ctx - max_new):]
            rows += [(j, prompt)] * j.req["n"]
        width = max(len(p) for _, p in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (_, p) in enumerate(rows):  # left padding
            ids[i, width - len(p):] = torch.tensor(p)
            attn[i, width - len(p):] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        seed = batch[0].req["seed"]
        if seed is not None:
            torch.manual_seed(seed % (2 ** 63))
        do_sample = temp > 0
        kw: dict[str, Any] = dict(do_sample=do_sample, max_new_tokens=max_new,
                                  eos_token_id=self.eos, pad_token_id=self.pad,
                                  return_dict_in_generate=True, output_logits=True)
        if do_sample:
            kw.update(temperature=temp, top_p=top_p, top_k=0)
        with self.lock, torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=attn, **kw)
            new = out.sequences[:, width:]
            # each step's raw logits (B, V) -> the sampled token's logprob, one
            # step at a time (a (B, T, V) stack would hold gigabytes)
            lp = torch.zeros(new.shape, dtype=torch.float32, device=new.device)
            for t, lg in enumerate(out.logits or ()):
                lp[:, t] = torch.log_softmax(lg.float(), dim=-1).gather(
                    -1, new[:, t:t + 1]).squeeze(-1)
            new, lp = new.tolist(), lp.tolist()
            texts = []
            for i, (j, _) in enumerate(rows):
                toks, finish = new[i], "length"
                if self.eos is not None and self.eos in toks:
                    toks, finish = toks[:toks.index(self.eos) + 1], "stop"
                texts.append((toks, lp[i][:len(toks)], finish))
            # NUL characters are dropped from the text (the ids keep them):
            # JSON parsers such as jansson, kgym's, refuse "\u0000" in strings
            decoded = [self.tok.decode([t for t in toks if t != self.eos],
                                       skip_special_tokens=False).replace("\x00", "")
                       for toks, _, _ in texts]
        ntok = 0
        at = 0
        for j in batch:
            choices = []
            for c in range(j.req["n"]):
                toks, lps, finish = texts[at]
                text = decoded[at]
                at += 1
                for s in j.req["stop"]:  # a stop string ends the text there
                    k = text.find(s)
                    if k >= 0:
                        text, finish = text[:k], "stop"
                        keep = self._prefix_tokens(toks, text)
                        toks, lps = toks[:keep], lps[:keep]
                ntok += len(toks)
                ch: dict[str, Any] = {"index": c, "finish_reason": finish,
                                      "message": {"role": "assistant", "content": text}}
                if j.req["logprobs"]:
                    ch["logprobs"] = {"content": [
                        {"token": self.tok.convert_ids_to_tokens(t), "logprob": v,
                         "bytes": None, "top_logprobs": []} for t, v in zip(toks, lps)]}
                if j.req["token_ids"]:
                    ch["token_ids"] = toks
                choices.append(ch)
            comp = sum(len(ch.get("token_ids") or []) for ch in choices) if j.req["token_ids"] \
                else None
            j.result = {"choices": choices, "prompt_tokens": len(j.prompt),
                        "completion_tokens": comp}
        # completion counts without token ids: recount from the texts
        at = 0
        for j in batch:
            if j.result["completion_tokens"] is None:
                j.result["completion_tokens"] = sum(len(texts[at + c][0])
                                                    for c in range(j.req["n"]))
            at += j.req["n"]
        self.stats["batches"] += 1
        self.stats["sequences"] += len(rows)
        self.stats["tokens"] += ntok
        self.stats["seconds"] += time.monotonic() - t0

    def _prefix_tokens(self, toks: list[int], text: str) -> int:
        """How many of toks decode to a prefix of at most text."""
        for k in range(len(toks), -1, -1):
            if len(self.tok.decode(toks[:k], skip_special_tokens=False)) <= len(text):
                return k
        return 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _send(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, msg: str) -> None:
        self._send(status, {"error": {"message": msg, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        e = self.engine
        p = self.path.split("?")[0].rstrip("/")
        if p == "/health":
            self._send(200, {"status": "ok", "model": e.path, "generation": e.generation,
                             "stats": e.stats})
        elif p == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": e.name, "object": "model", "owned_by": "kgym", "root": e.path}]})
        else:
            self._error(404, f"no route GET {p}")

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(n) or b"null")
        except ValueError as ex:
            raise BadRequest(f"the body is not JSON ({ex})")

    def do_POST(self) -> None:
        e = self.engine
        p = self.path.split("?")[0].rstrip("/")
        try:
            body = self._body()
            if p == "/v1/reload":
                path = body.get("model") if isinstance(body, dict) else None
                if not isinstance(path, str) or not os.path.isdir(path):
                    raise BadRequest('"model" must name a model directory')
                target = e.request_reload(path)
                if not e.wait_generation(target, 600):
                    self._error(504, "reload did not finish in 600 s")
                    return
                self._send(200, {"model": e.path, "generation": e.generation})
                return
            if p != "/v1/chat/completions":
                self._error(404, f"no route POST {p}")
                return
            req = parse_request(body, e.ctx)
            job = Job(req, e.render(req["messages"]))
        except BadRequest as ex:
            self._error(400, str(ex))
            return
        e.jobs.put(job)
        job.done.wait()
        if job.error:
            self._error(500, job.error)
            return
        r = job.result
        self._send(200, {
            "id": f"chatcmpl-{time.monotonic_ns():x}", "object": "chat.completion",
            "created": int(time.time()), "model": req["model"] or e.name,
            "choices": r["choices"],
            "usage": {"prompt_tokens": r["prompt_tokens"],
                      "completion_tokens": r["completion_tokens"],
                      "total_tokens": r["prompt_tokens"] + r["completion_tokens"]}})


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="kgym.serve_lm", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a transformers model directory")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    ap.add_argument("--max-batch", type=int, default=128, help="sequences per batch")
    ap.add_argument("--batch-wait", type=float, default=0.05,
                    help="seconds to gather requests into one batch")
    ap.add_argument("--name", help="the model's name in /v1/models (default: the path)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.model):
        print(f"kgym.serve_lm: {a.model}: not a model directory", file=sys.stderr)
        return 2
    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    Handler.engine = Engine(a.model, device, a.max_batch, a.batch_wait, a.name)
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    signal.signal(signal.SIGHUP, lambda *_: Handler.engine.request_reload(Handler.engine.path))
    print(f"kgym.serve_lm: listening on http://{a.host}:{srv.server_address[1]} "
          f"({a.model} on {device})", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
