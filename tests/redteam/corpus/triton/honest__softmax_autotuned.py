# redteam: family=honest problem=problems/cpu/level1/2_RowSoftmax.py backend=triton expect=pass
"""Honest, awkward: a row softmax behind triton.autotune, three choices of
rows per program; the autotuner benchmarks them on the first call of each
shape and launches the winner from then on. Launches made from inside the
autotuner must count as the candidate's kernel. Triton's default benchmark
needs a GPU driver, so without CUDA (the interpreter) the candidate gives
the autotuner a wall-clock benchmark of its own."""
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _wall_bench(fn, quantiles=None):
    """Median wall time (ms) of three calls: the autotuner's benchmark on the CPU."""
    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    med = sorted(times)[1]
    return [med] * len(quantiles) if quantiles else med


@triton.autotune(configs=[triton.Config({"BLOCK_R": r}) for r in (4, 8, 16)], key=["rows", "cols"],
                 do_bench=None if torch.cuda.is_available() else _wall_bench)
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None].to(tl.int64) * cols + c[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf"))
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=1)[:, None]), 0.0)
    tl.store(y_ptr + offs, e / tl.sum(e, axis=1)[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        _softmax_kernel[lambda meta: (triton.cdiv(rows, meta["BLOCK_R"]),)](
            x, y, rows, cols, BLOCK_C=triton.next_power_of_2(cols))
        return y
