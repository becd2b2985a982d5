"""What the zygote imports for its children (zygote._preimport): the
extension machinery and Triton's code generator, which every spare's
candidate would otherwise import after its fork (compiled from source
where the packages have no .pyc files, as on the H200), without starting
the CUDA driver before any fork."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(__file__), "..", "..", "harness")


def _py(code: str, **env: str) -> dict:
    e = dict(os.environ, PYTHONPATH=os.path.abspath(HARNESS), **env)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cpp_extension_is_imported_without_asking_cuda(tmp_path):
    """torch.utils.cpp_extension asks torch.cuda.is_available() at import
    once it finds a CUDA_HOME (only to print a warning); asking starts the
    driver. Here a CUDA build is faked on the CPU build (is_compiled, a
    version, a CUDA_HOME) and is_available records each call: the zygote's
    import makes none, finds the same CUDA_HOME, and puts the real function
    back afterwards."""
    code = r"""
import json, sys, torch
calls = []
def asked():
    calls.append(1)
    return False
torch.cuda.is_available = asked
torch.cuda._is_compiled = lambda: True
torch.version.cuda = "13.0"
from kgym_harness import zygote
zygote._import_cpp_extension()
during = len(calls)
import torch.utils.cpp_extension as ce
torch.cuda.is_available()
print(json.dumps({"during": during, "after": len(calls), "home": ce.CUDA_HOME,
                  "imported": "torch.utils.cpp_extension" in sys.modules}))
"""
    out = _py(code, CUDA_HOME=str(tmp_path))
    assert out == {"during": 0, "after": 1, "home": str(tmp_path), "imported": True}, out
    # the fake is what a CUDA machine has: without the zygote's answer the
    # import asks (so the test above can fail)
    plain = code.replace("zygote._import_cpp_extension()",
                         "import importlib; importlib.import_module('torch.utils.cpp_extension')")
    assert _py(plain, CUDA_HOME=str(tmp_path))["during"] == 1


def test_preimport_covers_what_a_spare_imports():
    """After _preimport, a forked child's warm prep (prewarm.warm_prep, a
    spare's unlocked start-up) imports almost nothing of its own, and the
    zygote has no GPU driver device open."""
    code = r"""
import json, os, sys
from kgym_harness import zygote, cpustat
info = zygote._preimport()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    cpustat.mark_fork()
    from kgym_harness import prewarm
    prewarm.warm_prep("cpu")
    os.write(w, json.dumps(cpustat.imported()).encode())
    os._exit(0)
os.close(w)
got = json.loads(os.read(r, 65536))
os.waitpid(pid, 0)
print(json.dumps({"info": info, "child": got}))
"""
    out = _py(code)
    info = out["info"]
    assert "import_errors" not in info and info["driver_fds"] == 0, info
    assert info["cpp_extension_ms"] > 0, info
    assert sum(out["child"].values()) < 10, out["child"]


def test_imported_counts_a_childs_own_modules_by_package():
    code = r"""
import json, os, sys
from kgym_harness import cpustat
cpustat.mark_fork()
before = cpustat.imported()
import xml.dom.minidom, json.tool
print(json.dumps({"before": before, "after": cpustat.imported(), "two": cpustat.imported(limit=1)}))
"""
    out = _py(code)
    assert out["before"] == {}, out
    assert out["after"].get("xml.dom", 0) >= 2 and out["after"].get("json.tool") == 1, out
    assert len(out["two"]) == 1 and list(out["two"]) == [max(out["after"], key=out["after"].get)]
