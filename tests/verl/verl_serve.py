"""What the verl tests that need kgym serve share: verl's venv (skip, or
fail under KGYM_REQUIRE_VERL=1), a real `kgym serve --workers 2` on the cpu
backend (tests/integration/kgym_env.py, KGYM_BIN), the GELU problem with
its honest, wrong and cheating candidates, and running a case script under
verl's venv."""
from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.environ.get("KGYM_VERL_PYTHON") or os.path.join(REPO, ".venv-verl", "bin", "python")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from kgym_env import KGYM, Env, free_port  # noqa: E402,F401


def require_verl() -> None:
    import pytest
    if not os.access(PY, os.X_OK):
        if os.environ.get("KGYM_REQUIRE_VERL") == "1":
            raise RuntimeError(f"KGYM_REQUIRE_VERL=1 but {PY} is missing (scripts/verl-venv)")
        pytest.skip(f"verl's venv {PY} not built (scripts/verl-venv)", allow_module_level=True)
    if not os.access(KGYM, os.X_OK):
        pytest.skip(f"{KGYM} not built (make)", allow_module_level=True)


GELU_REF = os.path.join(REPO, "problems", "cpu", "level1", "1_GELU.py")
GELU_SOL = os.path.join(REPO, "problems", "cpu", "level1", "solutions", "1_GELU.cpu.py")


def read(p: str) -> str:
    with open(p) as f:
        return f.read()


def block(code: str, before: str) -> str:
    return f"{before}\n\n```python\n{code}```\n"


def honest() -> str:
    return block(read(GELU_SOL), "One OpenMP loop.")


def wrong() -> str:
    code = read(GELU_SOL).replace("0.70710678118654752f", "0.5f").replace(
        "kgym_cpu_level1_1_GELU_cpu", "kgym_verl_gelu_wrong")
    return block(code, "A tuned constant.")


CHEAT = block("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.nn.functional.gelu(x)\n",
              "PyTorch's own GELU.")


def broken_ref() -> str:
    """The GELU problem with a get_inputs that raises: problem_error."""
    return read(GELU_REF).replace("    return [torch.randn(ROWS, COLS)]",
                                  "    raise RuntimeError('this problem is broken')")


def verl_env() -> dict:
    """The environment of a case under verl's venv: python/ and tests/verl
    on the path, then $KGYM_VERL_EXTRA_PATH (packages kept outside the venv);
    nothing fetched from the hub; Ray without its home-directory token."""
    path = [os.path.join(REPO, "python"), os.path.join(REPO, "tests", "verl")]
    if os.environ.get("KGYM_VERL_EXTRA_PATH"):
        path.append(os.environ["KGYM_VERL_EXTRA_PATH"])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), HF_HUB_OFFLINE="1",
                TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")


def verl_imports(module: str) -> bool:
    """Whether verl's venv imports module (with verl_env's path)."""
    return subprocess.run([PY, "-c", f"import {module}"], env=verl_env(),
                          capture_output=True, timeout=120).returncode == 0


def run_case(script: str, case: dict, timeout: float = 240) -> dict:
    """Runs tests/verl/SCRIPT under verl's venv with case on stdin, in a
    session of its own, which is killed whole after it (a case that starts
    Ray leaves nothing behind, also on a timeout); its last stdout line."""
    p = subprocess.Popen([PY, os.path.join(REPO, "tests", "verl", script)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=verl_env(), start_new_session=True)
    try:
        out, err = p.communicate(json.dumps(case), timeout=timeout)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    assert p.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


PASS_2X = {"status": "completed", "verdict": "pass", "correctness": True, "speedup": 2.0,
           "profile": {"coverage": 0.5}, "hack_reasons": [], "feedback": "Verdict: pass"}


class Fake(http.server.BaseHTTPRequestHandler):
    """A stand-in kgym serve for replies the real one never gives (or not
    on demand). mode "batch": POST /evaluate/batch answers JSON that is not
    a batch reply; "results": the batch is accepted, POST /results/batch
    answers garbage; "old": a server without POST /results/batch (405)
    whose GET /results/{id} gives a result; "seq": POST /results/batch
    gives results. The n-th task submitted gets results[n] (the last one
    past the end of the list)."""

    mode = "batch"
    results = [PASS_2X]
    given: dict = {}

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def result(self, tid):
        return {**self.given[tid], "task_id": tid}

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/evaluate/batch":
            if self.mode == "batch":
                return self.reply(200, {"tasks": "not a list"})
            for t in body["tasks"]:
                self.given[t["task_id"]] = self.results[min(len(self.given),
                                                            len(self.results) - 1)]
            tasks = [{"task_id": t["task_id"], "status": "pending"} for t in body["tasks"]]
            return self.reply(200, {"tasks": tasks, "accepted": len(tasks), "rejected": 0})
        if self.path == "/results/batch":
            if self.mode == "old":
                return self.reply(405, {"error": {"code": "method_not_allowed",
                                                  "message": "no such route"}})
            if self.mode == "results":
                return self.reply(200, {"results": "garbage"})
            return self.reply(200, {"results": [self.result(t) for t in body["task_ids"]],
                                    "pending": [], "unknown": []})
        self.reply(404, {})

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/results/"):
            return self.reply(200, self.result(self.path.rsplit("/", 1)[1]))
        self.reply(404, {})

    def log_message(self, *a):
        pass


def fake(mode: str, results: list | None = None) -> http.server.ThreadingHTTPServer:
    """A Fake server on a loopback port, serving in a thread; shutdown() it."""
    cls = type("F", (Fake,), {"mode": mode, "results": results or [PASS_2X], "given": {}})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), cls)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


NO_CODE = "Let me think about it first."


def ray_case(script: str, tmp_path) -> dict:
    """A Ray case (verl_legacy_case.py, verl_v1_case.py): one problem, 2
    samples x 2 turns (pass, pass; pass, no code) against a Fake server
    that passes every evaluation."""
    srv = fake("seq", [PASS_2X])
    try:
        return run_case(script, {
            "server": f"http://127.0.0.1:{srv.server_port}", "model_dir": str(tmp_path / "tiny"),
            "reference": read(GELU_REF),
            "replies": [[honest(), honest()], [honest(), NO_CODE]]}, timeout=150)
    finally:
        srv.shutdown()


def check_two_turns(out: dict) -> None:
    """What ray_case's samples must give: libkgym's rewards per turn (3.5
    for a pass, 0 without code), each on its turn's last token, turn k the
    k-th run of the mask, TRLOO per turn (returns 7, 3.5 and 3.5, 0: +-3.5
    at both turns)."""
    import pytest
    a, b = out["samples"]
    assert a["extra"]["kgym_turn_rewards"] == [3.5, 3.5]
    assert b["extra"]["kgym_turn_rewards"] == [3.5, 0]
    for x in (a, b):
        ends = x["extra"]["kgym_turn_ends"]
        assert x["extra"]["kgym_turn_index"] == [0, 1]
        assert [e for _, e in x["runs"]] == ends
        assert x["rm_nonzero"] == [[e - 1, r] for e, r in
                                   zip(ends, x["extra"]["kgym_turn_rewards"]) if r]
    assert a["run_advantages"] == pytest.approx([3.5, 3.5])
    assert b["run_advantages"] == pytest.approx([-3.5, -3.5])
