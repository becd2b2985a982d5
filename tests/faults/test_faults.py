"""Fault injection: hostile candidates through the real worker path (`kgym eval`).

Each fault in candidates/ runs as a KernelBench ModelNew for ref.py. The
candidates of a batch go through ONE `kgym eval --json` invocation, so they
share one warm zygote, and the honest candidate runs after the faults: its
pass proves that the worker survived and the next task succeeds. For every
fault we check a clear non-pass verdict and a message that says what
happened; after every invocation (the kgym process has exited by then) we
check that no process of any task is left, and that nothing but the shared
cache remains in the run's TMPDIR (no private kgym-XXXXXX work dir, no file)
and no task cgroup (kgym-<worker pid>-<n>).

As root, each candidate runs under its own uid (65401..65499) in a private
mount namespace: a tmpfs (the task's 1 GiB disk quota) holds its work dir,
/tmp, /var/tmp and /dev/shm, and the rest of the file system is read-only
but for the candidate cache. The tests at the end prove that: the private
/tmp, the quota, two concurrent candidates that cannot kill each other, and
a compiled extension reused from the cache by a later task and engine.

Run: PYTHONPATH=harness:python .venv/bin/python -m pytest -q tests/faults
Environment: KGYM_BIN (default build/kgym); KGYM_FAULTS_REPORT=path writes
a JSON table (fault, verdict, message, seconds); CI=true (or
KGYM_FAULTS_STRICT=1) also fails on any process of a candidate uid (nobody
or 65401..65499) left on the machine, attributed to this run or not (on a
shared machine other runs' candidates may be alive, so by default only this
run's are counted).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
REF = os.path.join(HERE, "ref.py")
CANDS = os.path.join(HERE, "candidates")
HONEST = "honest"
NOBODY = 65534
CAND_UIDS = range(65401, 65500)  # src/worker/engine_impl.h: CAND_UID0, CAND_UIDS
CAND_GID = 65400
GiB = 1 << 30

COMMON = ["--backend", "cpu", "--device", "cpu", "--json", "--num-correct-trials", "2",
          "--num-perf-trials", "5", "--num-warmup", "1", "--enable-profiling", "false"]

pytestmark = [
    pytest.mark.skipif(not os.access(KGYM, os.X_OK), reason=f"{KGYM} not built (make)"),
    # Only as root does the worker run candidates as another uid (nobody); as
    # an ordinary user kill_parent would succeed against the worker (and the
    # fork bomb would count against the user's own processes).
    # Not root: a skip, or a failure under KGYM_REQUIRE_ROOT=1 (CI; tests/conftest.py).
    pytest.mark.needs_root("the fault suite runs candidates as other uids (CI runs as root)"),
]

REPORT: list[dict] = []


# ---- helpers -----------------------------------------------------------------

def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def _read(path: str, mode: str = "rb") -> bytes | str | None:
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def _uid(pid: int) -> int | None:
    status = _read(f"/proc/{pid}/status", "r")
    if not status:
        return None
    m = re.search(r"^Uid:\s+(\d+)", status, re.M)
    return int(m.group(1)) if m else None


def _state(pid: int) -> str | None:
    stat = _read(f"/proc/{pid}/stat", "r")
    return stat.rsplit(")", 1)[1].split()[0] if stat else None


def _cmd(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline") or b""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def processes_of_run(base: str, marker: str) -> list[str]:
    """Live (non-zombie) processes that belong to this run: their initial
    environment names the run's TMPDIR or marker (zygote children inherit
    kgym's; fresh children get TMPDIR=<base>/kgym-XXXXXX), or their cwd is
    below the run's TMPDIR."""
    found = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        pid = int(d)
        if _state(pid) in (None, "Z", "X"):
            continue
        env = _read(f"/proc/{pid}/environ") or b""
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if marker.encode() in env or base.encode() in env or cwd.startswith(base):
            found.append(f"pid {pid} uid {_uid(pid)} state {_state(pid)}: {_cmd(pid)}")
    return found


def nobody_processes() -> list[str]:
    out = []
    for d in os.listdir("/proc"):
        u = _uid(int(d)) if d.isdigit() else None
        if (u == NOBODY or u in CAND_UIDS) and _state(int(d)) not in (None, "Z", "X"):
            out.append(f"pid {d}: {_cmd(int(d))}")
    return out


