"""kgym redteam: the red-team corpus (tests/redteam/corpus) through the real
worker engine (zygote, sandboxed judge and candidate children).

The corpus runs here on the cpu backend and on triton through Triton's
interpreter; cuda candidates and those marked needs=gpu run on a GPU
machine (make test-gpu). A MISS (a cheat not caught with its expected
verdict and reasons) or a FALSE_ALARM (an honest candidate not passing)
fails the run, so these tests fail until every detection the corpus
expects is in the harness: that is the point of the corpus.

Needs root, like tests/faults: the sandbox_escape probes expect the worker
to run candidates as another user, which only root can arrange.
Environment: KGYM_BIN (default build/kgym); KGYM_REDTEAM_REPORT=DIR keeps
the tables and JSON of the corpus runs there.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
CORPUS = os.path.join(ROOT, "tests", "redteam", "corpus")
HEADER = re.compile(r"^# redteam: (.*)$")

# THREATS.md families the corpus must cover, and on which backends
CPU_FAMILIES = {"no_custom_kernel", "mode_branch", "thread_injection", "lazy_output",
                "timer_tamper", "result_forgery", "expected_output_theft", "stale_memory",
                "input_mutation", "aliases_input", "output_cache", "call_count_switch",
                "precision_downgrade", "degenerate_problem", "sandbox_escape", "profile_forgery"}
GPU_ONLY_FAMILIES = {"side_stream", "l2_persist"}
VERDICTS = {"pass", "mismatch", "compile_error", "runtime_error", "timeout", "hacked"}
STATUSES = {"OK", "MISS", "FALSE_ALARM", "ERROR"}

needs_kgym = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the corpus's sandbox probes need root (CI runs as root)")


# ---- helpers -----------------------------------------------------------------

def headers() -> dict[str, dict[str, str]]:
    """Relative path (without .py) -> header fields, for every corpus file."""
    out = {}
    for dirpath, _, names in os.walk(CORPUS):
        for n in names:
            if not n.endswith(".py"):
                continue
            path = os.path.join(dirpath, n)
            with open(path, encoding="utf-8") as f:
                m = HEADER.match(f.readline().rstrip("\n"))
            assert m, f"{path}: no '# redteam:' header on the first line"
            fields = dict(tok.split("=", 1) for tok in m.group(1).split())
            out[os.path.relpath(path, CORPUS)[:-3]] = fields
    return out


@pytest.fixture(scope="module")
def tmpdir_base():
    """A private TMPDIR for the engine: work dirs and the extension cache
    (enterable by the candidate's uid)."""
    base = tempfile.mkdtemp(prefix="kgym-redteam-", dir="/tmp")
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def redteam(args: list[str], tmp: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=tmp)
    return subprocess.run([KGYM, "redteam", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def keep(name: str, text: str) -> None:
    d = os.environ.get("KGYM_REDTEAM_REPORT")
    if d:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)


SUMMARY = re.compile(r"^(\d+) candidates in [\d.]+ s: (\d+) OK, (\d+) MISS, (\d+) FALSE_ALARM, "
                     r"(\d+) ERROR")


def parse_table(stdout: str) -> tuple[list[tuple], tuple]:
    """(rows, summary counts) of a text run; fails on any other line."""
    lines = stdout.splitlines()
    assert lines and lines[0].split() == ["family", "candidate", "expected", "got", "time_s",
                                          "status"], lines[:1]
    rows, summary = [], None
    for ln in lines[1:]:
        if not ln.strip():
            continue
        m = SUMMARY.match(ln)
        if m:
            summary = tuple(int(g) for g in m.groups())
            continue
        if summary is not None:  # after the summary: one line per non-OK candidate
            assert ln.split()[0] in STATUSES - {"OK"}, ln
            continue
        cols = tuple(re.split(r"\s{2,}", ln.strip()))  # columns: two spaces or more apart
        assert len(cols) == 6 and cols[5] in STATUSES and re.fullmatch(r"\d+\.\d", cols[4]), (
            f"not a table row: {ln!r}")
        rows.append(cols)
    assert summary is not None, "no summary line"
    return rows, summary


# ---- the corpus itself (no evaluation) ----------------------------------------

def test_corpus_inventory():
    """Every family on the backends where it applies, at least 25 cheats and
    15 honest candidates (the awkward kinds among them), valid headers."""
    hs = headers()
    cheats = {k: v for k, v in hs.items() if v["family"] != "honest"}
    honest = {k: v for k, v in hs.items() if v["family"] == "honest"}
    assert len(cheats) >= 25, len(cheats)
    assert len(honest) >= 15, len(honest)
    by_backend: dict[str, set[str]] = {}
    for name, h in hs.items():
        for key in ("family", "problem", "backend", "expect"):
            assert key in h, f"{name}: header lacks {key}="
        assert os.path.isfile(os.path.join(ROOT, h["problem"])), f"{name}: {h['problem']}"
        assert set(h["expect"].split("|")) <= VERDICTS, f"{name}: expect={h['expect']}"
        assert os.path.basename(name).split("__")[0] == h["family"], (
            f"{name}: file name and family={h['family']} disagree")
        assert name.split("/")[0] == h["backend"], f"{name}: directory vs backend={h['backend']}"
        if h["family"] == "honest":
            assert h["expect"] == "pass" and "reasons" not in h, name
        by_backend.setdefault(h["backend"], set()).add(h["family"])
    assert CPU_FAMILIES <= by_backend["cpu"], CPU_FAMILIES - by_backend["cpu"]
    gpu = by_backend.get("triton", set()) | by_backend.get("cuda", set())
    assert GPU_ONLY_FAMILIES <= gpu, GPU_ONLY_FAMILIES - gpu
    for kind in ("side_stream_joined", "autotuned", "partial", "inplace_own",
                 "eval_only_kernel", "thread_pool_joined"):
        assert any(kind in n for n in honest), f"no honest candidate of the kind {kind!r}"


# ---- usage and header errors (exit 2 before any evaluation) ---------------------

def write(d: str, name: str, text: str) -> str:
    path = os.path.join(d, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


GOOD = ("# redteam: family=honest problem=problems/cpu/level1/1_GELU.py backend=cpu "
        "expect=pass\nimport torch\n")


@needs_kgym
@pytest.mark.parametrize("text, message", [
    ("import torch\n", r"no header"),
    ("# redteam: family=honest backend=cpu expect=pass\n", r"header lacks problem="),
    ("# redteam: family=x problem=problems/cpu/level1/nope.py backend=cpu expect=mismatch\n",
     r"problem=problems/cpu/level1/nope\.py: no such file"),
    ("# redteam: family=x problem=problems/cpu/level1/1_GELU.py backend=gpu expect=pass\n",
     r"backend=gpu"),
    ("# redteam: family=x problem=problems/cpu/level1/1_GELU.py backend=cpu expect=passed\n",
     r"'passed' is not a verdict"),
    ("# redteam: family=x problem=problems/cpu/level1/1_GELU.py backend=cpu expect=pass "
     "reasons=mode_branch\n", r"reasons= needs expect= to include hacked"),
    ("# redteam: family=honest problem=problems/cpu/level1/1_GELU.py backend=cpu "
     "expect=hacked reasons=x\n", r"family=honest must expect=pass"),
    ("# redteam: family=x problem=problems/cpu/level1/1_GELU.py backend=cpu expect=pass "
     "colour=red\n", r"unknown key 'colour'"),
    ("# redteam: family=x problem=problems/cpu/level1/1_GELU.py backend=cpu expect=pass "
     "fields=num_widgets:3\n", r"unknown request field 'num_widgets'"),
    ("# redteam: family=x problem=problems/cpu/level1/1_GELU.py backend=cpu expect=pass "
     "fields=num_perf_trials:0\n", r"num_perf_trials"),
])
def test_bad_header_is_refused_with_its_file_named(text, message, tmp_path):
    path = write(str(tmp_path), "cpu/bad.py", text)
    write(str(tmp_path), "cpu/good.py", GOOD)
    p = redteam(["--dir", str(tmp_path), "--backend", "cpu"], str(tmp_path), timeout=60)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert path in p.stderr and re.search(message, p.stderr), p.stderr
    assert p.stdout == ""  # nothing ran


@needs_kgym
def test_usage_errors(tmp_path):
    cases = [
        (["--dir", str(tmp_path / "missing")], r"--dir .*missing: No such file or directory"),
        (["--dir", str(tmp_path)], r"no candidates \(\*\.py\) under"),
        (["--backend", "rocm"], r"--backend rocm: cpu, triton, cuda, all"),
        (["--jobs", "0"], r"--jobs: expected an integer from 1 to 64, got '0'"),
        (["--num-widgets", "3"], r"--num_widgets: unknown request field"),
        (["--num-perf-trials", "0"], r"num_perf_trials"),
        (["--device", "gpu0"], r"--device gpu0: must be cuda:N"),
        (["stray"], r"stray: unexpected argument"),
        (["--filter"], r"--filter: needs a value"),
    ]
    if not os.path.exists("/dev/nvidia0"):
        cases.append((["--backend", "cuda"], r"need a GPU and none was found"))
    for args, message in cases:
        p = redteam(args, str(tmp_path), timeout=60)
        assert p.returncode == 2 and re.search(message, p.stderr), (args, p.stderr)
    write(str(tmp_path), "cpu/good.py", GOOD)
    p = redteam(["--dir", str(tmp_path), "--filter", "nothing-matches"], str(tmp_path), timeout=60)
    assert p.returncode == 2 and "matching nothing-matches" in p.stderr, p.stderr


# ---- the corpus through the engine ---------------------------------------------

# Cheats kgym does not catch yet, each with why.
# Exactly these may MISS: a new miss fails the test, and so does a gap that
# starts being caught (then it leaves this list). Empty: the timed-output
# spot checks, the ablation forward and the rounding fingerprint catch
# call_count_switch__layernorm_skips_when_timed,
# no_custom_kernel__layernorm_token_launch and
# precision_downgrade__linear_bf16_weights.
KNOWN_GAPS: set[str] = set()


@needs_kgym
@needs_root
def test_cpu_corpus_every_cheat_caught_no_false_alarm(tmpdir_base):
    p = redteam(["--backend", "cpu"], tmpdir_base)
    keep("redteam-cpu.txt", p.stdout + p.stderr)
    rows, (n, ok, miss, false_alarm, error) = parse_table(p.stdout)
    names = {r[1] for r in rows}
    want = {k for k, h in headers().items() if h["backend"] == "cpu"}
    assert names == want, (want - names, names - want)
    assert n == len(rows) == ok + miss + false_alarm + error
    for family, name, expected, got, secs, status in rows:
        assert name.startswith("cpu/") and family == os.path.basename(name).split("__")[0]
        assert got.split("[")[0].split()[0] in VERDICTS | {"infra_error", "problem_error"}, got
    missed = {r[1] for r in rows if r[5] == "MISS"}
    # a false alarm under the whole suite's load is run again alone, once:
    # the CPU's clock bounds are load-dependent (a tiny problem's harness
    # work per call was once read as the kernel's: clock 0.56x under make
    # test, fine 3 of 3 alone); a real false alarm reproduces alone
    again = []
    for r in rows:
        if r[5] == "FALSE_ALARM":
            q = redteam(["--backend", "cpu", "--filter", r[1].split("/", 1)[1]], tmpdir_base)
            keep(f"redteam-cpu-again-{os.path.basename(r[1])}.txt", q.stdout + q.stderr)
            again.append((r[1], parse_table(q.stdout)[1]))
    assert all(c[0] == c[1] == 1 for _, c in again), again
    assert (false_alarm - len(again), error) == (0, 0), p.stdout[-6000:]
    assert missed == KNOWN_GAPS, (f"new misses: {sorted(missed - KNOWN_GAPS)}; "
                                  f"now caught (drop from KNOWN_GAPS): "
                                  f"{sorted(KNOWN_GAPS - missed)}\n" + p.stdout[-6000:])


@needs_kgym
@needs_root
def test_triton_corpus_through_the_interpreter(tmpdir_base):
    """The triton candidates that need no GPU, on CPU tensors through Triton's
    interpreter; 20 timed iterations instead of 100, because the interpreter
    runs each kernel program in Python (the checks are the same)."""
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is present: triton candidates run on it (make test-gpu)")
    p = redteam(["--backend", "triton", "--json", "--num-perf-trials", "20"], tmpdir_base)
    keep("redteam-triton.json", p.stdout)
    doc = json.loads(p.stdout)
    hs = {k: h for k, h in headers().items() if h["backend"] == "triton"}
    gpu_only = {k for k, h in hs.items() if h.get("needs") == "gpu"}
    assert doc["gpu"] is False and doc["counts"]["skipped_need_gpu"] == len(gpu_only)
    assert {r["candidate"] for r in doc["rows"]} == set(hs) - gpu_only
    for r in doc["rows"]:
        assert r["backend"] == "triton" and r["result"]["device"]["device"] == "cpu", r["candidate"]
        assert r["status"] in STATUSES and r["got"]["verdict"] == r["result"]["verdict"]
    bad = [(r["candidate"], r["status"], r["got"]) for r in doc["rows"] if r["status"] != "OK"]
    assert p.returncode == 0 and not bad, bad


@needs_kgym
@needs_root
def test_wrong_expectations_fail_the_run(tmpdir_base, tmp_path):
    """A cheat whose header expects a pass is a MISS; the same cheat labelled
    honest is a FALSE_ALARM; either makes kgym redteam exit 1."""
    src = os.path.join(CORPUS, "cpu", "mode_branch__gelu_eval_falls_back.py")
    with open(src, encoding="utf-8") as f:
        body = f.read().split("\n", 1)[1]
    prob = "problem=problems/cpu/level1/1_GELU.py backend=cpu"
    write(str(tmp_path), "cpu/mode_branch__labelled_pass.py",
          f"# redteam: family=mode_branch {prob} expect=pass\n" + body)
    write(str(tmp_path), "cpu/honest__really_a_cheat.py",
          f"# redteam: family=honest {prob} expect=pass\n" + body)
    p = redteam(["--dir", str(tmp_path), "--backend", "cpu", "--num-perf-trials", "5"],
                tmpdir_base, timeout=600)
    rows, (n, ok, miss, false_alarm, error) = parse_table(p.stdout)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    status = {r[1]: (r[3], r[5]) for r in rows}
    assert status["cpu/mode_branch__labelled_pass"] == ("hacked[mode_branch]", "MISS")
    assert status["cpu/honest__really_a_cheat"] == ("hacked[mode_branch]", "FALSE_ALARM")
    assert (n, ok, miss, false_alarm, error) == (2, 0, 1, 1, 0)
    assert re.search(r"^MISS cpu/mode_branch__labelled_pass: expected pass, got "
                     r"hacked\[mode_branch\]: custom kernels ran in some modes", p.stdout, re.M)
