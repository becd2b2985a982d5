"""Each layer that ends what a task started, shown on its own.

A task's leftovers are ended by several layers: the engine kills each
child's process group (kill_child, release_children, note_exit), the
zygote and the engine kill orphans reparented to them (subreapers), and
the task's cgroup is emptied when it is closed. Any one of them hides a
fault in another, so each test here takes a path on which one layer alone
stands between a leftover process and a leak:

* `kgym eval` stopped by SIGTERM while the task runs: kg_engine_free kills
  the tasks in flight (kill_child) and exits, reaping no orphans (in fresh
  mode no zygote is there to kill them either). With `--no-cgroups`, a
  process the candidate forked that stays in its process group is ended
  by the process-group kill alone (a kill_child that kills only the
  candidate's pid leaves it running); with cgroups on, a process that left
  the group with setsid() is ended by the cgroup alone.
* the task ends by itself (zygote mode, `--no-cgroups`): the group kills
  when the result is in and the exits are seen, and the zygote's orphan
  kill, without the cgroup.

The leftover names itself with prctl(PR_SET_NAME) (a marker the test
chose), so the test finds it in /proc while the task runs, checks it is
where the test wants it (its group, its session, a task cgroup or none),
and after `kgym eval` has exited checks it is gone. Root only, like
test_faults.py (candidates run as other uids there).

Run: KGYM_BIN=build/kgym PYTHONPATH=harness:python .venv/bin/python -m pytest -q \
     tests/faults/test_kill_layers.py
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

from test_faults import COMMON, KGYM, REF, _read, _state, cgroup_leftovers, processes_of_run

pytestmark = [
    pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the fault suite needs root (CI runs as root)"),
]

# The candidate: its first forward forks a process that names itself MARKER
# and sleeps; then forward waits forever (interrupted) or raises (finished).
LEAVER = '''"""Leaves a sleeping process behind (tests/faults/test_kill_layers.py)."""
import ctypes
import os
import threading
import time

import torch.nn as nn

MARKER = {marker!r}
SETSID = {setsid!r}
FINISH = {finish!r}


def leave_one_behind():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if SETSID:
                os.setsid()  # out of the candidate's process group and session
            ctypes.CDLL(None).prctl(15, MARKER.encode(), 0, 0, 0)  # PR_SET_NAME
            os.write(w, b"x")
            os.close(w)
            time.sleep(600)
        finally:
            os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    return pid


class ModelNew(nn.Module):
    def forward(self, x):
        pid = leave_one_behind()
        if FINISH:
            raise RuntimeError(f"LEFT pid={{pid}}")
        threading.Event().wait()
        return x
'''


def _comm(pid: int) -> str:
    return ((_read(f"/proc/{pid}/comm", "r") or "")).strip()


def _find(marker: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and _comm(int(d)) == marker and _state(int(d)) not in (None, "Z", "X"):
            out.append(int(d))
    return out


def _cgroups_of(pid: int) -> str:
    return _read(f"/proc/{pid}/cgroup", "r") or ""


def run_leaver(*, setsid: bool, finish: bool, cgroups: bool, fresh: bool) -> dict:
    """Runs one LEAVER task through `kgym eval`; unless finish, sends kgym
    SIGTERM once the leftover runs. Returns what was seen: the leftover's
    pid, pgid, sid and the candidate's (its parent's) pid, the task cgroups
    that existed meanwhile, kgym's exit status and stderr, and the
    leftovers still alive after kgym exited (none, when the layer works)."""
    base = tempfile.mkdtemp(prefix="kgymkill-", dir="/tmp")
    os.chmod(base, 0o755)  # the candidate's uid must reach its work dir below
    run_marker = f"kgymfaults-{uuid.uuid4().hex}"
    marker = "kgk" + uuid.uuid4().hex[:12]  # comm holds 15 characters
    cand = os.path.join(base, "leaver.py")
    with open(cand, "w") as f:
        f.write(LEAVER.format(marker=marker, setsid=setsid, finish=finish))
    argv = [KGYM, "eval", "--ref", REF, *COMMON, "--timeout", "120", "--cand", cand]
    argv += ["--fresh"] if fresh else []
    argv += [] if cgroups else ["--no-cgroups"]
    env = dict(os.environ, TMPDIR=base, KGYM_FAULTS_RUN=run_marker)
    started = time.time()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen: dict = {"marker": marker}
    try:
        deadline = time.monotonic() + 150
        while not _find(marker):
            assert proc.poll() is None or finish, (
                f"kgym eval exited {proc.returncode} before the leftover ran:\n"
                + proc.stderr.read()[-3000:])
            if finish and proc.poll() is not None:
                break
            assert time.monotonic() < deadline, "the candidate did not fork in time"
            time.sleep(0.05)
        found = _find(marker)
        if found:
            pid = found[0]
            stat = (_read(f"/proc/{pid}/stat", "r") or "").rsplit(")", 1)[-1].split()
            seen.update(pid=pid, ppid=int(stat[1]), pgid=int(stat[2]), sid=int(stat[3]),
                        cgroup=_cgroups_of(pid), task_cgroups=cgroup_leftovers(proc.pid, started))
        if not finish:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        seen.update(rc=proc.returncode, stdout=out, stderr=err)
        # kgym has exited: what it ended is dead (or a zombie init reaps)
        deadline = time.monotonic() + 2
        while _find(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["alive"] = _find(marker)
        seen["cgroups_left"] = cgroup_leftovers(proc.pid, started)
        return seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in _find(marker):  # after a failure: end what the run left
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for line in processes_of_run(base, run_marker):
            try:
                os.kill(int(line.split()[1]), signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)
        for cg in cgroup_leftovers(proc.pid, started):  # emptied by the kills above
            try:
                os.rmdir(cg)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)


def test_group_kill_alone_ends_a_process_left_in_the_candidates_group():
    """--no-cgroups, fresh mode, kgym stopped mid-task: only kill_child's
    process-group kill reaches the leftover (a kill of the candidate's pid
    alone leaves it running: it is reparented to kgym, which exits without
    reaping orphans, then to init)."""
    s = run_leaver(setsid=False, finish=False, cgroups=False, fresh=True)
    assert "pid" in s, s
    # where the test wants it: in the candidate's group and session, no cgroup
    assert s["pgid"] == s["sid"] == s["ppid"] != s["pid"], s
    assert s["task_cgroups"] == [], f"--no-cgroups made a task cgroup: {s['task_cgroups']}"
    assert "kgym-" not in s["cgroup"], s["cgroup"]
    assert s["rc"] == 128 + signal.SIGTERM, (s["rc"], s["stderr"][-2000:])
    assert "stopping the tasks in flight" in s["stderr"], s["stderr"][-2000:]
    assert s["alive"] == [], (
        f"the process {s['alive']} the candidate left in its process group outlived "
        f"`kgym eval --no-cgroups` (SIGTERM): the process-group kill did not reach it")


def test_cgroup_alone_ends_a_process_that_left_the_group():
    """Cgroups on, fresh mode, kgym stopped mid-task: the leftover called
    setsid(), so no process-group kill reaches it and no orphan kill runs;
    closing the task's cgroup alone ends it."""
    s = run_leaver(setsid=True, finish=False, cgroups=True, fresh=True)
    assert "pid" in s, s
    if not s["task_cgroups"]:
        pytest.skip("no task cgroup on this host (kgym --verbose says why)")
    assert s["sid"] == s["pgid"] == s["pid"], s  # its own session and group
    assert any(os.path.basename(c) in s["cgroup"] for c in s["task_cgroups"]), s
    assert s["rc"] == 128 + signal.SIGTERM, (s["rc"], s["stderr"][-2000:])
    assert s["alive"] == [], (
        f"the process {s['alive']} that left the candidate's group (setsid) outlived "
        f"`kgym eval` (SIGTERM) although it was in the task's cgroup")
    assert s["cgroups_left"] == [], s["cgroups_left"]


def test_without_cgroups_a_finished_task_leaves_nothing():
    """--no-cgroups, zygote mode, the task ends by itself (runtime_error
    after the fork): the group kills and the zygote's orphan kill end the
    leftover without the cgroup."""
    s = run_leaver(setsid=False, finish=True, cgroups=False, fresh=False)
    assert s["rc"] == 0, s["stderr"][-2000:]
    assert '"verdict":"runtime_error"' in s["stdout"] and "LEFT pid=" in s["stdout"], (
        s["stdout"][-2000:])
    assert s.get("task_cgroups", []) == [], s
    assert s["alive"] == [], f"the process {s['alive']} outlived its task (no cgroups)"
