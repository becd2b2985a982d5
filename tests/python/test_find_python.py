"""scripts/find-python without KGYM_PYTHON or a .venv: the first python3
that has torch, found without importing it (every engine start without a
.venv runs it; importing torch there cost a cold kgym eval 3 s)."""
from __future__ import annotations

import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tree(tmp_path):
    """A copy of the script in a tree with no .venv, and a bin/python3."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(ROOT, "scripts", "find-python"), tmp_path / "scripts")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = shutil.which("python3")
    assert real, "no python3 on PATH"
    os.symlink(real, bindir / "python3")
    return str(tmp_path / "scripts" / "find-python"), str(bindir)


def _run(script, bindir, pythonpath):
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": pythonpath, "KGYM_PYTHON": ""}
    return subprocess.run(["sh", script], capture_output=True, text=True, env=env,
                          timeout=60).stdout.strip()


def test_a_python3_with_torch_is_found_without_importing_torch(tmp_path):
    script, bindir = _tree(tmp_path)
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    got = _run(script, bindir, str(tmp_path / "site"))
    assert got == os.path.join(bindir, "python3")
    assert not marker.exists(), "find-python imported torch"


def test_without_torch_anywhere_it_falls_back_to_python3(tmp_path):
    script, bindir = _tree(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    if _run(script, bindir, str(empty)) != "python3":
        # the system python3 has torch of its own: nothing to test here
        assert subprocess.run([os.path.join(bindir, "python3"), "-c", "import torch"],
                              capture_output=True).returncode == 0