def cgroup_leftovers(kgym_pid: int, since: float = 0.0) -> list[str]:
    """Task cgroups (kgym-<worker pid>-<n>) the engine made and did not remove,
    made at or after `since` (time.time()): one left by an earlier run whose
    process had the same pid (the hierarchy is the kernel's, shared by every
    run on the machine) is not this run's."""
    roots = []
    for line in (_read("/proc/self/cgroup", "r") or "").splitlines():
        _, ctrls, path = line.split(":", 2)
        path = path.lstrip("/")
        if ctrls == "":
            for top in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
                if os.path.exists(os.path.join(top, "cgroup.controllers")):
                    roots.append(os.path.join(top, path))
                    break
        else:
            for c in ctrls.split(","):
                if c in ("memory", "pids"):
                    roots.append(os.path.join("/sys/fs/cgroup", c, path))
    left = []
    for r in roots:
        for pat in (f"kgym-{kgym_pid}-*", f"*/kgym-{kgym_pid}-*"):
            left += [p for p in glob.glob(os.path.join(r, pat)) if _made_since(p, since)]
    return sorted(set(left))


def _made_since(path: str, since: float) -> bool:
    try:
        return os.stat(path).st_mtime >= since - 1.0
    except OSError:
        return False


class Run:
    """One `kgym eval` invocation: its results in completion order."""

    def __init__(self, name: str, results: list[dict], wall: float, stderr: str, rc: int):
        self.name, self.results, self.wall, self.stderr, self.rc = name, results, wall, stderr, rc
        self.escaped: list[str] = []
        self.marker = ""


def run_kgym(name: str, cands: list[str], timeout: float, *, fresh: bool = False,
             concurrency: int = 1, overrides: dict[str, str] | None = None,
             wall_limit: float = 300) -> Run:
    """Runs the candidates (names in candidates/, or paths) in one invocation
    with a private TMPDIR, then checks that nothing of the run is left."""
    base = tempfile.mkdtemp(prefix="kgymfaults-", dir="/tmp")
    os.chmod(base, 0o755)  # the candidate (nobody) must reach its work dir below
    marker = f"kgymfaults-{uuid.uuid4().hex}"
    paths = []
    for c in cands:
        if overrides and c in overrides:
            p = os.path.join(base, f"{c}.py")
            with open(p, "w") as f:
                f.write(overrides[c])
            paths.append(p)
        else:
            paths.append(c if os.path.isabs(c) else os.path.join(CANDS, f"{c}.py"))
    argv = [KGYM, "eval", "--ref", REF, *COMMON, "--timeout", str(timeout),
            "--concurrency", str(concurrency)]
    if fresh:
        argv.append("--fresh")
    for p in paths:
        argv += ["--cand", p]
    env = dict(os.environ, TMPDIR=base, KGYM_FAULTS_RUN=marker)
    t0, started = time.monotonic(), time.time()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        try:
            out, err = proc.communicate(timeout=wall_limit)
        except subprocess.TimeoutExpired:
            proc.kill()  # the kgym process only: what it leaves is checked below
            out, err = proc.communicate()
            left = processes_of_run(base, marker)
            pytest.fail(f"{name}: kgym eval did not finish in {wall_limit} s (hung); "
                        f"left: {left}\n{err[-3000:]}")
        wall = time.monotonic() - t0
        results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert proc.returncode == 0, f"{name}: kgym eval exited {proc.returncode}\n{err[-3000:]}"
        assert len(results) == len(cands), (
            f"{name}: {len(results)} results for {len(cands)} candidates\n{err[-3000:]}")
        # nothing of the run may be left: the kgym process has exited by now
        deadline = time.monotonic() + 5
        while True:
            left = processes_of_run(base, marker)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not left, f"{name}: processes of the run still alive:\n" + "\n".join(left)
        if os.environ.get("CI") or os.environ.get("KGYM_FAULTS_STRICT"):
            while True:
                nb = nobody_processes()
                if not nb or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert not nb, f"{name}: processes of uid nobody left:\n" + "\n".join(nb)
        work = [e for e in os.listdir(base) if e not in ("kgym-cache", "kgym-device-cpu.lock")
                and not e.endswith(".py")]
        assert not work, f"{name}: left under {base} (TMPDIR): {work}"
        cg = cgroup_leftovers(proc.pid, started)
        assert not cg, f"{name}: task cgroups left: {cg}"
    finally:
        # after a failure: end what this run left (only processes that carry
        # its marker or TMPDIR), then remove its TMPDIR
        for line in processes_of_run(base, marker):
            try:
                os.kill(int(line.split()[1]), signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)
    return Run(name, results, wall, err, proc.returncode)


