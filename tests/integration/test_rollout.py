"""`kgym rollout` end to end: a scripted OpenAI-compatible policy
(scripted_policy.py, replaying replies written here) against a real `kgym
serve --workers 2` on the cpu backend. Two problems x 3 samples x 2 turns
cover an honest kernel, a wrong one, a cheat, a reply without code, one
without ModelNew, 429s before an answer, a reply slower than the deadline
and a malformed reply. Checked: the feedback of each turn reaches the next
prompt (in the rows and at the policy), and every reward, return, TRLOO
and GRPO advantage, keep flag and loss mask against values computed here
by hand from the rows' verdicts and speedups; then resuming, and the
one-line errors of bad input."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from kgym_env import KGYM, ROOT, Env, read
from scripted_policy import ScriptedPolicy

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")

SOL = os.path.join(ROOT, "problems", "cpu", "level1", "solutions")
GELU, SOFTMAX = "1_GELU", "2_RowSoftmax"
GAMMA = 0.5


def block(code: str, before: str = "Here is my kernel.") -> str:
    return f"{before}\n\n```python\n{code}```\n\nIt should be faster."


def honest(name: str) -> str:
    with open(os.path.join(SOL, f"{name}.cpu.py")) as f:
        return block(f.read(), "I fuse the op into one OpenMP loop.")


def wrong_gelu() -> str:
    """The honest GELU with the wrong constant: a mismatch."""
    with open(os.path.join(SOL, f"{GELU}.cpu.py")) as f:
        code = f.read()
    code = code.replace("0.70710678118654752f", "0.5f").replace(
        "kgym_cpu_level1_1_GELU_cpu", "kgym_rollout_gelu_wrong")
    return block(code, "A faster GELU with a tuned constant.")


CHEAT = block("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n",
              "PyTorch's own GELU is already optimal.")
NO_BLOCK = "I would write an OpenMP loop over the elements, but I will not show it."
NO_MODELNEW = block("import torch\n\n\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return torch.softmax(x, -1)\n")


def script() -> dict:
    return {
        GELU: {0: {0: {"text": honest(GELU)}, 1: {"text": honest(GELU)}},
               1: {0: {"text": wrong_gelu()}, 1: {"text": honest(GELU)}},
               2: {0: {"text": NO_BLOCK}, 1: {"text": CHEAT}}},
        SOFTMAX: {0: {0: {"text": honest(SOFTMAX), "status429": 2}, 1: {"malformed": True}},
                  1: {0: {"text": honest(SOFTMAX), "slow": 5}, 1: {"text": honest(SOFTMAX)}},
                  2: {0: {"text": honest(SOFTMAX)}, 1: {"text": NO_MODELNEW}}},
    }


@pytest.fixture(scope="module")
def env():
    e = Env("sqlite")
    try:
        e.start_server("--workers", "2")
        probs = os.path.join(e.base, "problems")
        os.makedirs(probs)
        for name in (GELU, SOFTMAX):
            shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{name}.py"), probs)
        with open(os.path.join(probs, "0_broken.py"), "w") as f:
            f.write("x = 1\n")
        e.problems = probs
        yield e
    finally:
        e.close()


def rollout(env: Env, policy: str, out: str, *extra: str,
            timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KGYM, "rollout", "--policy", policy, "--model", "scripted", "--server", env.url,
         "--token-file", env.token_file, "--problems", env.problems, "--samples", "3",
         "--turns", "2", "--gamma", str(GAMMA), "--seed", "7", "--logprobs",
         "--no-group-n", "--policy-deadline", "2", "--policy-backoff", "0.05",
         "--backend", "cpu", "--num-perf-trials", "5", "--num-correct-trials", "2",
         "--out", out, *extra],
        capture_output=True, text=True, timeout=timeout)


def rows_of(out: str) -> dict[tuple[str, int, int], dict]:
    with open(out) as f:
        rows = [json.loads(ln) for ln in f]
    return {(r["problem"], r["sample"], r["turn"]): r for r in rows}


def by_hand(rows: dict, only: set | None = None) -> None:
    """Every number of every row, computed here from the verdicts and
    speedups: R = 1 + min(s, 3) for a pass, 0 for any other scored turn,
    none for a turn that was not scored; reward-to-go with GAMMA; TRLOO and
    GRPO per (problem, turn) over the valid samples. only: the (problem,
    sample) pairs to check (None: all); the others count in the groups."""
    def reward(r: dict) -> float | None:
        if not r["valid"]:
            return None
        res = r["result"]
        if res and res["verdict"] == "pass":
            return 1 + min(res["speedup"], 3)
        return 0.0

    for prob in (GELU, SOFTMAX):
        R = {(s, t): reward(rows[prob, s, t]) for s in range(3) for t in range(2)}
        G = {}
        for s in range(3):
            G[s, 1] = R[s, 1]
            G[s, 0] = None if R[s, 0] is None else R[s, 0] + GAMMA * (R[s, 1] or 0)
        for t in range(2):
            V = [s for s in range(3) if G[s, t] is not None]
            mean = sum(G[s, t] for s in V) / len(V) if V else 0
            for s in range(3):
                r = rows[prob, s, t]
                if only is not None and (prob, s) not in only:
                    continue
                if G[s, t] is None:
                    assert r["reward"] is None and r["return"] is None, r
                    assert r["advantage_trloo"] is None and not r["keep"], r
                    continue
                others = [G[j, t] for j in V if j != s]
                trloo = G[s, t] - sum(others) / len(others) if others else 0
                grpo = G[s, t] - mean if len(V) > 1 else 0
                assert r["reward"] == pytest.approx(R[s, t], abs=1e-9), (prob, s, t, r)
                assert r["return"] == pytest.approx(G[s, t], abs=1e-9), (prob, s, t)
                assert r["advantage_trloo"] == pytest.approx(trloo, abs=1e-9), (prob, s, t)
                assert r["advantage_grpo"] == pytest.approx(grpo, abs=1e-9), (prob, s, t)
                # PRS: a correct turn with coverage c is kept with
                # probability clip((c - 0.3) / 0.1, 0, 1); others are kept
                res = r["result"]
                if res and res["verdict"] == "pass":
                    p = min(1.0, max(0.0, (res["coverage"] - 0.3) / 0.1))
                    assert r["keep_prob"] == pytest.approx(p), r
                else:
                    assert r["keep"] and r["keep_prob"] == 1, r
        # the loss mask: a scored turn after a success with a lower reward
        for s in range(3):
            if only is not None and (prob, s) not in only:
                continue
            r0, r1 = rows[prob, s, 0], rows[prob, s, 1]
            regress = (R[s, 0] is not None and R[s, 1] is not None
                       and r0["result"] and r0["result"]["verdict"] == "pass"
                       and R[s, 1] < R[s, 0])
            assert r1["loss_mask"] == (R[s, 1] is not None and not regress), (prob, s)


def report_by_hand(env: Env, out: str, rows: dict) -> None:
    """`kgym report` on these rows (problems of a folder: level "all"):
    Fast@p last-turn and best-of-history at each p and the hacking ratio,
    recomputed here from the rows; and the fields rollout keeps for it."""
    for r in rows.values():
        assert r["reference_backend"] == "eager"
        res = r["result"]
        if res is not None:
            assert res["eval_s"] > 0, r
            assert (res["kernel_ms"] is not None) == (res["verdict"] == "pass"), r
    d = os.path.join(env.base, "report")
    p = subprocess.run([KGYM, "report", out, "--no-html", "--out", d],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    with open(os.path.join(d, "report.json")) as f:
        turns = json.load(f)["runs"][0]["levels"]["all"]["turns"]
    trajs = sorted({k[:2] for k in rows})
    for p_ in (0.0, 1.0, 1.2, 1.5, 2.0, 3.0):
        for t in range(2):
            last = best = 0
            for tr in trajs:
                fast = [None, None]  # per turn: None when not scored
                for u in range(2):
                    r = rows[tr + (u,)]
                    if r["valid"]:
                        res = r["result"] or {}
                        fast[u] = bool(res.get("correct") and not res.get("hacked")
                                       and res["speedup"] >= p_)
                cur = next((fast[u] for u in range(t, -1, -1) if fast[u] is not None), False)
                last += cur
                best += any(fast[u] for u in range(t + 1))
            got = turns[str(t)]
            key = "%.1f" % p_
            assert got["fast_p"][key] == pytest.approx(last / len(trajs)), (p_, t)
            assert got["fast_p_best"][key] == pytest.approx(best / len(trajs)), (p_, t)
    # turn 1: the cheat among 5 scored turns (the malformed reply is not)
    assert turns["1"]["n_valid"] == 5
    assert turns["1"]["hacked"] == {"no_custom_kernel": pytest.approx(0.2)}
    assert turns["0"]["fast_p"]["0.0"] == pytest.approx(0.5)
    assert turns["1"]["fast_p_best"]["0.0"] == pytest.approx(5 / 6)


def test_rollout_feedback_rewards_and_resume(env: Env) -> None:
    pol = ScriptedPolicy(script())
    out = os.path.join(env.base, "rollout.jsonl")
    try:
        p = rollout(env, pol.url, out)
        assert p.returncode == 0, p.stderr
        assert "problem 0_broken skipped" in p.stderr and "no `class Model`" in p.stderr, p.stderr
        rows = rows_of(out)
        assert len(rows) == 12, sorted(rows)
        v = {k: (r["result"] or {}).get("verdict") for k, r in rows.items()}
        assert v[GELU, 0, 0] == v[GELU, 0, 1] == v[GELU, 1, 1] == "pass", v
        assert v[GELU, 1, 0] == "mismatch" and v[GELU, 2, 1] == "hacked", v
        assert rows[GELU, 2, 1]["result"]["hack_reasons"] == ["no_custom_kernel"]
        assert v[SOFTMAX, 0, 0] == v[SOFTMAX, 1, 1] == v[SOFTMAX, 2, 0] == "pass", v
        # feedback reaches the next prompt: the rows' messages and the policy
        r = rows[GELU, 1, 1]
        assert r["messages"][-1]["role"] == "user"
        assert "Verdict: mismatch" in r["messages"][-1]["content"]
        assert "Verdict: mismatch" in rows[GELU, 1, 0]["feedback"]
        assert r["messages"][-2] == {"role": "assistant", "content": wrong_gelu()}
        seen = [b for tag, b, _ in pol.requests
                if tag == {"problem": GELU, "turn": 1, "samples": [1]}]
        assert len(seen) == 1 and seen[0]["messages"] == r["messages"]
        assert seen[0]["logprobs"] is True and seen[0]["return_token_ids"] is True
        assert seen[0]["seed"] >= 0 and seen[0]["n"] == 1
        nb = rows[GELU, 2, 0]
        assert nb["code"] is None and nb["reward"] == 0 and nb["valid"], nb
        assert "no fenced ```python" in nb["error"]
        assert "no fenced ```python" in rows[GELU, 2, 1]["messages"][-1]["content"]
        # the first turn's prompt: the reference and what ModelNew must be
        first = rows[GELU, 0, 0]["messages"]
        assert [m["role"] for m in first] == ["system", "user"]
        assert "def get_inputs" in first[1]["content"] and "ModelNew" in first[1]["content"]
        assert "load_inline" in first[1]["content"]  # the cpu backend's hint
        # 429 twice, then the answer
        assert sum(1 for tag, _, _ in pol.requests
                   if tag == {"problem": SOFTMAX, "turn": 0, "samples": [0]}) == 3
        mal = rows[SOFTMAX, 0, 1]
        assert not mal["valid"] and "not JSON" in mal["error"] and mal["reply"] is None, mal
        slow = rows[SOFTMAX, 1, 0]
        assert not slow["valid"] and "no reply from the policy within 2 s" in slow["error"]
        # no reply: the next turn asks again with the same chat
        assert rows[SOFTMAX, 1, 1]["messages"] == slow["messages"]
        nm = rows[SOFTMAX, 2, 1]
        assert nm["code"] is None and nm["reward"] == 0 and "class ModelNew" in nm["error"]
        # token ids, logprobs and usage kept per reply
        ok = rows[GELU, 0, 0]
        assert len(ok["token_ids"]) == len(ok["logprobs"]) == len(ok["reply"].split())
        assert ok["usage"]["prompt_tokens"] > 0 and ok["usage"]["completion_tokens"] > 0
        assert ok["trajectory_id"] == f"{GELU}:0" and ok["schema"] == "kgym.rollout/1"
        by_hand(rows)
        report_by_hand(env, out, rows)

        # a rerun skips what is done: no request reaches the policy
        before = len(pol.requests)
        p = rollout(env, pol.url, out)
        assert p.returncode == 0, p.stderr
        assert "holds 6 of 6 trajectories" in p.stderr, p.stderr
        assert len(pol.requests) == before and rows_of(out) == rows

        # a trajectory lost (its rows cut off): only it is rolled out again,
        # and scored in its group with the rows that stayed
        with open(out) as f:
            lines = f.readlines()
        keep = [ln for ln in lines if json.loads(ln)["trajectory_id"] != f"{SOFTMAX}:2"]
        with open(out, "w") as f:
            f.writelines(keep[:-1])
            f.write(keep[-1][:-20])  # and a cut last line
        p = rollout(env, pol.url, out)
        assert p.returncode == 0, p.stderr
        assert "last line was cut off" in p.stderr, p.stderr
        again = [tag for tag, _, _ in pol.requests[before:]]
        lost = json.loads(keep[-1])
        assert {(t["problem"], t["samples"][0]) for t in again} == {
            (SOFTMAX, 2), (lost["problem"], lost["sample"])}, again
        rows2 = rows_of(out)
        assert len(rows2) == 12
        redone = {(SOFTMAX, 2), (lost["problem"], lost["sample"])}
        for k, r in rows.items():
            if k[:2] not in redone:
                assert rows2[k] == r, k
        # the same code evaluated again may time differently (identical
        # submissions in one batch are separate evaluations; the cache keeps
        # one): the new rows are checked against the group as it is now
        by_hand(rows2, only=redone)
    finally:
        pol.close()


def test_bad_input_gets_one_line(env: Env) -> None:
    out = os.path.join(env.base, "bad.jsonl")
    # an unreachable policy: found at start, before anything is sent
    p = rollout(env, "http://127.0.0.1:1", out, timeout=60)
    assert p.returncode == 1 and "policy http://127.0.0.1:1 unreachable" in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("kgym rollout: policy http://127.0.0.1:1 unreachable: "), p.stderr
    pol = ScriptedPolicy(script())
    try:
        # an unreachable server
        p = subprocess.run([KGYM, "rollout", "--policy", pol.url, "--model", "m",
                            "--server", "http://127.0.0.1:1", "--problems", env.problems,
                            "--out", out], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and "server unreachable" in p.stderr, p.stderr
        # an --out that is not ours is left alone
        with open(out, "w") as f:
            f.write('{"prompt": "not ours"}\n')
        p = rollout(env, pol.url, out, timeout=60)
        assert p.returncode == 2 and "not a kgym rollout file (line 1" in p.stderr, p.stderr
        assert read(out) == '{"prompt": "not ours"}\n'
        assert pol.requests == []
        # bad flags
        p = rollout(env, pol.url, out, "--samples", "0", timeout=60)
        assert p.returncode == 2 and "--samples" in p.stderr, p.stderr
        p = rollout(env, pol.url, out, "--backend", "fortran", timeout=60)
        assert p.returncode == 2 and "backend" in p.stderr, p.stderr
        for bad in ("window:2", "window:0,1", "window:2,1,worst", "most"):
            p = rollout(env, pol.url, out, "--context", bad, timeout=60)
            assert p.returncode == 2 and "--context" in p.stderr, (bad, p.stderr)
    finally:
        pol.close()


def test_dataset_jsonl_group_n_concurrency_and_rate(env: Env) -> None:
    """A dataset JSONL (a bad row skipped), one n=K request per problem at
    turn 0, the concurrency cap and the rate limit, the key and sampling
    fields as sent. Every reply lacks code, so nothing is evaluated."""
    with open(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py")) as f:
        ref = f.read()
    data = os.path.join(env.base, "data.jsonl")
    rows = [{"prompt": [{"role": "user", "content": "Kernel for p0, please."}],
             "reward_model": {"ground_truth": ref}, "extra_info": {"name": "p0"}},
            {"prompt": "Kernel for p1, please.", "reward_model": {"ground_truth": ref},
             "extra_info": {"name": "p1", "entry_point": "Model"}},
            {"prompt": "no reference here", "extra_info": {"name": "bad"}},
            {"reward_model": {"ground_truth": ref}, "extra_info": {"index": 3}},
            {"reward_model": {"ground_truth": ref}}]
    with open(data, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    names = ["p0", "p1", "3", "line5"]
    step = {"text": NO_BLOCK, "slow": 0.3}
    pol = ScriptedPolicy({n: {s: {0: step, 1: step} for s in range(3)} for n in names})
    out = os.path.join(env.base, "data-out.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url + "/v1/", "--model", "scripted",
             "--server", env.url, "--token-file", env.token_file, "--problems", data,
             "--samples", "3", "--turns", "2", "--dataset-prompt",
             "--policy-concurrency", "2", "--policy-rate", "10",
             "--temperature", "0.7", "--top-p", "0.9", "--max-tokens", "512",
             "--stop", "</answer>", "--stop", "END", "--backend", "cpu", "--out", out],
            capture_output=True, text=True, timeout=120,
            env=dict(os.environ, KGYM_POLICY_KEY="sk-scripted-0123456789"))
        assert p.returncode == 0, p.stderr
        assert "problem bad (" in p.stderr and "skipped: no string reward_model" in p.stderr
        tags = [t for t, _, _ in pol.requests]
        assert sorted((t["problem"], t["turn"], tuple(t["samples"])) for t in tags
                      if t["turn"] == 0) == [(n, 0, (0, 1, 2)) for n in sorted(names)]
        assert len(tags) == 4 + 12
        assert pol.max_in_flight == 2
        gaps = [b - a for a, b in zip(pol.starts, pol.starts[1:])]
        assert min(gaps) >= 0.09, gaps
        _, body, headers = pol.requests[0]
        assert headers["Authorization"] == "Bearer sk-scripted-0123456789"
        assert body["temperature"] == 0.7 and body["top_p"] == 0.9
        assert body["max_tokens"] == 512 and body["stop"] == ["</answer>", "END"]
        assert "logprobs" not in body and "seed" not in body
        got = rows_of(out)
        assert len(got) == 4 * 3 * 2
        assert got["p0", 0, 0]["messages"] == rows[0]["prompt"]
        assert [m["role"] for m in got["p1", 0, 0]["messages"]] == ["system", "user"]
        assert got["p1", 0, 0]["messages"][1]["content"] == "Kernel for p1, please."
        assert "def get_inputs" in got["3", 0, 0]["messages"][1]["content"]
        for r in got.values():
            assert r["valid"] and r["code"] is None and r["result"] is None, r
            assert r["reward"] == r["return"] == r["advantage_trloo"] == 0, r
            assert r["usage"]["choices"] == (3 if r["turn"] == 0 else 1)
            if r["turn"] == 1:
                assert "no fenced ```python" in r["messages"][-1]["content"]
    finally:
        pol.close()


@pytest.mark.parametrize("spec,restarted", [
    ("window:2,1,best", {2: [0], 4: [0]}),
    ("window:2,1,last", {2: [1], 4: [3]}),
    ("full", {}),
])
def test_context_window(env: Env, spec: str, restarted: dict) -> None:
    """--context: five turns of one sample (pass, mismatch, no code, cheat,
    no code). A window of 2 turns restarts the chat at turns 2 and 4 from
    the first prompt and the best (the pass) or the last turn before it;
    full keeps everything. The rows record which turns each chat holds,
    the best turn so far, and the prompt tokens the policy counted."""
    probs = os.path.join(env.base, "one")
    os.makedirs(probs, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
    replies = [honest(GELU), wrong_gelu(), NO_BLOCK, CHEAT, NO_BLOCK]
    pol = ScriptedPolicy({GELU: {0: {t: {"text": x} for t, x in enumerate(replies)}}})
    out = os.path.join(env.base, f"ctx-{spec.replace(':', '-').replace(',', '-')}.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "scripted", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "1",
             "--turns", "5", "--context", spec, "--backend", "cpu",
             "--num-perf-trials", "5", "--num-correct-trials", "2", "--out", out],
            capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        rows = rows_of(out)
        verdicts = [(rows[GELU, 0, t]["result"] or {}).get("verdict") for t in range(5)]
        assert verdicts == ["pass", "mismatch", None, "hacked", None], verdicts
        base = rows[GELU, 0, 0]["messages"]
        assert len(base) == 2 and rows[GELU, 0, 0]["context"] == []
        ctx: list[int] = []
        for t in range(5):
            r = rows[GELU, 0, t]
            ctx = restarted.get(t, ctx)
            assert r["context"] == ctx, (t, r["context"])
            want = list(base)
            for s in ctx:
                want += [{"role": "assistant", "content": replies[s]},
                         {"role": "user", "content": rows[GELU, 0, s]["feedback"]}]
            # the feedback message is the refinement template around it
            got = r["messages"]
            assert len(got) == len(want), (t, len(got))
            for g, w in zip(got, want):
                assert g["role"] == w["role"] and w["content"] in g["content"], t
            assert r["best_turn"] == 0, r
            ctx = ctx + [t]
        tokens = [rows[GELU, 0, t]["usage"]["prompt_tokens"] for t in range(5)]
        if spec == "full":
            assert tokens == sorted(tokens) and len(set(tokens)) == 5, tokens
        else:
            assert tokens[4] < tokens[3], tokens  # the chat shrank at the restart
        assert "Verdict: mismatch" in rows[GELU, 0, 1]["feedback"]
    finally:
        pol.close()


def test_collect_sft(env: Env) -> None:
    """kgym collect: a rollout, then one SFT chat per trajectory whose final
    (or, with --filter best, best) turn is correct and not hacked; a rerun
    resumes the rollout and sends nothing."""
    probs = os.path.join(env.base, "one-c")
    os.makedirs(probs, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
    pol = ScriptedPolicy({GELU: {0: {0: {"text": wrong_gelu()}, 1: {"text": honest(GELU)}},
                                 1: {0: {"text": honest(GELU)}, 1: {"text": CHEAT}}}})
    sft = os.path.join(env.base, "sft.jsonl")

    def collect(*extra: str) -> list[dict]:
        p = subprocess.run(
            [KGYM, "collect", "--policy", pol.url, "--model", "teacher", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "2",
             "--turns", "2", "--backend", "cpu", "--num-perf-trials", "5",
             "--num-correct-trials", "2", "--sft", sft, *extra],
            capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert "kgym collect: " in p.stderr
        with open(sft) as f:
            return [json.loads(ln) for ln in f]

    try:
        lines = collect()
        assert os.path.exists(sft + ".rollout.jsonl")
        assert [(ln["sample"], ln["turn"]) for ln in lines] == [(0, 1)], lines
        ln = lines[0]
        rows = rows_of(sft + ".rollout.jsonl")
        assert ln["messages"][:-1] == rows[GELU, 0, 1]["messages"]
        assert ln["messages"][-1] == {"role": "assistant", "content": honest(GELU)}
        assert "Verdict: mismatch" in ln["messages"][-2]["content"]
        assert ln["final"]["verdict"] == "pass" and ln["final"]["speedup"] > 0
        n = len(pol.requests)
        lines = collect("--filter", "best")
        assert len(pol.requests) == n  # resumed: nothing asked again
        assert [(ln["sample"], ln["turn"]) for ln in lines] == [(0, 1), (1, 0)], lines
        assert lines[1]["messages"][-1]["content"] == honest(GELU)
        assert len(lines[1]["messages"]) == 3  # system, user, the reply
    finally:
        pol.close()


def test_a_broken_problem_is_not_scored(env: Env) -> None:
    """A reference whose get_inputs raises loads (it looks like a problem)
    but every evaluation ends in problem_error: the problem's fault, not the
    policy's, so its turns are not scored (reward, return and advantages
    null, not kept, masked) and the next turn is told about it."""
    probs = os.path.join(env.base, "broken")
    os.makedirs(probs, exist_ok=True)
    with open(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py")) as f:
        ref = f.read()
    with open(os.path.join(probs, "9_Broken.py"), "w") as f:
        f.write(ref.replace("    return [torch.randn(ROWS, COLS)]",
                            "    raise RuntimeError('this problem is broken')"))
    pol = ScriptedPolicy({"9_Broken": {s: {t: {"text": honest(GELU)} for t in range(2)}
                                       for s in range(2)}})
    out = os.path.join(env.base, "broken.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "m", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "2",
             "--turns", "2", "--backend", "cpu", "--num-perf-trials", "5", "--out", out],
            capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        rows = rows_of(out)
        for r in rows.values():
            assert r["result"]["verdict"] == "problem_error", r["result"]
            assert not r["valid"] and r["reward"] is None and r["return"] is None, r
            assert r["advantage_trloo"] is None and r["advantage_grpo"] is None, r
            assert not r["keep"] and not r["loss_mask"] and r["best_turn"] is None, r
        assert "problem_error" in rows["9_Broken", 0, 1]["messages"][-1]["content"]
    finally:
        pol.close()


def test_policy_5xx_retried_4xx_and_retries_spent(env: Env) -> None:
    """A 500 is retried; a 400 fails its turn at once with the server's
    message; 429s beyond --policy-retries fail the turn after the last
    attempt. Nothing is evaluated (no code), so this is the client alone."""
    pol = ScriptedPolicy({GELU: {
        0: {0: {"text": NO_BLOCK, "status500": 2}},
        1: {0: {"text": NO_BLOCK, "status400": "context length exceeded"}},
        2: {0: {"text": NO_BLOCK, "status429": 10}}}})
    probs = os.path.join(env.base, "one-r")
    os.makedirs(probs, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
    out = os.path.join(env.base, "retries.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "m", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "3",
             "--turns", "1", "--no-group-n", "--policy-retries", "3",
             "--policy-backoff", "0.01", "--out", out],
            capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        rows = rows_of(out)
        count = {s: sum(1 for t, _, _ in pol.requests if t["samples"] == [s]) for s in range(3)}
        assert count == {0: 3, 1: 1, 2: 4}, count
        assert rows[GELU, 0, 0]["valid"] and rows[GELU, 0, 0]["reply"] == NO_BLOCK
        r1 = rows[GELU, 1, 0]
        assert not r1["valid"] and r1["error"] == (
            "policy refused the request: HTTP 400: context length exceeded"), r1
        r2 = rows[GELU, 2, 0]
        assert not r2["valid"] and "HTTP 429 (gave up after 4 attempts)" in r2["error"], r2
        assert "policy failures 2" in p.stderr, p.stderr
    finally:
        pol.close()


def test_no_barrier_between_turns(env: Env) -> None:
    """A trajectory's next turn does not wait for its siblings: with sample
    1's first reply taking 2 s, sample 0's second request reaches the
    policy long before it."""
    pol = ScriptedPolicy({GELU: {0: {0: {"text": NO_BLOCK}, 1: {"text": NO_BLOCK}},
                                 1: {0: {"text": NO_BLOCK, "slow": 2}, 1: {"text": NO_BLOCK}}}})
    probs = os.path.join(env.base, "one-b")
    os.makedirs(probs, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "m", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "2",
             "--turns", "2", "--no-group-n", "--out", os.path.join(env.base, "nb.jsonl")],
            capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        at = {(t["samples"][0], t["turn"]): s for (t, _, _), s in zip(pol.requests, pol.starts)}
        assert at[0, 1] - at[1, 0] < 1.0, at  # not after sample 1's 2 s reply
        assert at[1, 1] - at[1, 0] >= 2.0, at
    finally:
        pol.close()


def requests_by_route(env: Env) -> dict[str, int]:
    """The server's kgym_http_requests_total, summed over codes by route."""
    c = env.client()
    code, text = c.request("GET", "/metrics")
    assert code == 200
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("kgym_http_requests_total{"):
            route = line.split('route="', 1)[1].split('"', 1)[0]
            out[route] = out.get(route, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def test_results_come_by_long_poll(env: Env) -> None:
    """The rollout asks for its results with POST /results/batch, which
    waits at the server while the policy has nothing to do: a few requests
    per evaluation, none of GET /results/{id} (which it sent for every
    task at the server every 250 ms before)."""
    with open(os.path.join(SOL, f"{GELU}.cpu.py")) as f:
        code = f.read()
    stamp = os.urandom(6).hex()  # kernels of their own: no cached answer
    pol = ScriptedPolicy({GELU: {s: {t: {"text": block(f"{code}# lp {stamp} {s} {t}\n")}
                                     for t in range(2)} for s in range(3)}})
    probs = os.path.join(env.base, "one-lp")
    os.makedirs(probs, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
    out = os.path.join(env.base, "lp.jsonl")
    try:
        before = requests_by_route(env)
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "m", "--server", env.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "3",
             "--turns", "2", "--no-group-n", "--backend", "cpu", "--out", out],
            capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        after = requests_by_route(env)
        rows = rows_of(out)
        assert len(rows) == 6 and all(r["result"]["verdict"] == "pass" for r in rows.values())
        got = {k: after.get(k, 0) - before.get(k, 0) for k in ("results", "results_batch")}
        print("requests during the rollout:", got)
        assert got["results"] == 0, got
        # 6 evaluations: a long poll per result that comes in, a few short
        # rounds while the policy answers (GET /results/{id} of each task
        # every 250 ms made 4 per second per task at the server)
        assert 1 <= got["results_batch"] <= 30, got
    finally:
        pol.close()


class OldServer:
    """A stub of a kgym serve from before POST /results/batch (it answers
    405 there, as the real one did): /health, /evaluate/batch, and GET
    /results/{id} answering 202 until 2 s after the submission. Counts
    the GET /results it was asked."""

    def __init__(self) -> None:
        import http.server
        import threading
        import time
        box = self
        self.submitted: dict[str, float] = {}
        self.gets = 0

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    return self.send(200, {"status": "ok"})
                if self.path.startswith("/status/"):  # rollout's token check
                    return self.send(404, {"error": "no such task"})
                tid = self.path.rsplit("/", 1)[1]
                box.gets += 1
                if time.monotonic() - box.submitted[tid] < 2.0:
                    return self.send(202, {"task_id": tid, "status": "running"})
                self.send(200, {"task_id": tid, "status": "completed", "verdict": "mismatch",
                                "compiled": True, "correctness": False, "speedup": None})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/evaluate/batch":
                    return self.send(405, {"error": {"code": "method_not_allowed",
                                                     "message": "method not allowed"}})
                for t in body["tasks"]:
                    box.submitted[t["task_id"]] = time.monotonic()
                self.send(200, {"tasks": [{"task_id": t["task_id"], "status": "pending"}
                                          for t in body["tasks"]]})
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()


def test_an_older_server_is_asked_task_by_task(env: Env) -> None:
    """Against a server without POST /results/batch the rollout asks GET
    /results/{id} of each task, a round every 250 ms (not in a loop)."""
    pol = ScriptedPolicy({GELU: {s: {0: {"text": honest(GELU)}} for s in range(2)}})
    old = OldServer()
    probs = os.path.join(env.base, "one-old")
    os.makedirs(probs, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "problems", "cpu", "level1", f"{GELU}.py"), probs)
    out = os.path.join(env.base, "old.jsonl")
    try:
        p = subprocess.run(
            [KGYM, "rollout", "--policy", pol.url, "--model", "m", "--server", old.url,
             "--token-file", env.token_file, "--problems", probs, "--samples", "2",
             "--turns", "1", "--no-group-n", "--out", out],
            capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert "no POST /results/batch" in p.stderr, p.stderr
        rows = rows_of(out)
        assert [rows[GELU, s, 0]["result"]["verdict"] for s in range(2)] == ["mismatch"] * 2
        # 2 tasks done 2 s after their submission: about 9 rounds of 2
        print("GET /results asked:", old.gets)
        assert 2 <= old.gets <= 24, old.gets
    finally:
        old.close()
        pol.close()
