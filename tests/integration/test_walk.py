"""The five-command walk that opens docs/agent.md ("From nothing to a
report"), run as written on a fresh `git clone` of this checkout (its
committed HEAD): install and build, `kgym serve` and `kgym policy
scripted` in the background (each waited for until it prints that it is
up), `kgym rollout` on problems/cpu/level1, `kgym report`. The clone gets
links to this checkout's .venv and .venv-verl, so scripts/install-deps
finds everything and installs nothing; the ports 10907 and 8100 of the
text are replaced by free ones (other servers may hold those). A few
minutes on 2 CPUs, most of it the clone's `make`."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest

from kgym_env import ROOT, free_port

VENV = os.path.realpath(os.path.join(ROOT, ".venv"))
VERL = os.path.realpath(os.path.join(ROOT, ".venv-verl"))

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(VENV, "bin", "python"), os.X_OK)
    or not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")),
    reason="needs the checkout's .venv and its git repository")


def walk_commands() -> list[str]:
    with open(os.path.join(ROOT, "docs", "agent.md")) as f:
        doc = f.read()
    sec = doc[doc.index("## From nothing to a report"):]
    block = re.search(r"```sh\n(.*?)```", sec, re.S).group(1)
    cmds = [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    return cmds


def test_the_doc_has_five_commands():
    cmds = walk_commands()
    assert len(cmds) == 5, cmds
    assert cmds[0].startswith("scripts/install-deps") and "kgym report" in cmds[4]


def test_walk_on_a_fresh_clone():
    base = tempfile.mkdtemp(prefix="kgym-walk-", dir="/tmp")
    os.chmod(base, 0o755)  # candidates run as uid nobody below it
    clone = os.path.join(base, "kgym")
    bg: list[subprocess.Popen] = []
    try:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True, timeout=120)
        os.symlink(VENV, os.path.join(clone, ".venv"))
        env = dict(os.environ, TMPDIR=base)
        for k in ("KGYM_BIN", "KGYM_LIB", "KGYM_SERVER", "KGYM_TOKEN_FILE", "PYTHONPATH"):
            env.pop(k, None)
        if os.access(os.path.join(VERL, "bin", "python"), os.X_OK):
            os.symlink(VERL, os.path.join(clone, ".venv-verl"))
        else:
            env["KGYM_NO_VERL"] = "1"
        sp, pp = free_port(), free_port()
        cmds = [c.replace("10907", str(sp)).replace("8100", str(pp)) for c in walk_commands()]
        outs = []
        for c in cmds:
            if c.endswith("&"):
                p = subprocess.Popen(["bash", "-c", "exec " + c[:-1]], cwd=clone, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
                bg.append(p)
                seen = []
                for line in p.stdout:  # its log lines, then the one that says it is up
                    seen.append(line)
                    if "listening on" in line or line.startswith("http://"):
                        break
                assert p.poll() is None, (c, seen)
                threading.Thread(target=lambda p=p: [None for _ in p.stdout], daemon=True).start()
            else:
                r = subprocess.run(["bash", "-c", c], cwd=clone, env=env, capture_output=True,
                                   text=True, timeout=900)
                assert r.returncode == 0, (c, r.stdout[-2000:], r.stderr[-4000:])
                outs.append(r)
        assert "install-deps: ok" in outs[0].stdout + outs[0].stderr
        assert "pip install" not in outs[0].stdout + outs[0].stderr  # nothing installed again
        with open(os.path.join(clone, "walk.jsonl")) as f:
            rows = [json.loads(x) for x in f]
        assert len(rows) == 16
        verdicts = {(r["result"] or {}).get("verdict") for r in rows}
        assert {"pass", "mismatch", "hacked"} <= verdicts, verdicts
        assert all(r["reward"] is not None for r in rows)
        assert any("Verdict:" in r["messages"][-1]["content"] for r in rows if r["turn"] == 1)
        rep = os.path.join(clone, "walk-report")
        with open(os.path.join(rep, "report.json")) as f:
            assert json.load(f)["runs"]
        with open(os.path.join(rep, "report.html")) as f:
            assert "<svg" in f.read()
        assert "Fast@" in outs[2].stdout + outs[2].stderr
    finally:
        for p in bg:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in bg:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(base, ignore_errors=True)
