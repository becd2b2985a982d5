"""Payload for torch_check.c: what a harness child does, inside the sandbox.

Each step prints "STEP <name> ok|FAIL <ms> [detail]". Run by torch_check.c
(manual) and, with --quick, by test_sandbox.c's torch smoke test; not a
pytest file.
"""
from __future__ import annotations

import os
import sys
import time
import traceback


def step(name: str, fn) -> bool:
    t0 = time.perf_counter()
    try:
        detail = fn()
        ok = True
    except BaseException as e:  # noqa: BLE001 - report everything
        detail = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        ok = False
        if os.environ.get("KG_CHECK_VERBOSE"):
            traceback.print_exc()
    ms = (time.perf_counter() - t0) * 1e3
    print(f"STEP {name} {'ok' if ok else 'FAIL'} {ms:.0f} {detail or ''}", flush=True)
    return ok


def imports() -> str:
    import torch  # noqa: F401
    import triton  # noqa: F401
    return f"torch {torch.__version__} triton {triton.__version__}"


def eager() -> str:
    import torch
    assert float(torch.ones(3).sum()) == 3.0
    a = torch.randn(256, 256)
    b = a @ a  # BLAS
    x = torch.randn(8, 16, 32, 32)
    w = torch.randn(32, 16, 3, 3)
    y = torch.nn.functional.conv2d(x, w)  # oneDNN (JIT kernels)
    return f"matmul {tuple(b.shape)} conv {tuple(y.shape)} threads {torch.get_num_threads()}"


def triton_interp() -> str:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(o_ptr + i, tl.load(x_ptr + i, mask=m) + tl.load(y_ptr + i, mask=m), mask=m)

    x, y = torch.randn(1000), torch.randn(1000)
    o = torch.empty_like(x)
    if os.environ.get("TRITON_INTERPRET") == "1":
        add[(triton.cdiv(1000, 256),)](x, y, o, 1000, BLOCK=256)
        assert torch.allclose(o, x + y)
    mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled"
    if mode == "compiled" and torch.cuda.is_available():
        x, y = x.cuda(), y.cuda()
        o = torch.empty_like(x)
        add[(triton.cdiv(1000, 256),)](x, y, o, 1000, BLOCK=256)
        assert torch.allclose(o, x + y)
        mode += " on " + torch.cuda.get_device_name()
    return mode + " add ok"


def profiler() -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.randn(64, 64) @ torch.randn(64, 64)
    n = len(prof.key_averages())
    return f"{n} events"


def cuda() -> str:
    import torch
    t0 = time.perf_counter()
    torch.cuda.init()
    a = torch.randn(2048, 2048, device="cuda")
    b = (a @ a).sum().item()
    init_ms = (time.perf_counter() - t0) * 1e3
    return f"{torch.cuda.get_device_name()} init+matmul {init_ms:.0f} ms ({b:.1f})"


def profiler_cuda() -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(512, 512, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        (a @ a).sum().item()
    kernels = [e.key for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
    assert kernels, "no device events (CUPTI)"
    return f"{len(kernels)} device kernels, e.g. {kernels[0][:40]}"


def no_network() -> str:
    import socket
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("1.1.1.1", 80))
    except OSError as e:
        return f"connect refused as expected: {e}"
    raise AssertionError("network reachable")


def load_inline() -> str:
    import torch
    from torch.utils.cpp_extension import load_inline as li

    src = "torch::Tensor twice(torch::Tensor x) { return x * 2; }"
    mod = li(name="kg_twice", cpp_sources=[src], functions=["twice"], verbose=False)
    assert torch.equal(mod.twice(torch.ones(3)), torch.full((3,), 2.0))
    return "built and ran (" + os.environ.get("TORCH_EXTENSIONS_DIR", "~/.cache") + ")"


def main() -> int:
    print(f"cwd {os.getcwd()} HOME {os.environ.get('HOME')} uid {os.getuid()}", flush=True)
    ok = step("imports", imports)
    ok &= step("eager", eager)
    ok &= step("triton", triton_interp)
    if "--quick" not in sys.argv:  # the unit test's smoke run skips it
        ok &= step("profiler_cpu", profiler)
    ok &= step("no_network", no_network)
    if "--gpu" in sys.argv:
        ok &= step("cuda", cuda)
        ok &= step("profiler_cuda", profiler_cuda)
    if "--load-inline" in sys.argv:
        ok &= step("load_inline", load_inline)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
