"""`kgym report` end to end (docs/report.md): hand-written rollout rows
through the built command, report.json's numbers and the terminal table,
two runs and their difference, bad input refused with one line and exit
2, and report.html opened in headless Chromium: it renders, every chart's
SVG is in the DOM, and the page asks nothing of the network (its CSP
forbids it; Chromium runs with every host unresolvable and a proxy that
records any connection). The numbers themselves are checked case by case
in tests/unit/test_report.c."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
CHARTS = ("fastp", "speedup", "hacking", "nograd", "coverage", "cost")


def row(problem, sample, turn, valid=True, sp=None, hacked=False, reasons=(),
        cov=None, km=None, eval_s=1.5, backend=None):
    correct = sp is not None and not hacked
    res = {"status": "completed",
           "verdict": "pass" if correct else "hacked" if hacked else "mismatch",
           "error_code": None, "correct": correct, "hacked": hacked,
           "speedup": sp if correct else None, "coverage": cov,
           "hack_reasons": list(reasons), "kernel_ms": km, "ref_ms": None,
           "eval_s": eval_s}
    r = {"schema": "kgym.rollout/1", "trajectory_id": f"{problem}:{sample}",
         "problem": problem, "sample": sample, "turn": turn, "valid": valid,
         "reward": (1 + min(sp, 3) if correct else 0.0) if valid else None,
         "result": res if valid else None,
         "usage": {"prompt_tokens": 10, "completion_tokens": 50, "choices": 1}}
    if backend:
        r["reference_backend"] = backend
    return r


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


# run A: level1/1_GELU, 2 samples x 2 turns; level2/3_Conv, 1 sample x 2
A_ROWS = [
    row("level1/1_GELU", 0, 0, sp=1.0, cov=0.9, km=2.0),
    row("level1/1_GELU", 0, 1, sp=2.0, cov=0.95, km=1.0),
    row("level1/1_GELU", 1, 0, hacked=True, reasons=["timer_tamper"]),
    row("level1/1_GELU", 1, 1, sp=1.5, cov=0.4, km=1.0),
    row("level2/3_Conv", 0, 0),
    row("level2/3_Conv", 0, 1, valid=False),
]
# run B: the same problems, better at turn 0
B_ROWS = [
    row("level1/1_GELU", 0, 0, sp=2.0, cov=0.9, km=1.0),
    row("level1/1_GELU", 0, 1, sp=2.0, cov=0.9, km=1.0),
    row("level1/1_GELU", 1, 0, sp=1.2, cov=0.5, km=1.0),
    row("level1/1_GELU", 1, 1, sp=1.5, cov=0.4, km=1.0),
    row("level2/3_Conv", 0, 0, sp=0.5, cov=0.1, km=8.0),
    row("level2/3_Conv", 0, 1, sp=0.5, cov=0.1, km=8.0),
]


def kgym_report(*args, check=True):
    p = subprocess.run([KGYM, "report", *args], capture_output=True, text=True,
                       timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture()
def tmp():
    d = tempfile.mkdtemp(prefix="report-it-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture()
def two_runs(tmp):
    a = write(os.path.join(tmp, "vanilla.jsonl"), A_ROWS)
    b = write(os.path.join(tmp, "ctx.jsonl"), B_ROWS)
    out = os.path.join(tmp, "out")
    p = kgym_report(a, b, "--out", out)
    with open(os.path.join(out, "report.json")) as f:
        return tmp, out, json.load(f), p.stdout


def test_numbers_table_and_difference(two_runs):
    _, _, rep, table = two_runs
    assert rep["comparison"] == ">="
    assert [r["name"] for r in rep["runs"]] == ["vanilla", "ctx"]
    a = rep["runs"][0]["levels"]["level1"]["turns"]
    # turn 0: 1.0 (a tie at p=1) and a hacked one; turn 1: 2.0 and 1.5
    assert a["0"]["fast_p"] == {"0.0": 0.5, "1.0": 0.5, "1.2": 0.0,
                                "1.5": 0.0, "2.0": 0.0, "3.0": 0.0}
    assert a["1"]["fast_p"]["1.5"] == 1.0 and a["1"]["fast_p"]["2.0"] == 0.5
    assert a["0"]["hacked"] == {"timer_tamper": 0.5}
    assert a["1"]["mean_reward"] == pytest.approx((3.0 + 2.5) / 2)
    assert a["1"]["geomean_speedup"] == pytest.approx(3.0 ** 0.5)
    assert sorted(a["1"]["speedups"]) == [1.5, 2.0]
    assert a["0"]["eval_s"]["total"] == 3.0 and a["0"]["tokens"]["mean"] == 50
    lv2 = rep["runs"][0]["levels"]["level2"]
    assert lv2["flat_groups"]["problems"] == {"level2/3_Conv": [0]}
    assert lv2["turns"]["1"]["hacked_ratio"] is None  # nothing valid
    d = rep["diffs"][0]
    assert (d["a"], d["b"]) == ("vanilla", "ctx")
    assert d["levels"]["level1"]["turns"]["0"]["fast_p"]["1.2"] == 1.0
    assert d["levels"]["level1"]["turns"]["0"]["hacked_ratio"] == -0.5
    assert "Fast@p counts speedup >= p" in table
    assert "difference ctx - vanilla" in table
    assert re.search(r"turn 0 hacked by reason: timer_tamper 0\.500", table)
    assert "level2/3_Conv [0]" in table


def test_strict_and_baselines(tmp):
    a = write(os.path.join(tmp, "a.jsonl"), A_ROWS)
    p = kgym_report(a, "--strict", "--no-html", "--out", os.path.join(tmp, "s"))
    rep = json.load(open(os.path.join(tmp, "s", "report.json")))
    assert rep["comparison"] == ">" and "speedup > p" in p.stdout
    t = rep["runs"][0]["levels"]["level1"]["turns"]
    assert t["0"]["fast_p"]["1.0"] == 0.0  # 1.0 is not > 1
    assert t["1"]["fast_p"]["1.5"] == 0.5  # 1.5 is not > 1.5
    assert not os.path.exists(os.path.join(tmp, "s", "report.html"))
    # torch.compile when the rows were evaluated so
    rows = [dict(r, reference_backend="torch_compile") for r in A_ROWS]
    c = write(os.path.join(tmp, "c.jsonl"), rows)
    p = kgym_report(c, "--no-html", "--out", os.path.join(tmp, "c"))
    assert "speedup baseline: torch_compile" in p.stdout
    # KernelBench's timing JSON: GELU 3 ms (on another machine)
    base = os.path.join(tmp, "baseline_time_torch.json")
    json.dump({"level1": {"1_GELU.py": {"mean": 3.0, "hardware": "NVIDIA H100"}},
               "level2": {"3_Conv.py": {"mean": 9.0}}}, open(base, "w"))
    p = kgym_report(a, "--baseline", base, "--no-html", "--out",
                    os.path.join(tmp, "b"))
    rep = json.load(open(os.path.join(tmp, "b", "report.json")))
    run = rep["runs"][0]
    assert "other hardware (NVIDIA H100)" in run["baseline"]
    assert "other hardware" in p.stdout
    # GELU kernels 2 ms then 1 ms: 1.5x, then 3x; 1 ms: 3x
    assert sorted(run["levels"]["level1"]["turns"]["1"]["speedups"]) == [3.0, 3.0]
    assert run["levels"]["level1"]["turns"]["0"]["fast_p"]["1.5"] == 0.5


@pytest.mark.parametrize("case", ["missing", "empty", "malformed", "schema",
                                  "no-out", "flag", "baseline", "out-file"])
def test_bad_input_one_line(tmp, case):
    good = write(os.path.join(tmp, "good.jsonl"), A_ROWS)
    out = os.path.join(tmp, "out")
    args, want = {
        "missing": ([os.path.join(tmp, "nope.jsonl"), "--out", out],
                    "nope.jsonl: No such file or directory"),
        "empty": ([write(os.path.join(tmp, "e.jsonl"), []), "--out", out],
                  "no rollout rows (empty file)"),
        "malformed": ([good, tmp + "/m.jsonl", "--out", out],
                      "m.jsonl line 2: not JSON"),
        "schema": ([write(os.path.join(tmp, "s.jsonl"), [{"schema": "x"}]),
                    "--out", out], "s.jsonl line 1: not a kgym rollout row"),
        "no-out": ([good], "--out DIR is required"),
        "flag": ([good, "--out", out, "--frobnicate"], "unknown flag --frobnicate"),
        "baseline": ([good, "--out", out, "--baseline", good],
                     "--baseline " + good),
        "out-file": ([good, "--out", good], "exists and is not a directory"),
    }[case]
    if case == "malformed":
        with open(tmp + "/m.jsonl", "w") as f:
            f.write(json.dumps(A_ROWS[0]) + "\n{\"schema\": \n")
    p = kgym_report(*args, check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and want in lines[0], p.stderr
    assert lines[0].startswith("kgym report: ")
    assert not os.path.exists(out)  # nothing written, not even the folder


def test_html_self_contained(two_runs):
    _, out, rep, _ = two_runs
    page = open(os.path.join(out, "report.html")).read()
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="'
                     r"default-src 'none';", page)
    for lv in ("level1", "level2"):
        for c in CHARTS:
            m = re.search(r'<figure data-chart="%s-%s">.*?</figure>' % (c, lv),
                          page, re.S)
            assert m and "<svg" in m.group(0), (c, lv)
    # nothing to fetch: no script, no external reference of any kind
    assert "<script" not in page.lower()
    assert not re.search(r'(src|href)\s*=\s*"(?!#)', page)
    assert not re.search(r"url\((?!#)", page)
    assert not re.search(r"https?://(?!www\.w3\.org/(2000/svg|1999/xlink))", page)


class _Recorder(threading.Thread):
    """A proxy that accepts connections and records them (and answers
    nothing): any request the page makes would arrive here."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.seen = []
        self.stop = False

    def run(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            c.settimeout(1)
            try:
                self.seen.append(c.recv(4096))
            except OSError:
                self.seen.append(b"")
            c.close()


def _chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe:
        return exe
    if os.environ.get("KGYM_REQUIRE_ROOT") == "1":
        pytest.fail("chromium is not installed, and KGYM_REQUIRE_ROOT=1 (CI) "
                    "forbids skipping (scripts/install-deps installs it)",
                    pytrace=False)
    pytest.skip("chromium not installed (scripts/install-deps installs it)")


def test_html_in_headless_chromium(two_runs):
    exe = _chromium()
    tmp, out, _, _ = two_runs
    html = os.path.join(out, "report.html")
    rec = _Recorder()
    rec.start()
    profile = os.path.join(tmp, "profile")
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-default-apps",
            "--user-data-dir=" + profile,
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=http://127.0.0.1:%d" % rec.port,
            "--proxy-bypass-list=<-loopback>"]
    try:
        dom = subprocess.run(base + ["--dump-dom", "file://" + html],
                             capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        shot = os.path.join(tmp, "shot.png")
        s = subprocess.run(base + ["--window-size=1400,2400",
                                   "--screenshot=" + shot, "file://" + html],
                           capture_output=True, text=True, timeout=120)
        assert s.returncode == 0, s.stderr[-2000:]
    finally:
        rec.stop = True
        rec.join(2)
        rec.sock.close()
    # rendered: every chart's SVG is in the DOM Chromium built
    figs = re.findall(r'<figure data-chart="([a-z]+-level\d)">(.*?)</figure>',
                      dom.stdout, re.S)
    assert sorted(f for f, _ in figs) == sorted(
        "%s-%s" % (c, lv) for c in CHARTS for lv in ("level1", "level2"))
    assert all("<svg" in body and "<path" in body for _, body in figs)
    assert "kgym report" in dom.stdout
    # nothing left the page
    assert rec.seen == [], rec.seen
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    keep = os.environ.get("KGYM_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_html_step_alone(two_runs):
    """python -m kgym.report_html: a report.json redrawn by hand, and one
    that is not a report refused with one line."""
    tmp, out, _, _ = two_runs
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    py = os.path.join(ROOT, ".venv", "bin", "python")
    again = os.path.join(tmp, "again.html")
    p = subprocess.run([py, "-m", "kgym.report_html",
                        os.path.join(out, "report.json"), again],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert open(again).read() == open(os.path.join(out, "report.html")).read()
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"rows": 1}')
    p = subprocess.run([py, "-m", "kgym.report_html", bad, again],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "kgym.report_html: %s: not a kgym report (no \"runs\" list)" % bad]
