"""docs/design.md is the contract: its request, result and verdict tables
are read here and the C side (a real `kgym serve`, `kgym eval`, the worker
engine) and the Python side (harness/kgym_harness/schema.py) are held to
them. A limit, a default or a field changed on one side only fails here.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any, Iterator

import pytest

from kgym_harness import schema
from test_server_api import (KGYM, ROOT, Server, lease_task, register, start_server,
                             stop_server, uid, write_tokens)

DESIGN = os.path.join(ROOT, "docs", "design.md")


def table(name: str) -> list[dict[str, str]]:
    """The rows of the markdown table between <!-- contract:NAME --> markers."""
    with open(DESIGN, encoding="utf-8") as f:
        text = f.read()
    m = re.search(rf"<!-- contract:{name} -->\n(.*?)<!-- /contract:{name} -->", text, re.S)
    assert m, f"docs/design.md has no contract:{name} table"
    lines = [ln.strip() for ln in m.group(1).strip().splitlines()]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    head, body = cells[0], cells[2:]
    return [dict(zip(head, row)) for row in body]


REQUEST = {r["field"]: r for r in table("request")}
RESULT_FIELDS = [r["field"] for r in table("result")]
VERDICTS = [r["verdict"] for r in table("verdicts")]

REF = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
BASE = {"reference_code": REF, "kernel_code": "class ModelNew: pass\n", "backend": "cpu"}


def bounds(row: dict) -> tuple[float, float] | None:
    m = re.match(r"^(-?[\d.e+]+)\.\.(-?[\d.e+]+)", row["limits"])
    return (float(m.group(1)), float(m.group(2))) if m else None


def cases(field: str) -> list[tuple[Any, bool]]:
    """(value, accepted) pairs at and beyond the table's limits."""
    row = REQUEST[field]
    kind, b = row["type"], bounds(row)
    out: list[tuple[Any, bool]] = []
    if kind == "int" and b:
        lo, hi = int(b[0]), int(b[1])
        out += [(lo, True), (hi, True), (lo - 1, False), (hi + 1, False), (lo + 0.5, False)]
    elif kind == "number" and b:
        lo, hi = b
        out += [(lo, True), (hi, True), (hi * 1.001 + 1, False), ("1", False)]
        out.append((lo - max(abs(lo) * 1e-3, 1e-3), False))
    elif kind == "string" and b:
        lo, hi = int(b[0]), int(b[1])
        out += [("a" * hi, True), ("a" * (hi + 1), False)]
        if lo >= 1:
            out.append(("", False))
    elif kind == "enum":
        for v in row["limits"].split(", "):
            out.append((v, True))
        out.append(("no-such-value", False))
    elif kind == "bool":
        out += [(True, True), (False, True), (1, False)]
    return out


ALL_CASES = [(f, v, ok) for f in REQUEST for v, ok in cases(f)]


