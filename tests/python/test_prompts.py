"""kgym.prompts reads the C agent's default prompts from libkgym: the text
`kgym rollout --write-prompts` writes is the text Python gets, and the
verl dataset's first turn is the C agent's, filled the same way."""
from __future__ import annotations

import os
import subprocess

import pytest

from kgym import prompts

KGYM = os.environ.get("KGYM_BIN") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "kgym")


def test_the_defaults_are_the_c_agents(tmp_path):
    subprocess.run([KGYM, "rollout", "--write-prompts", str(tmp_path)], check=True,
                   capture_output=True)
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 3, names
    for name in ("system", "first", "refine"):
        (path,) = [n for n in names if name in n]
        with open(tmp_path / path, encoding="utf-8") as f:
            assert f.read().rstrip("\n") == prompts.default(name).rstrip("\n"), name
    with pytest.raises(ValueError, match="no default prompt"):
        prompts.default("second")


def test_hints_and_fill():
    assert "Triton" in prompts.backend_hint("triton")
    assert "CUDA" in prompts.backend_hint("cuda")
    assert prompts.backend_hint("tpu") == prompts.backend_hint("")
    # one pass: braces in a value are not scanned, unknown ones are kept
    out = prompts.fill("a {x} {y} {z}", {"x": "{y}", "y": "2"})
    assert out == "a {y} 2 {z}"


def test_the_verl_dataset_asks_what_the_c_agent_asks():
    from kgym.verl import dataset
    ref = "class Model:\n    def f(self): return {1: 2}\n"
    text = dataset.first_prompt(ref, "triton")
    assert ref in text and prompts.backend_hint("triton") in text
    assert "{reference}" not in text and "{backend_hint}" not in text