def seconds(r: dict) -> float:
    t = r.get("timings") or {}
    return round((t.get("total") or 0) / 1e3, 2)


def check(fault: str, r: dict, verdicts: set[str], patterns: list[str],
          absent: list[str] = ()) -> str:
    """Asserts the verdict and the message; records the row for the report."""
    msg = r.get("error_message") or ""
    REPORT.append({"fault": fault, "verdict": r.get("verdict"), "code": r.get("error_code"),
                   "message": msg[:300], "seconds": seconds(r),
                   "mode": (r.get("device") or {}).get("mode")})
    assert r.get("verdict") != "pass" and r.get("correctness") is not True, (fault, r)
    assert r.get("verdict") in verdicts, f"{fault}: verdict {r.get('verdict')}: {msg}"
    for p in patterns:
        assert re.search(p, msg), f"{fault}: message lacks /{p}/: {msg}"
    for p in absent:
        assert not re.search(p, msg), f"{fault}: message has /{p}/: {msg}"
    return msg


def interleave(faults: list[str]) -> list[str]:
    """f1, honest, f2, honest, ...: every fault is followed by a task that must pass."""
    out = []
    for f in faults:
        out += [f, HONEST]
    return out


def assert_honest_pass(run: Run, positions: list[int]) -> None:
    for i in positions:
        r = run.results[i]
        assert r.get("verdict") == "pass", (
            f"{run.name}: the honest candidate at position {i} (after "
            f"{'a fault' if i else 'nothing'}) did not pass: {r.get('verdict')}: "
            f"{r.get('error_message')}")


