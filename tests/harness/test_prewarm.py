"""prewarm.warm_device: a warm spare's device warm-up must run, not raise.

Regression: an `import torch.utils.cpp_extension` statement in its body
made `torch` a local name, so its first line raised UnboundLocalError; the
spare reported a warm_error and every task paid the cpp_extension import
and Triton's start-up again. On the CPU the
same function runs up to its Triton part, which needs a GPU (or the
interpreter) and is reported, not raised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness")

PROBE = r"""
import json, sys
from kgym_harness import prewarm
errors = prewarm.warm_prep("cpu")
errors.update(prewarm.warm_device("cpu"))
setup = prewarm.preload_setup("cpu")  # nothing to set up off CUDA
print(json.dumps({"errors": errors, "setup": setup, "tables": list(prewarm._TABLES),
                  "cpp_extension": "torch.utils.cpp_extension" in sys.modules}))
"""


def test_warm_device_runs_every_part_on_cpu():
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS))
    env.pop("TRITON_INTERPRET", None)
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["cpp_extension"] is True
    assert out["setup"] == {} and out["tables"] == []
    # only the Triton part may fail here (a real kernel launch needs a GPU)
    assert set(out["errors"]) <= {"triton"}, out["errors"]


def test_preload_pair_holds_the_lock_once_per_unit_and_the_candidate_answers(tmp_path,
                                                                            monkeypatch):
    """spare._preload_pair against a real candidate process: one shared hold
    of the device lock per preload unit, one operation each (the trace says
    so), each with a warm command the candidate answers; on the CPU nothing
    is loaded and nothing fails. The device side is on the H200
    (test_prewarm_gpu.py, make test-gpu)."""
    import socket
    from kgym_harness import prewarm, spare
    from kgym_harness.channel import Channel
    from kgym_harness.devlock import DeviceLock
    monkeypatch.setenv("KGYM_LOCK_TRACE", "1")
    a, b = socket.socketpair()
    env = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS), TMPDIR=str(tmp_path))
    env.pop("KGYM_DEVICE", None)
    cand = subprocess.Popen([sys.executable, "-c", "import sys\nfrom kgym_harness.candidate "
                             "import run_candidate\nrun_candidate(int(sys.argv[1]))",
                             str(b.fileno())], pass_fds=[b.fileno()], env=env)
    b.close()
    try:
        chan = Channel(a.detach())
        lock = DeviceLock(str(tmp_path / "lock"))
        out: dict = {}
        spare._preload_pair(chan, out, lock, "cpu")
        assert "preload_error" not in out, out
        units = prewarm.units()
        assert len(units) > len(prewarm.SPARE_FAMILIES)  # one operation per unit
        assert {u.split("/")[0] for u in units} == set(prewarm.SPARE_FAMILIES)
        assert [h[0] for h in lock.trace] == ["spare/preload"] * len(units)
        assert all(h[1] == "s" for h in lock.trace) and lock.mode is None
        chan.send({"cmd": "exit"})
        reply = chan.recv()[0]  # the exit's, not a warm reply left unread
        assert reply["ok"] is True and "parts_ms" not in reply, reply
        chan.close()
        assert cand.wait(timeout=60) == 0
    finally:
        if cand.poll() is None:
            cand.kill()


def test_every_preload_unit_runs_on_its_own_zeroed_tensors():
    """A spare's preload runs each unit once (on CUDA; prewarm.preload):
    every operation must run on the table's zeroed tensors without error
    (an index op on never-written indices could fault the device) and the
    random ones must draw from the preload's own generator, not from the
    default one that inputs are drawn from. Checked on the CPU, unit by
    unit."""
    import torch
    sys.path.insert(0, os.path.abspath(HARNESS))
    from kgym_harness import prewarm
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    table = prewarm._harness_ops(torch.device("cpu"))
    ran = 0
    for name in prewarm.SPARE_FAMILIES:
        for fn in table[name]:
            fn()
            ran += 1
    assert ran == len(prewarm.units()) and ran > 70
    assert torch.equal(before, torch.get_rng_state())
    assert bool((table["index"][0]() == 0).all())  # zeroed values, valid indices
    # a spare's set-up allocates the tensors only (a kernel of its own must
    # wait for the device lock) and hands them over for zeroing
    made: list = []
    fams = prewarm._families(torch.device("cpu"), made)
    assert len(made) == 7 + 6 + (1 if "triton" in fams else 0), len(made)  # harness, common, triton
    for t in made:
        t.zero_()
    for name in prewarm.SPARE_FAMILIES:
        for fn in fams[name]:
            fn()
