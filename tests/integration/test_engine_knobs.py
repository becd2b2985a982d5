"""The engine's tuning knobs reach the sandboxed children, through each
command that makes an engine: `kgym eval`, `kgym worker` and `kgym serve
--workers` take --cpu-threads, --compile-ahead and --spare-mem-floor (the
old KGYM_CPU_THREADS, KGYM_COMPILE_AHEAD and KGYM_SPARE_MEM_FLOOR are read
when a flag is not given); a bad value is one line and exit status 2. And
the device lock reaches a warm spare's task from the spare's start message
(docs/harness-notes.md, "The device lock").

A probe candidate reports what its process sees, in the error its import
raises: torch's CPU threads, KGYM_CPU_THREADS, and whether the zygote it
was forked from imported what compile ahead's dry runs need (ahead.warm_meta
runs there only with compile ahead on: docs/harness-notes.md)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest
from kgym_env import KGYM, Env, eval_json, uid, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REF = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
SOL = os.path.join(ROOT, "problems", "cpu", "level1", "solutions", "1_GELU.cpu.py")
FAST = ["--num-perf-trials", "3", "--num-correct-trials", "1", "--enable-profiling", "false"]

PROBE = ("import os\nimport sys\nimport torch\n"
         "raise RuntimeError(f'THREADS={torch.get_num_threads()} "
         "ENV={os.environ.get(\"KGYM_CPU_THREADS\")} "
         "META={\"torch.fx.experimental.symbolic_shapes\" in sys.modules}')\n")

pytestmark = pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)")

KNOB_VARS = ("KGYM_CPU_THREADS", "KGYM_COMPILE_AHEAD", "KGYM_SPARE_MEM_FLOOR")


def clean_env(**extra: str) -> dict:
    """This environment without the knobs' variables, plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in KNOB_VARS}
    env.setdefault("TMPDIR", "/tmp")
    env.update(extra)
    return env


def probe_file(tmp_path) -> str:
    os.chmod(tmp_path, 0o755)  # the candidate's uid reads it
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    os.chmod(path, 0o644)
    return str(path)


def seen(result: dict) -> tuple[int, str, bool]:
    """(threads, KGYM_CPU_THREADS, zygote warmed for compile ahead) from the
    probe's error message."""
    msg = result.get("error_message") or ""
    m = re.search(r"THREADS=(\d+) ENV=(\S+) META=(True|False)", msg)
    assert m, result
    return int(m.group(1)), m.group(2), m.group(3) == "True"


