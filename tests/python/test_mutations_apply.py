"""Every mutation of `make mutate` (tests/mutations.py) still applies: its
text occurs exactly once in its file, it changes something, its id is its
own, and the tests named to catch it exist. `make mutate` itself runs for
hours and only on request; a mutation whose text drifted away (a defence
moved to another file) would otherwise be found only then, as it was for
worker-footprint-note-ignored after the engine's notes moved."""
from __future__ import annotations

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import mutations  # noqa: E402

ALL = mutations.MUTATIONS


def test_ids_are_unique():
    ids = [m.id for m in ALL]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("m", ALL, ids=[m.id for m in ALL])
def test_the_mutation_applies_once_and_names_real_tests(m):
    path = os.path.join(ROOT, m.file)
    assert os.path.isfile(path), m.file
    with open(path, encoding="utf-8") as f:
        n = f.read().count(m.find)
    assert n == 1, f"{m.id}: its text occurs {n} times in {m.file}"
    assert m.replace != m.find
    assert m.tests, f"{m.id}: no test is named to catch it"
    for t in m.tests:
        if t.startswith("unit:"):
            assert os.path.isfile(os.path.join(ROOT, "tests", "unit", t[5:] + ".c")), t
            continue
        target = t.split()[0]
        file, _, func = target.partition("::")
        assert os.path.isfile(os.path.join(ROOT, file)), t
        if func:
            with open(os.path.join(ROOT, file), encoding="utf-8") as f:
                assert re.search(rf"^def {re.escape(func.split('[')[0])}\(", f.read(), re.M), t
