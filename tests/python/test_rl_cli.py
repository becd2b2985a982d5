"""`kgym rl ...`: the command line's interface (src/cli/cmd_rl.c).

Exact output strings, the paper's worked numbers, options as flags and as
input fields, and bad input: exit 2 with one line on stderr naming the
field. Agreement with the Python bindings is in test_rl_bindings.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
KGYM = os.environ.get("KGYM_BIN") or str(REPO / "build" / "kgym")


def run(args: list[str], stdin: str | bytes) -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run(
        [KGYM, "rl", *args], input=data, capture_output=True, timeout=60
    )


def rl(sub: str, obj: Any, *flags: str) -> dict:
    """Runs a subcommand that must succeed; returns its parsed output."""
    p = run([sub, *flags], json.dumps(obj))
    assert p.returncode == 0, p.stderr.decode()
    assert p.stderr == b""
    out = p.stdout.decode()
    assert out.endswith("\n") and out.count("\n") == 1
    return json.loads(out)


def rl_fails(sub: str, stdin: str, *flags: str) -> str:
    """Runs a subcommand that must reject its input; returns the message
    (the one stderr line without the "kgym rl SUB: " prefix)."""
    p = run([sub, *flags], stdin)
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err, p.stdout)
    assert p.stdout == b""
    assert err.endswith("\n") and err.count("\n") == 1, err
    prefix = f"kgym rl {sub}: "
    assert err.startswith(prefix), err
    return err[len(prefix) : -1]


# ---- exact output ---------------------------------------------------------


def test_example_output_string():
    p = run(
        ["advantages", "--estimator", "trloo"],
        '{"returns": [[3],[1],[1]], "valid": [[true],[true],[true]]}',
    )
    assert p.returncode == 0
    assert p.stdout == b'{"advantages": [[2.0], [-1.0], [-1.0]]}\n'
    assert p.stderr == b""


def test_default_estimator_is_trloo():
    p = run(["advantages"], '{"returns": [[3],[1],[1]]}')
    assert p.stdout == b'{"advantages": [[2.0], [-1.0], [-1.0]]}\n'


def test_numbers_print_like_python_repr():
    # With gamma = 0 the returns are the rewards, so this echoes numbers.
    xs = [
        2.01, 0.1, 1.0, -3.0, 1e16, 1e15, 123456789.125, 1e-4, 1e-5, 5e-324,
        1.7976931348623157e308, 2.2250738585072014e-308, 1 / 3, 2 / 3,
        9007199254740993.0, 0.30000000000000004, 1.5e-7, 123e18, -2.5e-9,
    ]
    p = run(["returns", "--gamma", "0"], json.dumps({"rewards": [xs]}))
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode() == json.dumps({"returns": [xs]}) + "\n"


def test_random_doubles_round_trip_and_format():
    import random
    import struct

    rng = random.Random(1234)
    xs = []
    while len(xs) < 3000:
        (x,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if x == x and abs(x) != float("inf") and x != 0:
            xs.append(x)
    xs += [rng.uniform(-10, 10) for _ in range(1000)]
    xs += [round(rng.uniform(-100, 100), rng.randint(0, 6)) for _ in range(1000)]
    xs = [x for x in xs if x != 0]
    p = run(["returns", "--gamma", "0"], json.dumps({"rewards": [xs]}))
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode() == json.dumps({"returns": [xs]}) + "\n"


def test_invalid_entries_are_null():
    out = rl(
        "returns",
        {"rewards": [[1, 2, 3], [1, None, 3]], "valid": [[True, True, False], [True, True, True]]},
    )
    assert out == {"returns": [[3.0, 2.0, None], [4.0, None, 3.0]]}


# ---- the paper's numbers --------------------------------------------------


def test_paper_rewards():
    assert rl("reward", {"correct": True, "speedup": 1.01})["reward"] == pytest.approx(2.01)
    assert rl("reward", {"correct": True, "speedup": 2.94})["reward"] == pytest.approx(3.94)
    # with the profiling term: 1 + 2.0 + 0.94
    got = rl("reward", {"correct": True, "speedup": 2.0, "coverage": 0.94}, "--w-pr", "1")
    assert got["reward"] == pytest.approx(3.94)
    # capped at 3, and an incorrect or hacked turn gets the penalty
    assert rl("reward", {"correct": True, "speedup": 10})["reward"] == 4.0
    assert rl("reward", {"correct": False, "speedup": 10})["reward"] == 0.0
    # the widest cap; an infinite one is refused (a forged 1e308 would pass)
    assert rl("reward", {"correct": True, "speedup": 50}, "--cap", "1e6") == {"reward": 51.0}
    assert rl("reward", {"correct": True, "hacked": True, "speedup": 10}, "--penalty", "-1")[
        "reward"
    ] == -1.0


def test_paper_prs():
    out = rl("prs", {"coverage": [0.35, 0.15, 0.45]}, "--tau", "0.3", "--s", "0.1")
    assert out["keep_prob"] == pytest.approx([0.5, 0.0, 1.0])
    assert out["keep"][1] is False and out["keep"][2] is True


def test_paper_group_of_fifteen():
    G = [[3.0]] + [[1.0]] * 14
    trloo = rl("advantages", {"returns": G}, "--estimator", "trloo")["advantages"]
    grpo = rl("advantages", {"returns": G}, "--estimator", "grpo")["advantages"]
    assert trloo[0] == [2.0]
    assert grpo[0] == [pytest.approx(28 / 15)]
    assert trloo[1] == [pytest.approx(-1 / 7)]
    assert grpo[1] == [pytest.approx(-2 / 15)]


# ---- subcommands ----------------------------------------------------------


def test_returns_gamma_flag_and_field():
    obj = {"rewards": [[1, 1, 1]], "gamma": 0.5}
    assert rl("returns", obj)["returns"] == [[1.75, 1.5, 1.0]]
    # the flag wins over the field
    assert rl("returns", obj, "--gamma", "1")["returns"] == [[3.0, 2.0, 1.0]]
    assert rl("returns", obj, "--gamma=0")["returns"] == [[1.0, 1.0, 1.0]]
    assert rl("returns", {"rewards": [[1, 1, 1]]})["returns"] == [[3.0, 2.0, 1.0]]


def test_advantages_grpo_norm_std():
    G = [[1.0], [3.0]]
    out = rl("advantages", {"returns": G, "estimator": "grpo", "norm_std": True, "eps": 0})
    assert out["advantages"] == [[-1.0], [1.0]]
    out = rl("advantages", {"returns": G}, "--estimator", "grpo", "--norm-std", "--eps", "0")
    assert out["advantages"] == [[-1.0], [1.0]]


def test_advantages_masks():
    # a null return is invalid; a turn with one valid rollout has A = 0
    out = rl("advantages", {"returns": [[1.0, 5.0], [3.0, None]]})
    assert out["advantages"] == [[-2.0, 0.0], [2.0, None]]
    out = rl(
        "advantages",
        {"returns": [[1.0, 5.0], [3.0, 7.0]], "valid": [[True, False], [True, True]]},
    )
    assert out["advantages"] == [[-2.0, None], [2.0, 0.0]]


def test_empty_groups():
    assert rl("returns", {"rewards": []}) == {"returns": []}
    assert rl("advantages", {"returns": [[], []]}) == {"advantages": [[], []]}
    assert rl("reward", {"turns": []}) == {"rewards": []}
    assert rl("mrs", {"train_logprobs": [], "rollout_logprobs": []}) == {
        "ratio": [],
        "keep": [],
    }
    assert rl("prs", {"coverage": []}) == {"keep_prob": [], "keep": []}
    assert rl("select", {"rewards": []}) == {"selected": []}


def test_reward_batch_and_result_objects():
    turns = [
        {"correct": True, "speedup": 1.5},
        {"correctness": True, "speedup": 2.0, "decoy_kernel": True},
        {"correctness": True, "speedup": 2.0, "hack_reasons": ["side_stream"]},
        {"correctness": True, "speedup": 2.0, "hack_reasons": [], "profile": {"coverage": 0.5}},
        {"correct": False, "speedup": None},
        {"correct": True, "speedup": 1.0, "pr": 0.25},
    ]
    assert rl("reward", {"turns": turns})["rewards"] == [2.5, 0.0, 0.0, 3.0, 0.0, 2.0]
    # turn 0 has no coverage: with w_pr != 0 that is an error naming it
    msg = rl_fails("reward", json.dumps({"turns": turns}), "--w-pr", "1")
    assert 'field "turns[0].coverage"' in msg
    got = rl("reward", {"turns": turns[1:], "w_pr": 1, "cap": 1.5})["rewards"]
    assert got == [0.0, 0.0, pytest.approx(3.0), 0.0, pytest.approx(2.25)]


def test_mrs():
    out = rl(
        "mrs",
        {
            "train_logprobs": [[-1.0, -2.0], [-0.5], [], [-1.0, -30.0]],
            "rollout_logprobs": [[-1.0, -2.0], [-3.0], [], [-1.0, -20.0]],
        },
    )
    assert out["ratio"][0] == 1.0 and out["ratio"][2] == 1.0
    assert out["keep"] == [True, False, True, False]
    out = rl(
        "mrs",
        {"train_logprobs": [[-0.5]], "rollout_logprobs": [[-3.0]]},
        "--lo", "0", "--hi", "100", "--veto", "0",
    )
    assert out["keep"] == [True]


def test_prs_nulls_and_seed():
    cov = [0.31, 0.32, 0.33, 0.34, 0.35, 0.36, None, 0.38, 0.39] * 20
    a = rl("prs", {"coverage": cov, "seed": 7})
    b = rl("prs", {"coverage": cov}, "--seed", "7")
    c = rl("prs", {"coverage": cov, "seed": 8})
    assert a == b
    assert a["keep"] != c["keep"]
    assert a["keep_prob"][6] is None and a["keep"][6] is False
    # a near-hard threshold (s must be > 0: it divides)
    out = rl("prs", {"coverage": [0.29, 0.3, 0.31], "s": 1e-9})
    assert out == {"keep_prob": [0.0, 0.0, 1.0], "keep": [False, False, True]}
    # the whole uint64 range on the command line
    rl("prs", {"coverage": [0.5]}, "--seed", str(2**64 - 1))


def test_select():
    assert rl("select", {"rewards": [1, 5, 3, 5, 2], "w": 2}) == {"selected": [1, 3]}
    assert rl("select", {"rewards": [1, 5, 3, 5, 2]}, "--w", "3") == {"selected": [1, 2, 3]}
    # ties: the later turn first
    assert rl("select", {"rewards": [2, 2, 2]}, "--w", "1") == {"selected": [2]}
    assert rl("select", {"rewards": [1, 2]}) == {"selected": [0, 1]}


def test_fastp_grouping():
    attempts = [
        # level 1, problem "a": fast at 1.2 from turn 1; ends after turn 1
        {"level": 1, "problem": "a", "turn": 0, "correct": False},
        {"level": 1, "problem": "a", "turn": 1, "correct": True, "speedup": 1.3},
        # level 1, problem 7, two samples
        {"level": 1, "problem": 7, "sample": 0, "turn": 0, "correct": True, "speedup": 2.5},
        {"level": 1, "problem": 7, "sample": 0, "turn": 2, "correct": True, "speedup": 0.9},
        {"level": 1, "problem": 7, "sample": 1, "turn": 2, "correct": True, "hacked": True,
         "speedup": 9},
        # level 2: "7" (a string) is another problem than 7
        {"level": 2, "problem": "7", "turn": 1, "correctness": True, "speedup": 1.0,
         "hack_reasons": ["output_cache"]},
    ]
    out = rl("fastp", {"attempts": attempts, "p": [1, 2]})
    assert out["p"] == [1.0, 2.0]
    assert out["turns"] == [0, 1, 2]
    o = out["overall"]
    assert o["n"] == 4
    # turn 0: a fails, 7/0 is fast at 2.5, 7/1 absent, level 2 absent
    # turn 1: a at 1.3; 7/0 has no attempt, so its turn-0 attempt counts
    # turn 2: a carries its turn-1 attempt (1.3), 7/0 now 0.9, 7/1 hacked
    assert o["last"]["1"] == [0.25, 0.5, 0.25]
    assert o["last"]["2"] == [0.25, 0.25, 0.0]
    assert o["best"]["1"] == [0.25, 0.5, 0.5]
    assert o["best"]["2"] == [0.25, 0.25, 0.25]
    assert o["hacking_ratio"] == [0.0, 0.5, 0.5]
    assert list(out["by_level"]) == ["1", "2"]
    l1 = out["by_level"]["1"]
    assert l1["n"] == 3
    assert l1["best"]["1"] == [pytest.approx(1 / 3), pytest.approx(2 / 3), pytest.approx(2 / 3)]
    assert l1["hacking_ratio"] == [0.0, 0.0, 0.5]
    assert out["by_level"]["2"]["hacking_ratio"] == [0.0, 1.0, 0.0]
    # flag form of p, and its keys
    out = rl("fastp", {"attempts": attempts}, "--p", "1,1.25,3")
    assert list(out["overall"]["last"]) == ["1", "1.25", "3"]
    out = rl("fastp", {"attempts": attempts})
    assert list(out["overall"]["best"]) == ["1", "1.2", "1.5", "2"]


def test_problem_error_turns_are_not_scored():
    """A result with verdict problem_error (the problem's reference failed,
    not the kernel) is no turn of the policy's: its reward is null, never
    the penalty, so returns and advantages treat it as invalid, and Fast@p
    leaves the attempt out as if it were not given."""
    broken = {"verdict": "problem_error", "correctness": False, "speedup": None,
              "hack_reasons": [], "error_code": "PROBLEM_ERROR"}
    assert rl("reward", broken) == {"reward": None}
    assert rl("reward", {"verdict": "problem_error"}, "--penalty", "-1") == {"reward": None}
    turns = [{"verdict": "pass", "correctness": True, "speedup": 1.5}, broken,
             {"verdict": "mismatch", "correctness": False, "speedup": None}]
    rewards = rl("reward", {"turns": turns}, "--penalty", "-1")["rewards"]
    assert rewards == [2.5, None, -1.0]
    # other verdicts are scored as before
    assert rl("reward", {"verdict": "infra_error", "correctness": False}) == {"reward": 0.0}
    # a null reward is an invalid turn downstream
    assert rl("returns", {"rewards": [rewards]})["returns"] == [[1.5, None, -1.0]]
    att = [{"level": 1, "problem": "a", "turn": 0, "correct": True, "speedup": 2.0},
           {"level": 1, "problem": "a", "turn": 1, "correct": False},
           {"level": 1, "problem": "b", "turn": 0, "correct": False}]
    bad = [{"level": 1, "problem": "a", "turn": 1, **broken},  # turn 1 of a: not given
           {"level": 1, "problem": "c", "turn": 0, **broken},  # c: no attempt left
           {"level": 1, "problem": "c", "turn": 1, **broken}]
    with_bad = rl("fastp", {"attempts": att[:1] + att[2:] + bad})
    without = rl("fastp", {"attempts": att[:1] + att[2:]})
    assert with_bad == without and with_bad["overall"]["n"] == 2
    assert rl("fastp", {"attempts": bad})["overall"]["n"] == 0


def test_fastp_levels_sorted_numerically():
    attempts = [
        {"level": lv, "problem": 0, "turn": 1, "correct": False} for lv in (10, 2, -1)
    ]
    out = rl("fastp", {"attempts": attempts})
    assert list(out["by_level"]) == ["-1", "2", "10"]
    assert rl("fastp", {"attempts": []}) == {
        "p": [1.0, 1.2, 1.5, 2.0],
        "turns": [],
        "overall": {
            "last": {"1": [], "1.2": [], "1.5": [], "2": []},
            "best": {"1": [], "1.2": [], "1.5": [], "2": []},
            "hacking_ratio": [],
            "n": 0,
        },
        "by_level": {},
    }


def test_large_input():
    K, T = 3000, 40
    G = [[float((i * 31 + t * 7) % 13) for t in range(T)] for i in range(K)]
    out = rl("advantages", {"returns": G}, "--estimator", "grpo")
    adv = out["advantages"]
    assert len(adv) == K and all(len(r) == T for r in adv)
    col0 = [r[0] for r in G]
    mean0 = sum(col0) / K
    assert adv[5][0] == pytest.approx(G[5][0] - mean0)


# ---- usage ----------------------------------------------------------------


def test_help_and_usage():
    p = subprocess.run([KGYM, "rl", "--help"], capture_output=True)
    assert p.returncode == 0
    out = p.stdout.decode()
    for sub in ("reward", "returns", "advantages", "mrs", "prs", "fastp", "select"):
        assert sub in out
    p = subprocess.run([KGYM, "rl", "prs", "--help"], capture_output=True)
    assert p.returncode == 0 and b"--tau" in p.stdout
    p = subprocess.run([KGYM, "rl"], capture_output=True)
    assert p.returncode == 2 and b"usage" in p.stderr
    p = run(["nosuch"], "{}")
    assert p.returncode == 2 and b"usage" in p.stderr and b"nosuch" in p.stderr
    p = run(["prs", "--bogus", "1"], '{"coverage": []}')
    assert p.returncode == 2 and b"--bogus" in p.stderr and b"usage" in p.stderr
    p = run(["prs", "extra"], '{"coverage": []}')
    assert p.returncode == 2 and b"usage" in p.stderr
    p = run(["prs", "--tau"], '{"coverage": []}')
    assert p.returncode == 2 and b"--tau" in p.stderr
    p = run(["advantages", "--norm-std=1"], '{"returns": []}')
    assert p.returncode == 2


# ---- bad input --------------------------------------------------------------

# (subcommand, stdin, flags, the field the message must name)
BAD = [
    ("returns", '{"rewards": [[1, 2, 3], [1, 2]]}', [], "rewards"),
    ("returns", '{"rewards": [[1, 2, NaN]]}', [], "rewards[0][2]"),
    ("returns", '{"rewards": [[1, 2], [Infinity, 1]]}', [], "rewards[1][0]"),
    ("returns", '{"rewards": [[1, "2"]]}', [], "rewards"),
    ("returns", '{"rewards": [1, 2]}', [], "rewards"),
    ("returns", '{"rewards": 3}', [], "rewards"),
    ("returns", '{"reward": [[1]]}', [], "rewards"),
    ("returns", '{"rewards": [[1]], "gamma": "0.5"}', [], "gamma"),
    ("returns", '{"rewards": [[1]], "gamma": 2}', [], "gamma"),
    ("returns", '{"rewards": [[1]], "valid": [[1]]}', [], "valid"),
    ("returns", '{"rewards": [[1]], "valid": [[true], [true]]}', [], "valid"),
    ("returns", '{"rewards": [[1]], "rewards": [[2]]}', [], "rewards"),
    ("returns", '{"rewards": [[1e999]]}', [], "rewards[0][0]"),
    ("advantages", '{"returns": [[1]], "estimator": "ppo"}', [], "estimator"),
    ("advantages", '{"returns": [[1]], "estimator": 1}', [], "estimator"),
    ("advantages", '{"returns": [[1]], "norm_std": "yes"}', [], "norm_std"),
    ("advantages", '{"returns": [[1]], "eps": -1}', ["--estimator", "grpo"], "eps"),
    ("advantages", '{"returns": [[1], [2, 3]]}', [], "returns"),
    ("advantages", '{"returns": [[1], [2]], "valid": [[true], [true, false]]}', [], "valid"),
    ("reward", '{"speedup": 1.0}', [], "correct"),
    ("reward", '{"correct": "yes"}', [], "correct"),
    ("reward", '{"correct": true}', [], "speedup"),
    ("reward", '{"correct": true, "speedup": "fast"}', [], "speedup"),
    ("reward", '{"correct": true, "speedup": -2}', [], "speedup"),
    ("reward", '{"correct": true, "speedup": 1, "coverage": 1.5}', ["--w-pr", "1"], "coverage"),
    ("reward", '{"correct": true, "speedup": 1, "profile": 3}', ["--w-pr", "1"], "profile"),
    ("reward", '{"correct": true, "speedup": 1, "hack_reasons": "x"}', [], "hack_reasons"),
    ("reward", '{"correct": true, "speedup": 1, "verdict": 3}', [], "verdict"),
    ("reward", '{"turns": [{"verdict": "problem_error"}, {"verdict": ["x"]}]}', [],
     "turns[1].verdict"),
    ("reward", '{"correct": true, "speedup": 1, "cap": -1}', [], "cap"),
    ("reward", '{"correct": true, "speedup": 1, "w_pr": -1}', [], "w_pr"),
    ("reward", '{"turns": {"correct": true}}', [], "turns"),
    ("reward", '{"turns": [{"correct": true, "speedup": 1}, 5]}', [], "turns[1]"),
    ("reward", '{"turns": [{"correct": true, "speedup": 1}, {"correct": true}]}', [],
     "turns[1].speedup"),
    ("mrs", '{"train_logprobs": [[-1]]}', [], "rollout_logprobs"),
    ("mrs", '{"train_logprobs": [[-1]], "rollout_logprobs": [[-1, -2]]}', [],
     "rollout_logprobs"),
    ("mrs", '{"train_logprobs": [[-1], []], "rollout_logprobs": [[-1]]}', [],
     "rollout_logprobs"),
    ("mrs", '{"train_logprobs": [[-1, null]], "rollout_logprobs": [[-1, -2]]}', [],
     "train_logprobs"),
    ("mrs", '{"train_logprobs": [[-1]], "rollout_logprobs": [[-1]], "lo": 2}', [], "lo"),
    ("mrs", '{"train_logprobs": [[-1]], "rollout_logprobs": [[-1]], "veto": -1}', [], "veto"),
    ("prs", '{"coverage": [0.5, 2]}', [], "coverage"),
    ("prs", '{"coverage": [0.5, "a"]}', [], "coverage"),
    ("prs", '{"coverage": [0.5], "s": -1}', [], "s"),
    ("prs", '{"coverage": [0.5], "seed": -1}', [], "seed"),
    ("prs", '{"coverage": [0.5], "seed": 1.5}', [], "seed"),
    ("prs", '{"coverage": [0.5], "tau": null, "s": []}', [], "s"),
    ("fastp", '{}', [], "attempts"),
    ("fastp", '{"attempts": {}}', [], "attempts"),
    ("fastp", '{"attempts": [1]}', [], "attempts[0]"),
    ("fastp", '{"attempts": [{"problem": 1, "turn": 0, "correct": false}]}', [],
     "attempts[0].level"),
    ("fastp", '{"attempts": [{"level": 1, "turn": 0, "correct": false}]}', [],
     "attempts[0].problem"),
    ("fastp", '{"attempts": [{"level": 1, "problem": 1.5, "turn": 0, "correct": false}]}', [],
     "attempts[0].problem"),
    ("fastp", '{"attempts": [{"level": 1, "problem": 1, "correct": false}]}', [],
     "attempts[0].turn"),
    ("fastp", '{"attempts": [{"level": 1, "problem": 1, "turn": 0.5, "correct": false}]}', [],
     "attempts[0].turn"),
    ("fastp", '{"attempts": [{"level": 1, "problem": 1, "turn": 0, "correct": true}]}', [],
     "attempts[0].speedup"),
    ("fastp", '{"attempts": [{"level": 1, "problem": 1, "turn": 0, "correct": false},'
     '{"level": 1, "problem": 1, "turn": 0, "correct": false}]}', [], "attempts[1]"),
    ("fastp", '{"attempts": [], "p": [1, 1.0]}', [], "p"),
    ("fastp", '{"attempts": [], "p": [1, "2"]}', [], "p"),
    ("select", '{"rewards": [1, null]}', [], "rewards"),
    ("select", '{"rewards": [1], "w": 0}', [], "w"),
    ("select", '{"rewards": [1], "w": 2.5}', [], "w"),
    ("select", '{"rewards": [1], "w": 99999999999}', [], "w"),
]


@pytest.mark.parametrize("sub,stdin,flags,field", BAD)
def test_bad_input_names_field(sub, stdin, flags, field):
    msg = rl_fails(sub, stdin, *flags)
    assert f'field "{field}"' in msg, msg


@pytest.mark.parametrize(
    "sub,stdin,flags,needle",
    [
        ("returns", "", [], "bad JSON"),
        ("returns", "{", [], "bad JSON"),
        ("returns", '{"rewards": [[1]]} x', [], "bad JSON"),
        ("returns", "[1]", [], "expected a JSON object"),
        ("returns", "3", [], "input: expected a JSON object, got number"),
        ("returns", '{"rewards": [[1]]}', ["--gamma", "abc"], "option --gamma"),
        ("returns", '{"rewards": [[1]]}', ["--gamma", "nan"], "option --gamma"),
        ("advantages", '{"returns": [[1]]}', ["--estimator", "ppo"], "option --estimator"),
        ("prs", '{"coverage": [1]}', ["--seed", "-1"], "option --seed"),
        ("select", '{"rewards": [1]}', ["--w", "x"], "option --w"),
        ("select", '{"rewards": [1]}', ["--w", "99999999999"], "option --w"),
        ("fastp", '{"attempts": []}', ["--p", "1,x"], "option --p"),
        ("fastp", '{"attempts": []}', ["--p", "1,2,1"], "option --p: duplicate value 1.0"),
    ],
)
def test_bad_input_other(sub, stdin, flags, needle):
    msg = rl_fails(sub, stdin, *flags)
    assert needle in msg, msg


def test_flags_win_over_bad_fields():
    # the field would be an error, but the flag replaces it
    assert rl("returns", {"rewards": [[1]], "gamma": "x"}, "--gamma", "1") == {
        "returns": [[1.0]]
    }


def test_messages_are_exact():
    assert (
        rl_fails("returns", '{"rewards": [[1, 2, 3], [1, 2]]}')
        == 'field "rewards": row 1 has 2 entries, expected 3'
    )
    assert (
        rl_fails("returns", '{"rewards": [[1, 2, 3]], "valid": [[true, true]]}')
        == 'field "valid": shape 1x2 does not match "rewards" (1x3)'
    )
    assert (
        rl_fails("returns", '{"rewards": [[1, 2, NaN]]}')
        == "field \"rewards[0][2]\": bad JSON at line 1, column 23: invalid token near 'NaN'"
    )


def test_mangled_text_never_crashes():
    """Random byte edits of valid inputs: exit 0 with one JSON line, or
    exit 2 with one line on stderr; never anything else (ASan builds
    would report here)."""
    import random

    samples = {
        "returns": '{"rewards": [[1, 2.5, null], [0, -1, 3]], "valid": [[true, true, false], '
        '[true, false, true]], "gamma": 0.9}',
        "advantages": '{"returns": [[3], [1], [1]], "estimator": "grpo", "norm_std": true}',
        "reward": '{"turns": [{"correct": true, "speedup": 1.5, "coverage": 0.5}, '
        '{"correctness": false, "hack_reasons": ["x"]}], "w_pr": 1}',
        "mrs": '{"train_logprobs": [[-1, -2], []], "rollout_logprobs": [[-1.001, -2], []]}',
        "prs": '{"coverage": [0.35, null, 0.9], "tau": 0.3, "s": 0.1, "seed": 5}',
        "fastp": '{"attempts": [{"level": 1, "problem": "a", "turn": 1, "correct": true, '
        '"speedup": 1.3}, {"level": 2, "problem": 4, "sample": 1, "turn": 0, "correct": '
        'false}], "p": [1, 2]}',
        "select": '{"rewards": [1, 3, 2, 3], "w": 2}',
    }
    rng = random.Random(99)
    alphabet = '{}[]",:0123456789.-e truefalsnul\\\x00\xff'
    for sub, text in samples.items():
        for _ in range(40):
            b = bytearray(text.encode())
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(b))
                r = rng.random()
                if r < 0.4:
                    del b[i]
                elif r < 0.8:
                    b[i] = ord(rng.choice(alphabet)) & 0xFF
                else:
                    b.insert(i, ord(rng.choice(alphabet)) & 0xFF)
            p = run([sub], bytes(b))
            assert p.returncode in (0, 2), (sub, bytes(b), p.returncode, p.stderr)
            if p.returncode == 0:
                assert p.stderr == b""
                json.loads(p.stdout)
                assert p.stdout.count(b"\n") == 1
            else:
                assert p.stdout == b""
                assert p.stderr.count(b"\n") == 1, p.stderr
                assert p.stderr.startswith(f"kgym rl {sub}: ".encode())


def test_deep_nesting_and_odd_keys():
    msg = rl_fails("returns", '{"rewards": ' + "[" * 5000 + "]" * 5000 + "}")
    assert "bad JSON" in msg
    msg = rl_fails("returns", '{"rew\\nards": 1, "rewards": [[1, 2, tru]]}')
    assert 'field "rewards[0][2]"' in msg
    # a key with a newline is printed on the one line
    msg = rl_fails("returns", '{"a\\nb": [[x]]}')
    assert "\n" not in msg
