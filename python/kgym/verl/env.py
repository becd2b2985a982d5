"""kgym serve as verl's environment: code extraction, per-turn scores and an
asyncio scorer that submits in batches and polls (docs/training.md).

Shared by the agent loop (kgym.verl.agent_loop) and the reward manager
(kgym.verl.reward). Everything here follows the C agent (src/agent/):

- ``extract_code`` is kg_extract_code (src/agent/prompt.c): the body of the
  reply's last ```python / ```py block, which must define ``class
  ModelNew`` and be closed; else None and the reason the next prompt gives.
- ``score`` is rollout_score.c's classify + kg_rl_reward through libkgym
  (kgym.rl): valid = completed and not infra_error/problem_error; correct =
  pass with correctness and a speedup; hacked = hacked, decoy_kernel or any
  hack_reasons; coverage = profile.coverage clipped to [0, 1] (0 absent).
  The paper's reward is R = C + C*min(s, 3) + C*PR (w_pr 1).
- A result that is not the policy's doing (infra_error, problem_error, a
  task the server refused, no result in time, a server that cannot be
  reached or answers garbage) raises ``KgymEnvError``: verl must not score
  it as the policy's fault (0); what the callers do with it is in their
  docstrings.

No verl import here: the module runs in either venv.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import os
import re
import time
from typing import Any, Optional

from kgym import rl
from kgym.client import Client, KgymError, KgymUnavailable
from kgym_harness.schema import MAX_KERNEL_CODE  # libkgym's one schema

_OPEN = re.compile(r"[ \t]*```[ ]*(python|py)(?![A-Za-z0-9])", re.IGNORECASE)
_CLOSE = re.compile(r"[ \t]*```")
_MODELNEW = re.compile(r"(?m)^class ModelNew[(: ]")


class KgymEnvError(RuntimeError):
    """The environment, not the policy, failed a turn. kind is one of
    unreachable, malformed, refused, timeout, lost (a task the server
    does not know), cancelled, infra_error, problem_error."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"kgym {kind}: {message}")


def extract_code(reply: str) -> tuple[Optional[str], str]:
    """(code, "") or (None, why): kg_extract_code's rules."""
    body = opened = None
    lines = (reply or "").split("\n")
    pos = 0
    for line in lines:
        nxt = pos + len(line) + 1
        if opened is not None and _CLOSE.match(line):
            body, opened = (opened, pos), None
        elif opened is None and _OPEN.match(line):
            opened = min(nxt, len(reply))
        pos = nxt
    if opened is not None and (body is None or opened > body[0]):
        return None, ("the last ```python block of your reply is not closed with ``` "
                      "(was the reply cut off?)")
    if body is None:
        return None, "your reply has no fenced ```python code block"
    code = reply[body[0]:body[1]]
    if len(code.encode()) > MAX_KERNEL_CODE:
        return None, "the code of your last ```python block is over the 256 KiB limit"
    if not _MODELNEW.search(code):
        return None, "the last ```python block of your reply defines no `class ModelNew`"
    return code, ""


def no_code_feedback(why: str) -> str:
    """What the next turn is told when a reply had no code (rollout_turn.c)."""
    return (f"Your program was not evaluated: {why}. Answer with the complete program "
            "as one fenced ```python block that defines `class ModelNew`.")


def feedback_text(result: dict) -> str:
    """The result's feedback, else "Verdict: V" (rollout_turn.c)."""
    fb = result.get("feedback")
    if isinstance(fb, str) and fb:
        return fb
    return f"Verdict: {result.get('verdict') or 'unknown'}"


@dataclasses.dataclass
class RewardCfg:
    """libkgym's reward (docs/rl.md) and PRS settings; the paper's: w_pr 1."""
    cap: float = 3.0
    w_pr: float = 1.0
    penalty: float = 0.0
    prs_tau: float = rl.DEFAULT_TAU
    prs_s: float = rl.DEFAULT_S

    @classmethod
    def from_mapping(cls, m: Any) -> "RewardCfg":
        m = dict(m or {})
        return cls(**{f.name: float(m[f.name]) for f in dataclasses.fields(cls)
                      if m.get(f.name) is not None})


