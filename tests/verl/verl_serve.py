"""What the verl tests that need kgym serve share: verl's venv (skip, or
fail under KGYM_REQUIRE_VERL=1), a real `kgym serve --workers 2` on the cpu
backend (tests/integration/kgym_env.py, KGYM_BIN), the GELU problem with
its honest, wrong and cheating candidates, and running a case script under
verl's venv."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.environ.get("KGYM_VERL_PYTHON") or os.path.join(REPO, ".venv-verl", "bin", "python")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from kgym_env import KGYM, Env, free_port  # noqa: E402,F401


def require_verl() -> None:
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


def run_case(script: str, case: dict, timeout: float = 240) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "python"), os.path.join(REPO, "tests", "verl")]),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    p = subprocess.run([PY, os.path.join(REPO, "tests", "verl", script)],
                       input=json.dumps(case), capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])
