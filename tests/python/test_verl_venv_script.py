"""scripts/verl-venv keeps pip's and verl's noise (verl's "No supported
accelerator detected ... Falling back to 'nvidia'" on a machine without a
GPU) out of the terminal, in VENV/install.log, and shows the log's end on
a failure. Run on a stand-in venv (KGYM_VERL_VENV) whose pip and python
are scripts printing what the real ones print: nothing installed."""
from __future__ import annotations

import os
import stat
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WARN = "No supported accelerator detected, Falling back to 'nvidia'"


def fake_venv(tmp_path, pip_rc: int = 0):
    b = tmp_path / "venv" / "bin"
    b.mkdir(parents=True)
    scripts = {
        "pip": f"#!/bin/sh\necho 'Requirement already satisfied: verl'\n"
               f"echo 'WARNING: pip is noisy' >&2\nexit {pip_rc}\n",
        "python": f"#!/bin/sh\necho \"{WARN}\" >&2\n"
                  "case \"$2\" in *__version__*) echo 0.9.1;; esac\nexit 0\n",
    }
    for name, text in scripts.items():
        (b / name).write_text(text)
        (b / name).chmod(stat.S_IRWXU)
    return str(tmp_path / "venv")


def run(venv):
    return subprocess.run([os.path.join(REPO, "scripts", "verl-venv")], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, KGYM_VERL_VENV=venv))


def test_noise_goes_to_the_log(tmp_path):
    venv = fake_venv(tmp_path)
    p = run(venv)
    assert p.returncode == 0, p.stderr
    seen = p.stdout + p.stderr
    assert "accelerator" not in seen and "WARNING" not in seen, seen
    assert "verl-venv: verl 0.9.1 in " in p.stdout and "install.log" in p.stdout
    log = open(os.path.join(venv, "install.log")).read()
    assert WARN in log and "WARNING: pip is noisy" in log


def test_a_failure_shows_the_log(tmp_path):
    p = run(fake_venv(tmp_path, pip_rc=1))
    assert p.returncode == 1
    assert "verl-venv: pip install failed; the end of" in p.stderr
    assert "WARNING: pip is noisy" in p.stderr
