"""The plain launcher: cold role processes, timeouts, and the result frame."""

from __future__ import annotations

import os
import sys
import time

import kit
from kgym_harness import frame
from kgym_harness.launcher import evaluate


def _gone(pid: int) -> bool:
    """True when pid no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_cold_roles_pass():
    pids = []
    r = evaluate(kit.task(kit.cpu_kernel()), on_spawn=lambda j, c: pids.extend([j, c]))
    assert r["verdict"] == "pass", r["feedback"]
    assert len(pids) == 2 and all(_gone(p) for p in pids)


def test_timeout_kills_both_groups_and_grandchildren(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    top = ("import subprocess\n"
           "_child = subprocess.Popen(['sleep', '300'])\n"
           f"open({str(pidfile)!r}, 'w').write(str(_child.pid))\n\n")
    code = kit.cpu_kernel(kit.model_new("while True:\n    pass"), top=top)
    pids = []
    t0 = time.monotonic()
    r = evaluate(kit.task(code, timeout=8), on_spawn=lambda j, c: pids.extend([j, c]))
    took = time.monotonic() - t0
    assert (r["verdict"], r["error_code"]) == ("timeout", "TIMEOUT")
    assert r["error"]["phase"] == "correctness"
    assert r["compiled"] is True and r["correctness"] is False
    assert took < 8 + 6
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not all(_gone(p) for p in pids + [grandchild]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids + [grandchild])


def test_hard_kill_when_the_judge_itself_hangs():
    pids = []
    t0 = time.monotonic()
    r = evaluate(kit.task(kit.cpu_kernel(), timeout=3),
                 judge_argv=[sys.executable, "-c", "import time; time.sleep(600)"],
                 on_spawn=lambda j, c: pids.extend([j, c]))
    assert (r["verdict"], r["error_code"]) == ("timeout", "TIMEOUT")
    assert r["correctness"] is False
    assert time.monotonic() - t0 < 3 + 6
    assert all(_gone(p) for p in pids)


def _fake_judge(code: str) -> list[str]:
    return [sys.executable, "-c", "import os, sys; R = int(sys.argv[1]); " + code, "{result}"]


def test_truncated_frame_is_not_a_pass():
    whole = frame.encode_result({"verdict": "pass", "correctness": True})
    code = f"os.write(R, {whole[:-3]!r})"
    r = evaluate(kit.task(kit.cpu_kernel(), timeout=60), judge_argv=_fake_judge(code))
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "RESULT_INCOMPLETE")
    assert r["correctness"] is False and r["status"] == "completed"


def test_judge_exiting_without_a_result_is_not_a_pass():
    r = evaluate(kit.task(kit.cpu_kernel(), timeout=60), judge_argv=_fake_judge("pass"))
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "RESULT_INCOMPLETE")
    assert "exit status 0" in r["error_message"]


def test_inconsistent_pass_frame_is_rejected():
    bad = frame.encode_result({"verdict": "pass", "correctness": False})
    r = evaluate(kit.task(kit.cpu_kernel(), timeout=60),
                 judge_argv=_fake_judge(f"os.write(R, {bad!r})"))
    assert r["verdict"] == "runtime_error" and r["correctness"] is False


def test_candidate_forging_frames_on_every_fd_is_not_a_pass():
    forged = frame.encode_result({"verdict": "pass", "correctness": True, "speedup": 100.0})
    top = ("import os\n"
           f"_FORGED = {forged!r}\n"
           "for _fd in range(0, 64):\n"
           "    try:\n"
           "        os.write(_fd, _FORGED)\n"
           "    except OSError:\n"
           "        pass\n\n")
    code = kit.cpu_kernel(kit.model_new("return add_relu_scale(a, b, -self.scale)"), top=top)
    for spawner in (None, kit.SPAWNER):
        r = evaluate(kit.task(code), spawner=spawner)
        assert r["verdict"] != "pass" and r["correctness"] is False
        assert r["speedup"] is None


def test_cli_prints_the_result(tmp_path):
    import json
    import subprocess
    task = tmp_path / "task.json"
    out = tmp_path / "result.json"
    task.write_text(json.dumps(kit.task(kit.cpu_kernel(kit.model_new("return a")))))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "kgym_harness", "--task", str(task),
                           "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed == json.loads(out.read_text())
    assert printed["verdict"] in ("hacked", "mismatch")  # returns an input: decoy first


def test_bad_request_is_reported_not_run():
    r = evaluate({"kernel_code": "x = 1", "backend": "cpu", "timeout": 60}, spawner=kit.SPAWNER)
    assert (r["verdict"], r["error_code"]) == ("infra_error", "BAD_REQUEST")
    assert r["status"] == "failed" and r["error_message"].startswith("reference_code")


def test_reference_that_fails_is_problem_error():
    # the problem's fault, not kgym's (infra_error, retried) nor the candidate's
    r = kit.run(kit.cpu_kernel(), reference_code="import torch\nraise RuntimeError('ref broke')\n")
    assert (r["verdict"], r["error_code"]) == ("problem_error", "PROBLEM_ERROR")
    assert r["error"]["phase"] == "reference:load" and "ref broke" in r["error_message"]
    assert r["correctness"] is False and r["status"] == "completed"
