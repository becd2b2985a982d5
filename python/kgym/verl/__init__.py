"""kgym inside verl (docs/training.md): importing kgym.verl.trloo registers
the multi-turn TRLOO advantage estimator "trloo" with verl's
register_adv_est. Needs verl (the separate .venv-verl, scripts/verl-venv)."""
