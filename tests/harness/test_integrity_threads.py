"""Reward integrity, work left running after forward returns
(thread_injection): the candidate's own look after each checked call, its
thread ledger over timed calls, and the judge's look at the candidate's
process from /proc. Cheats are caught; thread pools that finish before
forward returns and OpenMP kernels pass."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import kit
from kgym_harness import quiet
from kgym_harness.remote import peer_pid

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def hacked(r: dict, reason: str) -> None:
    assert r["verdict"] == "hacked", (r["feedback"], r["checks"].get("idle_watch"))
    assert reason in r["hack_reasons"], r["hack_reasons"]


# ---- cheats ---------------------------------------------------------------------------

def test_thread_that_fills_the_output_after_return():
    top = "import threading, time\n\n"
    body = """
    out = torch.empty_like(a)
    def late():
        time.sleep(0.005)
        ext.add_relu_scale(out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(),
                           float(self.scale))
    threading.Thread(target=late, daemon=True).start()
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=top))
    hacked(r, "thread_injection")
    assert "changed after forward returned" in r["error_message"]


def test_thread_that_keeps_computing_after_return():
    top = "import threading, time\n\n"
    body = """
    out = add_relu_scale(a, b, self.scale)
    def more():
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            add_relu_scale(a, b, self.scale)
    threading.Thread(target=more, daemon=True).start()
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=top))
    hacked(r, "thread_injection")
    assert "work kept running after forward returned" in r["error_message"]


HIDDEN = kit.BEING_TIMED + '''import threading


def work(out, a, b, s):
    m = torch.ones(128, 128)
    for _ in range(20):  # torch releases the GIL: this runs beside the caller
        m = torch.mm(m, m).clamp_(max=1.0)
    ext.add_relu_scale(out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(), s)


'''


LATE_OUTPUT = """
    out = torch.empty_like(a)
    t = threading.Thread(target=work, args=(out, a, b, float(self.scale)), daemon=True)
    t.start()
    if being_timed():
        self.pending = (self.pending + [t])[-32:]
    else:
        t.join()
    return out
    """

# The judge's two later looks (quiet.thread_checks), each by its message
WATCH_SAYS = r"were still busy after the timing command returned|in which they had nothing to do"
LEDGER_SAYS = r"threads started inside forward outlived it \(\d+ ended after forward returned"


def thread_checks(monkeypatch, layers: str | None) -> None:
    """KGYM_THREAD_CHECKS for the judges kit.run starts (None: both looks)."""
    if layers is None:
        monkeypatch.delenv("KGYM_THREAD_CHECKS", raising=False)
    else:
        monkeypatch.setenv("KGYM_THREAD_CHECKS", layers)


@pytest.mark.parametrize("layers", [None, "ledger"], ids=["both", "ledger_alone"])
def test_threads_left_running_only_in_timed_calls(monkeypatch, layers):
    # Honest (joins its thread) whenever it is not being timed, so every
    # checked output is right and CallWatch sees nothing; the ledger sees
    # threads outlive their timed calls (the judge's watch, not always:
    # the work is short). A timed output is copied for the spot checks as
    # soon as its call returns, before the thread filled it. The judge's
    # clock may see it first: its wall blocks, where the kernel is honest,
    # take longer than the timed calls claim (timer_tamper).
    # ledger_alone: the judge's watch off, the ledger alone adds
    # thread_injection.
    thread_checks(monkeypatch, layers)
    r = kit.run(kit.cpu_kernel(kit.model_new(LATE_OUTPUT, "self.pending = []"), top=HIDDEN),
                num_perf_trials=20)
    reasons = [x for x in r["hack_reasons"] if x != "timer_tamper"]
    assert reasons == ["call_count_switch", "thread_injection"], (
        r["hack_reasons"], r["error_message"])
    assert r["error_code"] in ("CALL_COUNT_SWITCH", "TIMER_TAMPER"), r["error_message"]
    if r["error_code"] == "CALL_COUNT_SWITCH":
        assert "(a spot check drawn after it returned) is wrong" in r["error_message"]
    if layers == "ledger":
        assert r["checks"]["idle_watch"] is None  # the watch was off


BUSY_AFTER = kit.BEING_TIMED + '''import threading
import time


def burn(stop, seconds):
    end = time.monotonic() + seconds
    m = torch.ones(64, 64)
    while time.monotonic() < end and not stop.is_set():
        m = torch.mm(m, m).clamp_(max=1.0)


'''


# kit.REF, slow: the judge's reference blocks, during which the candidate
# has nothing to do, are long enough for the watch to measure (SETTLE_S
# and a window after each time reply)
SLOW_REF = kit.REF.replace("        return torch.relu(a + b) * self.scale",
                           "        time.sleep(0.05)\n"
                           "        return torch.relu(a + b) * self.scale").replace(
    "import torch\n", "import time\n\nimport torch\n", 1)


def busy_after_timed_calls() -> str:
    """Right outputs, returned when computed; but a timed call leaves a
    thread working after it returned (one at a time, up to 1 s; a call
    that is not timed stops it first, so no checked call sees it): it
    stands for work moved past the clock (a thread that computes the
    output itself is caught by the spot checks first, above), so the
    thread_injection finding is the first one and its message names the
    look that made it."""
    body = """
    if not being_timed() and self.t is not None:
        self.stop.set()
        self.t.join()
    out = add_relu_scale(a, b, self.scale)
    if being_timed() and (self.t is None or not self.t.is_alive()):
        self.stop = threading.Event()
        self.t = threading.Thread(target=burn, args=(self.stop, 1.0), daemon=True)
        self.t.start()
    return out
    """
    return kit.cpu_kernel(kit.model_new(body, "self.t = None"), top=BUSY_AFTER)


@pytest.mark.parametrize("layers, says", [(None, WATCH_SAYS), ("watch", WATCH_SAYS),
                                          ("ledger", LEDGER_SAYS)],
                         ids=["both", "watch_alone", "ledger_alone"])
def test_threads_busy_after_timed_calls_each_look_alone(monkeypatch, layers, says):
    """KGYM_THREAD_CHECKS=watch: the judge's ProcWatch alone flags it;
    =ledger: the candidate's ThreadLedger alone (no watch at all); both:
    the watch's finding is the one reported (audit.watched)."""
    thread_checks(monkeypatch, layers)
    r = kit.run(busy_after_timed_calls(), num_perf_trials=5, reference_code=SLOW_REF)
    assert r["hack_reasons"] == ["thread_injection"], (r["hack_reasons"], r["error_message"])
    assert r["error_code"] == "THREAD_INJECTION"
    assert re.search(says, r["error_message"]), r["error_message"]
    assert (r["checks"]["idle_watch"] is None) == (layers == "ledger"), r["checks"]["idle_watch"]


