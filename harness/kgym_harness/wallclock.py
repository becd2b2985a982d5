"""The trusted clock: the judge's own wall clock over blocks of
back-to-back forward calls (docs/harness-notes.md, "The trusted clock").

A wall block makes k calls back to back, each on an input set drawn right
before it, each output reduced right away to a print (below), and
synchronises once. Nothing between two calls can be skipped: no flush, no
lead, no event, no clock read. The judge runs the reference's blocks in its own
process and times the candidate's with its own clock from command to
reply, so both sides' figures are the judge's measurements.

A print of an output tensor y is (numel, sum r*|y|, sum r*y) with weights
r uniform in [0, 1) drawn from a seed sent with the command. sum r*|y|
needs every element of y (it is not linear, so no shortcut through the
inputs exists); together the two sums fix y's magnitude and sign. If y is
within (atol, rtol) of the reference elementwise, both sums are within
atol*sum(r) + rtol*sum(r*|ref|) of the reference's: `prints_match` checks
that necessary condition, so a block whose outputs were not computed
cannot match, and all the work shows on the judge's clock.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

from . import compare, timing

TARGET_MS = 5.0            # a wall block's calls take about this long (each side's own)
MAX_CALLS = 256            # calls per wall block, at most
MIN_CALLS = 2              # and at least
ROUNDS = 2                 # blocks per side, interleaved A B B A
TOL_MIN = 0.05             # the claim may exceed the clock by this fraction at least,
TOL_SPREAD = 3.0           # or by this many times the reference's block-to-block spread
TOL_MAX = 0.25             # never more than this
SUM_SLACK = 1e-4           # relative float32 summation error allowed in a print
# A print reduces at most this many elements per dot (cuBLAS's dot takes
# at most 2^31 - 1) and its weights repeat with this period, so that an
# output of any size costs one chunk of weights and one chunk of temporaries.
PRINT_CHUNK = 1 << 24

_perf_ns = time.perf_counter_ns  # captured before any candidate code runs


def calls_for(per_call_ms: float) -> int:
    """Calls in one wall block: about TARGET_MS at per_call_ms, within
    [MIN_CALLS, MAX_CALLS]."""
    k = MAX_CALLS if per_call_ms <= 0 else int(TARGET_MS / per_call_ms) + 1
    return max(MIN_CALLS, min(k, MAX_CALLS))


def _weights(numel: int, seed: int, j: int, device: str) -> torch.Tensor:
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed((seed + 7919 * (j + 1)) & (2**63 - 1))
    return torch.rand(numel, generator=gen, device=device, dtype=torch.float32)


class Printer:
    """Prints of one block's outputs, as device tensors until the end (no
    synchronize between calls). Weights are made per output tensor on the
    first output that has it, from seed."""

    def __init__(self, seed: int, device: str):
        self.seed, self.device = seed, device
        self.cpu = not timing.is_cuda(device)
        self.weights: list[torch.Tensor] = []
        self.rows: list[list[Any]] = []

        self.numels: list[int] = []

    def weight(self, j: int, numel: int) -> torch.Tensor | None:
        """Output j's weights: min(numel, PRINT_CHUNK) of them, repeated
        over longer outputs."""
        while len(self.weights) <= j:
            self.weights.append(None)  # type: ignore[arg-type]
            self.numels.append(0)
        w = self.weights[j]
        if w is None or self.numels[j] != numel:
            w = _weights(min(numel, PRINT_CHUNK), self.seed, j, self.device)
            self.weights[j], self.numels[j] = w, numel
        return w

    def take(self, out: Any) -> None:
        row: list[Any] = []
        for j, leaf in enumerate(compare.flatten(out)):
            if not isinstance(leaf, torch.Tensor):
                row.append(None)
                continue
            a = leaf.detach().reshape(-1)
            n = a.numel()
            w = self.weight(j, n)
            parts = [torch.zeros(2, dtype=w.dtype, device=w.device)] if n == 0 else []
            for lo in range(0, n, max(1, w.numel())):
                c = a[lo:lo + w.numel()]
                c = c.to(w.dtype) if c.dtype != w.dtype else c
                r = w[:c.numel()]
                parts.append(torch.stack([torch.dot(c.abs(), r), torch.dot(c, r)]))
            s = parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)
            row.append((n, s[0], s[1]))
        self.rows.append(row)

    def result(self) -> list[list[Any]]:
        """[[None or [numel, sum r|y|, sum r y]] per output tensor] per call,
        read back in one copy (which waits for the device)."""
        flat = [x for row in self.rows for p in row if p is not None for x in p[1:]]
        vals = iter(torch.stack(flat).double().tolist() if flat else [])
        return [[None if p is None else [int(p[0]), next(vals), next(vals)] for p in row]
                for row in self.rows]

    def weight_sums(self) -> list[float]:
        """sum r over each output's elements (its weights repeated)."""
        out = []
        for w, n in zip(self.weights, self.numels):
            if w is None or not w.numel():
                out.append(0.0)
                continue
            full, tail = divmod(n, w.numel())
            out.append(full * float(w.double().sum()) + float(w[:tail].double().sum()))
        return out


