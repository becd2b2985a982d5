"""kgym.verl.main_ppo: verl's main_ppo behind a check that fails at once,
one line per lack, where verl's trainer would wait in Ray forever: no GPU,
fewer GPUs than trainer.n_gpus_per_node, no rollout engine. The check on
configs made here (the project's Python), then the documented command with
the example config on this GPU-less machine (verl's venv; skips without
it, fails under KGYM_REQUIRE_VERL=1)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kgym.verl.main_ppo import preflight

HERE = os.path.dirname(os.path.abspath(__file__))


class Cfg(dict):
    """A stand-in for the composed config: attributes and .get."""
    __getattr__ = dict.__getitem__


def cfg(n_gpus: int, engine: str, device: str = "cuda") -> Cfg:
    return Cfg(trainer=Cfg(n_gpus_per_node=n_gpus, device=device),
               actor_rollout_ref=Cfg(rollout=Cfg(name=engine)))


def test_preflight_lines():
    present = lambda m: True  # noqa: E731
    absent = lambda m: False  # noqa: E731
    assert preflight(cfg(8, "vllm"), (8, ""), present) == []
    assert preflight(cfg(2, "sglang"), (4, ""), present) == []
    got = preflight(cfg(1, "vllm"), (0, "torch sees no CUDA device"), absent)
    assert len(got) == 2, got
    assert "no GPU: torch sees no CUDA device" in got[0]
    assert "vllm is not installed" in got[1] and "docs/training.md" in got[1]
    got = preflight(cfg(8, "sglang"), (2, ""), absent)
    assert "has 2 CUDA device(s)" in got[0] and "sglang is not installed" in got[1]
    # not a CUDA run, or an engine kgym does not know: nothing to say
    assert preflight(cfg(1, "hf", device="npu"), (0, "x"), absent) == []


def test_example_config_fails_fast_without_gpu_or_engine():
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "verl"))
    import verl_serve as V
    V.require_verl()
    if V.verl_imports("vllm"):
        pytest.skip("vLLM is installed in verl's venv: the engine line cannot be shown")
    p = subprocess.run(
        [V.PY, "-m", "kgym.verl.main_ppo", f"--config-path={V.REPO}/examples/verl",
         "--config-name=kgym_trloo_qwen", "trainer.n_gpus_per_node=1"],
        capture_output=True, text=True, timeout=240, env=dict(V.verl_env(), CUDA_VISIBLE_DEVICES=""),
        cwd=V.REPO)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("kgym.verl.main_ppo: ")]
    assert len(lines) == 2, p.stderr[-3000:]
    assert "no GPU" in lines[0] and "vllm is not installed" in lines[1], lines