def test_threads_busy_after_timed_calls_pass_with_both_looks_off(monkeypatch):
    """Nothing else catches that candidate (CallWatch looks at checked
    calls only, the spot checks see right outputs): the two tests above
    each show one look on its own."""
    thread_checks(monkeypatch, "none")
    r = kit.run(busy_after_timed_calls(), num_perf_trials=5, reference_code=SLOW_REF)
    assert r["verdict"] == "pass", (r["hack_reasons"], r["error_message"])
    assert r["checks"]["idle_watch"] is None


def test_thread_checks_knob(monkeypatch):
    monkeypatch.delenv("KGYM_THREAD_CHECKS", raising=False)
    assert quiet.thread_checks() == {"watch", "ledger"}
    for raw, want in (("ledger", {"ledger"}), ("watch, ledger", {"watch", "ledger"}),
                      ("none", set()), ("", set())):
        monkeypatch.setenv("KGYM_THREAD_CHECKS", raw)
        assert quiet.thread_checks() == want, raw
    monkeypatch.setenv("KGYM_THREAD_CHECKS", "ledgr")
    with pytest.raises(ValueError, match="ledgr"):
        quiet.thread_checks()


SPINNER_C = r'''
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

static volatile int busy = 0, started = 0;
static volatile double sink;

static void *spin(void *arg) {
    for (;;) {
        if (busy) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            continue;
        }
        double a = 1.0;
        for (int i = 0; i < 20000; i++) a = a * 1.0000001 + 1e-9;
        sink = a;
    }
    return NULL;
}

static PyObject *start(PyObject *self, PyObject *args) {
    if (!started) {
        pthread_t t;
        started = 1;
        if (pthread_create(&t, NULL, spin, NULL) == 0) pthread_detach(t);
    }
    Py_RETURN_NONE;
}

static PyObject *add_relu_scale(PyObject *self, PyObject *args) {
    unsigned long long o, a, b; Py_ssize_t n; double s;
    if (!PyArg_ParseTuple(args, "KKKnd", &o, &a, &b, &n, &s)) return NULL;
    float *po = (float *)(uintptr_t)o;
    const float *pa = (const float *)(uintptr_t)a, *pb = (const float *)(uintptr_t)b;
    busy = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = pa[i] + pb[i];
        po[i] = (v > 0.0f ? v : 0.0f) * (float)s;
    }
    busy = 0;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"start", start, METH_VARARGS, ""},
    {"add_relu_scale", add_relu_scale, METH_VARARGS, ""},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "kgym_test_spin", NULL, -1, methods};
PyMODINIT_FUNC PyInit_kgym_test_spin(void) { return PyModule_Create(&mod); }
'''


