"""What a warm spare's candidate does before its task (judge.run_warm_judge
drives it; docs/worker.md): everything a first evaluation in a fresh
process pays once and that does not depend on the task. On a GPU: the CUDA
context and cuBLAS handle, Triton's driver and launcher start-up (one tiny
kernel, compiled once into the candidate cache, then only loaded), and the
heavy torch.utils.cpp_extension import the extension hooks need. None of it
runs in the zygote: CUDA must never start before the fork."""

from __future__ import annotations

import importlib

import torch


def _tiny_triton() -> object | None:
    try:
        import triton
        import triton.language as tl
    except Exception:  # triton is optional
        return None

    @triton.jit
    def kgym_warm_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
    return kgym_warm_kernel


def warm_device(device: str) -> dict:
    """Warms this process for evaluations on device (cuda:N); returns what
    failed, by part (empty when all went well)."""
    errors: dict[str, str] = {}
    dev = torch.device(device)
    a = torch.ones(64, 64, device=dev)
    (a @ a).sum().item()
    try:
        # (importlib: an `import torch.utils...` statement here would make
        # torch a local name of this function, unbound in the lines above)
        importlib.import_module("torch.utils.cpp_extension")  # seconds when cold
    except Exception as e:
        errors["cpp_extension"] = str(e)[:200]
    kernel = _tiny_triton()
    if kernel is not None:
        try:
            x = torch.zeros(1024, device=dev)
            kernel[(1,)](x, x.numel(), BLOCK=1024)  # type: ignore[index]
            torch.cuda.synchronize(dev)
        except Exception as e:
            errors["triton"] = str(e)[:200]
    return errors
