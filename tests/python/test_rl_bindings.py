"""kgym.rl, the ctypes bindings to libkgym's RL math.

The bindings and `kgym rl` are two front ends of one library entry point
(kg_rl_json, lib/rl_json.c, which reads and checks the input for both);
here they must print the same bytes for the same random inputs (fixed
seeds) and reject the same bad inputs with the same message. Outputs are
also checked against plain-Python formulas written independently of lib/.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from kgym import rl

REPO = Path(__file__).resolve().parents[2]
KGYM = os.environ.get("KGYM_BIN") or str(REPO / "build" / "kgym")

# Options of each subcommand: name -> flag (None: a switch, --norm-std).
OPTIONS: dict[str, dict[str, str]] = {
    "reward": {"cap": "--cap", "w_pr": "--w-pr", "penalty": "--penalty"},
    "returns": {"gamma": "--gamma"},
    "advantages": {"estimator": "--estimator", "norm_std": "--norm-std", "eps": "--eps"},
    "mrs": {"lo": "--lo", "hi": "--hi", "veto": "--veto"},
    "prs": {"tau": "--tau", "s": "--s", "seed": "--seed"},
    "fastp": {"p": "--p"},
    "select": {"w": "--w"},
}


def run_cli(sub: str, obj: dict, flags: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KGYM, "rl", sub, *flags],
        input=json.dumps(obj).encode(),
        capture_output=True,
        timeout=60,
    )


@pytest.mark.parametrize("sub,obj,flags,named", [
    ("reward", {"correct": True, "speedup": 1e308}, ["--cap", "1e400"], "cap"),
    ("reward", {"correct": True, "speedup": 2}, ["--cap", "nan"], "cap"),
    ("reward", {"correct": False}, ["--penalty", "-1e300"], "penalty"),
    ("prs", {"coverage": [0.3]}, ["--s", "0"], "s"),
    ("prs", {"coverage": [0.3]}, ["--tau", "7"], "tau"),
    ("fastp", {"attempts": []}, ["--p", ""], "--p"),
    ("fastp", {"attempts": []}, ["--p", ",,,"], "--p"),
    ("fastp", {"attempts": []}, ["--p", "-1"], '"p"'),
    ("advantages", {"returns": [[1], [2]]}, ["--eps", "-1"], "eps"),
    ("mrs", {"train_logprobs": [[0.0]], "rollout_logprobs": [[0.0]]}, ["--lo", "-5"], "lo"),
    ("returns", {"rewards": [[1]]}, ["--gamma", "2"], "gamma"),
    ("select", {"rewards": [1]}, ["--w", "0"], "w"),
])
def test_cli_refuses_out_of_range_options(sub, obj, flags, named):
    """Each option out of its range: exit 2, one line naming it."""
    p = run_cli(sub, obj, flags)
    err = p.stderr.decode()
    assert p.returncode == 2 and p.stdout == b"", (p.returncode, p.stdout, err)
    assert (f'field "{named}"' in err or named in err) and err.count("\n") == 1, err


def call_py(sub: str, obj: dict, opts: dict) -> dict:
    """The Python binding on a CLI input (obj) plus options (opts), its
    result wrapped as the subcommand prints it."""
    o = {k: obj.get(k) for k in OPTIONS[sub]}
    o.update(opts)
    if sub == "reward":
        x = rl.reward(obj, **opts)
        return {"rewards": x} if obj.get("turns") is not None else {"reward": x}
    if sub == "returns":
        return {"returns": rl.returns(obj.get("rewards"), obj.get("valid"), **o)}
    if sub == "advantages":
        return {"advantages": rl.advantages(obj.get("returns"), obj.get("valid"), **o)}
    if sub == "mrs":
        return rl.mrs(obj.get("train_logprobs"), obj.get("rollout_logprobs"), **o)
    if sub == "prs":
        return rl.prs(obj.get("coverage"), **o)
    if sub == "fastp":
        return rl.fastp(obj.get("attempts"), **o)
    if sub == "select":
        return {"selected": rl.select(obj.get("rewards"), **o)}
    raise AssertionError(sub)


def flag_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(repr(float(x)) for x in v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def split_options(sub: str, opts: dict, rng: random.Random) -> tuple[dict, list[str]]:
    """Puts each option either in the input object or on the command line."""
    fields: dict = {}
    flags: list[str] = []
    for name, v in opts.items():
        flag = OPTIONS[sub][name]
        if name == "norm_std":
            if v and rng.random() < 0.5:
                flags.append(flag)
            else:
                fields[name] = v
        elif rng.random() < 0.5:
            fields[name] = v
        elif rng.random() < 0.5:
            flags += [flag, flag_value(v)]
        else:
            flags.append(f"{flag}={flag_value(v)}")
    return fields, flags


def assert_agree(sub: str, data: dict, opts: dict, rng: random.Random) -> Any:
    """CLI and bindings give the same bytes, or the same error message."""
    fields, flags = split_options(sub, opts, rng)
    obj = {**data, **fields}
    p = run_cli(sub, obj, flags)
    try:
        py = call_py(sub, data, opts)
    except ValueError as e:
        assert p.returncode == 2, (sub, obj, flags, str(e), p.stdout)
        assert p.stderr.decode() == f"kgym rl {sub}: {e}\n"
        return None
    assert p.returncode == 0, (sub, obj, flags, p.stderr.decode())
    assert p.stdout.decode() == json.dumps(py) + "\n", (sub, obj, flags)
    return py


# ---- independent formulas ------------------------------------------------


def ref_returns(R: list, valid: list, gamma: float) -> list:
    out = []
    for r, v in zip(R, valid):
        acc, row = 0.0, [None] * len(r)
        for t in reversed(range(len(r))):
            acc = (r[t] if v[t] else 0.0) + gamma * acc
            row[t] = acc if v[t] else None
        out.append(row)
    return out


def ref_advantages(G: list, valid: list, est: str, norm_std: bool, eps: float) -> list:
    K, T = len(G), len(G[0]) if G else 0
    out = [[None] * T for _ in range(K)]
    for t in range(T):
        idx = [i for i in range(K) if valid[i][t]]
        n = len(idx)
        mean = sum(G[i][t] for i in idx) / n if n else 0.0
        std = math.sqrt(sum((G[i][t] - mean) ** 2 for i in idx) / n) if n else 0.0
        for i in idx:
            if n < 2:
                out[i][t] = 0.0
            elif est == "trloo":
                others = (sum(G[j][t] for j in idx) - G[i][t]) / (n - 1)
                out[i][t] = G[i][t] - others
            elif norm_std:
                den = std + eps
                out[i][t] = (G[i][t] - mean) / den if den > 0 else 0.0
            else:
                out[i][t] = G[i][t] - mean
    return out


def ref_reward(turn: dict, cap: float, w_pr: float, penalty: float) -> float:
    correct = turn.get("correct", turn.get("correctness"))
    hacked = bool(turn.get("hacked")) or bool(turn.get("decoy_kernel"))
    hacked = hacked or bool(turn.get("hack_reasons"))
    if not correct or hacked:
        return penalty
    cov = turn.get("coverage")
    if cov is None:
        cov = turn.get("pr")
    if cov is None:
        cov = (turn.get("profile") or {}).get("coverage")
    return 1 + min(turn["speedup"], cap) + (w_pr * cov if w_pr else 0.0)


def ref_fastp(attempts: list, ps: list) -> dict:
    turns = sorted({a["turn"] for a in attempts})
    trajs: dict = {}
    for a in attempts:
        key = (a["level"], type(a["problem"]).__name__, a["problem"], a.get("sample", 0))
        trajs.setdefault(key, {})[a["turn"]] = a

    def fast(a: dict, p: float) -> bool:
        ok = a.get("correct", a.get("correctness")) and not a.get("hacked")
        return bool(ok) and a["speedup"] >= p

    def group(rows: list) -> dict:
        S = len(rows)
        last = {p: [0.0] * len(turns) for p in ps}
        best = {p: [0.0] * len(turns) for p in ps}
        hack = []
        for ti, t in enumerate(turns):
            at = [r[t] for r in rows if t in r]
            hack.append(sum(1 for a in at if a.get("hacked")) / len(at) if at else 0.0)
            for p in ps:
                nl = nb = 0
                for r in rows:
                    seen = [r[u] for u in turns[: ti + 1] if u in r]
                    nl += bool(seen) and fast(seen[-1], p)
                    nb += any(fast(a, p) for a in seen)
                last[p][ti] = nl / S
                best[p][ti] = nb / S
        return {"last": last, "best": best, "hacking_ratio": hack, "n": S}

    levels = sorted({k[0] for k in trajs})
    return {
        "overall": group(list(trajs.values())),
        "by_level": {lv: group([r for k, r in trajs.items() if k[0] == lv]) for lv in levels},
    }


def approx_nested(x: Any) -> Any:
    if isinstance(x, float):
        return pytest.approx(x, rel=1e-9, abs=1e-12)
    if isinstance(x, list):
        return [approx_nested(v) for v in x]
    return x


# ---- random inputs ---------------------------------------------------------


def rfloat(rng: random.Random, lo: float = -5.0, hi: float = 5.0) -> float:
    k = rng.random()
    if k < 0.4:
        return rng.uniform(lo, hi)
    if k < 0.7:
        return float(rng.randint(int(lo), int(hi)))
    if k < 0.9:
        return round(rng.uniform(lo, hi), 2)
    return rng.choice([1e-7, 0.1, 1e15, 3.0, 2.01]) * rng.choice([1, -1])


def gen_returns(rng: random.Random) -> tuple[dict, dict]:
    K, T = rng.randint(1, 6), rng.randint(1, 5)
    R = [[None if rng.random() < 0.15 else rfloat(rng) for _ in range(T)] for _ in range(K)]
    data: dict = {"rewards": R}
    if rng.random() < 0.5:
        data["valid"] = [[rng.random() < 0.8 for _ in range(T)] for _ in range(K)]
    opts: dict = {}
    if rng.random() < 0.7:
        opts["gamma"] = rng.choice([0.0, 1.0, 0.5, 0.99, rng.random(), 1.5])
    return data, opts


def gen_advantages(rng: random.Random) -> tuple[dict, dict]:
    data, _ = gen_returns(rng)
    data["returns"] = data.pop("rewards")
    opts: dict = {}
    if rng.random() < 0.8:
        opts["estimator"] = rng.choice(["grpo", "trloo"])
    if rng.random() < 0.5:
        opts["norm_std"] = rng.random() < 0.7
    if rng.random() < 0.5:
        opts["eps"] = rng.choice([0.0, 1e-6, 0.1])
    return data, opts


def gen_turn(rng: random.Random, need_cov: bool) -> dict:
    correct = rng.random() < 0.7
    hacked = rng.random() < 0.2
    t: dict = {}
    if rng.random() < 0.7:
        t["correct"] = correct
        if rng.random() < 0.5:
            t["hacked"] = hacked
        elif hacked:
            t["decoy_kernel"] = True
    else:
        t["correctness"] = correct
        t["hack_reasons"] = ["side_stream"] if hacked else []
    if (correct and not hacked) or rng.random() < 0.5:
        t["speedup"] = rng.choice([round(rng.uniform(0, 5), 3), 1.01, 2.94, 0.0, 3.0])
    cov = rng.choice([rng.random(), 0.0, 1.0, 0.35])
    where = rng.random()
    if need_cov or rng.random() < 0.5:
        if where < 0.4:
            t["coverage"] = cov
        elif where < 0.7:
            t["pr"] = cov
        else:
            t["profile"] = {"coverage": cov, "kernels": []}
    return t


def gen_reward(rng: random.Random) -> tuple[dict, dict]:
    opts: dict = {}
    if rng.random() < 0.5:
        opts["cap"] = rng.choice([1.0, 3.0, 10.0, 2.5])
    if rng.random() < 0.5:
        opts["w_pr"] = rng.choice([0.0, 1.0])
    if rng.random() < 0.3:
        opts["penalty"] = rng.choice([0.0, -1.0, -0.5])
    need_cov = opts.get("w_pr", 0.0) != 0
    if rng.random() < 0.4:
        return gen_turn(rng, need_cov), opts
    return {"turns": [gen_turn(rng, need_cov) for _ in range(rng.randint(0, 6))]}, opts


def gen_mrs(rng: random.Random) -> tuple[dict, dict]:
    train, roll = [], []
    for _ in range(rng.randint(0, 5)):
        n = rng.randint(0, 6)
        noise = rng.choice([0.0, 1e-5, 1e-3, 1e-1])
        t = [-rng.uniform(0, 3) for _ in range(n)]
        train.append(t)
        roll.append([x + rng.gauss(0, noise) for x in t])
    opts: dict = {}
    if rng.random() < 0.3:
        opts["lo"] = rng.choice([0.99, 0.999])
    if rng.random() < 0.3:
        opts["hi"] = rng.choice([1.01, 1.001])
    if rng.random() < 0.3:
        opts["veto"] = rng.choice([0.0, 1e-4, 0.9])
    return {"train_logprobs": train, "rollout_logprobs": roll}, opts


def gen_prs(rng: random.Random) -> tuple[dict, dict]:
    n = rng.randint(0, 12)
    cov = [
        None if rng.random() < 0.15 else rng.choice([rng.random(), 0.0, 1.0, 0.35, 0.3])
        for _ in range(n)
    ]
    opts: dict = {}
    if rng.random() < 0.5:
        opts["tau"] = rng.choice([0.3, 0.0, rng.random()])
    if rng.random() < 0.5:
        opts["s"] = rng.choice([0.1, 1e-3, 0.5])
    if rng.random() < 0.6:
        opts["seed"] = rng.randrange(2**62)
    return {"coverage": cov}, opts


def gen_attempts(rng: random.Random) -> list:
    keys = set()
    out = []
    base = rng.choice([0, 1])
    for _ in range(rng.randint(0, 25)):
        key = (
            rng.randint(1, 3),
            rng.choice([0, 1, 7, "a", "b", "7"]),
            rng.randint(0, 1),
            base + rng.randint(0, 3),
        )
        if key in keys:
            continue
        keys.add(key)
        a: dict = {"level": key[0], "problem": key[1], "turn": key[3]}
        if key[2] or rng.random() < 0.5:
            a["sample"] = key[2]
        correct = rng.random() < 0.7
        hacked = rng.random() < 0.15
        a["correct"] = correct
        a["hacked"] = hacked
        a["speedup"] = (
            rng.choice([round(rng.uniform(0, 3), 2), 1.0, 1.2, 1.5, 2.0])
            if correct and not hacked or rng.random() < 0.5
            else None
        )
        out.append(a)
    return out


def gen_fastp(rng: random.Random) -> tuple[dict, dict]:
    opts: dict = {}
    if rng.random() < 0.6:
        opts["p"] = rng.sample([0.0, 0.5, 1.0, 1.2, 1.5, 2.0, 3.0], rng.randint(1, 4))
    return {"attempts": gen_attempts(rng)}, opts


def gen_select(rng: random.Random) -> tuple[dict, dict]:
    T = rng.randint(0, 9)
    data = {"rewards": [rng.choice([0.0, 1.0, 2.01, 3.94, round(rng.uniform(0, 4), 1)]) for _ in range(T)]}
    opts = {"w": rng.randint(1, 6)} if rng.random() < 0.8 else {}
    return data, opts


GENERATORS: dict[str, Callable] = {
    "reward": gen_reward,
    "returns": gen_returns,
    "advantages": gen_advantages,
    "mrs": gen_mrs,
    "prs": gen_prs,
    "fastp": gen_fastp,
    "select": gen_select,
}


@pytest.mark.parametrize("sub", sorted(GENERATORS))
def test_random_inputs_agree_with_cli(sub):
    rng = random.Random(20240917 + len(sub))
    ok = 0
    for _ in range(60):
        data, opts = GENERATORS[sub](rng)
        ok += assert_agree(sub, data, opts, rng) is not None
    assert ok >= 40  # most random cases are valid input


# ---- against independent formulas -----------------------------------------


def test_returns_and_advantages_formulas():
    rng = random.Random(7)
    for _ in range(200):
        K, T = rng.randint(1, 7), rng.randint(1, 6)
        # moderate values: sums in another order must agree to ~1e-9
        R = [
            [None if rng.random() < 0.1 else round(rng.uniform(-5, 5), 3) for _ in range(T)]
            for _ in range(K)
        ]
        given = [[rng.random() < 0.85 for _ in range(T)] for _ in range(K)]
        valid = [[g and r is not None for g, r in zip(gr, rr)] for gr, rr in zip(given, R)]
        gamma = rng.choice([0.0, 0.5, 0.9, 1.0])
        R0 = [[0.0 if x is None else x for x in row] for row in R]
        G = rl.returns(R, given, gamma)
        assert G == approx_nested(ref_returns(R0, valid, gamma))
        G0 = [[0.0 if x is None else x for x in row] for row in G]
        for est in ("grpo", "trloo"):
            for ns in (False, True):
                A = rl.advantages(G, given, estimator=est, norm_std=ns, eps=1e-6)
                ref = ref_advantages(G0, valid, est, ns, 1e-6)
                assert [[None if v is None else pytest.approx(v, rel=1e-7, abs=1e-7)
                         for v in row] for row in ref] == A


def test_reward_formula():
    rng = random.Random(11)
    for _ in range(300):
        cap = rng.choice([1.0, 3.0, 10.0])
        w_pr = rng.choice([0.0, 1.0])
        penalty = rng.choice([0.0, -1.0])
        turns = [gen_turn(rng, w_pr != 0) for _ in range(5)]
        got = rl.reward(turns, cap=cap, w_pr=w_pr, penalty=penalty)
        want = [ref_reward(t, cap, w_pr, penalty) for t in turns]
        assert got == approx_nested(want)


def test_mrs_formula():
    rng = random.Random(13)
    for _ in range(100):
        data, _ = gen_mrs(rng)
        out = rl.mrs(data["train_logprobs"], data["rollout_logprobs"])
        for s, (t, r) in enumerate(zip(data["train_logprobs"], data["rollout_logprobs"])):
            d = [a - b for a, b in zip(t, r)]
            ratio = math.exp(sum(d) / len(d)) if d else 1.0
            keep = 0.999 <= ratio <= 1.001 and all(math.exp(x) >= 1e-4 for x in d)
            assert out["ratio"][s] == pytest.approx(ratio, rel=1e-12)
            assert out["keep"][s] == keep


def test_prs_formula_and_rate():
    cov = [i / 1000 for i in range(1001)] * 5
    out = rl.prs(cov, tau=0.3, s=0.1, seed=99)
    for c, p in zip(cov, out["keep_prob"]):
        assert p == pytest.approx(min(max((c - 0.3) / 0.1, 0.0), 1.0), abs=1e-12)
    for c, p, k in zip(cov, out["keep_prob"], out["keep"]):
        if p == 0.0:
            assert not k
        if p == 1.0:
            assert k
    # keep is a Bernoulli(keep_prob) draw: on the ramp about half survive
    ramp = [k for c, k in zip(cov, out["keep"]) if 0.3 < c < 0.4]
    assert 0.35 < sum(ramp) / len(ramp) < 0.65
    assert rl.prs(cov, seed=99) == out
    assert rl.prs(cov, seed=100)["keep"] != out["keep"]


def test_fastp_formula():
    rng = random.Random(17)
    for _ in range(60):
        attempts = gen_attempts(rng)
        ps = [1.0, 1.2, 1.5, 2.0]
        try:
            out = rl.fastp(attempts, p=ps)
        except ValueError:
            continue  # a correct attempt without speedup: not this test's subject
        ref = ref_fastp(attempts, ps)
        for name, got, want in [("overall", out["overall"], ref["overall"])] + [
            (lv, out["by_level"][str(lv)], g) for lv, g in ref["by_level"].items()
        ]:
            assert got["n"] == want["n"], name
            assert got["hacking_ratio"] == approx_nested(want["hacking_ratio"])
            for p in ps:
                key = rl._pkey(p)
                assert got["last"][key] == approx_nested(want["last"][p]), name
                assert got["best"][key] == approx_nested(want["best"][p]), name
        assert list(out["by_level"]) == [str(lv) for lv in sorted(ref["by_level"])]


def test_select_formula():
    rng = random.Random(19)
    for _ in range(300):
        data, _ = gen_select(rng)
        w = rng.randint(1, 6)
        r = data["rewards"]
        ranked = sorted(range(len(r)), key=lambda t: (r[t], t), reverse=True)
        assert rl.select(r, w=w) == sorted(ranked[:w])


# ---- the paper's numbers ----------------------------------------------------


def test_paper_examples():
    assert rl.reward(correct=True, speedup=1.01) == pytest.approx(2.01)
    assert rl.reward(correct=True, speedup=2.94) == pytest.approx(3.94)
    assert rl.reward({"correct": True, "speedup": 2.0, "coverage": 0.94}, w_pr=1) == (
        pytest.approx(3.94)
    )
    out = rl.prs([0.35, 0.15, 0.45], tau=0.3, s=0.1)
    assert out["keep_prob"] == pytest.approx([0.5, 0.0, 1.0])
    G = [[3]] + [[1]] * 14
    assert rl.advantages(G, estimator="trloo")[0] == [2.0]
    assert rl.advantages(G, estimator="grpo")[0] == [pytest.approx(28 / 15)]
    assert rl.advantages([[3], [1], [1]]) == [[2.0], [-1.0], [-1.0]]
    assert json.dumps({"advantages": rl.advantages([[3], [1], [1]])}) == (
        '{"advantages": [[2.0], [-1.0], [-1.0]]}'
    )


# ---- errors -------------------------------------------------------------------

ERRORS = [
    ("returns", {"rewards": [[1, 2, 3], [1, 2]]}),
    ("returns", {"rewards": [[1, "2"]]}),
    ("returns", {"rewards": [1, 2]}),
    ("returns", {"rewards": None}),
    ("returns", {"rewards": [[1]], "gamma": "0.5"}),
    ("returns", {"rewards": [[1]], "gamma": 2}),
    ("returns", {"rewards": [[1]], "valid": [[1]]}),
    ("returns", {"rewards": [[1]], "valid": [[True], [True]]}),
    ("advantages", {"returns": [[1]], "estimator": "ppo"}),
    ("advantages", {"returns": [[1]], "estimator": 3}),
    ("advantages", {"returns": [[1]], "norm_std": "yes"}),
    ("advantages", {"returns": [[1]], "eps": -1, "estimator": "grpo"}),
    ("advantages", {"returns": [[1], [2]], "valid": [[True], [True, False]]}),
    ("advantages", {"returns": [[1], 2]}),
    ("reward", {"speedup": 1.0}),
    ("reward", {"correct": "yes"}),
    ("reward", {"correct": True}),
    ("reward", {"correct": True, "speedup": -2}),
    ("reward", {"correct": True, "speedup": 1, "coverage": 1.5, "w_pr": 1}),
    ("reward", {"correct": True, "speedup": 1, "w_pr": 1}),
    ("reward", {"correct": True, "speedup": 1, "profile": 3, "w_pr": 1}),
    ("reward", {"correct": True, "speedup": 1, "hack_reasons": "x"}),
    ("reward", {"correct": True, "speedup": 1, "cap": -1}),
    ("reward", {"correct": True, "speedup": 1, "w_pr": -1}),
    ("reward", {"turns": {"correct": True}}),
    ("reward", {"turns": [{"correct": True, "speedup": 1}, 5]}),
    ("reward", {"turns": [{"correct": True, "speedup": 1}, {"correct": True}]}),
    ("mrs", {"train_logprobs": [[-1]]}),
    ("mrs", {"train_logprobs": [[-1]], "rollout_logprobs": [[-1, -2]]}),
    ("mrs", {"train_logprobs": [[-1], []], "rollout_logprobs": [[-1]]}),
    ("mrs", {"train_logprobs": [[-1, None]], "rollout_logprobs": [[-1, -2]]}),
    ("mrs", {"train_logprobs": [[-1]], "rollout_logprobs": [[-1]], "lo": 2}),
    ("mrs", {"train_logprobs": [[-1]], "rollout_logprobs": [[-1]], "veto": -1}),
    ("mrs", {"train_logprobs": [[0.0]], "rollout_logprobs": [[-1000.0]]}),
    ("prs", {"coverage": [0.5, 2]}),
    ("prs", {"coverage": [0.5, "a"]}),
    ("prs", {"coverage": 0.5}),
    ("prs", {"coverage": [0.5], "s": -1}),
    ("prs", {"coverage": [0.5], "seed": 1.5}),
    ("prs", {"coverage": [0.5], "seed": True}),
    ("reward", {"correct": True, "speedup": 1, "verdict": 3}),
    ("fastp", {"attempts": [{"level": 1, "problem": 1, "turn": 0, "verdict": False}]}),
    ("fastp", {}),
    ("fastp", {"attempts": {}}),
    ("fastp", {"attempts": [1]}),
    ("fastp", {"attempts": [{"problem": 1, "turn": 0, "correct": False}]}),
    ("fastp", {"attempts": [{"level": 1, "turn": 0, "correct": False}]}),
    ("fastp", {"attempts": [{"level": 1, "problem": 1.5, "turn": 0, "correct": False}]}),
    ("fastp", {"attempts": [{"level": 1, "problem": [], "turn": 0, "correct": False}]}),
    ("fastp", {"attempts": [{"level": "1", "problem": 1, "turn": 0, "correct": False}]}),
    ("fastp", {"attempts": [{"level": 1, "problem": 1, "turn": 0.5, "correct": False}]}),
    ("fastp", {"attempts": [{"level": 1, "problem": 1, "turn": 0, "correct": True}]}),
    ("fastp", {"attempts": [{"level": 1, "problem": 1, "turn": 0, "correct": True,
                             "speedup": -1}]}),
    ("fastp", {"attempts": [
        {"level": 1, "problem": "x", "turn": 0, "correct": False},
        {"level": 1, "problem": "x", "turn": 1, "correct": False},
        {"level": 1, "problem": 2, "turn": 1, "correct": False},
        {"level": 1, "problem": 2, "turn": 1, "correct": False},
        {"level": 1, "problem": "x", "turn": 0, "correct": False},
    ]}),
    ("fastp", {"attempts": [], "p": [1, 1.0]}),
    ("fastp", {"attempts": [], "p": [1, "2"]}),
    ("fastp", {"attempts": [], "p": 2}),
    ("select", {"rewards": [1, None]}),
    ("select", {"rewards": [1], "w": 0}),
    ("select", {"rewards": [1], "w": 2.5}),
    ("select", {"rewards": [1], "w": 99999999999}),
]


@pytest.mark.parametrize("sub,obj", ERRORS)
def test_errors_agree_with_cli(sub, obj):
    p = run_cli(sub, obj, [])
    with pytest.raises(ValueError) as e:
        call_py(sub, obj, {})
    msg = str(e.value)
    assert msg.startswith('field "'), msg
    assert p.returncode == 2
    assert p.stderr.decode() == f"kgym rl {sub}: {msg}\n"


def test_problem_error_is_not_scored_as_the_cli():
    """verdict problem_error: reward None (not the penalty), the attempt left
    out of Fast@p; the same bytes as `kgym rl`."""
    broken = {"verdict": "problem_error", "correctness": False, "speedup": None}
    assert rl.reward(broken) is None
    assert rl.reward(verdict="problem_error", penalty=-1.0) is None
    turns = [{"correct": True, "speedup": 1.5}, broken, {"correct": False}]
    assert rl.reward(turns, penalty=-1.0) == [2.5, None, -1.0]
    assert_agree("reward", {"turns": turns}, {"penalty": -1.0}, random.Random(1))
    att = {"attempts": [{"level": 1, "problem": 1, "turn": 0, "correct": True, "speedup": 2.0},
                        {"level": 1, "problem": 2, "turn": 0, **broken},
                        {"level": 2, "problem": 3, "turn": 1, **broken}]}
    got = rl.fastp(att["attempts"])
    assert got["overall"]["n"] == 1 and got["turns"] == [0] and list(got["by_level"]) == ["1"]
    assert_agree("fastp", att, {}, random.Random(2))


NAN, INF = float("nan"), float("inf")
ATTEMPT = {"level": 1, "problem": 1, "turn": 0, "correct": True}

# (subcommand, the command line's input and flags, the same call in Python):
# options as flags and as keyword arguments, non-finite numbers as the
# strings "NaN", "Infinity", "-Infinity" in JSON and as floats in Python,
# seeds beyond JSON's integers as strings of digits and as ints.
SAME_ERRORS: list[tuple[str, dict, list[str], Callable[[], Any]]] = [
    ("returns", {"rewards": [[1.0]]}, ["--gamma", "1.5"],
     lambda: rl.returns([[1.0]], gamma=1.5)),
    ("advantages", {"returns": [[1.0]]}, ["--estimator", "grpo", "--eps=-1"],
     lambda: rl.advantages([[1.0]], estimator="grpo", eps=-1)),
    ("reward", {"correct": True, "speedup": 1}, ["--cap", "-1"],
     lambda: rl.reward(correct=True, speedup=1, cap=-1)),
    ("reward", {"turns": [{"correct": True, "speedup": 2}]}, ["--w-pr", "1"],
     lambda: rl.reward([{"correct": True, "speedup": 2}], w_pr=1)),
    ("mrs", {"train_logprobs": [[-1.0]], "rollout_logprobs": [[-1.0]]},
     ["--lo", "2", "--hi", "1"], lambda: rl.mrs([[-1.0]], [[-1.0]], lo=2, hi=1)),
    ("prs", {"coverage": [0.5]}, ["--s", "-0.5"], lambda: rl.prs([0.5], s=-0.5)),
    ("select", {"rewards": [1.0]}, ["--w", "0"], lambda: rl.select([1.0], w=0)),
    ("fastp", {"attempts": [ATTEMPT]}, ["--p", "1,2"],
     lambda: rl.fastp([ATTEMPT], p=[1, 2])),
    ("returns", {"rewards": [[1.0, "NaN"]]}, [], lambda: rl.returns([[1.0, NAN]])),
    ("advantages", {"returns": [[1.0], ["-Infinity"]]}, [],
     lambda: rl.advantages([[1.0], [-INF]])),
    ("reward", {"correct": True, "speedup": "Infinity"}, [],
     lambda: rl.reward(correct=True, speedup=INF)),
    ("mrs", {"train_logprobs": [[0.0]], "rollout_logprobs": [["-Infinity"]]}, [],
     lambda: rl.mrs([[0.0]], [[-INF]])),
    ("prs", {"coverage": [0.5, "NaN"]}, [], lambda: rl.prs([0.5, NAN])),
    ("select", {"rewards": ["NaN"]}, [], lambda: rl.select([NAN])),
    ("prs", {"coverage": [0.5], "seed": -1}, [], lambda: rl.prs([0.5], seed=-1)),
    ("prs", {"coverage": [0.5], "seed": str(2**64)}, [],
     lambda: rl.prs([0.5], seed=2**64)),
    ("prs", {"coverage": [0.5], "seed": 1.5}, [], lambda: rl.prs([0.5], seed=1.5)),
]


@pytest.mark.parametrize("sub,obj,flags,call", SAME_ERRORS)
def test_one_path_same_error(sub, obj, flags, call):
    """The command line and the bindings reach the same checks in libkgym,
    so the same bad input gets the same message, naming the field."""
    p = run_cli(sub, obj, flags)
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith('field "'), msg
    assert p.returncode == 2, p.stdout
    assert p.stderr.decode() == f"kgym rl {sub}: {msg}\n"


def test_seeds_beyond_json_integers_agree():
    cov = [0.31, 0.35, 0.38] * 20
    want = run_cli("prs", {"coverage": cov}, ["--seed", str(2**64 - 1)])
    assert want.returncode == 0, want.stderr
    got = run_cli("prs", {"coverage": cov, "seed": str(2**64 - 1)}, [])
    assert got.stdout == want.stdout
    assert json.dumps(rl.prs(cov, seed=2**64 - 1)) + "\n" == want.stdout.decode()
    assert rl.prs(cov, seed=2**63) != rl.prs(cov, seed=2**63 + 1)


def test_python_only_errors():
    with pytest.raises(ValueError, match='^field "rewards": a set has no JSON form'):
        rl.returns({1, 2})
    with pytest.raises(ValueError, match='^field "turns\\[1\\].speedup": a complex'):
        rl.reward([{"correct": False}, {"correct": True, "speedup": 1j}])
    with pytest.raises(ValueError, match="^input: expected a JSON object"):
        rl.reward(3)
    with pytest.raises(TypeError):
        rl.reward({"correct": False}, speedup=1.0)
    # an invalid entry is not read, so a NaN there is fine
    assert rl.returns([[NAN]], [[False]]) == [[None]]
    # an infinite cap would let a forged speedup through: refused
    with pytest.raises(ValueError, match='^field "cap": must be a finite number'):
        rl.reward(correct=True, speedup=5.0, cap=INF)
    with pytest.raises(ValueError, match='^field "p": no value'):
        rl.fastp([], p=())


def test_python_values_accepted():
    assert rl.returns(((1, 2),), gamma=1) == [[3.0, 2.0]]
    assert rl.reward([{"correct": True, "speedup": 2}]) == [3.0]
    assert rl.reward({"turns": [{"correct": False}]}) == [0.0]
    assert rl.reward(correct=True, speedup=1.5, cap=1.0) == 2.0
    assert rl.reward({"correct": True, "speedup": 1.5, "cap": 1.0}, cap=3) == 2.5
    assert rl.select((1.0, 2.0, 0.5), w=1) == [1]
    assert rl.fastp([], p=(1,)) == {
        "p": [1.0],
        "turns": [],
        "overall": {"last": {"1": []}, "best": {"1": []}, "hacking_ratio": [], "n": 0},
        "by_level": {},
    }


def test_numpy_inputs():
    np = pytest.importorskip("numpy")
    G = np.array([[3.0], [1.0], [1.0]])
    assert rl.advantages(G) == [[2.0], [-1.0], [-1.0]]
    assert rl.advantages(G, valid=np.array([[True], [True], [False]])) == [
        [2.0],
        [-2.0],
        [None],
    ]
    assert rl.select(np.array([1.0, 3.0, 2.0]), w=np.int64(2)) == [1, 2]
    assert rl.prs(np.array([0.5, 0.2]), tau=np.float32(0.3))["keep"] == [True, False]


def test_library_location_and_version():
    import kgym

    assert rl.library_path() == os.environ.get("KGYM_LIB", rl.library_path())
    env = {k: v for k, v in os.environ.items() if k != "KGYM_LIB"}
    code = "from kgym import rl; print(rl.library_path())"
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    if (REPO / "build" / "libkgym.so").exists():
        assert p.stdout.strip() == str(REPO / "build" / "libkgym.so")
    assert rl.reward(correct=True, speedup=1.0, cap=1e6) == 2.0
    out = subprocess.run([KGYM, "version"], capture_output=True, text=True).stdout
    assert out.strip() == f"kgym {kgym.__version__}"


# ---- mutated inputs ---------------------------------------------------------

JUNK = [None, True, False, -1, 0, 1, 2.5, -0.5, 1e300, "x", "", [], [[]], {}, [1, None],
        {"a": 1}, [[1, 2], [3]], 2**53]


def mutate(x: Any, rng: random.Random) -> Any:
    """x with one value somewhere replaced, deleted or wrapped."""
    if isinstance(x, dict) and x and rng.random() < 0.8:
        k = rng.choice(sorted(x))
        y = dict(x)
        r = rng.random()
        if r < 0.2:
            del y[k]
        elif r < 0.4:
            y[k] = rng.choice(JUNK)
        else:
            y[k] = mutate(x[k], rng)
        return y
    if isinstance(x, list) and x and rng.random() < 0.8:
        i = rng.randrange(len(x))
        y = list(x)
        r = rng.random()
        if r < 0.2:
            del y[i]
        elif r < 0.4:
            y[i] = rng.choice(JUNK)
        elif r < 0.5:
            y.append(rng.choice(JUNK))
        else:
            y[i] = mutate(x[i], rng)
        return y
    return rng.choice(JUNK)


@pytest.mark.parametrize("sub", sorted(GENERATORS))
def test_mutated_inputs_agree_with_cli(sub):
    """Broken inputs: the same error (or the same output) from both."""
    rng = random.Random(4242 + len(sub))
    errors = 0
    for _ in range(80):
        data, opts = GENERATORS[sub](rng)
        obj = mutate({**data, **opts}, rng)
        if not isinstance(obj, dict):
            continue
        p = run_cli(sub, obj, [])
        try:
            py = call_py(sub, obj, {})
        except ValueError as e:
            errors += 1
            assert p.stderr.decode() == f"kgym rl {sub}: {e}\n", obj
            continue
        assert p.returncode == 0, (obj, p.stderr.decode())
        assert p.stdout.decode() == json.dumps(py) + "\n", obj
    assert errors > 0
