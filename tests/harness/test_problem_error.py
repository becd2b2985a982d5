"""problem_error: a broken reference (problem) is its own verdict, never the
candidate's.

Each reference below is broken in one way; the candidate is honest (the
reference's own Model, unchanged: `class ModelNew(Model): pass`), so the
candidate is clearly not at fault. Every case runs through `kgym eval`, the
real worker engine (zygote, sandboxed judge and candidate), in one run.
Then the other side: a candidate whose own forward fails in the same ways
(returns a dict, raises, calls os._exit) keeps the verdict it always had.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from kgym_harness import problem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
FAST = ["--backend", "cpu", "--num-perf-trials", "1", "--num-correct-trials", "1",
        "--num-warmup", "0", "--enable-profiling", "false", "--timeout", "120", "--seed", "7"]

REF = """import os
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        {forward}

def get_inputs():
    {inputs}

def get_init_inputs():
    return []
"""
GOOD = {"init": "pass", "forward": "return x * 2", "inputs": "return [torch.randn(16)]"}

# name: (parts of the reference that differ from GOOD, error.phase, words
# the error message must hold)
BROKEN = {
    "dict": ({"inputs": "return {'x': torch.ones(4)}"}, "reference:get_inputs", ["dict"]),
    "str": ({"inputs": "return 'not a list'"}, "reference:get_inputs", ["str"]),
    "none": ({"inputs": "return None"}, "reference:get_inputs", ["returned None"]),
    "selfref": ({"inputs": "l = [torch.ones(4)]; l.append(l); return l"},
                "reference:get_inputs", ["contains itself"]),
    "tensors": ({"inputs": "return [torch.ones(1) for _ in range(100_000)]"},
                "reference:get_inputs", ["100000 tensors", "at most 256"]),
    "ints": ({"inputs": "return list(range(5_000_000))"},
             "reference:get_inputs", ["5000000", "at most 256"]),
    "raises": ({"inputs": "raise RuntimeError('no inputs today')"},
               "reference:get_inputs", ["RuntimeError", "no inputs today"]),
    "init": ({"init": "raise ValueError('cannot build')"}, "reference:init",
             ["ValueError", "cannot build"]),
    "forward": ({"forward": "raise RuntimeError('forward broke')"}, "reference:forward",
                ["RuntimeError", "forward broke"]),
    "outdict": ({"forward": "return {'y': x}"}, "reference:forward", ["dict"]),
    "exit": ({"inputs": "os._exit(0)"}, "reference:get_inputs", ["exited"]),
}

# the candidate's own forward fails, against the good reference: (forward
# body, verdict, error_code) as before problem_error existed
CANDIDATE = {
    "own_dict": ("return {'y': x * 2}", "mismatch", "OUTPUT_TYPE"),
    "own_raise": ("raise RuntimeError('my kernel broke')", "runtime_error", "FORWARD_EXCEPTION"),
    "own_exit": ("os._exit(0)", "runtime_error", "CHILD_DIED"),
}


def _ref(**parts: str) -> str:
    return REF.format(**{**GOOD, **parts})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `kgym eval` run over every case: {candidate file name: result}."""
    if not os.access(KGYM, os.X_OK):
        pytest.skip(f"{KGYM} not built (make)")
    d = tmp_path_factory.mktemp("problem-error")
    os.chmod(d, 0o755)  # the candidate's uid reads its file
    args: list[str] = []
    for name, (parts, _, _) in BROKEN.items():
        ref = _ref(**parts)
        (d / f"ref_{name}.py").write_text(ref)
        # honest: the reference's own model, unchanged
        (d / f"cand_{name}.py").write_text(ref + "\nclass ModelNew(Model):\n    pass\n")
        args += ["--ref", str(d / f"ref_{name}.py"), "--cand", str(d / f"cand_{name}.py")]
    (d / "ref_good.py").write_text(_ref())
    args += ["--ref", str(d / "ref_good.py")]
    for name, (body, _, _) in CANDIDATE.items():
        (d / f"{name}.py").write_text(
            "import os\nimport torch\n\nclass ModelNew(torch.nn.Module):\n"
            f"    def forward(self, x):\n        {body}\n")
        args += ["--cand", str(d / f"{name}.py")]
    env = dict(os.environ)
    env.setdefault("TMPDIR", "/tmp")  # must be enterable by the candidate's uid
    p = subprocess.run([KGYM, "eval", "--json", *args, *FAST], capture_output=True, text=True,
                       env=env, timeout=600)
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[os.path.splitext(os.path.basename(r["candidate"]))[0]] = r
    assert len(out) == len(BROKEN) + len(CANDIDATE), (p.returncode, p.stderr[-3000:])
    return out


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_reference_is_problem_error(results: dict, name: str):
    r = results[f"cand_{name}"]
    _, phase, words = BROKEN[name]
    got = (r["verdict"], r["error_code"], (r.get("error") or {}).get("phase"))
    assert got == ("problem_error", "PROBLEM_ERROR", phase), (got, r.get("error_message"))
    # final (not retried), never a score for the candidate
    assert r["status"] == "completed" and r["correctness"] is False
    assert r["hack_reasons"] == [] and r["speedup"] is None
    msg = r["error_message"]
    assert msg.startswith("the reference (problem) is at fault"), msg
    for w in words:
        assert w in msg, (w, msg)
    assert "problem" in r["feedback"] and "not your kernel" in r["feedback"], r["feedback"]