@pytest.fixture(scope="session", autouse=True)
def report():
    yield REPORT
    path = os.environ.get("KGYM_FAULTS_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(REPORT, f, indent=1)


# ---- expectations ----------------------------------------------------------

def _died(signal_or_status: str) -> list[str]:
    return [r"died", signal_or_status]


# fault -> (verdicts allowed, message patterns, patterns that must not appear)
EXPECT: dict[str, tuple[set[str], list[str], list[str]]] = {
    "segfault": ({"runtime_error"}, _died(r"signal 11"), []),
    "segfault_import": ({"runtime_error", "compile_error"}, _died(r"signal 11"), []),
    "abort": ({"runtime_error"}, _died(r"signal 6"), []),
    "exit_early": ({"runtime_error"}, _died(r"exited with status 0"), []),
    "close_fds": ({"runtime_error"}, [r"died|closed|protocol"], []),
    "forge_result": ({"runtime_error", "mismatch"}, [r"protocol|mismatch|outside"], []),
    "fake_stdout": ({"mismatch"}, [r"outside atol"], []),
    "kill_parent": ({"runtime_error"}, [r"KILL_PARENT", r"parent \d+ PermissionError\(1\)",
                                        r"sibling \d+ PermissionError\(1\)"], [r"KILLED"]),
    "network": ({"runtime_error"}, [r"NETWORK", r"127\.0\.0\.1:\d+ blocked"], [r"CONNECTED"]),
    # leaks: anything of root's (the judge, the worker) that could be read;
    # same_uid (other candidates' dirs, on a shared machine) is not counted
    "read_judge": ({"runtime_error"}, [r"READ_JUDGE leaks=0 \[\]", r"/environ: PermissionError",
                                       r"/mem: PermissionError"], []),
    "daemon": ({"runtime_error"}, [r"DAEMON pid=\d+"], []),
    "fork_bomb": ({"runtime_error"}, [r"FORKBOMB forks=\d+ stopped by: \[Errno 11\]"], []),
    # the private tmpfs (1 GiB) fills before RLIMIT_FSIZE (2 GiB) is reached
    "fill_disk": ({"runtime_error"},
                  [r"FILL_DISK written=\d+ fs=tmpfs stopped by: \[Errno 28\] No space left"], []),
    "fill_disk_files": ({"runtime_error"},
                        [r"FILL_DISK_FILES written=\d+ stopped by: \[Errno 28\] No space left"],
                        []),
    "escape_files": ({"runtime_error"}, [r"ESCAPE_FILES"], []),
    "list_tmp": ({"runtime_error"}, [r"LIST_TMP "], [r"WRITTEN"]),
    "alloc_unbounded": ({"runtime_error"},
                        [r"ALLOC_UNBOUNDED total=\d+ stopped by MemoryError|signal 9"],
                        [r"no limit stopped it", r"own cap"]),
    "infinite_loop": ({"timeout"}, [r"timeout|time limit"], []),
    "sleep_forever": ({"timeout"}, [r"timeout|time limit"], []),
}

CRASH = ["segfault", "segfault_import", "abort", "exit_early", "close_fds", "forge_result",
         "fake_stdout", "kill_parent", "network", "read_judge", "daemon", "fork_bomb",
         "fill_disk", "fill_disk_files", "escape_files", "list_tmp", "alloc_unbounded"]
HANG = ["infinite_loop", "sleep_forever"]
# fresh mode: the candidate's parent is kgym itself, and kgym is the subreaper
FRESH = ["segfault", "kill_parent", "daemon", "sleep_forever"]


def extra_checks(fault: str, msg: str, listener: socket.socket | None) -> None:
    if fault == "fork_bomb":
        forks = int(re.search(r"forks=(\d+)", msg).group(1))
        assert forks < 2000, f"the process limits did not stop the fork bomb: {msg}"
    elif fault == "fill_disk":
        written = int(re.search(r"written=(\d+)", msg).group(1))
        assert written <= 1 * GiB, f"more than the 1 GiB task quota written: {msg}"
    elif fault == "alloc_unbounded":
        m = re.search(r"total=(\d+)", msg)
        if m:  # a limit larger than the machine is no limit
            assert int(m.group(1)) <= _mem_total() // 2, (
                f"the memory limit let the task take more than half of the machine's "
                f"{_mem_total() >> 20} MiB: {msg}")
    elif fault == "daemon":
        pid = int(re.search(r"DAEMON pid=(\d+)", msg).group(1))
        st = _state(pid)
        assert st in (None, "Z", "X") or _uid(pid) != NOBODY, (
            f"the daemon {pid} is still alive: {_cmd(pid)}")
    elif fault == "network" and listener is not None:
        listener.settimeout(0.2)
        try:
            conn, addr = listener.accept()
        except (socket.timeout, BlockingIOError):
            return
        conn.close()
        pytest.fail(f"the candidate reached the test's listener from {addr}")


# ---- the batches -----------------------------------------------------------

@pytest.fixture(scope="module")
def listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s
    s.close()


def _network_source(port: int) -> str:
    with open(os.path.join(CANDS, "network.py")) as f:
        src = f.read()
    return src.replace("PORT = 0  # set by the test", f"PORT = {port}")


@pytest.fixture(scope="module")
def crash_run(listener) -> Run:
    """Crashing/escaping faults, each followed by the honest candidate, in one
    warm-zygote invocation."""
    port = listener.getsockname()[1]
    # a file of the host's in /tmp, which no candidate may see (list_tmp)
    fd, marker = tempfile.mkstemp(prefix="kgymfaults-marker-", dir="/tmp")
    os.close(fd)
    try:
        run = run_kgym("crash", interleave(CRASH), timeout=120,
                       overrides={"network": _network_source(port)})
    finally:
        escaped = remove_escaped_files()
        os.unlink(marker)
    run.escaped = escaped
    run.marker = os.path.basename(marker)
    return run


def remove_escaped_files() -> list[str]:
    """Files escape_files.py left outside its work dir (removed here)."""
    left = []
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/var/crash", "/var/mail"):
        for p in glob.glob(os.path.join(d, "kgymfaults-escape-*")):
            left.append(p)
            try:
                os.unlink(p)
            except OSError:
                pass
    return left


@pytest.fixture(scope="module")
def hang_run() -> Run:
    """The hanging faults side by side (two slots), then two honest tasks,
    which start only when a hung task has been killed."""
    return run_kgym("hang", HANG + [HONEST, HONEST], timeout=15, concurrency=2)


