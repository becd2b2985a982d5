"""Problems as verl's RL dataset (parquet): one row per reference program,
its prompt the C agent's first turn (system and first message, libkgym's
templates through kgym.prompts, docs/agent.md), reward_model.ground_truth the
reference, extra_info.entry_point and name, agent_name kgym_agent.

    python -m kgym.verl.dataset PROBLEMS OUT.parquet [--backend triton]
                                [--entry-point Model] [--no-system]

PROBLEMS is a KernelBench tree (PROBLEMS/levelN/*.py, named levelN/stem), a
folder of reference files, or one file; a file without ``class <entry
point>`` or ``def get_inputs`` is skipped with a line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

from kgym import prompts


def first_prompt(reference: str, backend: str, entry_point: str = "Model") -> str:
    """The C agent's first turn (libkgym's template)."""
    return prompts.fill(prompts.default("first"), {
        "reference": reference, "entry_point": entry_point, "backend": backend,
        "backend_hint": prompts.backend_hint(backend)})


def problems(path: str) -> list[tuple[str, str]]:
    """(name, file) of each problem under path, sorted by name."""
    if os.path.isfile(path):
        return [(os.path.splitext(os.path.basename(path))[0], path)]
    levels = sorted(d for d in os.listdir(path) if d.startswith("level")
                    and os.path.isdir(os.path.join(path, d)))
    dirs = [(lv + "/", os.path.join(path, lv)) for lv in levels] or [("", path)]
    out = []
    for prefix, d in dirs:
        for f in sorted(os.listdir(d)):
            if f.endswith(".py") and os.path.isfile(os.path.join(d, f)):
                out.append((prefix + f[:-3], os.path.join(d, f)))
    return out


def rows(path: str, backend: str, entry_point: str = "Model", system: bool = True) -> list[dict]:
    out = []
    for name, f in problems(path):
        with open(f, encoding="utf-8") as fh:
            ref = fh.read()
        if f"class {entry_point}" not in ref or "def get_inputs" not in ref:
            print(f"kgym.verl.dataset: {name} skipped: no `class {entry_point}` or "
                  "`def get_inputs`", file=sys.stderr)
            continue
        msgs = ([{"role": "system", "content": prompts.default("system")}] if system else []) + [
            {"role": "user", "content": first_prompt(ref, backend, entry_point)}]
        out.append({"data_source": "kgym", "prompt": msgs, "agent_name": "kgym_agent",
                    "reward_model": {"style": "rule", "ground_truth": ref},
                    "extra_info": {"name": name, "entry_point": entry_point,
                                   "index": len(out)}})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kgym.verl.dataset")
    ap.add_argument("problems")
    ap.add_argument("out")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--entry-point", default="Model")
    ap.add_argument("--no-system", action="store_true")
    a = ap.parse_args(argv)
    rs = rows(a.problems, a.backend, a.entry_point, not a.no_system)
    if not rs:
        print(f"kgym.verl.dataset: no problem in {a.problems}", file=sys.stderr)
        return 2
    import pandas as pd
    pd.DataFrame(rs).to_parquet(a.out)
    print(f"kgym.verl.dataset: {len(rs)} problems -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