@dataclasses.dataclass
class Score:
    """One scored turn. reward is libkgym's; keep_prob is PRS's (1 for a
    turn that is not correct: PRS is aimed at lazy correct kernels)."""
    reward: float
    correct: bool
    hacked: bool
    speedup: Optional[float]
    coverage: float
    keep_prob: float
    verdict: Optional[str]


def classify(result: Any) -> tuple[bool, bool, Optional[float], float]:
    """(correct, hacked, speedup, coverage) of a completed, valid result.
    Raises KgymEnvError when the result is not the policy's doing or is
    not a result object."""
    if not isinstance(result, dict):
        raise KgymEnvError("malformed", f"a result is not an object: {str(result)[:200]}")
    st, v = result.get("status"), result.get("verdict")
    if st in ("failed", "cancelled"):
        # failed: an infra_error on the task's last attempt (docs/design.md)
        raise KgymEnvError("infra_error" if st == "failed" else "cancelled",
                           f"task {result.get('task_id')}: {st} "
                           f"{str(result.get('error') or '')[:300]}")
    if st != "completed" or not isinstance(v, str):
        raise KgymEnvError("malformed", f"result of task {result.get('task_id')}: status {st!r}, "
                           f"verdict {v!r}")
    if v in ("infra_error", "problem_error"):
        why = result.get("error") or result.get("error_code") or ""
        raise KgymEnvError(v, f"task {result.get('task_id')}: {v} {str(why)[:300]}")
    reasons = result.get("hack_reasons")
    hacked = v == "hacked" or result.get("decoy_kernel") is True or bool(
        isinstance(reasons, list) and reasons)
    sp = result.get("speedup")
    correct = (v == "pass" and result.get("correctness") is True
               and isinstance(sp, (int, float)) and not isinstance(sp, bool) and sp >= 0)
    prof = result.get("profile")
    cov = prof.get("coverage") if isinstance(prof, dict) else None
    if not isinstance(cov, (int, float)) or isinstance(cov, bool):
        cov = result.get("time_coverage")
    cov = min(1.0, max(0.0, float(cov))) if isinstance(cov, (int, float)) and not isinstance(
        cov, bool) else 0.0
    return correct, hacked, (float(sp) if correct else None), cov


def score(result: Optional[dict], cfg: RewardCfg) -> Score:
    """A turn's score: result None is a reply without code (the penalty).
    Raises KgymEnvError for a result the policy is not to blame for."""
    if result is None:
        r = rl.reward(correct=False, hacked=False, cap=cfg.cap, w_pr=cfg.w_pr, penalty=cfg.penalty)
        return Score(float(r), False, False, None, 0.0, 1.0, None)
    correct, hacked, sp, cov = classify(result)
    r = rl.reward(correct=correct, hacked=hacked, speedup=sp, coverage=cov,
                  cap=cfg.cap, w_pr=cfg.w_pr, penalty=cfg.penalty)
    keep_prob = 1.0
    if correct:
        keep_prob = float(rl.prs([cov], tau=cfg.prs_tau, s=cfg.prs_s)["keep_prob"][0])
    return Score(float(r), correct, hacked, sp, cov, keep_prob, result.get("verdict"))


def prs_keep(scores: list[Score], cfg: RewardCfg, seed: int) -> tuple[list[float], list[bool]]:
    """PRS over one trajectory's turns, by libkgym (kg_rl_prs): a correct
    turn t is kept with probability clip((coverage - tau)/s, 0, 1), drawn
    as kg_rl_uniform(seed, t); other turns are kept (keep_prob 1), as in
    rollout_score.c."""
    if not scores:
        return [], []
    out = rl.prs([s.coverage for s in scores], tau=cfg.prs_tau, s=cfg.prs_s, seed=seed)
    probs = [float(p) if s.correct else 1.0 for s, p in zip(scores, out["keep_prob"])]
    keeps = [bool(k) if s.correct else True for s, k in zip(scores, out["keep"])]
    return probs, keeps


