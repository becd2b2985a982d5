#!/usr/bin/env python3
"""The candidate's own root (docs/sandbox.md, "The candidate's own root") on
a real worker: what a candidate can still do, and what it can no longer see.

Through `build/kgym eval` as root (own uid, private mounts, new root):

  honest   the level-1 GELU solutions pass: on cuda:N the Triton one
           (compiled, launched) and the CUDA one (load_inline: nvcc, g++,
           ninja under CUDA_HOME, the extension cache); on cpu the Triton
           one (interpreter) and the cpu one (a cpp_extension)
  probe    a candidate reports what it sees: /, /dev, /proc/driver/nvidia,
           whether CUDA works (a matmul on the device) and /etc's names
  hidden   a candidate opens world-readable files planted in a fresh /opt
           directory, a /var/lib data directory, /home and /root: each must
           be FileNotFoundError, and no content may reach its result

    bench/candidate_view.py [--device cuda:0|cpu] [--out DIR]

DIR defaults to $OUT, else bench/results/. Writes candidate_view.txt (the
PASS/FAIL lines and the probe's report) and candidate_view.jsonl (every
result). Exit status 1 if a check failed. About 2-4 min on the H200 (the
CUDA extension compiles once), 1 min on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KGYM = os.environ.get("KGYM_BIN") or os.path.join(ROOT, "build", "kgym")
FAULTS = os.path.join(ROOT, "tests", "faults")

PROBE = r'''
import json, os
import torch
import torch.nn as nn


def _ls(d):
    try:
        return sorted(os.listdir(d))
    except OSError as e:
        return f"{e.__class__.__name__}({e.errno})"


class ModelNew(nn.Module):
    def forward(self, x):
        rep = {"root": _ls("/"), "dev": _ls("/dev"), "etc": _ls("/etc"),
               "driver": _ls("/proc/driver/nvidia"), "uid": os.getuid()}
        try:
            if torch.cuda.is_available():
                a = torch.randn(512, 512, device="cuda")
                rep["cuda"] = f"ok {torch.cuda.get_device_name()} {float((a @ a).sum()):.1f}"
            else:
                rep["cuda"] = "not available"
        except Exception as e:  # noqa: BLE001 - reported
            rep["cuda"] = f"{e.__class__.__name__}: {e}"[:300]
        raise RuntimeError("VIEW " + json.dumps(rep, sort_keys=True))
'''


def kgym_eval(ref: str, cands: list[str], backend: str, device: str, base: str) -> list[dict]:
    argv = [KGYM, "eval", "--ref", ref, "--backend", backend, "--device", device, "--json",
            "--num-correct-trials", "2", "--num-perf-trials", "5", "--num-warmup", "1",
            "--enable-profiling", "false", "--timeout", "240"]
    for c in cands:
        argv += ["--cand", c]
    env = dict(os.environ, TMPDIR=base)
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if len(out) != len(cands):
        raise SystemExit(f"kgym eval exited {p.returncode}, {len(out)} results for "
                         f"{len(cands)}:\n{p.stderr[-3000:]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root: only then does a candidate get its own uid and root")
        return 2
    gpu = a.device.startswith("cuda")
    os.makedirs(a.out, exist_ok=True)
    lines: list[str] = []
    results: list[dict] = []
    bad = 0

    def say(ok: bool, what: str) -> None:
        nonlocal bad
        bad += not ok
        lines.append(f"{'PASS' if ok else 'FAIL'} {what}")
        print(lines[-1], flush=True)

    base = tempfile.mkdtemp(prefix="kgym-view-", dir="/tmp")
    os.chmod(base, 0o755)
    tag = uuid.uuid4().hex[:12]
    planted = {f"/opt/kgym-view-{tag}/secret.txt": f"OPT-SECRET-{tag}",
               f"/var/lib/kgym-view-data-{tag}/kgym.db": f"DATA-SECRET-{tag}",
               f"/root/kgym-view-{tag}.txt": f"ROOT-SECRET-{tag}"}
    if os.path.isdir("/home"):
        planted[f"/home/kgym-view-{tag}/notes.txt"] = f"HOME-SECRET-{tag}"
    try:
        for path, text in planted.items():
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o644)
        # honest solutions, one invocation per backend
        prob = os.path.join(ROOT, "problems", "gpu" if gpu else "cpu", "level1")
        for backend in ("triton", "cuda" if gpu else "cpu"):
            sol = os.path.join(prob, "solutions", f"1_GELU.{backend}.py")
            r = kgym_eval(os.path.join(prob, "1_GELU.py"), [sol], backend, a.device, base)[0]
            results.append(r)
            say(r.get("verdict") == "pass",
                f"honest {backend}: {r.get('verdict')} speedup {r.get('speedup')} "
                f"{(r.get('error_message') or '')[:300]}")
        # the probe and the planted files, on the fault suite's reference
        probe = os.path.join(base, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        with open(os.path.join(FAULTS, "candidates", "read_host.py")) as f:
            src = f.read().replace("PATHS = []  # set by the test", f"PATHS = {sorted(planted)!r}")
        reader = os.path.join(base, "read_host.py")
        with open(reader, "w") as f:
            f.write(src)
        rp, rh = kgym_eval(os.path.join(FAULTS, "ref.py"), [probe, reader],
                           "triton" if gpu else "cpu", a.device, base)
        results += [rp, rh]
        msg = rp.get("error_message") or ""
        view = json.loads(msg.split("VIEW ", 1)[1]) if "VIEW " in msg else {}
        lines.append("probe: " + json.dumps(view, sort_keys=True))
        print(lines[-1])
        say(bool(view), f"probe ran: {msg[:200] if not view else 'ok'}")
        if gpu:
            say(str(view.get("cuda", "")).startswith("ok"), f"cuda in the candidate: {view.get('cuda')}")
            say(any(d.startswith("nvidia") for d in view.get("dev", [])),
                f"/dev holds the nvidia nodes: {view.get('dev')}")
        msg = rh.get("error_message") or ""
        rep = json.loads(msg.split("READ_HOST ", 1)[1]) if "READ_HOST " in msg else {}
        for path, text in planted.items():
            got = rep.get(path)
            say(got == "FileNotFoundError(2)" and text not in json.dumps(rh),
                f"hidden {path}: {got}")
    finally:
        for path in planted:
            if path.startswith("/root/"):
                if os.path.exists(path):
                    os.unlink(path)
            else:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    with open(os.path.join(a.out, "candidate_view.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "candidate_view.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print(f"{'all passed' if not bad else f'{bad} failed'}; written to {a.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
