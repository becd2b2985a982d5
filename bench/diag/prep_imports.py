"""What a spare's warm prep imports after its fork, with and without the
zygote's pre-imports (session 11, issue 4).

Imports what the zygote imports before its imports for the children
(torch, triton, the harness's judge and candidate), forks a child that
makes its CUDA context (where there is one) and runs prewarm.warm_prep,
then does those imports (zygote.import_for_children) and forks a second
child. Each child prints one JSON line: its context, prep and CPU times
and the modules it imported, by package (cpustat.imported). On a machine
whose packages have no .pyc files (the H200's image) every such module is
compiled from source in the child.

    python bench/diag/prep_imports.py      (PYTHONPATH=harness)
"""
from __future__ import annotations

import json
import os
import sys
import time

T0 = time.perf_counter()
import torch  # noqa: E402
try:
    import triton  # noqa: E402,F401
except Exception:  # noqa: BLE001 - optional on cpu
    triton = None
import kgym_harness.candidate  # noqa: E402,F401
import kgym_harness.judge  # noqa: E402,F401
from kgym_harness import cpustat, prewarm, zygote  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctx_create import fork_child, read_line  # noqa: E402  (bench/diag/ctx_create.py, next to it)


def _prep(w: int, tag: str) -> None:
    """In the forked child: its context, warm prep and imports, as JSON on w."""
    cpustat.mark_fork()
    out: dict = {"child": tag}
    t = time.perf_counter()
    cpu = time.process_time()
    device = "cpu"
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.cuda.set_device(0)
        device = "cuda:0"
    out["ctx_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    t = time.perf_counter()
    out["failed"] = prewarm.warm_prep(device)
    out["prep_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    out["cpu_ms"] = round((time.process_time() - cpu) * 1e3, 1)
    out["imported"] = cpustat.imported()
    out["modules"] = cpustat.sample()[2]
    os.write(w, (json.dumps(out) + "\n").encode())


def child(tag: str) -> dict:
    pid, r = fork_child(_prep, tag)
    line = read_line(r)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(line or "{}")


def main() -> int:
    print(json.dumps({"import_ms": round((time.perf_counter() - T0) * 1e3, 1),
                      "modules": len(sys.modules),
                      "dont_write_bytecode": sys.flags.dont_write_bytecode}), flush=True)
    print(json.dumps(child("nothing pre-imported")), flush=True)
    t = time.perf_counter()
    info: dict = {"triton": triton is not None}
    zygote.import_for_children(info)
    print(json.dumps({"pre_import_ms": round((time.perf_counter() - t) * 1e3, 1),
                      "errors": info.get("import_errors"),
                      "driver_fds": zygote.driver_fds()}), flush=True)
    print(json.dumps(child("pre-imported")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