def case_id(c: tuple) -> str:
    f, v, ok = c
    s = repr(v) if not isinstance(v, str) or len(v) < 20 else f"str[{len(v)}]"
    return f"{f}={s}-{'ok' if ok else 'refused'}"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    tmp = tempfile.mkdtemp(prefix="kgym-contract-")
    cf, wf = write_tokens(tmp)
    try:
        s = start_server(["--store", f"sqlite:{tmp}/kgym.db", "--token-file", cf,
                          "--worker-token-file", wf, "--max-attempts", "1", "--lease-s", "1"],
                         tmp)
        yield s
        stop_server(s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_tables_cover_the_code():
    """Every field the C and Python validators know is in the table."""
    py = schema.normalize_request(dict(BASE))
    client_fields = set(py) - {"device", "worker_id", "queued_ms", "deadline", "device_lock"}
    assert client_fields == set(REQUEST), client_fields ^ set(REQUEST)
    assert all(c in (r["type"] for r in REQUEST.values())
               for c in ("int", "number", "string", "enum", "bool"))


@pytest.mark.parametrize("c", ALL_CASES, ids=case_id)
def test_c_limits(server, c):
    field, value, ok = c
    body = {**BASE, field: value}
    if field != "task_id":
        body["task_id"] = uid("c")
    code, _, reply = server.request("POST", "/evaluate", body)
    if ok:
        assert code == 200, (code, reply)
    else:
        assert code in (400, 413, 422), (code, reply)
        assert reply["error"].get("field") == field, reply


@pytest.mark.parametrize("c", ALL_CASES, ids=case_id)
def test_python_limits(c):
    field, value, ok = c
    body = {**BASE, field: value}
    if ok:
        out = schema.normalize_request(body)
        if REQUEST[field]["type"] in ("int", "number", "enum", "bool"):
            assert out[field] == value
    else:
        with pytest.raises(ValueError, match=field):
            schema.normalize_request(body)


def default_of(row: dict) -> Any:
    d, kind = row["default"], row["type"]
    if kind == "int":
        return int(d)
    if kind == "number":
        return float(d)
    if kind == "bool":
        return d == "true"
    return d


DEFAULTED = [f for f, r in REQUEST.items() if r["default"] not in ("required", "assigned", "drawn")]


def test_defaults_c_and_python(server):
    """The request a worker leases (C's normalization) and Python's carry
    the table's defaults for every field the client left out."""
    t = {"reference_code": REF, "kernel_code": f"class ModelNew: pass  # {uid()}\n",
         "task_id": uid("d")}
    assert server.request("POST", "/evaluate", t)[0] == 200
    wid = register(server)
    leased = lease_task(server, wid, t["task_id"])["request"]
    py = schema.normalize_request({"reference_code": REF, "kernel_code": "k = 1\n"})
    for f in DEFAULTED:
        want = default_of(REQUEST[f])
        assert leased[f] == want, (f, leased[f], want)
        assert py[f] == want, (f, py[f], want)
    # no seed given: none in the request (the judge draws it), Python draws one
    assert leased.get("seed") is None and 0 <= py["seed"] <= 2**53 - 1
    server.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                     "result": {"verdict": "mismatch", "correctness": False}})


def test_strict_defaults_c_and_python(server):
    """A strict request without tolerances gets the table's strict ones
    ("strict: X" in the meaning column), from C and from Python alike."""
    strict = {f: float(re.search(r"strict: ([0-9.e+-]+)", REQUEST[f]["meaning"]).group(1))
              for f in REQUEST if "strict: " in REQUEST[f]["meaning"]}
    assert set(strict) == {"atol", "rtol"}
    t = {"reference_code": REF, "kernel_code": f"class ModelNew: pass  # {uid()}\n",
         "task_id": uid("s"), "strict": True}
    assert server.request("POST", "/evaluate", t)[0] == 200
    wid = register(server)
    leased = lease_task(server, wid, t["task_id"])["request"]
    py = schema.normalize_request({"reference_code": REF, "kernel_code": "k = 1\n",
                                   "strict": True})
    for f, want in strict.items():
        assert leased[f] == want and py[f] == want, (f, leased[f], py[f], want)
    server.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                     "result": {"verdict": "mismatch", "correctness": False}})


def complete(server: Server, t: dict) -> None:
    """Submits t and has a fake worker post a pass for it."""
    assert server.request("POST", "/evaluate", t)[0] == 200
    wid = register(server)
    lease_task(server, wid, t["task_id"])
    server.worker("/worker/result", {"worker_id": wid, "task_id": t["task_id"],
                                     "result": {"verdict": "pass", "correctness": True,
                                                "speedup": 1.0, "kernel_runtime": 1.0,
                                                "reference_runtime": 1.0}})


def other_value(field: str) -> Any:
    row = REQUEST[field]
    kind = row["type"]
    if kind == "enum":
        return [v for v in row["limits"].split(", ") if v != row["default"]][0]
    if kind == "bool":
        return row["default"] != "true"
    if kind == "int":
        return int(bounds(row)[0]) + 1 if field != "seed" else 12345
    if kind == "number":
        return bounds(row)[0] + 1.5
    if field == "entry_point":
        return "Other"
    return None