def draw_block(make_args: Callable[[int], Any], k: int, device: str) -> list:
    """A wall block's k input sets (make_args(0..k-1)), drawn and
    synchronised: the CPU's blocks take their inputs drawn before the
    first call (there a draw can cost ten times a call)."""
    inputs = [make_args(i) for i in range(k)]
    timing.sync(device)
    return inputs


def run_block(call: Callable[[Any], Any] | None, make_args: Callable[[int], Any], k: int,
              device: str, print_seed: int | None, inputs: list | None = None) -> dict:
    """One wall block: for i < k, the call's input set (drawn right before
    it, make_args(i), or inputs[i] when drawn before), the call, its
    output's print (no call: draws only; no print_seed: no prints), all
    back to back; then one synchronise (sleeping, not spinning: the judge
    reads the candidate's CPU time over the block) and one read-back of
    the prints.
    Every call gets inputs of its own: a kernel that remembered outputs by
    their inputs gains nothing. Drawn in the loop (CUDA) no block holds
    more than one input set (plus what the device has queued). Returns
    {"prints", "ms" (this process's clock), "print_cpu_ms" (this
    process's CPU time, all threads, in the prints: what they may cost a
    single-threaded candidate)}. Nothing else is computed after the last
    call: the candidate's command is timed to its reply, the reference's
    block to this return."""
    t1 = _perf_ns()
    print_cpu = 0
    printer = Printer(print_seed or 0, device)
    for i in range(k):
        args = None  # the last call's input set and output go before the next
        args = inputs[i] if inputs is not None else make_args(i)
        if call is None:
            continue
        out = call(args)
        if print_seed is not None:
            c0 = time.process_time_ns()
            printer.take(out)
            print_cpu += time.process_time_ns() - c0
        out = None
    args = None
    timing.sync_sleeping(device)
    c0 = time.process_time_ns()
    prints = printer.result()
    if print_seed is not None:
        print_cpu += time.process_time_ns() - c0
    return {"prints": prints, "ms": (_perf_ns() - t1) / 1e6, "print_cpu_ms": print_cpu / 1e6}


def prints_match(got: Any, want: list, weight_sums: list[float], atol: float,
                 rtol: float) -> str | None:
    """None when one call's prints (got, the candidate's claim) are within
    what outputs allclose to the reference's (want) could give; else why
    not. A reference print that is not finite (NaN or inf in its output)
    checks nothing."""
    if not isinstance(got, list) or len(got) != len(want):
        return "a different number of output tensors"
    for j, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        if not (isinstance(g, list) and len(g) == 3
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in g)):
            return f"output {j}: not a tensor"
        if int(g[0]) != w[0]:
            return f"output {j}: {int(g[0])} elements, expected {w[0]}"
        if not all(map(_finite, w[1:])):
            continue
        ws = weight_sums[j] if j < len(weight_sums) else 0.0
        bound = atol * ws + rtol * abs(w[1]) + SUM_SLACK * (abs(w[1]) + abs(float(g[1])) + ws)
        for x, y in ((g[1], w[1]), (g[2], w[2])):
            if not _finite(x) or abs(float(x) - y) > bound:
                return f"output {j}: weighted sums differ beyond the tolerance"
    return None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and x == x and abs(x) != float("inf")


def tolerance(ref_per_call: list[float]) -> float:
    """How far the candidate's claimed speedup may exceed the judge's clock:
    TOL_MIN, or TOL_SPREAD times the spread of the reference's own blocks
    when the machine is noisier, at most TOL_MAX. Only the reference's
    blocks count: the candidate could make its own noisy."""
    lo = min(ref_per_call) if ref_per_call else 0.0
    spread = (max(ref_per_call) - lo) / lo if lo > 0 else 0.0
    return min(max(TOL_MIN, TOL_SPREAD * spread), TOL_MAX)
