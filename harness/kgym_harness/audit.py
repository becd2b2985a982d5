"""The judge's reading of what a checked call did besides its output.

Each function returns findings, (reason, code, message) triples the judge
turns into hack reasons (stages/integrity.py, report). The judge trusts its own
observations (what it sent, what it received, what the reference did, what
/proc says about the candidate's process); the candidate's guard report can
only add findings, and a candidate that stops sending it breaks the
protocol. docs/harness-notes.md, "Reward integrity", says why each rule is safe
for honest kernels.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import guards, quiet
from .compare import flatten
from .remote import Remote, RunReply

Finding = tuple[str, str, str]
MIN_STALE_WORDS = 8


class ReferenceFacts:
    """What the reference itself does to its inputs, learnt on the judge's
    own calls: which (output, input) pairs share storage, which inputs it
    changes in place. The candidate may do the same."""

    def __init__(self) -> None:
        self.aliases: set[tuple[int, int]] = set()
        self.mutated: set[int] = set()

    def learn(self, out: Any, clones: list, sent: list | None,
              after: list | None = None) -> None:
        """clones: what the reference ran on; after: their digests now, when
        the caller has them already."""
        self.aliases.update((i, j) for i, j in guards.storage_aliases(flatten(out), clones))
        if sent is not None:
            after = after if after is not None else guards.digests(clones)
            self.mutated.update(j for j, (a, b) in enumerate(zip(sent, after)) if a != b)


def _name(i: int) -> str:
    return f"output {i}"


def stale(got: Any) -> list[Finding]:
    """Outputs that are (almost) all the poison pattern: never written."""
    out = []
    for i, g in enumerate(flatten(got)):
        if not isinstance(g, torch.Tensor):
            continue
        hit, n = guards.poisoned_words(g)
        if n >= MIN_STALE_WORDS and hit >= guards.STALE_FRACTION * n:
            out.append(("stale_memory", "STALE_MEMORY",
                        f"{_name(i)} was never written: {hit} of its {n} 16-bit words still hold "
                        "the pattern the harness leaves in freed memory (an uninitialised "
                        "torch.empty buffer returned as the result)"))
    return out


# A 16-bit word of an output that was written still equals the poison word
# by chance: at most 2^-16 per word (a uniformly random word; for floats
# 0xFFFF is a NaN, rarer still). The note needs more hits than that chance
# gives for the output's size, with a false-alarm chance of POISON_ALARM.
POISON_WORD_CHANCE = 2.0 ** -16
POISON_ALARM = 1e-6


def poison_threshold(n: int) -> float:
    """Hits among n words above which chance is ruled out: the mean
    lam = n * 2^-16 of Binomial(n, 2^-16) plus t from Bernstein's bound,
    P(X - lam >= t) <= exp(-t^2 / (2 (lam + t/3))) = POISON_ALARM, i.e.
    t = L/3 + sqrt((L/3)^2 + 2 L lam) with L = ln(1/POISON_ALARM).
    About 28 for 524288 words (1 MiB), 3.1e-3 n for large n."""
    lam = n * POISON_WORD_CHANCE
    big_l = math.log(1 / POISON_ALARM)
    return lam + big_l / 3 + math.sqrt((big_l / 3) ** 2 + 2 * big_l * lam)


def poison_note(got: Any, index: int, expected: Any = None) -> str:
    """For a mismatch message: how much of output `index` was never written,
    when its poisoned words are more than chance gives (poison_threshold)
    on top of those the expected output holds itself (an int output of -1s
    holds the word by right)."""
    leaves = flatten(got)
    if not 0 <= index < len(leaves) or not isinstance(leaves[index], torch.Tensor):
        return ""
    hit, n = guards.poisoned_words(leaves[index])
    base = 0
    want = flatten(expected) if expected is not None else []
    if index < len(want) and isinstance(want[index], torch.Tensor) \
            and want[index].dtype == leaves[index].dtype:
        base = guards.poisoned_words(want[index])[0]
    if hit <= base + poison_threshold(n):
        return ""
    return (f" ({hit} of {n} 16-bit words still hold the harness's poison pattern: "
            "parts of the output were never written)")


def deferred(r: RunReply) -> list[Finding]:
    q = r.quiet
    if not q.get("deferred"):
        return []
    if q.get("changed"):
        what = (f"{', '.join(_name(i) for i in q['changed'][:4])} changed after forward "
                "returned (a thread or process kept writing it)")
    else:
        what = (f"work kept running after forward returned: {q.get('busy_ms', 0):.1f} ms of "
                f"CPU in other threads or processes ({q.get('new_threads', 0)} new threads, "
                f"{q.get('new_children', 0)} new processes)")
    return [("thread_injection", "THREAD_INJECTION", what)]


def mutation(r: RunReply, sent: list, facts: ReferenceFacts) -> list[Finding]:
    changed = [j for j, (a, b) in enumerate(zip(sent, r.inputs or []))
               if a is not None and a != b and j not in facts.mutated]
    if not changed:
        return []
    return [("input_mutation", "INPUT_MUTATION",
             f"forward changed its input{'s' if len(changed) > 1 else ''} "
             f"{', '.join(str(j) for j in changed[:8])} in place (the reference does not)")]


def shared_storage(r: RunReply, facts: ReferenceFacts) -> list[Finding]:
    pairs = [(i, j) for i, j in r.aliases if (i, j) not in facts.aliases]
    if not pairs:
        return []
    i, j = pairs[0]
    return [("aliases_input", "ALIASES_INPUT",
             f"{_name(i)} shares memory with input {j} (it returns the input or a view of "
             "it; the reference's output does not)")]


def copies_of_inputs(expected: Any, got: Any, inputs: list, sent: list) -> list[Finding]:
    """Received outputs that hold exactly the bytes of an input the judge
    sent (a returned input, a copy or a reshaped view of one) while the
    expected output does not. Trusted: the judge's own data only. The
    received tensor is digested where it is (no copy to the device); only
    a matching digest is confirmed byte for byte."""
    for i, (e, g) in enumerate(zip(flatten(expected), flatten(got))):
        if not (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)):
            continue
        for j, (x, d) in enumerate(zip(inputs, sent)):
            if (not isinstance(x, torch.Tensor) or d is None or x.dtype != g.dtype
                    or x.numel() != g.numel() or x.numel() == 0):
                continue
            if (guards.digest_on(g, x.device) == d and guards.same_values(x, g)
                    and not guards.same_values(x, e)):
                return [("aliases_input", "ALIASES_INPUT",
                         f"{_name(i)} is input {j}, unchanged (the expected output is not)")]
    return []


def downgrade(expected: Any, got: Any) -> list[Finding]:
    """A lower-precision dtype, or values rounded to one, where the
    reference computes in full precision."""
    for i, (e, g) in enumerate(zip(flatten(expected), flatten(got))):
        if (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor)
                and guards.is_downcast(e.dtype, g.dtype)):
            return [("precision_downgrade", "PRECISION_DOWNGRADE",
                     f"{_name(i)} is {str(g.dtype).replace('torch.', '')}; the reference "
                     f"computes {str(e.dtype).replace('torch.', '')}")]
    low = guards.rounded_to(expected, got)
    if low is None:
        return []
    return [("precision_downgrade", "PRECISION_DOWNGRADE",
             f"every output value is rounded to {low} (the expected values are not): the "
             "kernel computes in lower precision and casts back")]


def watched(remote: Remote) -> list[Finding]:
    """The judge's own look at the candidate's process between commands,
    and the candidate's thread ledger (each unless KGYM_THREAD_CHECKS
    leaves it out: quiet.thread_checks)."""
    out = []
    on = quiet.thread_checks()
    w = remote.watch if "watch" in on else None
    if w is not None and w.findings:
        f = max(w.findings, key=lambda x: x["busy_ms"])
        if f["what"] == "new threads":
            what = (f"{f['threads']} threads started during the timed calls were still busy "
                    f"after the timing command returned ({f['busy_ms']:.1f} ms of CPU in "
                    f"{f['window_ms']:.0f} ms)")
        else:
            what = (f"the candidate's processes used {f['busy_ms']:.1f} ms of CPU (and waited "
                    f"{f['waited_ms']:.1f} ms for one) during {f['window_ms']:.0f} ms "
                    f"in which they had nothing to do (after the {f['phase']} command)")
        out.append(("thread_injection", "THREAD_INJECTION", what))
    if "ledger" in on and (remote.late_threads or remote.thread_busy_ms > 1.0):
        out.append(("thread_injection", "THREAD_INJECTION",
                    f"threads started inside forward outlived it ({remote.late_threads} "
                    f"ended after forward returned; {remote.thread_busy_ms:.1f} ms of CPU in "
                    "ones still running)"))
    return out[:1]


class Sketch:
    """What degenerate() reads of an expected output too large to keep
    (memstat.is_large): whether a constant output passes, decided at once,
    and each leaf's shape, dtype and strided sample (compare.strided_sample)
    on the host. Two sketches match when their samples do: outputs that
    differ only between sampled elements would draw a warning, never a
    failure."""

    def __init__(self, expected: Any, atol: float, rtol: float, constant: bool = True):
        from .compare import strided_sample
        self.constant = guards.constant_passes(expected, atol, rtol) if constant else False
        leaves = flatten(expected)
        self.kinds = [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None
                      for x in leaves]
        self.sample = [strided_sample(x).cpu() if isinstance(x, torch.Tensor) else x
                       for x in leaves]

    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in self.sample
                   if isinstance(x, torch.Tensor))


def _constant(expected: Any, atol: float, rtol: float) -> bool:
    if isinstance(expected, Sketch):
        return expected.constant
    return guards.constant_passes(expected, atol, rtol)


def _same_output(a: Any, b: Any, atol: float, rtol: float) -> bool:
    from .compare import outputs_match
    if not isinstance(a, Sketch) and not isinstance(b, Sketch):
        return outputs_match(a, b, atol, rtol)
    a, b = (x if isinstance(x, Sketch) else Sketch(x, atol, rtol, constant=False)
            for x in (a, b))
    return a.kinds == b.kinds and outputs_match(a.sample, b.sample, atol, rtol)


def degenerate(first: tuple[list, Any] | None, second: tuple[list, Any] | None,
               atol: float, rtol: float) -> list[str]:
    """Warnings about the problem itself, from two trials' (input digests,
    expected output or its Sketch): a constant output would pass; the
    output does not depend on the inputs drawn; the inputs do not change
    between draws."""
    out = []
    if first is not None and _constant(first[1], atol, rtol):
        out.append("degenerate problem: the reference's output barely varies (a constant "
                   f"output is within atol={atol:g} rtol={rtol:g} of it), so a kernel that "
                   "does nothing can pass")
    if first is not None and second is not None:
        if first[0] == second[0]:
            out.append("degenerate problem: get_inputs() returned the same values for two "
                       "different seeds, so a cached output passes every trial")
        elif _same_output(first[1], second[1], atol, rtol):
            out.append("degenerate problem: the reference gave the same output for two "
                       "different input draws, so a cached output passes every trial")
    return out