def test_native_thread_burning_while_forward_is_idle():
    # Started at import, it slows whatever runs beside the candidate (the
    # reference's timing) and pauses during forward: only the judge's look
    # at the idle process sees it.
    code = ('import torch\nimport torch.nn as nn\n'
            'from torch.utils.cpp_extension import load_inline\n\n'
            f'SRC = r"""{SPINNER_C}"""\n'
            'ext = load_inline("kgym_test_spin", cpp_sources=[SRC], no_implicit_headers=True,'
            ' extra_ldflags=["-lpthread"])\n'
            'ext.start()\n\n\n'
            'def add_relu_scale(a, b, scale):\n'
            '    out = torch.empty_like(a)\n'
            '    ext.add_relu_scale(out.data_ptr(), a.contiguous().data_ptr(),'
            ' b.contiguous().data_ptr(), a.numel(), float(scale))\n'
            '    return out\n\n\n' + kit.HONEST_MODEL)
    r = kit.run(code)
    hacked(r, "thread_injection")
    assert "nothing to do" in r["error_message"]
    assert r["checks"]["idle_watch"]["windows"] >= 1


def test_child_process_burning_cpu():
    top = textwrap.dedent('''\
        import os, signal
        CHILD = os.fork()
        if CHILD == 0:
            while True:
                pass


        ''')
    r = kit.run(kit.cpu_kernel(top=top))
    hacked(r, "thread_injection")


def test_a_spinner_starved_by_the_load_still_counts():
    # beside busy processes a spinner (the child above) runs little of an
    # idle window and waits for a CPU the rest
    from kgym_harness import quiet
    assert quiet.idle_finding(2.0, 17.0, 20.0)      # runnable nearly all the window
    assert quiet.idle_finding(6.0, 0.0, 20.0)       # the CPU alone, as before
    assert not quiet.idle_finding(0.3, 15.0, 20.0)  # woken for a moment, delayed by the load
    assert not quiet.idle_finding(2.0, 3.0, 20.0)   # mostly asleep
    assert not quiet.idle_finding(0.0, 0.0, 20.0)


def test_thread_cheats_are_not_flagged_with_hack_checks_off():
    top = "import threading, time\n\n"
    body = """
    out = add_relu_scale(a, b, self.scale)
    def more():
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            add_relu_scale(a, b, self.scale)
    threading.Thread(target=more, daemon=True).start()
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=top), run_hack_checks=False)
    assert r["verdict"] == "pass" and "idle_watch" not in r["checks"]


# ---- honest look-alikes ---------------------------------------------------------------

def test_private_pool_joined_before_return_passes():
    top = "from concurrent.futures import ThreadPoolExecutor\n\n"
    body = """
    halves = [(a[:2], b[:2]), (a[2:], b[2:])]
    futs = [self.pool.submit(add_relu_scale, x, y, self.scale) for x, y in halves]
    return torch.cat([f.result() for f in futs])
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body, "self.pool = ThreadPoolExecutor(2)"),
                               top=top))
    assert r["verdict"] == "pass", r["feedback"]


