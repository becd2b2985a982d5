"""The judge's handle on the candidate process: commands out, checked replies in.

Every reply is untrusted. Remote turns it into plain, bounded, typed data or
raises: CandidateFailed (the candidate reported a failure, already mapped to
a verdict it is allowed to claim), and the channel's PeerClosed,
ProtocolError and ChannelTimeout.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from . import lead, memstat, quiet, schema
from .channel import Channel, ChannelTimeout, ProtocolError, pack, unpack

MAX_TEXT = 4000
MAX_TB = 8000
MAX_RECORDS = 16
MAX_INPUTS = 256


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
    low = v.get("low_precision")
    low = [_text(x, 200) for x in low[:8] if isinstance(x, str)] if isinstance(low, list) else []
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
    return {"count": count, "records": records, "low_precision": low}


def _l2(v: Any) -> dict | None:
    """The candidate's persisting-L2 report of a timing command (CUDA)."""
    if not isinstance(v, dict):
        return None
    out = {k: _int(v.get(k), 0, 2**63) or 0 for k in ("baseline", "limit", "window", "resets")}
    out["available"] = v.get("available") is True
    return out


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


HOST_PARTS = ("calibrate", "launch", "wait", "read")


def _host_ms(v: Any) -> dict:
    """A timing reply's host_ms (where its wall time went, diagnostics):
    the known parts, each a number of ms; anything else is dropped."""
    v = v if isinstance(v, dict) else {}
    return {k: _num(v.get(k, 0.0)) for k in HOST_PARTS}


def _int(v: Any, lo: int = 0, hi: int = 2**63) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi else None


def _num(v: Any) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return max(float(v), 0.0) if ok else 0.0


@dataclass
class RunReply:
    """One checked call, as the judge may use it. guard is None when the
    judge did not ask for the guard report."""
    output: Any = None
    problem: str | None = None
    lazy: bool = False
    launches: dict = field(default_factory=dict)
    aliases: list = field(default_factory=list)      # [output leaf, input]
    inputs: list | None = None                       # digest per input, after the call
    quiet: dict = field(default_factory=dict)
    ms: dict = field(default_factory=dict)          # the candidate's own time split
    ablation: dict | None = None                     # calls, poisoned, unresolved


def _guard(v: Any, n_inputs: int) -> tuple[list, list, dict]:
    """The candidate's guard report, bounded and typed; ProtocolError when
    it is missing or malformed (only a tampered candidate leaves it out)."""
    if not isinstance(v, dict):
        raise ProtocolError("run reply without its guard report")
    aliases = []
    for p in (v.get("aliases") if isinstance(v.get("aliases"), list) else [])[:64]:
        if (isinstance(p, list) and len(p) == 2 and _int(p[0], 0, 1 << 20) is not None
                and _int(p[1], 0, MAX_INPUTS) is not None):
            aliases.append((p[0], p[1]))
    inputs = v.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != n_inputs:
        raise ProtocolError("guard report without one digest per input")
    digests = []
    for d in inputs:
        if d is None:
            digests.append(None)
        elif isinstance(d, list) and len(d) == 3 and all(_int(x, 0, 2**64) is not None for x in d):
            digests.append(list(d))
        else:
            raise ProtocolError("bad input digest")
    q = v.get("quiet") if isinstance(v.get("quiet"), dict) else {}
    changed = q.get("changed") if isinstance(q.get("changed"), list) else []
    report = {"deferred": q.get("deferred") is True,
              "changed": [c for c in changed[:16] if _int(c, 0, 1 << 20) is not None],
              "busy_ms": _num(q.get("busy_ms")), "waited_ms": _num(q.get("waited_ms")),
              "new_threads": _int(q.get("new_threads"), 0, 1 << 20) or 0,
              "new_children": _int(q.get("new_children"), 0, 1 << 20) or 0}
    return aliases, digests, report


def peer_pid(sock: socket.socket, deadline: float | None) -> int | None:
    """The pid of the process that wrote the next message on sock, as the
    kernel reports it (SCM_CREDENTIALS; needs SO_PASSCRED set on sock before
    it was sent), read with MSG_PEEK so the message stays where it is. None
    when the platform or the socket cannot say."""
    if not hasattr(socket, "SCM_CREDENTIALS"):
        return None
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left <= 0:
        raise ChannelTimeout("deadline passed")
    sock.settimeout(left)
    try:
        data, anc, _flags, _addr = sock.recvmsg(1, socket.CMSG_SPACE(12), socket.MSG_PEEK)
    except socket.timeout:
        raise ChannelTimeout("deadline passed") from None
    except OSError:
        return None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= 12:
            pid = struct.unpack("iII", payload[:12])[0]
            return pid if data and pid > 0 else None
    return None


