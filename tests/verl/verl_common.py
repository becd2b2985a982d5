"""Shared by the cases run under verl's venv (tests/verl/verl_*_case.py):
verl's own config for examples/verl/kgym_trloo_qwen.yaml, composed by
hydra over verl's ppo_trainer.yaml with the overrides a CPU test needs, and
the tiny tokenizer and model of tests/integration/tiny_lm.py (built here,
nothing downloaded)."""
from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))


def tiny_model(path: str) -> str:
    import tiny_lm
    if not os.path.exists(os.path.join(path, "config.json")):
        tiny_lm.build(path)
    return path


def compose(overrides: list[str]):
    """verl's config from the example YAML (hydra, verl's own search path)."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    with initialize_config_dir(config_dir=os.path.join(REPO, "examples", "verl"),
                               version_base=None):
        return hcompose(config_name="kgym_trloo_qwen", overrides=overrides)


def kgym_overrides(server: str, token_file: str, model: str) -> list[str]:
    return [f"kgym.server={server}", f"kgym.token_file={token_file}",
            "kgym.fields={backend: cpu, num_correct_trials: 1, num_perf_trials: 3, "
            "timeout: 120}",
            "kgym.server_wait=3", "kgym.eval_timeout=240", "kgym.poll=0.1",
            f"actor_rollout_ref.model.path={model}",
            ]
