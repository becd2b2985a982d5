"""Faults back to back, then honest tasks, in ONE engine.

test_faults.py puts an honest task after every fault; here the faults
follow one another with nothing in between (a segfault, a spin, a memory
bomb, a fork bomb, a candidate that kills its parent, one that leaves a
daemon behind, one that connects out), so whatever one leaves behind (a
warm spare forked while it ran, a uid still held by its processes, a
device lock, a cache dir) meets the next fault and then the honest tasks
at the end, which must pass. One `kgym eval` runs the whole sequence (one
engine, one zygote, its spares), and after it nothing of the run may be
left (run_kgym's checks: processes, work dirs, task cgroups).

Run: PYTHONPATH=harness:python .venv/bin/python -m pytest -q tests/faults/test_fault_sequence.py
"""

from __future__ import annotations

import os
import re
import socket

import pytest

import test_faults as tf

pytestmark = [
    pytest.mark.skipif(not os.access(tf.KGYM, os.X_OK), reason=f"{tf.KGYM} not built (make)"),
    pytest.mark.needs_root("the fault suite runs candidates as other uids (CI runs as root)"),
]

# the kinds of the sequence, in its order: (candidate, verdicts)
SEQUENCE = [
    ("segfault", {"runtime_error"}),
    ("infinite_loop", {"timeout"}),                      # the spin
    ("alloc_unbounded", {"runtime_error", "timeout"}),   # slow to fill on a small machine
    ("fork_bomb", {"runtime_error"}),
    ("kill_parent", {"runtime_error"}),
    ("daemon", {"runtime_error"}),                       # lingers
    ("network", {"runtime_error"}),                      # connects out
]
HONEST_AFTER = 2  # two honest tasks: the first may take a spare made during the faults


@pytest.fixture(scope="module")
def sequence_run():
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    try:
        cands = [name for name, _ in SEQUENCE] + [tf.HONEST] * HONEST_AFTER
        run = tf.run_kgym("sequence", cands, timeout=20,
                          overrides={"network": tf._network_source(lst.getsockname()[1])},
                          wall_limit=400)
        run.listener = lst
        yield run
    finally:
        lst.close()


def test_faults_back_to_back_then_honest_passes(sequence_run) -> None:
    res = sequence_run.results
    assert len(res) == len(SEQUENCE) + HONEST_AFTER
    honest = [r for r in res if r.get("verdict") == "pass"]
    faults = [r for r in res if r.get("verdict") != "pass"]
    assert len(honest) == HONEST_AFTER, (
        "an honest task after the faults did not pass: " + "; ".join(
            f"{r.get('verdict')}: {(r.get('error_message') or '')[:300]}" for r in res[len(SEQUENCE):]))
    assert len(faults) == len(SEQUENCE)
    # each fault was contained with its own clear verdict (in completion
    # order, which for one slot is the submission order but for the spin and
    # the task staged behind it)
    seen = set()
    for name, verdicts in SEQUENCE:
        pats = tf.EXPECT[name][1]
        hit = [r for r in faults if id(r) not in seen and r.get("verdict") in verdicts
               and (r.get("verdict") == "timeout" or all(
                   re.search(p, r.get("error_message") or "") for p in pats))]
        assert hit, f"{name}: no result with {verdicts} and {pats}: " + "; ".join(
            f"{r.get('verdict')}: {(r.get('error_message') or '')[:200]}" for r in faults)
        seen.add(id(hit[0]))
        if r_msg := hit[0].get("error_message"):
            if hit[0].get("verdict") != "timeout":
                tf.extra_checks(name, r_msg, sequence_run.listener)
    # the honest tasks ran after the faults, in the same engine
    for r in honest:
        assert (r.get("device") or {}).get("mode", "").startswith("zygote"), r.get("device")


def test_kill_parent_report_fits_the_cap_beside_many_zombies() -> None:
    """A fork bomb before kill_parent leaves hundreds of zombies as siblings
    until they are reaped; the report must still show the parent's outcome
    and every kill that worked within the harness's 2000-character cap."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "kill_parent_fault", os.path.join(tf.CANDS, "kill_parent.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    outcomes = [(300 + i, "sibling", "PermissionError(1)") for i in range(600)]
    outcomes += [(950, "sibling", "KILLED"), (999, "parent", "PermissionError(1)")]
    msg = ("KILL_PARENT " + mod._report(sorted(outcomes)))[:2000]
    pats, forbidden = tf.EXPECT["kill_parent"][1], tf.EXPECT["kill_parent"][2]
    assert all(re.search(p, msg) for p in pats), msg
    assert all(re.search(p, msg) for p in forbidden), "a kill that worked was cut off"
    assert "596 more siblings PermissionError(1)" in msg