class Remote:
    """Commands to the candidate; one outstanding command at a time.

    With watch_wanted set before finish_load(), the judge learns the
    candidate's pid from the kernel and keeps a quiet.ProcWatch on it:
    busy() before each command, idle() after each reply. Threads that
    forward calls started and left running are summed in late_threads and
    thread_busy_ms (the candidate's own report, quiet.ThreadLedger)."""

    def __init__(self, chan: Channel):
        self.chan = chan
        self.tamper: set[str] = set()
        self.watch_wanted = False
        self.watch: quiet.ProcWatch | None = None
        self.pid: int | None = None
        self.late_threads = 0
        self.thread_busy_ms = 0.0
        self.chan_claim: dict[str, float] = {}  # the candidate's Channel.ms (diagnostics)
        self.ahead: dict | None = None  # the load reply's compile-ahead account (claim)
        self.mem_claim: dict | None = None  # the candidate's last memstat.peak() (claim)
        self.wall_claim: dict | None = None  # its clock over its last wall block (claim)
        self._pass_creds(True)  # the kernel attaches the writer's pid to the load reply

    def _pass_creds(self, on: bool) -> None:
        try:
            self.chan.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, int(on))
        except (OSError, AttributeError):
            pass

    def close_gap(self) -> None:
        """Closes and judges the candidate's idle gap now (the watch's /proc
        reads), so that a command timed right after does not carry it; the
        command's own busy() then finds no gap open."""
        if self.watch is not None:
            self.watch.busy()

    def _call(self, header: dict, tensors: list[torch.Tensor] = ()) -> tuple[dict, list]:
        if self.watch is not None:
            self.watch.busy()
        self.chan.send(header, list(tensors))
        reply, out = self._reply()
        if self.watch is not None:
            self.watch.idle(str(header.get("cmd")))
        return reply, out

    def _reply(self, allow_infra: bool = False) -> tuple[dict, list]:
        reply, out = self.chan.recv()
        tamper = reply.get("tamper")
        if isinstance(tamper, list):
            self.tamper.update(_text(t, 200) for t in tamper[:50] if isinstance(t, str))
        claim = reply.get("chan_ms")
        if isinstance(claim, dict):
            self.chan_claim = {k: _num(claim.get(k)) for k in self.chan.ms}
        mem = memstat.claim(reply.get("mem"))
        if mem is not None:
            self.mem_claim = mem
        threads = reply.get("threads")
        if isinstance(threads, dict):
            self.late_threads += _int(threads.get("late"), 0, 1 << 30) or 0
            if (_int(threads.get("running"), 0, 1 << 30) or 0) > 0:
                self.thread_busy_ms = max(self.thread_busy_ms, _num(threads.get("busy_ms")))
        if reply.get("ok") is not True:
            raise CandidateFailed(sanitize_failure(reply.get("failure"),
                                                   allow_infra and not self.tamper))
        return reply, out

    def load(self, **fields: Any) -> None:
        self._call({"cmd": "load", **fields})

    def send_load(self, **fields: Any) -> None:
        """The first half of load(): the candidate works while we do."""
        self.chan.send({"cmd": "load", **fields})

    def finish_load(self) -> dict:
        """The load reply's own account of its time (diagnostics only)."""
        try:
            pid = peer_pid(self.chan.sock, self.chan.deadline) if self.watch_wanted else None
        finally:
            self._pass_creds(False)  # later messages may carry fds (channel.py's regions)
        reply, _ = self._reply(allow_infra=True)
        if pid is not None and quiet.proc_stat(pid) is not None:
            self.pid = pid
            if "watch" in quiet.thread_checks():  # KGYM_THREAD_CHECKS, for tests
                self.watch = quiet.ProcWatch(pid)
        a = reply.get("ahead")
        if isinstance(a, dict):
            self.ahead = {"outcome": _text(a.get("outcome"), 200), "ms": _num(a.get("ms")),
                          "kernels": _int(a.get("kernels"), 0, 1 << 20) or 0}
            if "imported" in a:
                self.ahead["imported"] = _int(a.get("imported"), 0, 1 << 20) or 0
            phases = a.get("phases_ms")
            if isinstance(phases, dict):
                self.ahead["phases_ms"] = {k: _num(phases.get(k))
                                           for k in ("fork", "start", "run", "exit")}
        ms = reply.get("ms")
        return {k: _num(v) for k, v in list(ms.items())[:8] if isinstance(k, str) and len(k) < 32} \
            if isinstance(ms, dict) else {}

    def close(self) -> None:
        """Stop the watch's thread (idempotent)."""
        if self.watch is not None:
            self.watch.close()

    def run(self, inputs: list, mode: str, grad: bool, guard: bool = False,
            ablate: bool = False, only: set[str] | None = None) -> RunReply:
        """One forward call; with guard, the candidate's guard report too;
        with ablate, the ablation forward (guards.Ablation) and its report,
        of the calls of the launch names in only when given."""
        tensors: list[torch.Tensor] = []
        desc = pack(list(inputs), tensors)
        header = {"cmd": "run", "mode": mode, "grad": grad, "guard": guard and not ablate,
                  "args": desc}
        if ablate:
            header["ablate"] = True
            if only is not None:
                header["ablate_only"] = sorted(only)
        reply, out = self._call(header, tensors)
        r = RunReply(launches=_launches(reply.get("launches")))
        problem = reply.get("output_problem")
        if problem is not None:
            r.problem = _text(problem, MAX_TEXT) or "bad output"
            r.lazy = reply.get("output_lazy") is True
            return r
        r.output = unpack(reply.get("output"), out)
        if ablate:
            a = reply.get("ablation")
            if not isinstance(a, dict):
                raise ProtocolError("ablation run without its report")
            r.ablation = {k: _int(a.get(k), 0, 1 << 30) or 0
                          for k in ("calls", "poisoned", "unresolved")}
        elif guard:
            r.aliases, r.inputs, r.quiet = _guard(reply.get("guard"), len(inputs))
        ms = reply.get("ms")
        if isinstance(ms, dict):  # the candidate's own account: diagnostics only
            r.ms = {k: _num(ms.get(k)) for k in ("prepare", "forward", "output", "guard")}
        return r

    def time(self, n_warmup: int, n_iter: int, seed: int, start: int = 0,
             warmup_ms: float = 0.0, timed_start: int | None = None, spots: int = 0,
             reserve: tuple[int, int] = (0, 0)) -> dict:
        """One timing command. reserve: (timed calls, spot checks) of the
        phase to come, whose memory a warm-up only leaves cached."""
        reply, _ = self._call({"cmd": "time", "n_warmup": n_warmup, "n_iter": n_iter,
                               "seed": seed, "start": start, "warmup_ms": warmup_ms,
                               "timed_start": start + n_warmup if timed_start is None
                               else timed_start, "spots": spots,
                               "reserve": reserve[0], "reserve_spots": reserve[1]})
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
                "l2": _l2(t.get("l2")),
                # diagnostics only (the lead decides nothing the judge trusts)
                "lead_us": _num(t.get("lead_us") or 0.0),
                "lead_short": _int(t.get("lead_short"), 0, 1 << 20) or 0,
                "lead_fit": t.get("lead_fit") if t.get("lead_fit") in lead.STATES else None,
                "host_ms": _host_ms(t.get("host_ms")),
                "reserved": _int(t.get("reserved"), 0, 1 << 50) or 0,
                "launches": _launches(reply.get("launches"))}

    def wall_draw(self, k: int, seed: int) -> None:
        """Draw a wall block's k input sets (candidate.cmd_wall; the CPU's)."""
        self._call({"cmd": "wall", "draw": k, "seed": seed})

    def wall(self, k: int, seed: int, print_seed: int) -> list:
        """One wall block of k calls (candidate.cmd_wall): the prints, one
        row per call (checked by the caller against the reference's)."""
        reply, _ = self._call({"cmd": "wall", "k": k, "seed": seed, "print_seed": print_seed})
        prints = reply.get("prints")
        if not isinstance(prints, list) or len(prints) != k:
            raise ProtocolError("bad wall-block report")
        # its own clock over the block: a claim, kept as a diagnostic only
        ms = reply.get("block_ms")
        self.wall_claim = None
        if isinstance(ms, dict):
            vals = [ms.get(key) for key in ("calls", "handler")]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   and 0 <= v < 1e9 for v in vals):
                self.wall_claim = {"calls": float(vals[0]), "handler": float(vals[1])}
        return prints

    def spots(self, k: int, seed: int, sample: int) -> list[tuple[int, Any, str | None]]:
        """The timed outputs the candidate kept for the spot checks:
        (input index, (samples, meta) or None, problem or None), at most k,
        indices distinct (the judge checks they are timed ones). samples:
        `sample` elements of each output tensor at positions drawn from
        seed (compare.sample_output); meta: each tensor's shape and dtype."""
        reply, out = self._call({"cmd": "spots", "seed": seed, "sample": sample})
        items = reply.get("spots")
        if not isinstance(items, list) or len(items) > k:
            raise ProtocolError("bad spot-check report")
        got: list[tuple[int, Any, str | None]] = []
        for it in items:
            index = _int(it.get("index"), 0, 1 << 40) if isinstance(it, dict) else None
            if index is None or any(index == g[0] for g in got):
                raise ProtocolError("bad spot-check index")
            if "problem" in it:
                got.append((index, None, _text(it.get("problem"), MAX_TEXT) or "bad output"))
            else:
                samples = unpack(it.get("output"), out)
                meta = it.get("meta")
                if not isinstance(samples, list) or not isinstance(meta, list) \
                        or len(meta) != len(samples) or not all(
                            isinstance(m, dict) and isinstance(m.get("shape"), list)
                            and isinstance(m.get("dtype"), str) for m in meta):
                    raise ProtocolError("bad spot-check sample")
                got.append((index, (samples, meta), None))
        return got

    def profile(self, n_iter: int, seed: int) -> Any:
        reply, _ = self._call({"cmd": "profile", "n_iter": n_iter, "seed": seed})
        return reply.get("profile")

    def exit(self) -> None:
        self.chan.send({"cmd": "exit"})
        self.chan.recv()