@pytest.fixture(scope="module")
def fresh_run() -> Run:
    """A subset with a fresh interpreter per child (no zygote): there the
    candidate's parent is kgym itself."""
    return run_kgym("fresh", interleave(FRESH), timeout=20, fresh=True, wall_limit=240)


@pytest.mark.parametrize("fault", CRASH)
def test_crash_fault(crash_run: Run, listener, fault: str) -> None:
    i = 2 * CRASH.index(fault)
    verdicts, pats, absent = EXPECT[fault]
    msg = check(fault, crash_run.results[i], verdicts, pats, absent)
    extra_checks(fault, msg, listener)
    assert_honest_pass(crash_run, [i + 1])


def test_hang_faults(hang_run: Run) -> None:
    """Both hung tasks time out; both honest tasks, which waited for the
    slots the hung tasks held, pass."""
    res = hang_run.results
    hung = [r for r in res if r.get("verdict") != "pass"]
    honest = [r for r in res if r.get("verdict") == "pass"]
    assert len(hung) == 2 and len(honest) == 2, [
        (r.get("verdict"), r.get("error_message")) for r in res]
    for fault, r in zip(HANG, hung):  # both expect the same: which is which does not matter
        verdicts, pats, absent = EXPECT[fault]
        check(f"{fault} / {HANG[1 - HANG.index(fault)]} (pair)", r, verdicts, pats, absent)
        assert seconds(r) < 15 + 10, f"a hung task held its slot {seconds(r)} s"
    for r in honest:  # they ran after a hung task was killed
        assert r["timings"]["queued"] >= 10e3, r["timings"]


@pytest.mark.parametrize("fault", FRESH)
def test_fresh_fault(fresh_run: Run, fault: str) -> None:
    i = 2 * FRESH.index(fault)
    r = fresh_run.results[i]
    assert (r.get("device") or {}).get("mode") == "fresh", r.get("device")
    verdicts, pats, absent = EXPECT[fault]
    msg = check(f"{fault} (fresh)", r, verdicts, pats, absent)
    extra_checks(fault, msg, None)
    if fault == "sleep_forever":  # the judge's own verdict, naming the phase, came in time
        assert "during correctness" in msg, msg
    assert_honest_pass(fresh_run, [i + 1])


def test_private_tmpdir_is_refused_not_blamed_on_the_candidate() -> None:
    """A TMPDIR the candidate's uid cannot reach (mode 0700, pytest's and
    mktemp's default) must not turn an honest candidate into a compile_error:
    kgym refuses to start and says why, or the candidate passes."""
    base = tempfile.mkdtemp(prefix="kgymfaults-private-")  # 0700
    try:
        proc = subprocess.run([KGYM, "eval", "--ref", REF, *COMMON, "--timeout", "60",
                               "--cand", os.path.join(CANDS, f"{HONEST}.py")],
                              cwd=ROOT, env=dict(os.environ, TMPDIR=base),
                              capture_output=True, text=True, timeout=300)
        results = [json.loads(line) for line in proc.stdout.splitlines()
                   if line.startswith("{")]
        if results:
            assert results[0].get("verdict") == "pass", results[0].get("error_message")
        else:
            assert proc.returncode != 0
            assert "not reachable" in proc.stderr, proc.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---- private mounts, disk quota, per-pair uids, the shared cache ------------

def test_escape_files_do_not_outlive_the_task(crash_run: Run) -> None:
    """Files written to /tmp, /var/tmp and /dev/shm land in the task's
    private tmpfs: the writes succeed and nothing reaches the host."""
    msg = crash_run.results[2 * CRASH.index("escape_files")].get("error_message") or ""
    assert not crash_run.escaped, f"left behind by the candidate: {crash_run.escaped} ({msg})"
    assert msg.count("WRITTEN") == 3, msg  # into its own tmpfs: nothing failed


def test_disk_total_is_bounded(crash_run: Run) -> None:
    """Many files, each under RLIMIT_FSIZE: the task's tmpfs (1 GiB) bounds
    the total, with ENOSPC in the verdict's message."""
    msg = crash_run.results[2 * CRASH.index("fill_disk_files")].get("error_message") or ""
    written = int(re.search(r"written=(\d+)", msg).group(1))
    assert written <= 1 * GiB, f"the task wrote {written >> 20} MiB in all: {msg}"
    assert "No space left on device" in msg, msg


