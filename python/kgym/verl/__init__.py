"""kgym inside verl 0.9.x, no fork (docs/training.md). Needs verl (the
separate .venv-verl, scripts/verl-venv), except kgym.verl.env and
kgym.verl.dataset.

- kgym.verl.agent_loop: the multi-turn agent loop ``kgym_agent``, each
  turn's reward on its last token, PRS per turn;
- kgym.verl.reward: the reward manager ``KgymRewardManager`` (``kgym``),
  scoring through kgym serve; importing it registers ``trloo``;
- kgym.verl.trloo: the multi-turn TRLOO advantage estimator ``trloo``;
- kgym.verl.mrs: MRS as verl's rollout-correction settings;
- kgym.verl.env: code extraction, scores and the batching scorer;
- kgym.verl.dataset: problems as verl's parquet dataset."""