def seed_of(*parts: Any) -> int:
    """A 64-bit seed from parts (stable across processes, unlike hash())."""
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "little")


_task_counter = itertools.count()


class KgymScorer:
    """Evaluations through kgym serve from asyncio code: ``evaluate`` queues
    one task; the tasks queued within ``window`` seconds go out in one POST
    /evaluate/batch (at most 256), and one poller polls every task in
    flight (GET /results/{id}, every ``poll`` seconds). HTTP runs in the
    default executor with the project's client (kgym.client), one Client
    per call.

    The server not answering for ``server_wait`` seconds, a reply that is
    not what docs/api.md says, a task the batch refused and a task without
    a result after ``timeout`` seconds raise KgymEnvError from evaluate.
    """

    def __init__(self, server: Optional[str] = None, token_file: Optional[str] = None,
                 fields: Optional[dict] = None, timeout: float = 3600.0, poll: float = 0.25,
                 window: float = 0.05, server_wait: float = 120.0, max_batch: int = 256,
                 long_poll: float = 1.0):
        self.server = server or os.environ.get("KGYM_SERVER") or "http://127.0.0.1:10907"
        self.token_file = token_file or os.environ.get("KGYM_TOKEN_FILE")
        self.fields = dict(fields or {})
        self.timeout, self.poll, self.window = timeout, poll, window
        self.server_wait, self.max_batch, self.long_poll = server_wait, max_batch, long_poll
        self._per_task = False  # the server has no POST /results/batch
        self._queue: list[tuple[dict, asyncio.Future]] = []
        self._inflight: dict[str, tuple[asyncio.Future, float]] = {}
        self._flusher: Optional[asyncio.Task] = None
        self._poller: Optional[asyncio.Task] = None
        self.batches: list[int] = []  # sizes of the batches sent, for tests and logs

    def _client(self) -> Client:
        return Client(self.server, token_file=self.token_file, timeout=30.0)

    async def _call(self, fn, what: str):
        """fn(client) in the executor, retried while the server is
        unreachable, for server_wait seconds."""
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        pause = 0.25
        while True:
            def run():
                c = self._client()
                try:
                    return fn(c)
                finally:
                    c.close()
            try:
                return await loop.run_in_executor(None, run)
            except KgymUnavailable as e:
                if time.monotonic() - t0 + pause > self.server_wait:
                    raise KgymEnvError("unreachable", f"{self.server} did not answer {what} for "
                                       f"{self.server_wait:g} s: {e}") from e
                await asyncio.sleep(pause)
                pause = min(5.0, pause * 2)
            except KgymError as e:
                raise KgymEnvError("refused", f"{self.server} refused {what}: {e}") from e

    async def evaluate(self, reference_code: str, kernel_code: str,
                       entry_point: Optional[str] = None, **fields: Any) -> dict:
        """The result object of one evaluation (docs/design.md)."""
        req = {**self.fields, **fields, "reference_code": reference_code,
               "kernel_code": kernel_code,
               "task_id": f"verl{int(time.time() * 1000)}-{os.getpid()}-{next(_task_counter)}"}
        if entry_point:
            req["entry_point"] = entry_point
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((req, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_later())
        return await fut

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.window)
        while self._queue:
            batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            try:
                await self._submit(batch)
            except Exception as e:  # noqa: BLE001  every waiter learns why
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)

    async def _submit(self, batch: list[tuple[dict, asyncio.Future]]) -> None:
        reqs = [r for r, _ in batch]
        # task_ids make a batch sent again after a lost reply answer with the
        # tasks already queued (docs/agent.md)
        reply = await self._call(lambda c: c.batch(reqs), f"POST /evaluate/batch ({len(reqs)})")
        self.batches.append(len(reqs))
        tasks = reply.get("tasks") if isinstance(reply, dict) else None
        if not isinstance(tasks, list) or len(tasks) != len(reqs):
            raise KgymEnvError("malformed", f"POST /evaluate/batch answered {str(reply)[:300]}")
        now = time.monotonic()
        for (req, fut), t in zip(batch, tasks):
            if not isinstance(t, dict):
                fut.set_exception(KgymEnvError("malformed", f"batch entry {str(t)[:200]}"))
            elif t.get("error") is not None or t.get("status_code") not in (None, 200, 202):
                fut.set_exception(KgymEnvError("refused", f"task {req['task_id']}: "
                                               f"{str(t.get('error'))[:300]}"))
            elif isinstance(t.get("result"), dict):
                fut.set_result(t["result"])
            elif not isinstance(t.get("task_id"), str):
                fut.set_exception(KgymEnvError("malformed", f"batch entry without task_id: "
                                               f"{str(t)[:200]}"))
            else:
                self._inflight[t["task_id"]] = (fut, now)
        if self._inflight and (self._poller is None or self._poller.done()):
            self._poller = asyncio.ensure_future(self._poll())

    def _round(self, c: Client, ids: list[str]) -> dict[str, Any]:
        """One poll of ids: {task_id: result} for those finished. POST
        /results/batch (a long poll of at most ``long_poll`` seconds while
        one chunk of ids is all there is; at most 1,000 ids a request);
        GET /results/{id} of each on a server without it (405)."""
        if not self._per_task:
            out: dict[str, Any] = {}
            try:
                for chunk, b in c.results_chunked(ids, wait_s=self.long_poll):
                    if not isinstance(b, dict) or not isinstance(b.get("results"), list) \
                            or not isinstance(b.get("unknown", []), list):
                        return {"": KgymEnvError("malformed", "POST /results/batch answered "
                                                 f"{str(b)[:300]}")}
                    for r in b["results"]:
                        if not isinstance(r, dict) or r.get("task_id") not in chunk:
                            return {"": KgymEnvError("malformed", "POST /results/batch: a result "
                                                     f"that is not one asked for: {str(r)[:200]}")}
                        out[r["task_id"]] = r
                    for tid in b.get("unknown", []):
                        out[tid] = KgymEnvError("lost", f"kgym serve does not know task {tid}")
                return out
            except KgymError as e:
                if e.status != 405 or isinstance(e, KgymUnavailable):
                    raise
                self._per_task = True
        return {tid: r for tid in ids if (r := c.result(tid)) is not None}

    async def _poll(self) -> None:
        while self._inflight:
            ids = list(self._inflight)
            try:
                got = await self._call(lambda c: self._round(c, ids),
                                       f"POST /results/batch ({len(ids)} tasks)")
            except KgymEnvError as e:
                got = {"": e}
            if "" in got:  # the whole round failed: every task waiting on it
                for tid in ids:
                    fut, _ = self._inflight.pop(tid)
                    if not fut.done():
                        fut.set_exception(got[""])
                continue
            now = time.monotonic()
            for tid in ids:
                fut, t0 = self._inflight[tid]
                r = got.get(tid)
                if r is not None:
                    del self._inflight[tid]
                    if fut.done():
                        continue
                    if isinstance(r, Exception):
                        fut.set_exception(r)
                    elif not isinstance(r, dict):
                        fut.set_exception(KgymEnvError("malformed", f"the result of {tid} is "
                                                       f"{str(r)[:200]}"))
                    else:
                        fut.set_result(r)
                elif now - t0 > self.timeout:
                    del self._inflight[tid]
                    if not fut.done():
                        fut.set_exception(KgymEnvError("timeout", f"task {tid}: no result after "
                                                       f"{self.timeout:g} s"))
            if self._inflight and self._per_task:
                await asyncio.sleep(self.poll)