def test_candidate_sees_only_its_own_tmp(crash_run: Run) -> None:
    """/tmp shows only the way to its own work dir (and the cache); /var/tmp
    and /dev/shm are empty; nothing outside is writable; the marker the
    test left in the host's /tmp is not visible."""
    msg = crash_run.results[2 * CRASH.index("list_tmp")].get("error_message") or ""
    rep = json.loads(msg.split("LIST_TMP ", 1)[1])
    cwd = rep["cwd"]
    assert rep["uid"] in CAND_UIDS, rep
    # the kgym tree is bound back when it lives in /tmp (a clone there)
    tree = [os.path.realpath(ROOT).split("/")[2]] if os.path.realpath(ROOT).startswith("/tmp/") else []
    if cwd.startswith("/tmp/"):
        assert sorted(rep["tmp"]) == sorted({cwd.split("/")[2], *tree}), rep
    else:
        assert rep["tmp"] == tree, rep
    assert crash_run.marker not in rep["tmp"], rep
    # its parent: its own work dir and the cache, not the judge's or any other
    assert set(rep["parent"]) <= {os.path.basename(cwd), "kgym-cache"}, rep
    assert rep["var_tmp"] == [] and rep["shm"] == [], rep
    assert all(v.startswith(("OSError(30)", "PermissionError(13)")) for v in rep["writes"].values()), rep


