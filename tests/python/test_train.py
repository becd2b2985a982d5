"""kgym train (python/kgym/train.py) on a tiny random Llama built here
(tests/python/train_tiny.py; nothing downloaded): the clipped
policy-gradient loss's gradient against finite differences (float64);
TRLOO and GRPO weights on rows worked by hand; MRS (libkgym's, through
kgym.rl), PRS keep and loss_mask taking sequences out of the gradient; the
SFT mask on assistant tokens and the held-out loss; a resumed run equal to
an uninterrupted one; two gloo ranks equal to one process; bad input as
one line and exit 2 through `kgym train`."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny as T  # noqa: E402

from kgym import train  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(REPO, "build", "kgym")
REPLY = "Here is my kernel. It should be faster."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return T.make_tiny(str(tmp_path_factory.mktemp("tiny") / "m"), vocab_pad=64)


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    return T.make_tiny(str(tmp_path_factory.mktemp("tiny64") / "m"), dtype="float64",
                       arch="gpt2")


def load(path, dtype=None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"dtype": dtype} if dtype else {}
    return AutoModelForCausalLM.from_pretrained(path, **kw), AutoTokenizer.from_pretrained(path)


def items_of(tok, rows, estimator="trloo", prs=True, ids="text"):
    turns = train.read_rollout(rows)
    used, counts = train.select_turns(turns, estimator, prs)
    out = []
    for t in used:
        e = train.encode_turn(tok, t, ids == "rows", 4096)
        e["adv"] = t.advantage[estimator]
        out.append(e)
    return out, counts


def run_main(args):
    rc = train.main([str(a) for a in args])
    assert rc == 0
    return rc


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(x) for x in f]


def last_step(out):
    return os.path.join(out, f"step-{metrics(out)[-1]['step']}")


# ---- the loss --------------------------------------------------------------


def test_pg_loss_gradient_matches_finite_differences(tiny64, tmp_path):
    model, tok = load(tiny64, torch.float64)
    model.eval()  # no dropout; the loss is a function of the parameters only
    rows = [T.row("p", s, 0, REPLY * (s + 1), a, 0.0) for s, a in enumerate([1.5, -0.5, -1.0])]
    items, _ = items_of(tok, T.write_rows(str(tmp_path / "r.jsonl"), rows))
    ids, attn, mask = train.pad_batch(items, tok.pad_token_id, "cpu")
    assert mask.sum() > 0 and not mask.all()  # prompt and padding are out
    adv = torch.tensor([it["adv"] for it in items], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # old logprobs off by up to +-0.5: ratios from 0.6 to 1.6, some clipped
        old = train.token_logprobs(model, ids, attn) + (torch.rand(mask.shape, generator=g,
                                                                 dtype=torch.float64) - 0.5)
    denom = float(mask.sum())

    def loss():
        lp = train.token_logprobs(model, ids, attn)
        return train.pg_loss(lp, old, adv, mask, 0.2, 0.28, denom)

    L, frac = loss()
    assert 0.05 < float(frac) < 0.95, "both branches of the clip must be taken"
    model.zero_grad()
    L.backward()
    named = dict(model.named_parameters())
    checked = 0
    for name in ("transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                 "transformer.h.1.mlp.c_proj.weight", "lm_head.weight", "transformer.ln_f.weight"):
        p = named[name]
        flat = p.grad.reshape(-1)
        # the entries with the largest gradient, and a few others
        idx = torch.cat([flat.abs().topk(3).indices,
                         torch.randint(0, flat.numel(), (2,), generator=g)])
        for i in idx.tolist():
            h = 1e-6
            with torch.no_grad():
                orig = p.view(-1)[i].item()
                p.view(-1)[i] = orig + h
                up = float(loss()[0])
                p.view(-1)[i] = orig - h
                down = float(loss()[0])
                p.view(-1)[i] = orig
            fd = (up - down) / (2 * h)
            assert fd == pytest.approx(flat[i].item(), rel=1e-5, abs=1e-9), (name, i)
            checked += 1
    assert checked == 25
    # a non-zero gradient was checked, not only zeros
    assert max(named[n].grad.abs().max().item() for n in ("lm_head.weight",)) > 1e-4


def test_weights_trloo_grpo_by_hand(tiny, tmp_path):
    """Problem p, 3 samples x 2 turns, gamma 0.5. Rewards (turn 0, turn 1):
    s0 (3, 1), s1 (0, 2), s2 (1, not scored). Returns: s0 3.5, 1; s1 1, 2;
    s2 1, -. Turn 0 (N = 3, mean 11/6): TRLOO s0 3.5 - (1+1)/2 = 2.5,
    s1 1 - (3.5+1)/2 = -1.25, s2 -1.25; GRPO s0 3.5 - 11/6 = 5/3,
    s1 and s2 -5/6. Turn 1 (N = 2): TRLOO s0 1 - 2 = -1, s1 1;
    GRPO s0 -0.5, s1 0.5; s2 none."""
    R = {(0, 0): 3, (0, 1): 1, (1, 0): 0, (1, 1): 2, (2, 0): 1, (2, 1): None}
    rows = [T.row("p", s, t, REPLY, None, None, valid=R[s, t] is not None,
                  reward=R[s, t] if R[s, t] is not None else 0.0)
            for s in range(3) for t in range(2)]
    path = T.write_rows(str(tmp_path / "r.jsonl"), rows)
    want = {"trloo": {(0, 0): 2.5, (1, 0): -1.25, (2, 0): -1.25, (0, 1): -1.0, (1, 1): 1.0},
            "grpo": {(0, 0): 5 / 3, (1, 0): -5 / 6, (2, 0): -5 / 6, (0, 1): -0.5, (1, 1): 0.5}}
    for est in ("trloo", "grpo"):
        turns = train.read_rollout(path)
        train.recompute_advantages(turns, est, 0.5)
        got = {(t.sample, t.turn): t.advantage[est] for t in turns}
        assert got.pop((2, 1)) is None
        assert got == pytest.approx(want[est], abs=1e-12), est
    # TRLOO is GRPO scaled by N/(N-1) per turn: 3/2 at turn 0, 2 at turn 1
    for (s, t), v in want["grpo"].items():
        assert want["trloo"][s, t] == pytest.approx(v * (3 / 2 if t == 0 else 2))

    # the rows' fields are what the loss weighs by: at ratio 1 the gradient
    # is -sum_i A_i grad(sum of row i's logprobs) / tokens
    rows2 = [T.row("p", s, 0, REPLY * (s + 1), a, b)
             for s, (a, b) in enumerate([(2.5, 5 / 3), (-1.25, -5 / 6), (-1.25, -5 / 6)])]
    path2 = T.write_rows(str(tmp_path / "r2.jsonl"), rows2)
    model, tok = load(tiny)
    model.eval()
    per_row = []
    items, _ = items_of(tok, path2, "trloo")
    for it in items:
        ids, attn, mask = train.pad_batch([it], tok.pad_token_id, "cpu")
        model.zero_grad()
        (train.token_logprobs(model, ids, attn) * mask).sum().backward()
        per_row.append(model.lm_head.weight.grad.clone())
    for est in ("trloo", "grpo"):
        items, _ = items_of(tok, path2, est)
        assert [it["adv"] for it in items] == pytest.approx([r[f"advantage_{est}"] for r in rows2])
        ids, attn, mask = train.pad_batch(items, tok.pad_token_id, "cpu")
        adv = torch.tensor([it["adv"] for it in items])
        with torch.no_grad():
            old = train.token_logprobs(model, ids, attn)
        model.zero_grad()
        n = float(mask.sum())
        train.pg_loss(train.token_logprobs(model, ids, attn), old, adv, mask, 0.2, 0.2,
                      n)[0].backward()
        want_g = -sum(a * g for a, g in zip(adv.tolist(), per_row)) / n
        assert torch.allclose(model.lm_head.weight.grad, want_g, atol=1e-6), est


# ---- MRS, PRS, loss_mask ------------------------------------------------------


def rows_with_logprobs(tiny, tmp_path, shifts):
    """One row per shift function: the reply's token ids and, as the
    rollout's logprobs, this model's own logprobs of them shifted."""
    model, tok = load(tiny)
    model.eval()
    out = []
    for s, shift in enumerate(shifts):
        r = T.row("p", s, 0, REPLY, 1.0 if s % 2 == 0 else -1.0, 0.0)
        ids = tok(REPLY, add_special_tokens=False)["input_ids"]
        r["token_ids"] = ids
        t = train.read_rollout(T.write_rows(str(tmp_path / "one.jsonl"), [r]))[0]
        e = train.encode_turn(tok, t, True, 4096)
        x, attn, mask = train.pad_batch([e], tok.pad_token_id, "cpu")
        with torch.no_grad():
            lp = train.token_logprobs(model, x, attn)[0, e["start"] - 1:].double().tolist()
        r["logprobs"] = [shift(k, v) for k, v in enumerate(lp)]
        out.append(r)
    return out


def test_mrs_drops_mismatched_sequences(tiny, tmp_path):
    rows = rows_with_logprobs(tiny, tmp_path, [
        lambda k, v: v,                                  # ratio 1: kept
        lambda k, v: v + (10.0 if k == 2 else 0.0),      # one token ratio e^-10 < 1e-4: vetoed
        lambda k, v: v - 0.01,                           # geometric ratio e^0.01 > 1.001
        lambda k, v: v + (9.0 if k == 1 else 0.0) - (9.0 if k == 3 else 0.0) * 0,  # e^-9 kept by
    ])                                                   # the veto but ratio far off: dropped
    path = T.write_rows(str(tmp_path / "r.jsonl"), rows)
    out = str(tmp_path / "o")
    run_main([path, "--model", tiny, "--out", out, "--steps", "1", "--batch-size", "4",
              "--token-ids", "rows", "--lr", "1e-2"])
    m = metrics(out)[-1]
    assert m["mrs_checked"] == 4 and m["mrs_dropped"] == 3
    n_reply = len(rows[0]["token_ids"])
    assert m["tokens"] == n_reply  # only the kept sequence's tokens


def test_vetoed_prs_and_masked_turns_carry_no_gradient(tiny, tmp_path):
    vetoed = rows_with_logprobs(tiny, tmp_path, [lambda k, v: v + (10.0 if k == 0 else 0.0)] * 2)
    vetoed[1]["advantage_trloo"] = -1.0
    prs = [T.row("q", 0, 0, REPLY, 0.0, 0.0), T.row("q", 1, 0, REPLY, 1.5, 1.0, keep=False)]
    masked = [T.row("r", 0, 0, REPLY, 0.0, 0.0), T.row("r", 1, 0, REPLY, 1.5, 1.0,
                                                         loss_mask=False)]
    before = T.params(tiny)
    for name, rows, on_flag in (("mrs", vetoed, ["--token-ids", "rows"]),
                                ("prs", prs, []), ("mask", masked, [])):
        path = T.write_rows(str(tmp_path / f"{name}.jsonl"), rows)
        out = str(tmp_path / f"o-{name}")
        run_main([path, "--model", tiny, "--out", out, "--steps", "2", "--batch-size", "2",
                  "--lr", "1e-2", *on_flag])
        after = T.params(last_step(out))
        assert all(torch.equal(before[k], after[k]) for k in before), name
    # the same rows change the model when the filter is off
    for name, rows, flags in (("mrs", vetoed, ["--token-ids", "rows", "--mrs", "off"]),
                              ("prs", prs, ["--no-prs"])):
        path = T.write_rows(str(tmp_path / f"{name}.jsonl"), rows)
        out = str(tmp_path / f"o-{name}-off")
        run_main([path, "--model", tiny, "--out", out, "--steps", "2", "--batch-size", "2",
                  "--lr", "1e-2", *flags])
        after = T.params(last_step(out))
        assert any(not torch.equal(before[k], after[k]) for k in before), name
    # a turn only PRS would keep: no row left, one line
    path = T.write_rows(str(tmp_path / "none.jsonl"), [prs[1]])
    with pytest.raises(train.TrainError, match="no row can carry a gradient"):
        train.run(train.parse_args([path, "--model", tiny, "--out", str(tmp_path / "x")]))


# ---- SFT ------------------------------------------------------------------


def chat(i):
    return {"messages": [{"role": "system", "content": "You write fast kernels."},
                         {"role": "user", "content": f"Write kernel {i}."},
                         {"role": "assistant", "content": f"First try {i}."},
                         {"role": "user", "content": "Verdict: fail."},
                         {"role": "assistant", "content": REPLY}],
            "trajectory_id": f"p{i}:0", "problem": f"p{i}", "sample": 0, "turn": 1}


@pytest.mark.parametrize("template", [None, "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                                      "</s>{% endfor %}{% if add_generation_prompt %}"
                                      "<|assistant|>{% endif %}"])
def test_sft_mask_is_the_assistant_tokens(tmp_path, template):
    path = T.make_tiny(str(tmp_path / "m"), chat_template=template)
    _, tok = load(path)
    c = chat(1)
    e = train.encode_chat(tok, c["messages"], 4096)
    assert len(e["ids"]) == len(e["mask"])
    masked = [i for i, m in zip(e["ids"], e["mask"]) if m]
    text = tok.decode(masked)
    if template is None:
        assert text == f"First try 1.\n{REPLY}\n</s>"
    else:
        assert text == f"First try 1.</s>{REPLY}</s>"
    unmasked = tok.decode([i for i, m in zip(e["ids"], e["mask"]) if not m])
    assert "Write kernel 1." in unmasked and "First try" not in unmasked and REPLY not in unmasked


def test_sft_trains_and_reports_held_out_loss(tiny, tmp_path):
    path = str(tmp_path / "sft.jsonl")
    with open(path, "w") as f:
        for i in range(10):
            f.write(json.dumps(chat(i)) + "\n")
    out = str(tmp_path / "o")
    run_main(["--sft", path, "--model", tiny, "--out", out, "--steps", "12", "--batch-size", "3",
              "--lr", "1e-2", "--val-frac", "0.2", "--eval-every", "4"])
    m = metrics(out)
    vals = [x["val_loss"] for x in m if x.get("val_loss") is not None]
    assert len(vals) == 3 and all(math.isfinite(v) for v in vals)
    assert vals[-1] < vals[0]  # the held-out chats share the assistant text
    assert m[-1]["loss"] < m[0]["loss"]


# ---- checkpoints, ranks ------------------------------------------------------


def test_resume_equals_uninterrupted(tiny, tmp_path):
    rows = [T.row("p", s, 0, REPLY * (1 + s % 2), a, a) for s, a in
            enumerate([1.0, -0.5, 0.25, -0.75, 0.5])]
    path = T.write_rows(str(tmp_path / "r.jsonl"), rows)
    common = [path, "--model", tiny, "--batch-size", "2", "--lr", "1e-2", "--ppo-epochs", "2"]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_main([*common, "--out", a, "--steps", "6"])
    run_main([*common, "--out", b, "--steps", "3"])
    assert os.path.isdir(os.path.join(b, "step-3"))
    run_main([*common, "--out", b, "--steps", "6", "--resume"])
    pa, pb = T.params(os.path.join(a, "step-6")), T.params(os.path.join(b, "step-6"))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert [x["loss"] for x in metrics(a)] == pytest.approx([x["loss"] for x in metrics(b)])
    p0 = T.params(tiny)
    assert any(not torch.equal(p0[k], pa[k]) for k in pa)


def test_two_gloo_ranks_equal_one_process(tiny64, tmp_path):
    """float64: Adam turns float32 rounding noise on a zero gradient into
    updates of lr/10; in float64 the two runs agree to 1e-9."""
    rows = [T.row("p", s, 0, REPLY * (1 + s), a, a) for s, a in enumerate([1.0, -1.0])]
    path = T.write_rows(str(tmp_path / "r.jsonl"), rows)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    common = ["--model", tiny64, "--steps", "3", "--lr", "1e-2", "--device", "cpu",
              "--dtype", "float64"]
    run_main([path, *common, "--out", one, "--batch-size", "2"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"),
                                                       os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2",
                          os.path.join(REPO, "python", "kgym", "train.py"),
                          path, *common, "--out", two, "--batch-size", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)  # the launcher and its ranks
            p.wait()
    assert p.returncode == 0, err[-3000:]
    pa, pb = T.params(os.path.join(one, "step-3")), T.params(os.path.join(two, "step-3"))
    for k in pa:
        assert torch.allclose(pa[k], pb[k], atol=1e-9), (k, (pa[k] - pb[k]).abs().max())
    assert [x["loss"] for x in metrics(one)] == pytest.approx([x["loss"] for x in metrics(two)],
                                                               abs=1e-9)
    assert any(not torch.equal(pa[k], T.params(tiny64)[k]) for k in pa)


# ---- bad input ---------------------------------------------------------------


@pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")
@pytest.mark.parametrize("content,msg", [
    ('{"schema": "kgym.rollout/1"\n', "line 1: not JSON"),
    ("", "no rows"),
    ("[1, 2]\n", "line 1: not a JSON object"),
    (None, 'line 2: missing field "advantage_trloo"'),
    ("bad-type", 'line 1: field "sample" has the wrong type (str)'),
])
def test_bad_input_is_one_line(tiny, tmp_path, content, msg):
    path = str(tmp_path / "r.jsonl")
    good = T.row("p", 0, 0, REPLY, 1.0, 1.0)
    if content is None:
        bad = dict(good)
        del bad["advantage_trloo"]
        T.write_rows(path, [good, bad])
    elif content == "bad-type":
        T.write_rows(path, [dict(good, sample="0")])
    else:
        with open(path, "w") as f:
            f.write(content)
    p = subprocess.run([KGYM, "train", path, "--model", tiny, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgym train: ") and msg in lines[0], p.stderr


# ---- what a run says -----------------------------------------------------------


def test_all_equal_rewards_say_no_gradient(tiny, tmp_path, capsys):
    """Rows whose rewards are all 0: the counts say how many groups had
    all-equal rewards, and each step says it has no gradient."""
    rows = [T.row(p, s, 0, REPLY, 0.0, 0.0, reward=0.0) for p in ("a", "b") for s in range(2)]
    rows += [T.row("c", 0, 0, REPLY, 0.5, 0.5, reward=1.0),
             T.row("c", 1, 0, REPLY, -0.5, -0.5, reward=0.0)]
    path = T.write_rows(str(tmp_path / "r.jsonl"), rows[:4])
    out = str(tmp_path / "o")
    run_main([path, "--model", tiny, "--out", out, "--steps", "2", "--batch-size", "4"])
    err = capsys.readouterr().err
    assert "2 groups (problem, turn): 2 with all-equal rewards" in err, err
    assert "4 of 4 used rows have advantage 0" in err, err
    assert err.count("no gradient: every sequence of the batch has advantage 0") == 2, err
    assert all(m["no_gradient"] for m in metrics(out))
    # with a group that differs: counted apart, and its steps have a gradient
    path = T.write_rows(str(tmp_path / "r2.jsonl"), rows)
    out2 = str(tmp_path / "o2")
    run_main([path, "--model", tiny, "--out", out2, "--steps", "1", "--batch-size", "6"])
    err = capsys.readouterr().err
    assert "3 groups (problem, turn): 2 with all-equal rewards" in err, err
    assert "no gradient" not in err.replace("(no gradient from them)", ""), err
    assert "no_gradient" not in metrics(out2)[0]


@pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")
def test_a_model_that_does_not_load_is_one_line(tmp_path):
    path = T.write_rows(str(tmp_path / "r.jsonl"), [T.row("p", 0, 0, REPLY, 1.0, 1.0)])
    for name in (str(tmp_path / "no-such-model"), "kgym-test/no-such-model-offline"):
        p = subprocess.run([KGYM, "train", path, "--model", name, "--out", str(tmp_path / "o")],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, HF_HUB_OFFLINE="1"))
        assert p.returncode == 2, p.stderr
        lines = [ln for ln in p.stderr.strip().splitlines()
                 if not ln.startswith("kgym train: 1 rows") and "groups (problem" not in ln]
        assert len(lines) == 1, p.stderr
        assert lines[0].startswith("kgym train: cannot load the tokenizer"), p.stderr
        assert "Traceback" not in p.stderr