@pytest.mark.parametrize("name", list(CANDIDATE))
def test_the_candidates_own_failure_is_still_its_own(results: dict, name: str):
    r = results[name]
    _, verdict, code = CANDIDATE[name]
    assert (r["verdict"], r["error_code"]) == (verdict, code), r.get("error_message")
    assert r["status"] == "completed"


def test_the_launcher_reads_the_phase_marker_too():
    """The plain launcher (here with warm roles) blames a reference that
    ends the judge, as the worker does; the judge's other deaths stay
    RESULT_INCOMPLETE."""
    import kit
    ref = kit.REF.replace("return [torch.randn(4, 16), torch.randn(4, 16)]",
                          "import os; os._exit(3)")
    r = kit.run(kit.cpu_kernel(), reference_code=ref, num_correct_trials=1,
                num_perf_trials=1)
    got = (r["verdict"], r["error_code"], r["error"]["phase"], r["status"])
    assert got == ("problem_error", "PROBLEM_ERROR", "reference:get_inputs", "completed"), r
    assert "exited with status 3" in r["error_message"], r["error_message"]
    assert "not your kernel" in r["feedback"]


def test_the_candidate_cannot_claim_problem_error():
    from kgym_harness.remote import sanitize_failure
    for allow in (False, True):
        got = sanitize_failure({"verdict": "problem_error", "code": "PROBLEM_ERROR"}, allow)
        assert got["verdict"] == "runtime_error", got


# ---- the judge's checks of what the reference produced (no processes) ------

def test_inputs_within_the_channels_limits_pass():
    problem.check_inputs([torch.ones(3), (torch.zeros(2, 2), 4, 1.5, None, "s")] * 10)
    problem.check_inputs(tuple(torch.ones(1) for _ in range(problem.MAX_TENSORS)))


@pytest.mark.parametrize("value, words", [
    ({"x": 1}, "dict"),
    ([torch.ones(1)] * (problem.MAX_TENSORS + 1), "at most 256"),
    ([[0] * 100] * 100, "more than 4096 values"),
    ([[torch.ones(1)] * 200, [torch.ones(1)] * 200], "more than 256 tensors"),
    ([{"a": 1}], "args[0]"),
    ([torch.ones(2, dtype=torch.uint16)], "uint16"),
    ([2 ** 70], "64 bits"),
    ([torch.ones(1).to_sparse()], "dense"),
    ([[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]], "nested"),
])
def test_inputs_the_channel_cannot_carry_are_the_problems(value, words):
    with pytest.raises(problem.ReferenceFailed) as e:
        problem.check_inputs(value)
    assert e.value.phase == "reference:get_inputs" and words in e.value.message, e.value.message


def test_a_self_containing_input_is_found_not_recursed():
    inner: list = [torch.ones(1)]
    inner.append((inner,))
    with pytest.raises(problem.ReferenceFailed, match="contains itself"):
        problem.check_inputs([inner])
    shared = [torch.ones(1)]
    problem.check_inputs([shared, shared])  # the same list twice is not a cycle


@pytest.mark.parametrize("value, words", [
    ({"y": torch.ones(1)}, "dict"),
    (None, "no tensor"),
    ([1, 2], "no tensor"),
    (torch.ones(1, device="meta"), "meta"),
])
def test_unusable_reference_outputs_are_the_problems(value, words):
    with pytest.raises(problem.ReferenceFailed) as e:
        problem.check_output(value, "cpu")
    assert e.value.phase == "reference:forward" and words in e.value.message, e.value.message
    problem.check_output((torch.ones(2), [torch.zeros(1), 3]), "cpu")


def test_the_phase_marker_nests_and_reads_back(tmp_path):
    m = problem.Marker(str(tmp_path))
    assert problem.read_mark(str(tmp_path)) is None
    with m.mark("reference:forward"):
        with m.mark("reference:get_inputs"):
            assert problem.read_mark(str(tmp_path)) == "reference:get_inputs"
        assert problem.read_mark(str(tmp_path)) == "reference:forward"
    assert problem.read_mark(str(tmp_path)) is None
    m.close()
