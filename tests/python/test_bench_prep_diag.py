"""bench/diag/prep_imports.py, preload_modes.py and ctx_rate.py on a
machine without a GPU: prep_imports shows the zygote's pre-imports at work
(a child forked before them imports the extension machinery itself, one
forked after imports next to nothing, no driver device open);
preload_modes and ctx_rate refuse clearly without a device, and ctx_rate
reads its variants or names what is wrong with one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIAG = os.path.join(ROOT, "bench", "diag")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "harness"), CUDA_VISIBLE_DEVICES="")


def test_prep_imports_shows_what_the_pre_imports_spare_a_child():
    p = subprocess.run([sys.executable, os.path.join(DIAG, "prep_imports.py")],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 4, p.stdout
    before, pre, after = lines[1], lines[2], lines[3]
    assert before["child"] == "nothing pre-imported" and after["child"] == "pre-imported"
    assert before["modules"] > 50 and before["imported"].get("torch.utils", 0) >= 1, before
    assert after["modules"] < 10, after
    assert pre["driver_fds"] == 0, pre


def test_preload_modes_needs_a_device_and_says_so():
    p = subprocess.run([sys.executable, os.path.join(DIAG, "preload_modes.py"), "run"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 2 and "needs a CUDA device" in p.stderr, (p.returncode, p.stderr)
    p = subprocess.run([sys.executable, os.path.join(DIAG, "preload_modes.py"), "bogus"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 2 and "usage" in p.stderr


def test_ctx_rate_variants_and_its_refusal_without_a_device():
    sys.path.insert(0, DIAG)
    try:
        import ctx_rate
    finally:
        sys.path.remove(DIAG)
    assert ctx_rate.parse_variant("base") == {}
    assert ctx_rate.parse_variant("CUDA_DEVICE_MAX_CONNECTIONS=1;X=") == {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1", "X": ""}
    for bad in ("X", "=1", "A=1;B"):
        try:
            ctx_rate.parse_variant(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")
    script = os.path.join(DIAG, "ctx_rate.py")
    p = subprocess.run([sys.executable, script, "--variant", "X"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 2 and "NAME=V" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, script, "--k", "1", "--secs", "0.2"],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 2 and "needs a CUDA device" in p.stderr, (p.returncode, p.stderr)