DEFAULT_THREADS = max(1, (os.cpu_count() or 1) // 2)


@pytest.mark.parametrize("args,env,want", [
    # the flags, over the old variables
    (["--cpu-threads", "3", "--compile-ahead", "on"],
     {"KGYM_CPU_THREADS": "2", "KGYM_COMPILE_AHEAD": "0"}, (3, "3", True)),
    # the old variables alone: the fallback
    ([], {"KGYM_CPU_THREADS": "2", "KGYM_COMPILE_AHEAD": "1"}, (2, "2", True)),
    # neither: the defaults (no compile ahead without a GPU)
    ([], {}, (DEFAULT_THREADS, str(DEFAULT_THREADS), False)),
    (["--compile-ahead", "off", "--cpu-threads", "auto"], {"KGYM_COMPILE_AHEAD": "1"},
     (DEFAULT_THREADS, str(DEFAULT_THREADS), False)),
], ids=["flags-win", "env-fallback", "defaults", "off-and-auto"])
def test_eval_knobs_reach_the_candidate(tmp_path, args, env, want):
    probe = probe_file(tmp_path)
    out, p = eval_json(["--ref", REF, "--backend", "cpu", "--cand", probe, *FAST, *args],
                       clean_env(**env), timeout=300)
    assert p.returncode == 0 and len(out) == 1, p.stderr[-2000:]
    assert seen(out[0]) == want, out[0]


@pytest.mark.parametrize("argv,msg", [
    (["eval", "--ref", REF, "--cand", SOL, "--cpu-threads", "0"],
     "--cpu-threads must be a number from 1 to 1024, or auto, not '0'"),
    (["eval", "--ref", REF, "--cand", SOL, "--compile-ahead", "yes"],
     "--compile-ahead must be on, off or auto (or 1, 0), not 'yes'"),
    (["eval", "--ref", REF, "--cand", SOL, "--spare-mem-floor", "1.5"],
     "--spare-mem-floor must be a share from 0 to 1, not '1.5'"),
    (["worker", "--device", "cpu", "--server", "http://127.0.0.1:9", "--cpu-threads", "x"],
     "--cpu-threads must be a number from 1 to 1024, or auto, not 'x'"),
    (["worker", "--device", "cpu", "--server", "http://127.0.0.1:9",
      "--spare-mem-floor", "-1"], "--spare-mem-floor must be a share from 0 to 1, not '-1'"),
    (["serve", "--listen", "127.0.0.1:0", "--workers", "1", "--compile-ahead", "2"],
     "--compile-ahead must be on, off or auto (or 1, 0), not '2'"),
    (["serve", "--listen", "127.0.0.1:0", "--cpu-threads", "2"],
     "--cpu-threads is for the local workers: it needs --workers"),
])
def test_a_bad_knob_is_one_line_and_status_2(tmp_path, argv, msg):
    p = subprocess.run([KGYM, *argv], capture_output=True, text=True, timeout=30,
                       env=clean_env(KGYM_DATA_DIR=str(tmp_path)))
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(msg), p.stderr
    assert p.stdout == ""


def _run_probe_task(env: Env, probe: str) -> dict:
    c = env.client()
    tid = uid("knobs")
    with open(probe) as f:
        code = f.read()
    c.submit_raw({"task_id": tid, "reference_code": open(REF).read(), "kernel_code": code,
                  "backend": "cpu", "num_correct_trials": 1, "num_perf_trials": 1,
                  "enable_profiling": False, "timeout": 120})
    r = c.wait(tid, timeout=180)
    c.close()
    assert r["status"] == "completed", r
    return r


def test_worker_flags_reach_the_candidate(tmp_path):
    probe = probe_file(tmp_path)
    env = Env("sqlite")
    try:
        env.start_server()
        env.start_worker("cpu", "--cpu-threads", "3", "--compile-ahead", "on")
        assert seen(_run_probe_task(env, probe)) == (3, "3", True), env.worker_logs()
    finally:
        env.close()


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                pass
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def test_serve_workers_flags_reach_the_candidate(tmp_path):
    """kgym serve hands the flags to the workers it starts, on their
    command line (not through its environment), who pass them to their
    children."""
    probe = probe_file(tmp_path)
    env = Env("sqlite")
    try:
        serve = env.start_server("--workers", "1", "--cpu-threads", "3",
                                 "--compile-ahead", "on", "--spare-mem-floor", "0.5")
        c = env.client()
        wait_for(lambda: c.request("GET", "/workers/status")[1]["alive"] == 1, 60,
                 "the local worker to register")
        c.close()
        r = _run_probe_task(env, probe)
        assert seen(r) == (3, "3", True), open(serve.log).read()[-3000:]
        workers = [_cmdline(p) for p in _children(serve.pid)]
        workers = [w for w in workers if w[1:2] == ["worker"]]
        assert len(workers) == 1, workers
        flags = " ".join(workers[0])
        assert ("--cpu-threads 3" in flags and "--compile-ahead on" in flags
                and "--spare-mem-floor 0.5" in flags), flags
    finally:
        env.close()


def test_a_warm_spares_task_holds_the_device_lock():
    """A warm spare learns the device lock from its start message, before it
    has a task; the task the engine hands it later names none, and the
    judge puts the start message's lock into it. Timing then holds the lock
    exclusively (on the cpu only timing and profiling take it), in a warm
    pair as in a pair forked for its task."""
    args = ["--ref", REF, "--backend", "cpu", *FAST, "--prewarm", "2"]
    for _ in range(3):
        args += ["--cand", SOL]
    out, p = eval_json(args, clean_env())
    assert p.returncode == 0 and len(out) == 3, p.stderr[-2000:]
    assert [r["verdict"] for r in out] == ["pass"] * 3, [r.get("error_message") for r in out]
    assert sorted(r["device"]["mode"] for r in out) == ["zygote", "zygote+warm",
                                                        "zygote+warm"], out
    for r in out:
        held = r["timings"].get("lock_held") or {}
        assert held.get("exclusive", 0) > 0, (r["device"]["mode"], r["timings"])
