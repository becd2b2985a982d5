"""The judge's shape: a pipeline of stages, one module and one mixin each.

Each stage's behaviour is tested by its own files (named in each module's
docstring); these tests hold the structure those files rely on.
"""

from __future__ import annotations

import ast
import inspect
import pathlib

from kgym_harness import judge
from kgym_harness.stages import correctness, integrity, precision, profile, timing

STAGES = [correctness.Correctness, precision.Precision, timing.Timing,
          integrity.Integrity, profile.Profiling]
STAGE_DIR = pathlib.Path(correctness.__file__).parent


def _own_methods(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if inspect.isfunction(v)}


def test_no_method_is_defined_twice():
    # A mixin's method of the same name as another's would win silently by
    # the order of Judge's bases.
    seen: dict[str, str] = {n: "Judge" for n in _own_methods(judge.Judge)}
    for cls in STAGES:
        for name in _own_methods(cls):
            assert name not in seen, f"{name} in both {seen[name]} and {cls.__name__}"
            seen[name] = cls.__name__


def test_judge_is_every_stage():
    assert set(STAGES) <= set(judge.Judge.__mro__)


def test_the_pipeline_names_methods_in_order():
    keys = [k for k, _, _ in judge.PIPELINE]
    assert keys == ["setup", "compile", "gate", "correctness", "timing", "profiling",
                    "timing_checks", "recheck", "speedup_recheck"]
    for _, method, when in judge.PIPELINE:
        assert callable(getattr(judge.Judge, method))
        assert when is None or callable(when)


def test_stages_import_down_only():
    # stages/ may use the mechanism modules and each other's package, never
    # the pipeline (judge.py) or the spare that sits on top of it.
    for path in STAGE_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
                assert not {"judge", "spare"} & set(names), f"{path.name} imports {names}"
