"""kgym.serve_lm against the toy model of scripts/tiny-model (nothing
downloaded): n choices; the sampled ids with the EOS kept; logprobs equal
to kgym.train's token_logprobs of the same ids (what MRS compares); the
text without NUL characters; a reload to another checkpoint changing the
answers; bad requests refused with 400."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from kgym import tiny_model  # noqa: E402
from kgym.train import _render, token_logprobs  # noqa: E402

MSGS = [{"role": "system", "content": "You write fast kernels."},
        {"role": "user", "content": "Write a GELU kernel in Triton."}]


def post(url: str, body) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve_lm")
    a, b = str(base / "a"), str(base / "b")
    tiny_model.build(a, "toy", seed=0)
    tiny_model.build(b, "toy", seed=1)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    log = open(base / "serve.log", "w+")
    p = subprocess.Popen([sys.executable, "-m", "kgym.serve_lm", a, "--device", "cpu",
                          "--threads", "1", "--batch-wait", "0.2"], stdout=log,
                         stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = None
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120 and p.poll() is None:
        log.seek(0)
        for line in log.read().splitlines():
            if "listening on " in line:
                url = line.split("listening on ", 1)[1].split()[0]
        if url:
            break
        time.sleep(0.2)
    try:
        assert url, open(base / "serve.log").read()
        yield url, a, b
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)


def logprobs_of(model_dir: str, msgs: list[dict], ids: list[int]) -> list[float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    m = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompt = _render(tok, msgs, add_generation_prompt=True)
    x = torch.tensor([prompt + ids])
    with torch.no_grad():
        return token_logprobs(m, x, torch.ones_like(x))[0, len(prompt) - 1:].tolist()


def test_choices_ids_and_logprobs(served) -> None:
    url, a, _ = served
    from transformers import AutoTokenizer
    eos = AutoTokenizer.from_pretrained(a).eos_token_id
    code, j = post(url + "/v1/chat/completions",
                   {"model": "tiny", "messages": MSGS, "n": 3, "max_tokens": 24,
                    "temperature": 1.0, "top_p": 1.0, "logprobs": True,
                    "return_token_ids": True, "seed": 5})
    assert code == 200, j
    assert [c["index"] for c in j["choices"]] == [0, 1, 2]
    total = 0
    for c in j["choices"]:
        ids = c["token_ids"]
        lps = [x["logprob"] for x in c["logprobs"]["content"]]
        assert len(ids) == len(lps) and 1 <= len(ids) <= 24
        assert c["finish_reason"] in ("stop", "length")
        assert (c["finish_reason"] == "length") == (len(ids) == 24 and ids[-1] != eos)
        assert "\x00" not in c["message"]["content"]
        ref = logprobs_of(a, MSGS, ids)
        assert max(abs(x - y) for x, y in zip(ref, lps)) < 1e-4, (ref, lps)
        total += len(ids)
    assert j["usage"]["completion_tokens"] == total
    # the prompt count is the chat template's rendering
    assert j["usage"]["prompt_tokens"] == len(_render(AutoTokenizer.from_pretrained(a), MSGS,
                                                      True))


def test_eos_kept(served) -> None:
    """A choice that stopped ends its ids with the EOS id, and has no other."""
    url, a, _ = served
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a)
    seen_stop = False
    for seed in range(40):
        code, j = post(url + "/v1/chat/completions",
                       {"messages": MSGS, "n": 8, "max_tokens": 200, "seed": seed,
                        "temperature": 1.0, "return_token_ids": True})
        assert code == 200, j
        for c in j["choices"]:
            assert "\x00" not in c["message"]["content"]
            if c["finish_reason"] == "stop":
                seen_stop = True
                assert c["token_ids"][-1] == tok.eos_token_id
                assert tok.eos_token_id not in c["token_ids"][:-1]
        if seen_stop:
            break
    assert seen_stop


def test_reload_and_bad_requests(served) -> None:
    url, a, b = served
    # one request at a time with a seed: the same checkpoint answers the same
    body = {"messages": MSGS, "max_tokens": 8, "seed": 3, "logprobs": True,
            "return_token_ids": True}

    def answer() -> tuple[list, list]:
        code, j = post(url + "/v1/chat/completions", body)
        assert code == 200, j
        c = j["choices"][0]
        return c["token_ids"], [x["logprob"] for x in c["logprobs"]["content"]]

    before = answer()
    code, j = post(url + "/v1/reload", {"model": b})
    assert code == 200 and j["model"] == b, j
    with urllib.request.urlopen(url + "/health") as r:
        assert json.load(r)["model"] == b
    after = answer()
    assert after != before  # another model: other logprobs (and ids)
    code, j = post(url + "/v1/reload", {"model": a})
    assert code == 200
    assert answer() == before

    for bad, why in [({"messages": []}, "messages"),
                     ({"messages": MSGS, "n": 0}, '"n"'),
                     ({"messages": MSGS, "temperature": "hot"}, '"temperature"'),
                     ({"messages": MSGS, "stop": [1]}, '"stop"'),
                     ([1, 2], "not a JSON object")]:
        code, j = post(url + "/v1/chat/completions", bad)
        assert code == 400 and why in j["error"]["message"], (bad, j)
    code, j = post(url + "/v1/reload", {"model": "/nonexistent"})
    assert code == 400, j
