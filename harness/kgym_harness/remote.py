"""The judge's handle on the candidate process: commands out, checked replies in.

Every reply is untrusted. Remote turns it into plain, bounded, typed data or
raises: CandidateFailed (the candidate reported a failure, already mapped to
a verdict it is allowed to claim), and the channel's PeerClosed,
ProtocolError and ChannelTimeout.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import schema
from .channel import Channel, ProtocolError, pack, unpack

MAX_TEXT = 4000
MAX_TB = 8000
MAX_RECORDS = 16


class CandidateFailed(Exception):
    """The candidate's code failed; info is a sanitised failure dict."""

    def __init__(self, info: dict):
        super().__init__(info.get("message", ""))
        self.info = info


def _text(v: Any, limit: int) -> str:
    return v[:limit] if isinstance(v, str) else ""


def _frames(v: Any) -> list[dict]:
    out = []
    for f in (v if isinstance(v, list) else [])[:40]:
        if not isinstance(f, dict):
            continue
        line = f.get("line")
        out.append({"file": _text(f.get("file"), 300),
                    "line": line if isinstance(line, int) and not isinstance(line, bool) else 0,
                    "name": _text(f.get("name"), 200), "source": _text(f.get("source"), 200),
                    "candidate": f.get("candidate") is True})
    return out


def sanitize_failure(v: Any, allow_infra: bool = False) -> dict:
    """A candidate-reported failure, restricted to verdicts it may claim.

    The candidate may only fail itself: compile_error or runtime_error. A
    claimed infra_error (which would not be scored) becomes runtime_error,
    except with allow_infra (the reply to load, no measuring function
    replaced): an unusable $TMPDIR or extension build cache is the worker's
    problem, found before or while the candidate's code was imported.
    """
    v = v if isinstance(v, dict) else {}
    verdict = v.get("verdict")
    code = v.get("code")
    if allow_infra and verdict == "infra_error" and code == "INFRA_ERROR":
        pass
    elif verdict == "compile_error" and code in schema.COMPILE_CODES:
        pass
    elif verdict == "runtime_error" and code in schema.RUNTIME_CODES:
        pass
    elif verdict == "compile_error":
        code = "IMPORT_ERROR"
    else:
        verdict = "runtime_error"
        code = code if code in schema.RUNTIME_CODES else "FORWARD_EXCEPTION"
    return {"verdict": verdict, "code": code, "phase": _text(v.get("phase"), 40),
            "type": _text(v.get("type"), 200), "message": _text(v.get("message"), MAX_TEXT),
            "traceback": _text(v.get("traceback"), MAX_TB), "frames": _frames(v.get("frames"))}


def _launches(v: Any) -> dict:
    v = v if isinstance(v, dict) else {}
    count = v.get("count")
    count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
    records = []
    for r in (v.get("records") if isinstance(v.get("records"), list) else [])[:MAX_RECORDS]:
        if isinstance(r, dict):
            grid = r.get("grid")
            grid = grid if (isinstance(grid, list) and len(grid) <= 3
                            and all(isinstance(g, int) for g in grid)) else None
            records.append({"kind": _text(r.get("kind"), 20), "name": _text(r.get("name"), 200),
                            "grid": grid})
    return {"count": count, "records": records}


def _samples(v: Any, n: int) -> list[float]:
    if not isinstance(v, list) or len(v) != n:
        raise ProtocolError(f"expected {n} timing samples")
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            raise ProtocolError("bad timing sample")
        out.append(float(x))
    return out


def _ms(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ProtocolError("bad duration")
    return max(float(v), 0.0)


def _signed_ms(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ProtocolError("bad duration")
    return float(v)


class Remote:
    """Commands to the candidate; one outstanding command at a time."""

    def __init__(self, chan: Channel):
        self.chan = chan
        self.tamper: set[str] = set()

    def _call(self, header: dict, tensors: list[torch.Tensor] = ()) -> tuple[dict, list]:
        self.chan.send(header, list(tensors))
        return self._reply()

    def _reply(self, allow_infra: bool = False) -> tuple[dict, list]:
        reply, out = self.chan.recv()
        tamper = reply.get("tamper")
        if isinstance(tamper, list):
            self.tamper.update(_text(t, 200) for t in tamper[:50] if isinstance(t, str))
        if reply.get("ok") is not True:
            raise CandidateFailed(sanitize_failure(reply.get("failure"),
                                                   allow_infra and not self.tamper))
        return reply, out

    def load(self, **fields: Any) -> None:
        self._call({"cmd": "load", **fields})

    def send_load(self, **fields: Any) -> None:
        """The first half of load(): the candidate works while we do."""
        self.chan.send({"cmd": "load", **fields})

    def finish_load(self) -> None:
        self._reply(allow_infra=True)

    def run(self, inputs: list, mode: str, grad: bool) -> tuple[Any, str | None, dict]:
        """(output, output_problem, launches) for one forward call."""
        tensors: list[torch.Tensor] = []
        desc = pack(list(inputs), tensors)
        reply, out = self._call({"cmd": "run", "mode": mode, "grad": grad, "args": desc}, tensors)
        launches = _launches(reply.get("launches"))
        problem = reply.get("output_problem")
        if problem is not None:
            return None, _text(problem, MAX_TEXT) or "bad output", launches
        return unpack(reply.get("output"), out), None, launches

    def time(self, n_warmup: int, n_iter: int, seed: int, start: int = 0,
             warmup_ms: float = 0.0, timed_start: int | None = None) -> dict:
        reply, _ = self._call({"cmd": "time", "n_warmup": n_warmup, "n_iter": n_iter,
                               "seed": seed, "start": start, "warmup_ms": warmup_ms,
                               "timed_start": start + n_warmup if timed_start is None
                               else timed_start})
        t = reply.get("timing")
        if not isinstance(t, dict):
            raise ProtocolError("time reply without timing")
        side = t.get("side_stream", [])
        if (not isinstance(side, list) or len(side) > n_iter
                or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_iter
                           for i in side)):
            raise ProtocolError("bad side_stream sample list")
        return {"samples_ms": _samples(t.get("samples_ms"), n_iter),
                "inputs": t.get("inputs") if isinstance(t.get("inputs"), list) else None,
                "prep_ms": _ms(t.get("prep_ms")), "warmup_ms": _ms(t.get("warmup_ms")),
                "wall_ms": _ms(t.get("wall_ms")), "side_stream": sorted(set(side)),
                "sync_latency_ms": _ms(t.get("sync_latency_ms", 0.0)),
                "sync_excess_ms": _signed_ms(t.get("sync_excess_ms", 0.0)),
                "launches": _launches(reply.get("launches"))}

    def profile(self, n_iter: int, seed: int) -> Any:
        reply, _ = self._call({"cmd": "profile", "n_iter": n_iter, "seed": seed})
        return reply.get("profile")

    def exit(self) -> None:
        self.chan.send({"cmd": "exit"})
        self.chan.recv()
