"""`kgym policy scripted DIR`: the OpenAI-compatible server that replies from
a folder of kernels per problem. Checked over HTTP (models, chat, choosing
the problem by the reference the prompt quotes, cycling, errors), then as
the policy of a real `kgym rollout` against `kgym serve` on a KernelBench
tree made from problems/cpu: an honest kernel passes, a wrong one
mismatches, a cheat is caught, a prose reply has no code, and logprobs are
absent without failing the run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from kgym_env import KGYM, ROOT, Env

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")

CPU = os.path.join(ROOT, "problems", "cpu", "level1")
SOL = os.path.join(CPU, "solutions")
GELU, SOFTMAX = "level1/1_GELU", "level1/2_RowSoftmax"
CHEAT = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n")
PROSE = "I would write an OpenMP loop over the elements, but I will not show it.\n"


def wrong_gelu() -> str:
    with open(os.path.join(SOL, "1_GELU.cpu.py")) as f:
        code = f.read()
    return code.replace("0.70710678118654752f", "0.5f").replace(
        "kgym_cpu_level1_1_GELU_cpu", "kgym_scripted_gelu_wrong")


def make_replies(base: str) -> str:
    """DIR/level1/1_GELU: a honest, b wrong, c cheat, d prose;
    DIR/level1/2_RowSoftmax: the honest kernel only."""
    d = os.path.join(base, "replies")
    g, s = os.path.join(d, GELU), os.path.join(d, SOFTMAX)
    os.makedirs(g)
    os.makedirs(s)
    shutil.copy(os.path.join(SOL, "1_GELU.cpu.py"), os.path.join(g, "a_honest.py"))
    with open(os.path.join(g, "b_wrong.py"), "w") as f:
        f.write(wrong_gelu())
    with open(os.path.join(g, "c_cheat.py"), "w") as f:
        f.write(CHEAT)
    with open(os.path.join(g, "d_prose.txt"), "w") as f:
        f.write(PROSE)
    with open(os.path.join(g, "notes.json"), "w") as f:
        f.write("{}")  # not a reply: ignored
    shutil.copy(os.path.join(SOL, "2_RowSoftmax.cpu.py"), os.path.join(s, "honest.py"))
    return d


def make_tree(base: str) -> str:
    t = os.path.join(base, "tree", "level1")
    os.makedirs(t)
    for n in ("1_GELU", "2_RowSoftmax"):
        shutil.copy(os.path.join(CPU, f"{n}.py"), t)
    return os.path.dirname(t)


class Scripted:
    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen([KGYM, "policy", "scripted", *args, "--port", "0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = self.p.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:") and self.url.endswith("/v1"), (
            self.url, self.p.stderr.read() if self.p.poll() is not None else "")

    def post(self, body: dict, headers: dict | None = None) -> tuple[int, dict]:
        req = urllib.request.Request(self.url + "/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def close(self) -> str:
        self.p.terminate()
        _, err = self.p.communicate(timeout=10)
        return err


@pytest.fixture(scope="module")
def env():
    e = Env("sqlite")
    try:
        e.start_server("--workers", "2")
        e.replies = make_replies(e.base)
        e.tree = make_tree(e.base)
        yield e
    finally:
        e.close()


def test_http_models_chat_and_problem_from_prompt(env: Env) -> None:
    pol = Scripted(env.replies, "--problems", env.tree)
    try:
        with urllib.request.urlopen(pol.url + "/models", timeout=10) as r:
            assert json.load(r)["data"][0]["id"] == "scripted"
        with open(os.path.join(CPU, "2_RowSoftmax.py")) as f:
            ref = f.read()
        prompt = f"Make this faster:\n\n```python\n{ref}\n```\n"
        st, r = pol.post({"model": "m", "messages": [{"role": "user", "content": prompt}],
                          "n": 2, "logprobs": True})
        assert st == 200, r
        with open(os.path.join(SOL, "2_RowSoftmax.cpu.py")) as f:
            want = f"```python\n{f.read()}```\n"
        assert [c["message"]["content"] for c in r["choices"]] == [want, want]
        assert "logprobs" not in r["choices"][0] and r["model"] == "m"
        assert r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] > 0
        # GELU by its reference: the files in name order, then round again
        with open(os.path.join(CPU, "1_GELU.py")) as f:
            ref = f.read()
        texts = []
        for _ in range(5):
            st, r = pol.post({"model": "m", "messages": [
                {"role": "system", "content": "x"},
                {"role": "user", "content": f"```python\n{ref}```"}]})
            assert st == 200, r
            texts.append(r["choices"][0]["message"]["content"])
        assert "0.70710678118654752f" in texts[0] and "0.5f" in texts[1], texts
        assert "functional.gelu" in texts[2] and texts[3] == PROSE and texts[4] == texts[0]
        # the X-Kgym-Tag header names the problem before the prompt does
        st, r = pol.post({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                         {"X-Kgym-Tag": json.dumps({"problem": SOFTMAX, "turn": 0,
                                                    "samples": [0]})})
        assert st == 200 and r["choices"][0]["message"]["content"] == want
        st, r = pol.post({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert st == 400 and "cannot tell this request's problem" in r["error"]["message"]
        st, r = pol.post({"model": "m", "messages": "hi"})
        assert st == 400 and "messages" in r["error"]["message"]
        st, r = pol.post({"model": "m", "messages": [], "n": 0})
        assert st == 400 and "n must be" in r["error"]["message"]
    finally:
        err = pol.close()
    assert "2 problem(s), 5 replies" in err, err


def test_bad_invocations() -> None:
    p = subprocess.run([KGYM, "policy", "scripted", "/nonexistent/replies"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "/nonexistent/replies" in p.stderr, p.stderr
    p = subprocess.run([KGYM, "policy", "scripted", ROOT + "/docs", "--pick", "x"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "--pick" in p.stderr, p.stderr
    p = subprocess.run([KGYM, "policy", "scripted", os.path.join(ROOT, "examples", "verl")],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "holds no replies" in p.stderr, p.stderr
    p = subprocess.run([KGYM, "policy"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "kgym policy scripted DIR" in p.stderr


def test_rollout_with_scripted_policy(env: Env) -> None:
    pol = Scripted(env.replies)
    out = os.path.join(env.base, "rollout.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "scripted", "--server", env.url,
             "--token-file", env.token_file, "--problems", env.tree, "--samples", "4",
             "--turns", "1", "--logprobs", "--backend", "cpu", "--num-perf-trials", "3",
             "--num-correct-trials", "2", "--out", out],
            capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr
    finally:
        pol.close()
    with open(out) as f:
        rows = {(r["problem"], r["sample"]): r for r in map(json.loads, f)}
    assert len(rows) == 8, sorted(rows)
    v = {k: (r["result"] or {}).get("verdict") for k, r in rows.items()}
    # one request of n=4 per problem: the GELU files in name order
    assert [v[GELU, s] for s in range(4)] == ["pass", "mismatch", "hacked", None], v
    assert "no fenced ```python" in rows[GELU, 3]["error"]
    assert all(v[SOFTMAX, s] == "pass" for s in range(4)), v
    assert all(r["logprobs"] is None for r in rows.values())


def test_reply_with_nul(env: Env) -> None:
    """\\u0000 in a reply is valid JSON: a NUL in the prose leaves the turn
    scored; one inside the code block fails that turn with its reason."""
    from scripted_policy import ScriptedPolicy
    with open(os.path.join(SOL, "2_RowSoftmax.cpu.py")) as f:
        code = f.read()
    prose = f"Here\x00 it is.\n\n```python\n{code}```\n"
    inside = f"```python\n{code}# \x00\n```\n"
    pol = ScriptedPolicy({"2_RowSoftmax": {0: {0: {"text": prose}},
                                           1: {0: {"text": inside}}}})
    probs = os.path.join(env.base, "nul-problems")
    os.makedirs(probs)
    shutil.copy(os.path.join(CPU, "2_RowSoftmax.py"), probs)
    out = os.path.join(env.base, "nul.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "scripted", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "2",
             "--turns", "1", "--no-group-n", "--backend", "cpu", "--num-perf-trials", "3",
             "--num-correct-trials", "2", "--out", out],
            capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    finally:
        pol.close()
    with open(out) as f:
        rows = {r["sample"]: r for r in map(json.loads, f)}
    assert "not JSON" not in (rows[0]["error"] or "") + (rows[1]["error"] or ""), rows
    assert rows[0]["result"]["verdict"] == "pass", rows[0]
    assert rows[0]["reply"] == prose.replace("\x00", "\ufffd")
    assert rows[1]["code"] is None and rows[1]["valid"], rows[1]
    assert "holds a NUL character (U+0000)" in rows[1]["error"], rows[1]


def test_rollout_checks_the_token_before_the_policy(env: Env) -> None:
    """No --token-file against a server that needs one: a clear line and
    exit 2 at start, before any chat request reaches the policy."""
    from scripted_policy import ScriptedPolicy
    pol = ScriptedPolicy({})
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "scripted", "--server", env.url,
             "--problems", env.tree, "--samples", "1", "--turns", "1", "--backend", "cpu",
             "--out", os.path.join(env.base, "no-token.jsonl")],
            capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k != "KGYM_TOKEN_FILE"})
    finally:
        pol.close()
    assert p.returncode == 2, p.stderr
    assert "refused the client token (HTTP 401" in p.stderr and "--token-file" in p.stderr
    assert pol.requests == []


def test_collect_with_scripted_teacher(env: Env) -> None:
    """kgym collect with the scripted policy as its teacher: the SFT chats
    are the trajectories whose final turn passed (the honest kernels), the
    wrong, cheating and prose replies left out."""
    pol = Scripted(env.replies)
    sft = os.path.join(env.base, "sft.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "collect", "--sft", sft, "--policy", pol.url, "--model", "scripted",
             "--server", env.url, "--token-file", env.token_file, "--problems", env.tree,
             "--samples", "4", "--turns", "1", "--backend", "cpu", "--num-perf-trials", "3",
             "--num-correct-trials", "2"],
            capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr
    finally:
        pol.close()
    with open(sft) as f:
        chats = [json.loads(x) for x in f]
    assert len(chats) == 5, [c.get("problem") for c in chats]
    for c in chats:
        reply = c["messages"][-1]["content"]
        assert c["messages"][-1]["role"] == "assistant" and "erf(v * 0.5f)" not in reply
        assert "functional.gelu" not in reply
