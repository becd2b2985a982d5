"""The commands' options go through one table-driven parser (src/cli/opts.c):
-h/--help prints the usage on stdout and exits 0; an unknown flag, a
stray argument, a missing value or a bad number is one line on stderr
that names the option, exit status 2, before any server, policy or engine
is asked. Fast: nothing here evaluates."""
from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
REF = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
ID = "0123456789abcdef0123456789abcdef"

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")


def kgym(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KGYM, *args], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("cmd", [
    ["status"], ["result"], ["cancel"], ["wait"], ["submit"], ["eval"], ["rollout"],
    ["collect"], ["report"], ["policy", "scripted"], ["rl", "prs"], ["serve"], ["worker"],
    ["selfcheck"], ["eval", "--kernelbench", "d"], ["redteam"],
])
def test_help_exits_zero(cmd):
    for flag in ("-h", "--help"):
        p = kgym(*cmd, flag)
        assert p.returncode == 0 and "usage" in p.stdout, (cmd, flag, p)


# (arguments, what the one stderr line must hold)
REFUSED = [
    (["status", ID, "--frob"], "unknown flag --frob"),
    (["status", ID, ID], f"{ID}: unexpected argument"),
    (["wait", ID, "--timeout", "soon"], "--timeout: expected a number of at least 0, got 'soon'"),
    (["wait", ID, "--timeout", "-1"], "--timeout: expected a number"),
    (["submit", "--ref", REF, "--cand", REF, "--wait-timeout", "x"],
     "--wait-timeout: expected a number of at least 0, got 'x'"),
    (["submit", "--ref"], "--ref: needs a value"),
    (["submit", "stray"], "stray: unexpected argument"),
    (["eval", "--ref", REF, "--concurrency", "0"],
     "--concurrency: expected an integer from 1 to 64, got '0'"),
    (["eval", "--ref", REF, "--concurrency", "two"], "--concurrency: expected an integer"),
    (["eval", "--json=1"], "--json: takes no value"),
    (["eval", "--backend"], "--backend: needs a value"),
    (["rollout", "--turns", "1.5"], "--turns: expected an integer from 1 to 64, got '1.5'"),
    (["rollout", "--top-p=2"], "--top-p: expected a number from 0 to 1, got '2'"),
    (["rollout", "-x"], "unknown flag -x"),
    (["collect", "--sft", "x.jsonl", "--filter", "worst"], "--filter: final or best, not 'worst'"),
    (["collect", "--sft", "x.jsonl", "--min-speedup", "nan"], "--min-speedup: expected a number"),
    (["report", "r.jsonl", "--out="], "--out: needs a value"),
    (["report", "r.jsonl", "--frob"], "unknown flag --frob (kgym report --help)"),
    (["policy", "scripted", "d", "--port", "70000"],
     "--port: expected an integer from 0 to 65535, got '70000'"),
    (["policy", "scripted", "d", "e"], "e: unexpected argument (one DIR)"),
    (["rl", "prs", "--tau"], "--tau: needs a value"),
    (["serve", "--frob", "x"], "unknown flag --frob"),
    (["serve", "stray"], "stray: unexpected argument"),
    (["serve", "--listen"], "--listen: needs a value"),
    (["serve", "--threads", "0"], "--threads: expected an integer from 1 to 1024, got '0'"),
    (["serve", "--lease-s=1.5"], "--lease-s: expected an integer from 1 to 86400, got '1.5'"),
    (["serve", "--max-attempts", "x"], "--max-attempts: expected an integer from 1 to 1000"),
    (["serve", "--cpu-threads", "0"], "--cpu-threads must be a number from 1 to 1024, or auto"),
    (["worker", "--frob", "x"], "unknown flag --frob"),
    (["worker", "stray"], "stray: unexpected argument"),
    (["worker", "--device"], "--device: needs a value"),
    (["worker", "--fresh=1"], "--fresh: takes no value"),
    (["worker", "--drain-timeout", "-1"],
     "--drain-timeout: expected an integer from 0 to 86400, got '-1'"),
    (["worker", "--token-fd", "x"], "--token-fd: expected an integer from 0 to 1048576"),
    (["selfcheck", "-x"], "unknown flag -x"),
    (["selfcheck", "stray"], "stray: unexpected argument"),
    (["selfcheck", "--kernelbench"], "--kernelbench: needs a value"),
    (["selfcheck", "--num-perf-trials"], "--num-perf-trials: needs a value"),
    (["selfcheck", "--prewarm", "33"], "--prewarm: a number from 0 to 32, not '33'"),
    (["selfcheck", "--concurrency", "0"], "--concurrency: expected an integer from 1 to 64"),
    (["selfcheck", "--ref", "r.py"], "--ref: not with selfcheck"),
    (["eval", "--kernelbench", "d", "--candidates"], "--candidates: needs a value"),
    (["eval", "--kernelbench", "d", "--cand", "c.py"], "--cand: not with --kernelbench"),
    (["eval", "--kernelbench=d", "--cand", "c.py"], "--cand: not with --kernelbench"),
    (["redteam", "-x"], "unknown flag -x"),
    (["redteam", "stray"], "stray: unexpected argument (kgym redteam --help)"),
    (["redteam", "--dir"], "--dir: needs a value"),
    (["redteam", "--jobs", "65"], "--jobs: expected an integer from 1 to 64, got '65'"),
    (["redteam", "--json=1"], "--json: takes no value"),
    (["redteam", "--kernel-code", "x"], "--kernel-code: the code comes from the corpus"),
]


@pytest.mark.parametrize("args,want", REFUSED, ids=[f"{i}-{a[0]}" for i, (a, _) in enumerate(REFUSED)])
def test_bad_options_are_one_line_naming_the_option(args, want):
    p = kgym(*args)
    assert p.returncode == 2, (args, p)
    first = p.stderr.splitlines()[0]
    assert want in first, (args, p.stderr)
    assert p.stdout == ""