def test_pool_per_call_shut_down_before_return_passes():
    top = "from concurrent.futures import ThreadPoolExecutor\n\n"
    body = """
    with ThreadPoolExecutor(2) as pool:
        futs = [pool.submit(add_relu_scale, x, y, self.scale)
                for x, y in ((a[:2], b[:2]), (a[2:], b[2:]))]
        return torch.cat([f.result() for f in futs])
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=top))
    assert r["verdict"] == "pass", r["feedback"]


@pytest.mark.parametrize("name", ["level1/3_Linear", "level1/1_GELU"])
def test_openmp_solutions_pass(name):
    problem = os.path.join(ROOT, "problems", "cpu", f"{name}.py")
    sol = os.path.join(ROOT, "problems", "cpu", os.path.dirname(name), "solutions",
                       f"{os.path.basename(name)}.cpu.py")
    with open(problem) as f, open(sol) as g:
        ref, code = f.read(), g.read()
    r = kit.run(code, reference_code=ref, num_perf_trials=10, timeout=300)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["idle_watch"]["windows"] >= 1


# ---- the pieces -------------------------------------------------------------------------

BURNER = textwrap.dedent('''\
    import sys, threading
    def burn():
        while True:
            sum(range(1000))
    sys.stdin.readline()
    threading.Thread(target=burn, daemon=True).start()
    print("go", flush=True)
    sys.stdin.readline()
    ''')


def _spawn(code: str) -> subprocess.Popen:
    """A process in its own session, as the candidate role is."""
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)


def test_procwatch_idle_process_has_no_findings():
    p = _spawn("import sys, time\nsys.stdin.readline()")
    try:
        time.sleep(0.2)  # past its start-up
        w = quiet.ProcWatch(p.pid)
        w.busy()
        w.idle("run")
        time.sleep(quiet.SETTLE_S + 0.05)
        w.busy()
        assert w.windows == 1 and w.window_ms > 20 and w.findings == []
        w.close()
    finally:
        p.kill()
        p.wait()


def test_procwatch_sees_a_busy_process_and_new_threads(monkeypatch):
    monkeypatch.setattr(quiet, "NEW_WINDOW_S", 0.05)  # this machine is shared: a wider look
    p = _spawn(BURNER)
    try:
        time.sleep(0.2)
        w = quiet.ProcWatch(p.pid)
        w.busy()  # the "time" command goes out
        p.stdin.write("x\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "go"
        w.idle("time")  # its reply: a thread appeared and keeps running
        time.sleep(quiet.SETTLE_S + 0.1)
        w.busy()
        kinds = {f["what"] for f in w.findings}
        assert kinds == {"new threads", "idle"}, w.findings
        w.close()
    finally:
        p.kill()
        p.wait()


def test_peer_pid_is_the_writers_pid_from_the_kernel():
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    pid = os.fork()
    if pid == 0:
        try:
            b.sendall(b"hello")
        finally:
            os._exit(0)
    try:
        assert peer_pid(a, time.monotonic() + 5) == pid
        assert a.recv(5) == b"hello"  # peeked, not consumed
    finally:
        os.waitpid(pid, 0)
        a.close()
        b.close()


def test_final_window_ends_early_when_quiet_and_judges_a_burner():
    p = _spawn("import sys, time\nsys.stdin.readline()")
    q = _spawn(BURNER)
    try:
        time.sleep(0.2)
        w = quiet.ProcWatch(p.pid)
        t0 = time.monotonic()
        w.final_window("last")
        assert time.monotonic() - t0 < quiet.SETTLE_S and w.findings == [] and w.windows == 1
        w.close()
        q.stdin.write("x\n")
        q.stdin.flush()
        assert q.stdout.readline().strip() == "go"
        w = quiet.ProcWatch(q.pid)
        w.final_window("last")
        assert [f["what"] for f in w.findings] == ["idle"], w.findings
        w.close()
    finally:
        for x in (p, q):
            x.kill()
            x.wait()


def test_thread_ledger_tells_late_threads_from_joined_ones(monkeypatch):
    import _thread
    import threading
    for owner, name in ((_thread, "start_new_thread"), (threading, "_start_new_thread"),
                        (_thread, "start_joinable_thread"), (threading, "_start_joinable_thread")):
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, getattr(owner, name))  # restored after the test

    def forward(join: bool) -> None:
        t = threading.Thread(target=time.sleep, args=(0.02,))
        t.start()
        if join:
            t.join()
        return t

    ledger = quiet.ThreadLedger()
    ledger.install(forward.__code__)
    forward(True)
    assert ledger.report() == {"late": 0, "running": 0, "busy_ms": 0.0}
    t = forward(False)
    assert ledger.report()["running"] == 1
    t.join()
    assert ledger.report()["late"] == 1
    threading.Thread(target=time.sleep, args=(0.001,)).start()  # not from a forward: ignored
    time.sleep(0.01)
    assert ledger.report() == {"late": 0, "running": 0, "busy_ms": 0.0}
