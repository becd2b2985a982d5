"""`kgym rollout` against a real OpenAI-compatible server from a maintained
package: `transformers serve` (transformers' serving extras: fastapi,
uvicorn, openai) serving a tiny randomly initialised Llama that the test
builds (tiny_lm.py: a BPE tokenizer trained on a few strings, a chat
template, 2 layers of hidden size 32; nothing is downloaded), with a real
`kgym serve` on the cpu backend.

What transformers serve (5.x) does with the client's fields, checked here
so a change shows up: `n` and `logprobs` are ignored with a warning (one
choice, no logprobs), `return_token_ids` is refused with 422, `seed` and
`max_tokens` are honoured, `usage` is always given. So kgym asks again,
one by one, for the samples a group request (`n: K`) got no choice for,
and `--logprobs` fails every turn against it (docs/agent.md).
The replies are gibberish: every turn scores 0 for "no code block", and
that feedback must reach the next turn's prompt."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import pytest

from kgym_env import KGYM, ROOT, Env, free_port, read, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TOKENS = 24
NO_CODE_ERR = "your reply has no fenced ```python code block"
NO_CODE = "Your program was not evaluated: your reply has no fenced ```python code block."


def _missing() -> str | None:
    if not os.access(KGYM, os.X_OK):
        return f"{KGYM} not built (make)"
    for mod in ("transformers", "fastapi", "uvicorn", "openai"):
        if importlib.util.find_spec(mod) is None:
            return f"transformers serve needs {mod} (scripts/requirements.txt)"
    return None


# CI installs scripts/requirements.txt: there a missing package fails the
# test (transformers serve does not start, its log says why), never skips it.
pytestmark = pytest.mark.skipif(_missing() is not None and os.environ.get("CI") != "true",
                                reason=str(_missing()))

# No hub, no telemetry, no update check: nothing leaves the machine.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TOKENIZERS_PARALLELISM": "false"}


class Served:
    """The tiny model in a temp dir and `transformers serve` on a free
    loopback port, pinned to it; close() kills the server by pid."""

    def __init__(self) -> None:
        self.base = tempfile.mkdtemp(prefix="real-policy-")
        self.env = dict(os.environ, HF_HOME=os.path.join(self.base, "hf"), **OFFLINE)
        self.model = os.path.join(self.base, "tiny-llama")
        self.proc: subprocess.Popen | None = None
        subprocess.run([sys.executable, os.path.join(HERE, "tiny_lm.py"), self.model],
                       env=self.env, check=True, timeout=120)
        self.log = os.path.join(self.base, "serve.log")
        for _ in range(3):  # another process may take the free port first
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "transformers.cli.transformers", "serve", self.model,
                 "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
                 "--log-level", "info"],
                stdin=subprocess.DEVNULL, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True)
            try:
                wait_for(self._up, 90, "transformers serve's /health", step=0.25)
                return
            except AssertionError:
                if "address already in use" not in read(self.log):
                    raise AssertionError(f"transformers serve did not start:\n{read(self.log)}")
                self._kill()
        raise AssertionError(f"transformers serve found no free port:\n{read(self.log)}")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"transformers serve exited {self.proc.returncode}:\n"
                                 f"{read(self.log)}")
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def chat(self, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(self.url + "/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def prompt_tokens(self, chats: list[list[dict]]) -> list[int]:
        """Each chat's length in tokens through the model's chat template."""
        p = subprocess.run([sys.executable, os.path.join(HERE, "tiny_lm.py"), "count",
                            self.model], input=json.dumps(chats), capture_output=True,
                           text=True, env=self.env, timeout=120, check=True)
        return json.loads(p.stdout)

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def close(self) -> None:
        self._kill()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def served():
    s = None
    try:
        s = Served()
        yield s
    finally:
        if s:
            s.close()


@pytest.fixture(scope="module")
def env():
    e = Env("sqlite")
    try:
        e.start_server("--workers", "1")
        probs = os.path.join(e.base, "problems")
        os.makedirs(probs)
        shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py"), probs)
        e.problems = probs
        yield e
    finally:
        e.close()


def rollout(env: Env, served: Served, out: str, *extra: str) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [KGYM, "rollout", "--policy", served.url, "--model", served.model,
         "--server", env.url, "--token-file", env.token_file, "--problems", env.problems,
         "--max-tokens", str(MAX_TOKENS), "--temperature", "1.0", "--seed", "11",
         "--policy-deadline", "60", "--backend", "cpu", "--out", out, *extra],
        capture_output=True, text=True, timeout=180)
    assert "Traceback" not in read(served.log), read(served.log)
    return p


def rows_of(out: str) -> dict[tuple[int, int], dict]:
    with open(out) as f:
        return {(r["sample"], r["turn"]): r for r in map(json.loads, f)}


def reproduce(served: Served, rows: dict) -> None:
    """Each row's reply asked again with its messages and the seed kgym
    sent (S + 1000003*problem + 1009*sample + turn) is the same text."""
    for (s, t), r in sorted(rows.items()):
        code, j = served.chat({"model": served.model, "messages": r["messages"],
                               "max_tokens": MAX_TOKENS, "temperature": 1.0,
                               "seed": 11 + 1009 * s + t})
        assert code == 200, j
        assert j["choices"][0]["message"]["content"] == r["reply"], (s, t)
        assert j["usage"]["completion_tokens"] == r["usage"]["completion_tokens"], (s, t)


def test_rollout_against_transformers_serve(env: Env, served: Served) -> None:
    """3 samples x 2 turns, one request at a time (the server's seed is
    global, so only then is a reply reproducible): every row has the
    server's reply and usage; the prompt token counts are those of the
    messages recorded; the no-code feedback of turn 0 is turn 1's last
    user message; and a reply asked again with the row's messages and
    seed is the row's reply, byte for byte."""
    out = os.path.join(env.base, "ro.jsonl")
    p = rollout(env, served, out, "--samples", "3", "--turns", "2", "--no-group-n",
                "--policy-concurrency", "1")
    assert p.returncode == 0, p.stderr
    rows = rows_of(out)
    assert sorted(rows) == [(s, t) for s in range(3) for t in range(2)]
    counts = served.prompt_tokens([rows[k]["messages"] for k in sorted(rows)])
    for k, n in zip(sorted(rows), counts):
        r = rows[k]
        assert isinstance(r["reply"], str), r
        assert r["error"] == NO_CODE_ERR, r
        assert r["finish_reason"] in ("length", "stop"), r
        u = r["usage"]
        assert u["choices"] == 1 and u["prompt_tokens"] == n, (k, u, n)
        assert 1 <= u["completion_tokens"] <= MAX_TOKENS, (k, u)
        assert (u["completion_tokens"] == MAX_TOKENS) == (r["finish_reason"] == "length"), r
        # transformers serve gives neither (nor were they asked for)
        assert r["token_ids"] is None and r["logprobs"] is None, r
        # gibberish: no code, nothing submitted, scored 0
        assert r["code"] is None and r["task_id"] is None and r["result"] is None, r
        assert r["valid"] is True and r["reward"] == 0 and r["return"] == 0, r
        assert r["advantage_trloo"] == 0 and r["advantage_grpo"] == 0, r
        assert r["feedback"].startswith(NO_CODE), r["feedback"]
    for s in range(3):
        r0, r1 = rows[s, 0], rows[s, 1]
        assert r1["messages"][:-2] == r0["messages"], s
        assert r1["messages"][-2] == {"role": "assistant", "content": r0["reply"]}, s
        assert r1["messages"][-1]["role"] == "user", s
        assert r0["feedback"] in r1["messages"][-1]["content"], s
        assert r1["usage"]["prompt_tokens"] > r0["usage"]["prompt_tokens"], s
    reproduce(served, rows)
    # rerun: every trajectory is done, nothing is asked
    before = read(served.log).count("POST /v1/chat/completions")
    p = rollout(env, served, out, "--samples", "3", "--turns", "2", "--no-group-n")
    assert p.returncode == 0, p.stderr
    assert read(served.log).count("POST /v1/chat/completions") == before


