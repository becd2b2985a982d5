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


_KERNEL: list = []  # the tiny kernel, built once per process


def _tiny_triton() -> object | None:
    if _KERNEL:
        return _KERNEL[0]
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
    _KERNEL.append(kgym_warm_kernel)
    return kgym_warm_kernel


def warm_prep(device: str) -> dict:
    """The part of a spare's warm-up that runs no device work, so it needs
    no device lock: the cpp_extension import (seconds when cold) and the
    tiny Triton kernel compiled (or loaded from the cache) without a launch.
    Returns what failed, by part."""
    errors: dict[str, str] = {}
    try:
        # (importlib: an `import torch.utils...` statement in a function
        # makes torch a local name of it)
        importlib.import_module("torch.utils.cpp_extension")
    except Exception as e:
        errors["cpp_extension"] = str(e)[:200]
    kernel = _tiny_triton()
    if kernel is not None and torch.device(device).type == "cuda":
        try:
            kernel.warmup(torch.float32, 1024, BLOCK=1024, grid=(1,))  # type: ignore[attr-defined]
        except Exception as e:
            errors["triton_compile"] = str(e)[:200]
    return errors


def warm_device(device: str) -> dict:
    """The part that runs on the device (the judge holds the device lock
    shared): a cuBLAS matmul (handle and kernels) and one launch of the tiny
    Triton kernel (module load, launcher). Returns what failed, by part."""
    errors: dict[str, str] = {}
    dev = torch.device(device)
    try:
        a = torch.ones(64, 64, device=dev)
        (a @ a).sum().item()
    except Exception as e:
        errors["cublas"] = str(e)[:200]
    kernel = _tiny_triton()
    if kernel is not None:
        try:
            x = torch.zeros(1024, device=dev)
            kernel[(1,)](x, x.numel(), BLOCK=1024)  # type: ignore[index]
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        except Exception as e:
            errors["triton"] = str(e)[:200]
    return errors
