"""python -m kgym.verl.main_ppo: verl's `verl.trainer.main_ppo` with a
check first (docs/training.md, "verl: running it").

verl's trainer started on a machine that lacks what the config asks for
(no GPU, fewer than trainer.n_gpus_per_node, no vLLM or SGLang for
actor_rollout_ref.rollout.name) waits in Ray for resources that never
come, saying nothing. This entry point takes the same command line
(hydra's --config-path, --config-name, overrides), composes the config as
verl does, and checks on this node, before Ray starts: the accelerator
and its count, and that the rollout engine imports. Any lack is one line
each on stderr and exit 2; else verl's main runs with the config.
KGYM_SKIP_PREFLIGHT=1 skips the check (a node that is not the one the
GPUs are on, e.g. a Ray client).
"""
from __future__ import annotations

import importlib.util
import os
import sys

PROG = "kgym.verl.main_ppo"

# the engines verl's rollout.name may name, and the module each imports
ENGINES = {"vllm": "vllm", "sglang": "sglang"}


def _gpus() -> tuple[int, str]:
    """(CUDA devices this process sees, why none when 0)."""
    try:
        import torch
    except Exception as e:  # verl's venv has torch; a broken one is a lack too
        return 0, f"torch does not import ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return 0, f"torch {torch.__version__} sees no CUDA device"
    return torch.cuda.device_count(), ""


def preflight(config, gpus: tuple[int, str] | None = None,
              has_module=None) -> list[str]:
    """What this node lacks for config, one line each ([] when nothing)."""
    has_module = has_module or (lambda m: importlib.util.find_spec(m) is not None)
    out = []
    trainer = config.trainer
    device = str(trainer.get("device", "cuda") or "cuda")
    want = int(trainer.get("n_gpus_per_node", 0) or 0)
    if device == "cuda" and want > 0:
        have, why = gpus if gpus is not None else _gpus()
        if have == 0:
            out.append(f"trainer.n_gpus_per_node={want} but this machine has no GPU: {why}; "
                       "verl's trainer would wait for one forever")
        elif have < want:
            out.append(f"trainer.n_gpus_per_node={want} but this machine has {have} CUDA "
                       f"device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")
    name = str(config.actor_rollout_ref.rollout.get("name", "") or "")
    mod = ENGINES.get(name)
    if mod and not has_module(mod):
        out.append(f"actor_rollout_ref.rollout.name={name} but {name} is not installed in "
                   f"{sys.executable}: install it on the GPU machine "
                   f"(docs/training.md, \"A rollout engine\")")
    return out


def _verl_config_dir() -> str:
    import verl.trainer
    return os.path.join(os.path.dirname(verl.trainer.__file__), "config")


def main() -> None:
    import hydra

    @hydra.main(config_path=_verl_config_dir(), config_name="ppo_trainer", version_base=None)
    def run(config) -> None:
        if os.environ.get("KGYM_SKIP_PREFLIGHT") != "1":
            lacks = preflight(config)
            if lacks:
                for line in lacks:
                    print(f"{PROG}: {line}", file=sys.stderr)
                sys.exit(2)
        from verl.trainer.main_ppo import main as verl_main
        verl_main(config)  # hydra's wrapper runs the task on a config given to it

    run()


if __name__ == "__main__":
    main()