def _plant(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


@pytest.fixture(scope="module")
def host_run() -> tuple[Run, dict[str, str]]:
    """A candidate that reads world-readable files the test planted outside
    its view: a fresh directory under /opt, a data directory under /var/lib
    (where `kgym serve --data-dir` might keep its store), a home directory
    and /root; then the honest candidate."""
    tag = uuid.uuid4().hex[:12]
    planted = {f"/opt/kgymfaults-{tag}/secret.txt": f"OPT-SECRET-{tag}",
               f"/var/lib/kgymfaults-data-{tag}/kgym.db": f"DATA-SECRET-{tag}",
               f"/root/kgymfaults-{tag}.txt": f"ROOT-SECRET-{tag}"}
    if os.path.isdir("/home"):
        planted[f"/home/kgymfaults-{tag}/notes.txt"] = f"HOME-SECRET-{tag}"
    with open(os.path.join(CANDS, "read_host.py")) as f:
        src = f.read().replace("PATHS = []  # set by the test", f"PATHS = {sorted(planted)!r}")
    try:
        for path, text in planted.items():
            _plant(path, text)
        run = run_kgym("host", ["read_host", HONEST], timeout=90, overrides={"read_host": src})
    finally:
        for path in planted:
            if path.startswith("/root/"):
                os.unlink(path)
            else:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return run, planted


def test_candidate_cannot_read_the_hosts_files(host_run) -> None:
    """The candidate's root holds the system, its Python, the harness, its
    own dirs and the cache: files the host made world-readable elsewhere do
    not exist for it, and nothing of them reaches its output."""
    run, planted = host_run
    msg = run.results[0].get("error_message") or ""
    assert "READ_HOST " in msg, msg
    rep = json.loads(msg.split("READ_HOST ", 1)[1])
    for path, text in planted.items():
        assert rep[path] == "FileNotFoundError(2)", (path, rep)
        assert text not in json.dumps(run.results[0]), path
    # the top directories of the kgym tree and of its Python are there
    trees = {ROOT, os.path.realpath(ROOT), sys.prefix, os.path.realpath(sys.prefix),
             sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    tops = {t.split("/")[1] for t in trees if t.startswith("/")}
    for path, got in rep.items():
        if path != "/" and path.strip("/") not in tops:
            assert not got.startswith(("READ", "LISTED")), (path, rep)
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "sys",
              "dev", "tmp", "var"}
    assert set(rep["/"]) <= system | tops, rep["/"]
    assert_honest_pass(run, [1])


@pytest.fixture(scope="module")
def concurrent_run() -> Run:
    """Killers next to honest tasks, two at a time."""
    return run_kgym("concurrent", ["kill_others", HONEST, "kill_others", HONEST], timeout=90,
                    concurrency=2)


def test_concurrent_candidates_cannot_kill_each_other(concurrent_run: Run) -> None:
    """Each pair has its own uid: a candidate that kills every process it can
    find, over and over for 6 s, hits nothing of another task (the other
    candidate, a judge, the zygote, the worker), and the honest tasks that
    ran next to it pass."""
    res = concurrent_run.results
    killers = [r for r in res if "KILL_OTHERS" in (r.get("error_message") or "")]
    honest = [r for r in res if r.get("verdict") == "pass"]
    assert len(killers) == 2 and len(honest) == 2, [
        (r.get("verdict"), r.get("error_message")) for r in res]
    uids = set()
    for r in killers:
        msg = check("kill_others (concurrent)", r, {"runtime_error"},
                    [r"KILL_OTHERS uid=\d+ killed=\[\] kill_minus_1=\d+ eperm=[1-9]"], [r"refused"])
        uid = int(re.search(r"uid=(\d+)", msg).group(1))
        others = json.loads(re.search(r"other_candidate_uids=(\[[\d, ]*\])", msg).group(1))
        assert uid in CAND_UIDS, msg
        # it saw another task's candidate alive next to it, under another uid
        assert others and uid not in others, msg
        uids.add(uid)


def _so_files(cache: str) -> dict[str, tuple[int, int, int, int]]:
    """The extension builds in the candidate cache: path -> (inode, mtime_ns, uid, gid)."""
    out = {}
    for p in glob.glob(os.path.join(cache, "**", "*.so"), recursive=True):
        st = os.stat(p)
        out[p] = (st.st_ino, st.st_mtime_ns, st.st_uid, st.st_gid)
    return out


def test_extension_cache_reused_across_tasks_and_uids() -> None:
    """The candidate cache survives the private /tmp and is shared by the
    candidate uids: a cpu extension (load_inline) built by a task of the
    first `kgym eval` is reused, not rebuilt, by the tasks of a second one
    (three concurrent pairs, so at least two other uids) on the same TMPDIR."""
    base = tempfile.mkdtemp(prefix="kgymfaults-cache-", dir="/tmp")
    os.chmod(base, 0o755)
    try:
        argv = [KGYM, "eval", "--ref", REF, *COMMON, "--timeout", "120"]
        cand = os.path.join(CANDS, f"{HONEST}.py")
        env = dict(os.environ, TMPDIR=base)
        first = subprocess.run(argv + ["--cand", cand], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        r1 = [json.loads(line) for line in first.stdout.splitlines() if line.startswith("{")]
        assert [r.get("verdict") for r in r1] == ["pass"], r1
        cache = os.path.join(base, "kgym-cache", "candidate")
        st = os.stat(cache)
        assert st.st_gid == CAND_GID and st.st_mode & 0o7777 == 0o2770, oct(st.st_mode)
        built = _so_files(cache)
        assert built, f"no extension built under {cache}"
        assert all(v[2] in CAND_UIDS and v[3] == CAND_GID for v in built.values()), built
        second = subprocess.run(argv + ["--concurrency", "3"] + ["--cand", cand] * 3, cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr[-3000:]
        r2 = [json.loads(line) for line in second.stdout.splitlines() if line.startswith("{")]
        assert [r.get("verdict") for r in r2] == ["pass"] * 3, [
            (r.get("verdict"), r.get("error_message")) for r in r2]
        # not rebuilt: the same files, untouched
        assert _so_files(cache) == built, (built, _so_files(cache))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_children_share_the_cpus_among_the_tasks_that_run_at_once() -> None:
    """Each child's torch CPU pool is the machine's CPUs divided by the
    processes that may compute at once (judge and candidate times
    --concurrency; KGYM_CPU_THREADS), so OpenMP pools, which spin after
    each parallel region, never outnumber the CPUs across the worker's
    children."""
    src = ("import os\nimport torch\n"
           "raise RuntimeError(f'THREADS={torch.get_num_threads()} "
           "ENV={os.environ.get(\"KGYM_CPU_THREADS\")}')\n")
    ncpu = os.cpu_count() or 1
    for conc in (1, 2):
        run = run_kgym(f"threads{conc}", ["threads", "threads"], timeout=60,
                       concurrency=conc, overrides={"threads": src})
        want = max(1, ncpu // (2 * conc))
        for r in run.results:
            assert f"THREADS={want} ENV={want}" in (r.get("error_message") or ""), r