# force_refresh is not in the key but bypasses the cache by its meaning
@pytest.mark.parametrize("field", [f for f in REQUEST if other_value(f) is not None
                                   and f not in ("kernel_code", "reference_code",
                                                 "force_refresh")])
def test_cache_key_column(server, field):
    """A field marked key changes the result cache's answer; one not marked
    does not (the same request with it changed is answered from the cache)."""
    kc = f"class ModelNew: pass  # {uid()}\n"
    t = {**BASE, "kernel_code": kc, "seed": 7, "task_id": uid("k")}
    complete(server, t)
    again = {**t, "task_id": uid("k2"), field: other_value(field)}
    if field == "seed":
        again["seed"] = 8
    code, _, body = server.request("POST", "/evaluate", again)
    assert code == 200, body
    cached = body.get("cached") is True
    assert cached == (REQUEST[field]["key"] == "no"), (field, body)


def test_verdicts_c_and_python():
    assert set(VERDICTS) == set(schema.VERDICTS) and len(VERDICTS) == len(schema.VERDICTS)
    with open(os.path.join(ROOT, "src", "server", "store.c"), encoding="utf-8") as f:
        src = f.read()
    m = re.search(r"VERDICT_NAMES\[KG_NVERDICT\] = \{(.*?)\};", src, re.S)
    c_names = re.findall(r'"([a-z_]+)"', m.group(1))
    assert set(c_names) - {"other"} == set(VERDICTS), set(c_names) ^ set(VERDICTS)


# ---- every result path has every field ---------------------------------------

def eval_results(args: list[str]) -> list[dict]:
    env = dict(os.environ, TMPDIR=os.environ.get("TMPDIR", "/tmp"))
    p = subprocess.run([KGYM, "eval", "--json", "--backend", "cpu", "--num-perf-trials", "3",
                        "--num-correct-trials", "1", *args], capture_output=True, text=True,
                       timeout=300, env=env)
    out = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert out, p.stderr[-2000:]
    return out


def missing(r: dict) -> list[str]:
    return [f for f in RESULT_FIELDS if f not in r]


def test_judge_results_have_every_field(tmp_path):
    ref = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
    good = os.path.join(ROOT, "problems", "cpu", "level1", "solutions", "1_GELU.cpu.py")
    bad = tmp_path / "syntax.py"
    bad.write_text("class ModelNew(:\n")
    for r in eval_results(["--ref", ref, "--cand", good, "--cand", str(bad)]):
        assert missing(r) == [], (r["verdict"], missing(r))


def test_engine_written_results_have_every_field(tmp_path):
    """A timeout is written by the worker engine, not the judge."""
    ref = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
    hang = tmp_path / "hang.py"
    hang.write_text("import time\nimport torch\n"
                    "class ModelNew(torch.nn.Module):\n"
                    "    def __init__(self, *a):\n        super().__init__()\n"
                    "    def forward(self, x):\n        time.sleep(3600)\n")
    (r,) = eval_results(["--ref", ref, "--cand", str(hang), "--timeout", "3"])
    assert r["verdict"] == "timeout" and r["error_code"] == "TIMEOUT"
    assert missing(r) == [], missing(r)


def test_server_written_results_have_every_field(server):
    """A lease that expires on its last attempt: the store writes the result."""
    t = {**BASE, "task_id": uid("x"), "kernel_code": f"class ModelNew: pass  # {uid()}\n"}
    assert server.request("POST", "/evaluate", t)[0] == 200
    wid = register(server)
    lease_task(server, wid, t["task_id"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code, _, r = server.request("GET", f"/results/{t['task_id']}")
        if code == 200:
            break
        time.sleep(0.2)
    assert code == 200 and r["status"] == "failed" and r["verdict"] == "infra_error", r
    assert missing(r) == [], missing(r)
