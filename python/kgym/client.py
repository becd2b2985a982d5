"""A client for kgym serve (docs/api.md): submit, status, result, wait,
cancel and batch submission. Standard library only.

    from kgym.client import Client
    c = Client("http://127.0.0.1:10907", token_file="~/.kgym/tokens")
    tid = c.submit(reference_code=ref, kernel_code=cand, backend="triton")
    r = c.wait(tid, timeout=600)
    print(r["verdict"], r["speedup"])

Errors: ``KgymError`` for a reply the server refused (``status``, ``code``,
``message``, ``field`` from its JSON error), ``KgymUnavailable`` when the
server could not be reached, ``KgymTimeout`` when ``wait`` gave up.
"""
from __future__ import annotations

import http.client
import json
import os
import time
import urllib.parse
from typing import Any, Iterable, Iterator

DEFAULT_SERVER = "http://127.0.0.1:10907"
RESULTS_CHUNK = 1000  # the server's cap on ids per POST /results/batch
LONG_POLL_S = 60.0    # the longest wait_all asks the server to wait at once

__all__ = ["Client", "KgymError", "KgymUnavailable", "KgymTimeout", "DEFAULT_SERVER"]


class KgymError(Exception):
    """The server answered with an error (4xx/5xx)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        self.status, self.code, self.message, self.field = status, code, message, field
        where = f" (field {field})" if field else ""
        super().__init__(f"{status} {code}: {message}{where}")


class KgymUnavailable(KgymError):
    """The server could not be reached, or answered 503."""


class KgymTimeout(KgymError):
    """wait() gave up before the task finished."""


def read_token(path: str) -> str:
    """The first token of a token file (blank lines and # comments skipped)."""
    with open(os.path.expanduser(path)) as f:
        for line in f:
            s = line.strip()
            if s and not s.startswith("#"):
                return s
    raise ValueError(f"token file {path}: no token in it")


class Client:
    """One server. Keeps one HTTP connection alive; not thread-safe (use one
    Client per thread).

    server: base URL (default $KGYM_SERVER, else http://127.0.0.1:10907).
    token / token_file: bearer token (default: $KGYM_TOKEN_FILE's first).
    timeout: seconds per request."""

    def __init__(self, server: str | None = None, *, token: str | None = None,
                 token_file: str | None = None, timeout: float = 30.0):
        server = server or os.environ.get("KGYM_SERVER") or DEFAULT_SERVER
        u = urllib.parse.urlsplit(server)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"server URL {server!r}: expected http://HOST:PORT")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        token_file = token_file or os.environ.get("KGYM_TOKEN_FILE")
        self._token = token if token is not None else (read_token(token_file) if token_file else None)
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    # ---- transport ------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=timeout)
        else:
            self._conn.timeout = timeout
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout)
        return self._conn

    def request(self, method: str, path: str, body: Any = None,
                timeout: float | None = None) -> tuple[int, Any]:
        """One request; returns (status, parsed JSON body or None). Raises
        KgymUnavailable when no answer came (one retry on a kept-alive
        connection the server had closed)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        t = self.timeout if timeout is None else timeout
        for attempt in (0, 1):
            reused = self._conn is not None
            try:
                c = self._connection(t)
                c.request(method, self._prefix + path, body=data, headers=headers)
                r = c.getresponse()
                payload = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                break
            except (ConnectionError, http.client.RemoteDisconnected,
                    http.client.BadStatusLine) as e:
                self.close()
                # the server closed an idle kept-alive connection: ask again
                # when that cannot create a second task
                idempotent = method != "POST" or (isinstance(body, dict) and "task_id" in body)
                if attempt == 0 and reused and idempotent:
                    continue
                raise KgymUnavailable(0, "unavailable", f"{method} {path}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                self.close()
                code = "timeout" if isinstance(e, TimeoutError) else "unavailable"
                raise KgymUnavailable(0, code, f"{method} {path}: {e}") from e
        parsed = None
        if payload:
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = payload.decode(errors="replace")
        return r.status, parsed

    def _check(self, status: int, body: Any, ok: Iterable[int]) -> Any:
        if status in ok:
            return body
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            code, msg, field = err.get("code", "error"), err.get("message", ""), err.get("field")
        else:
            code, msg, field = "error", str(body)[:200] if body else "", None
        cls = KgymUnavailable if status == 503 else KgymError
        raise cls(status, code, msg, field)

    # ---- client API -------------------------------------------------------------

    def submit_raw(self, request: dict) -> dict:
        """POST /evaluate with a full request; returns the server's reply
        ({"task_id", "status", ...}, with "result" when already finished)."""
        s, b = self.request("POST", "/evaluate", request)
        return self._check(s, b, (200, 202))

    def submit(self, reference_code: str, kernel_code: str, **fields: Any) -> str:
        """Submits one task (any request field as a keyword); returns its id."""
        return self.submit_raw({"reference_code": reference_code,
                                "kernel_code": kernel_code, **fields})["task_id"]

    def batch(self, requests: list[dict]) -> dict:
        """POST /evaluate/batch; returns {"tasks": [...], "accepted",
        "rejected"}: one entry per request, in order (a rejected one has
        "status_code" and "error")."""
        s, b = self.request("POST", "/evaluate/batch", {"tasks": list(requests)})
        return self._check(s, b, (200,))

    def status(self, task_id: str) -> dict:
        """GET /status/{id}."""
        s, b = self.request("GET", f"/status/{urllib.parse.quote(task_id, safe='')}")
        return self._check(s, b, (200,))

    def result(self, task_id: str) -> dict | None:
        """The result object when the task has finished, else None."""
        s, b = self.request("GET", f"/results/{urllib.parse.quote(task_id, safe='')}")
        b = self._check(s, b, (200, 202))
        return b if s == 200 else None

    def results(self, task_ids: Iterable[str], wait_s: float = 0) -> dict:
        """POST /results/batch: {"results": [result of each finished task],
        "pending": [{"task_id", "status"}], "unknown": [ids]}. With wait_s
        (at most 120) the server answers once one of them has finished, or
        with no results when wait_s has passed. At most 1,000 ids."""
        s, b = self.request("POST", "/results/batch",
                            {"task_ids": list(task_ids), "wait_s": wait_s},
                            timeout=self.timeout + wait_s)
        return self._check(s, b, (200,))

    def results_chunked(self, task_ids: list[str],
                        wait_s: float = 0) -> Iterator[tuple[list[str], dict]]:
        """results() of any number of ids: (chunk, answer) for one POST
        /results/batch per RESULTS_CHUNK ids, each asked when the caller
        takes it. Only a single request waits (wait_s); with several none
        may hold the others up."""
        chunks = [task_ids[i:i + RESULTS_CHUNK]
                  for i in range(0, len(task_ids), RESULTS_CHUNK)]
        wait = wait_s if len(chunks) == 1 else 0.0
        for chunk in chunks:
            yield chunk, self.results(chunk, wait_s=wait)

    def wait(self, task_id: str, timeout: float | None = None, poll: float = 0.2,
             max_poll: float = 2.0) -> dict:
        """Waits until the task has finished and returns its result. Raises
        KgymTimeout after `timeout` seconds (None: never); a server that is
        briefly away is retried until then. poll and max_poll pace the
        polling of a server without POST /results/batch."""
        return self.wait_all([task_id], timeout=timeout, poll=poll,
                             max_poll=max_poll)[task_id]

    def wait_all(self, task_ids: Iterable[str], timeout: float | None = None,
                 poll: float = 0.2, max_poll: float = 2.0) -> dict[str, dict]:
        """Waits for every task; returns {task_id: result}. The server is
        asked with long polls of POST /results/batch (one request per
        result that comes in, at most RESULTS_CHUNK ids each), or, when it
        has no such endpoint, with GET /results/{id} for each. An unknown
        task raises KgymError (404)."""
        ids = list(dict.fromkeys(task_ids))
        t0 = time.monotonic()
        out: dict[str, dict] = {}
        while len(out) < len(ids):
            left = None if timeout is None else timeout - (time.monotonic() - t0)
            if left is not None and left <= 0:
                raise KgymTimeout(0, "timeout", f"{len(ids) - len(out)} of {len(ids)} tasks "
                                  f"not finished after {timeout} s")
            todo = [t for t in ids if t not in out]
            several = len(todo) > RESULTS_CHUNK
            wait = min(LONG_POLL_S, left if left is not None else LONG_POLL_S)
            try:
                for _, b in self.results_chunked(todo, wait_s=max(0.0, wait)):
                    if b["unknown"]:
                        raise KgymError(404, "not_found", f"task_id {b['unknown'][0]}: no such task",
                                        "task_id")
                    out.update((r["task_id"], r) for r in b["results"])
            except KgymError as e:
                if e.status != 405:  # a server from before POST /results/batch
                    raise
                return {**out, **self._wait_each([t for t in ids if t not in out], t0, timeout,
                                                 poll, max_poll)}
            except KgymUnavailable:
                if left is not None and left < 1:
                    raise
                time.sleep(0.5)
                continue
            if several and len(out) < len(ids):
                time.sleep(poll)
        return {t: out[t] for t in ids}

    def _wait_each(self, task_ids: list[str], t0: float, timeout: float | None,
                   poll: float, max_poll: float) -> dict[str, dict]:
        """wait_all through GET /results/{id} of each task."""
        out: dict[str, dict] = {}
        for tid in task_ids:
            pause = poll
            while tid not in out:
                try:
                    r = self.result(tid)
                    if r is not None:
                        out[tid] = r
                        break
                except KgymUnavailable:
                    if timeout is not None and time.monotonic() - t0 > timeout:
                        raise
                if timeout is not None and time.monotonic() - t0 + pause > timeout:
                    raise KgymTimeout(0, "timeout",
                                      f"task {tid} not finished after {timeout} s")
                time.sleep(pause)
                pause = min(max_poll, pause * 1.5)
        return out

    def cancel(self, task_id: str) -> dict:
        """DELETE /tasks/{id}: {"task_id", "status": "cancelled"}."""
        s, b = self.request("DELETE", f"/tasks/{urllib.parse.quote(task_id, safe='')}")
        return self._check(s, b, (200,))

    def health(self) -> dict:
        s, b = self.request("GET", "/health")
        return self._check(s, b, (200,))