def test_group_n_and_logprobs_against_transformers_serve(env: Env, served: Served) -> None:
    """What kgym makes of the fields transformers serve does not support:
    the turn-0 request of n: 3 gets one choice, so samples 1 and 2 are
    asked again one by one (n: 1, each with its own seed); --logprobs
    sends return_token_ids, which it refuses with 422, a turn failure with
    the server's message."""
    out = os.path.join(env.base, "group.jsonl")
    posts = read(served.log).count("POST /v1/chat/completions")
    p = rollout(env, served, out, "--samples", "3", "--turns", "1",
                "--policy-concurrency", "1")
    assert p.returncode == 0, p.stderr
    assert "1 of 3 choices; asking for the other 2 one by one" in p.stderr, p.stderr
    assert read(served.log).count("POST /v1/chat/completions") == posts + 3
    assert "Ignoring unsupported fields in the request: {" in read(served.log)
    rows = rows_of(out)
    assert [rows[s, 0]["usage"]["choices"] for s in range(3)] == [3, 1, 1], rows
    for r in rows.values():
        assert isinstance(r["reply"], str) and r["error"] == NO_CODE_ERR, r
        assert r["valid"] and r["reward"] == 0, r
    reproduce(served, rows)

    out = os.path.join(env.base, "logprobs.jsonl")
    p = rollout(env, served, out, "--samples", "2", "--turns", "1", "--no-group-n",
                "--logprobs")
    assert p.returncode == 0, p.stderr
    for r in rows_of(out).values():
        assert r["reply"] is None and not r["valid"], r
        assert r["error"].startswith("policy refused the request: HTTP 422"), r
        assert "return_token_ids" in r["error"], r


def test_direct_probe_with_the_openai_client(served: Served) -> None:
    """The endpoint through the official `openai` client: /v1/models lists
    the pinned model; n: 2 and logprobs give one choice without logprobs;
    usage adds up and max_tokens holds; return_token_ids is a 422."""
    import openai
    c = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0,
                      timeout=60)
    assert [m.id for m in c.models.list().data] == [served.model]
    r = c.chat.completions.create(model=served.model, n=2, max_tokens=8, logprobs=True,
                                  messages=[{"role": "user", "content": "Write a kernel."}])
    assert len(r.choices) == 1 and r.choices[0].index == 0, r
    assert r.choices[0].logprobs is None and isinstance(r.choices[0].message.content, str), r
    u = r.usage
    assert u.prompt_tokens == served.prompt_tokens(
        [[{"role": "user", "content": "Write a kernel."}]])[0], u
    assert 1 <= u.completion_tokens <= 8 and u.total_tokens == u.prompt_tokens + \
        u.completion_tokens, u
    with pytest.raises(openai.UnprocessableEntityError) as ei:
        c.chat.completions.create(model=served.model, max_tokens=4,
                                  messages=[{"role": "user", "content": "hi"}],
                                  extra_body={"return_token_ids": True})
    assert "return_token_ids" in json.dumps(ei.value.body), ei.value.body
