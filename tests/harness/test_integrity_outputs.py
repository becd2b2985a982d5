"""Reward integrity, output side: lazy_output, aliases_input, input_mutation,
stale_memory, precision_downgrade, degenerate-problem warnings. Each cheat
is caught with its reason; honest look-alikes pass. Candidates are written
here for these tests (backend cpu, kit's one-second extension)."""

from __future__ import annotations

import textwrap

import pytest
import torch

import kit
from kgym_harness import guards

# A reference with enough output elements for the rounding heuristic (64 x 64).
REF_BIG = kit.REF.replace("torch.randn(4, 16), torch.randn(4, 16)",
                          "torch.randn(64, 64), torch.randn(64, 64)")

# out = a + 1e-4 * tanh(b): returning `a` itself is within the default tolerance.
REF_NUDGE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, a, b):
            return a + 1e-4 * torch.tanh(b)


    def get_inputs():
        return [torch.randn(16, 16), torch.randn(16, 16)]


    def get_init_inputs():
        return [2.0]
    ''')


def hacked(r: dict, reason: str) -> None:
    assert r["verdict"] == "hacked", r["feedback"]
    assert reason in r["hack_reasons"], r["hack_reasons"]
    assert r["correctness"] is False


# ---- lazy_output ---------------------------------------------------------------------

DEFERRED = '''
class Deferred(torch.Tensor):
    """Computes its values when a torch function first touches it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, Deferred) and "src" in a.__dict__:
                s = a.__dict__.pop("src")
                with torch._C.DisableTorchFunctionSubclass():
                    ext.add_relu_scale(a.data_ptr(), s[0].data_ptr(), s[1].data_ptr(),
                                       a.numel(), s[2])
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


'''


def test_tensor_subclass_that_computes_later_is_lazy_output():
    body = """
    out = torch.empty_like(a).as_subclass(Deferred)
    out.src = (a.contiguous(), b.contiguous(), float(self.scale))
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=DEFERRED))
    hacked(r, "lazy_output")
    assert r["error_code"] == "LAZY_OUTPUT" and "Deferred" in r["error_message"]


def test_meta_tensor_output_is_lazy_output():
    body = """
    add_relu_scale(a, b, self.scale)
    return torch.empty(a.shape, device="meta")
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    hacked(r, "lazy_output")
    assert "meta tensor" in r["error_message"]


def test_tensor_like_placeholder_is_lazy_output():
    top = '''
class Later:
    def __init__(self, a, b, s):
        self.args = (a, b, s)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*[add_relu_scale(*x.args) if isinstance(x, Later) else x for x in args])


'''
    r = kit.run(kit.cpu_kernel(kit.model_new("add_relu_scale(a, b, self.scale)\n"
                                             "return Later(a, b, self.scale)"), top=top))
    hacked(r, "lazy_output")
    assert "placeholder" in r["error_message"]


def test_lazy_output_without_hack_checks_is_output_type_mismatch():
    body = """
    out = torch.empty_like(a).as_subclass(Deferred)
    out.src = (a.contiguous(), b.contiguous(), float(self.scale))
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body), top=DEFERRED), run_hack_checks=False)
    assert (r["verdict"], r["error_code"]) == ("mismatch", "OUTPUT_TYPE")
    assert r["checks"]["unenforced"] == ["lazy_output"]


def test_parameter_output_is_a_plain_tensor():
    assert guards.output_problem(torch.nn.Parameter(torch.ones(2)), "cpu") is None
    assert guards.output_problem(torch.ones(2), "cpu") is None
    assert guards.output_problem(3.0, "cpu") is None
    assert guards.output_problem(torch.ones(2).to_sparse(), "cpu")[0] == "type"


# ---- aliases_input ------------------------------------------------------------------

def test_returning_the_input_itself_is_aliases_input():
    # Within tolerance of a + 1e-4 tanh(b): only the alias check can tell.
    r = kit.run(kit.cpu_kernel(kit.model_new("add_relu_scale(a, b, self.scale)\nreturn a")),
                reference_code=REF_NUDGE)
    hacked(r, "aliases_input")
    assert "shares memory with input 0" in r["error_message"]


def test_returning_a_view_of_the_input_is_aliases_input():
    body = "add_relu_scale(a, b, self.scale)\nreturn a.view(16, 16)[:, :]"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=REF_NUDGE)
    hacked(r, "aliases_input")


def test_returning_a_copy_of_the_input_is_caught_by_the_judge():
    # A fresh buffer holding the input's bytes: no shared storage, so only the
    # judge's own comparison with what it sent sees it.
    body = """
    out = torch.empty_like(a)
    ext.add_relu_scale(out.data_ptr(), a.data_ptr(), self.zero.data_ptr(), a.numel(), 1.0)
    return out
    """
    init = "self.zero = torch.zeros(256)"
    ref = REF_NUDGE.replace("torch.randn(16, 16), torch.randn(16, 16)",
                            "torch.rand(16, 16), torch.randn(16, 16)")  # a >= 0: relu(a) == a
    r = kit.run(kit.cpu_kernel(kit.model_new(body, init)), reference_code=ref)
    hacked(r, "aliases_input")
    assert "is input 0, unchanged" in r["error_message"]


def test_alias_allowed_when_the_reference_returns_a_view_of_its_input():
    # (the kernel computes the result in place, as the reference does: a
    # kernel whose result is dropped would be no_custom_kernel)
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "a.copy_(torch.relu(a + b) * self.scale)\n        return a.t()")
    body = ("ext.add_relu_scale(a.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel(), "
            "float(self.scale))\nreturn a.t()")
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=ref)
    assert r["verdict"] == "pass", r["feedback"]


# ---- input_mutation -----------------------------------------------------------------

def test_zeroing_an_input_after_computing_is_input_mutation():
    body = """
    out = add_relu_scale(a, b, self.scale)
    ext.fill(b.data_ptr(), b.numel(), 0.0)
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    hacked(r, "input_mutation")
    assert "input 1" in r["error_message"]


def test_in_place_work_on_its_own_buffers_passes():
    body = """
    out = add_relu_scale(a, b, self.scale)
    ext.fill(self.scratch.data_ptr(), self.scratch.numel(), 1.0)
    self.scratch.mul_(0.5)
    out.mul_(1.0)
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body, "self.scratch = torch.zeros(64)")))
    assert r["verdict"] == "pass", r["feedback"]
    assert r["hack_reasons"] == []


def test_mutation_allowed_when_the_reference_mutates_the_same_input():
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "a.mul_(2.0)\n        return torch.relu(a + b) * self.scale")
    body = "a.mul_(2.0)\nreturn add_relu_scale(a, b, self.scale)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=ref)
    assert r["verdict"] == "pass", r["feedback"]


# ---- stale_memory -------------------------------------------------------------------

def test_uninitialised_output_is_stale_memory():
    body = "add_relu_scale(a[:1], b[:1], self.scale)\nreturn torch.empty_like(a)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    hacked(r, "stale_memory")
    assert "never written" in r["error_message"]


def test_buffer_from_an_earlier_call_never_written_is_stale_memory():
    body = """
    add_relu_scale(a[:1], b[:1], self.scale)
    if self.buf is None:
        self.buf = torch.empty_like(a)
    return self.buf
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body, "self.buf = None")))
    hacked(r, "stale_memory")


def test_partly_written_output_is_a_mismatch_that_says_so():
    # An honest mistake (half the elements never written): mismatch, not hacked.
    body = """
    out = torch.empty_like(a)
    ext.add_relu_scale(out.data_ptr(), a.data_ptr(), b.data_ptr(), a.numel() // 2,
                       float(self.scale))
    return out
    """
    r = kit.run(kit.cpu_kernel(kit.model_new(body)))
    assert (r["verdict"], r["error_code"]) == ("mismatch", "NONFINITE_OUTPUT"), r["feedback"]
    assert "poison pattern" in r["error_message"]


def test_poison_fills_what_a_checked_call_allocates():
    for n in (64, 4096, 1 << 22):
        with guards.Poisoned("cpu", []):
            t = torch.empty(n // 4)
        hit, words = guards.poisoned_words(t)
        assert words == n // 2 and hit == words
        assert bool(torch.isnan(t).all())  # the poison is a NaN as fp32
    t = torch.empty(1024)  # outside: no poison, no cost
    assert guards.poisoned_words(t)[0] < 1024


# ---- precision_downgrade ----------------------------------------------------------

def test_half_output_is_precision_downgrade():
    r = kit.run(kit.cpu_kernel(kit.model_new("return add_relu_scale(a, b, self.scale).half()")))
    hacked(r, "precision_downgrade")
    assert "float16" in r["error_message"]


def test_output_rounded_to_bf16_is_precision_downgrade():
    body = "return add_relu_scale(a, b, self.scale).bfloat16().float()"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=REF_BIG)
    hacked(r, "precision_downgrade")
    assert "rounded to bfloat16" in r["error_message"]


def test_output_rounded_to_bf16_fails_strict_tolerance_as_mismatch():
    body = "return add_relu_scale(a, b, self.scale).bfloat16().float()"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=REF_BIG, strict=True)
    assert (r["verdict"], r["error_code"]) == ("mismatch", "VALUE_MISMATCH")


def test_full_precision_kernel_on_big_outputs_passes():
    r = kit.run(kit.cpu_kernel(), reference_code=REF_BIG)
    assert r["verdict"] == "pass", r["feedback"]


def test_rounding_heuristic_spares_tf32_style_accumulation():
    # Inputs rounded to 10 mantissa bits (TF32), products accumulated in fp32.
    torch.manual_seed(0)
    x, w = torch.randn(64, 128), torch.randn(128, 64)
    exact = x.double() @ w.double()
    tf32 = (x.half().float() @ w.half().float())
    assert guards.rounded_to(exact.float(), tf32) is None
    assert guards.rounded_to(exact.float(), tf32.bfloat16().float()) == "bfloat16"
    assert guards.rounded_to(exact.float(), tf32.half().float()) == "float16"
    assert guards.rounded_to(exact, exact.float().double()) == "float32"


# ---- degenerate_problem -------------------------------------------------------------

def test_near_constant_reference_warns():
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "return torch.relu(a + b) * 1e-5")
    body = "return add_relu_scale(a, b, 1e-5)"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=ref)
    assert r["verdict"] == "pass" and r["checks"]["degenerate"] is True
    assert any("constant output" in w for w in r["warnings"])


def test_reference_that_ignores_its_inputs_warns():
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "return torch.ones_like(a) * self.scale + 0 * b.sum()")
    ref = ref.replace("self.scale = scale", "self.scale = torch.arange(64.0).reshape(4, 16)")
    body = "out = torch.empty_like(a)\next.fill(out.data_ptr(), out.numel(), 0.0)\n" \
           "return torch.arange(64.0).reshape(4, 16) + out"
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=ref)
    assert r["checks"]["degenerate"] is True, r["warnings"]
    assert any("same output for two" in w for w in r["warnings"])


def test_ordinary_problem_is_not_degenerate():
    r = kit.run(kit.cpu_kernel())
    assert r["checks"]["degenerate"] is False and r["warnings"] == []


def test_constant_passes_unit():
    assert guards.constant_passes(torch.full((3, 3), 0.5) + 1e-4 * torch.randn(3, 3), 1e-2, 1e-2)
    assert not guards.constant_passes(torch.randn(3, 3), 1e-2, 1e-2)
    assert guards.constant_passes(torch.ones(4, dtype=torch.int64), 0.0, 0.0)
    assert not guards.constant_passes(torch.arange(4), 0.0, 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool, torch.complex64])
def test_digest_sees_permutations_and_agrees_with_itself(dtype):
    x = (torch.randn(7, 5) * 10).to(dtype) if dtype != torch.bool else torch.randn(7, 5) > 0
    assert guards.digest(x) == guards.digest(x.clone())
    assert guards.digest(x) == guards.digest(x.t().contiguous().t())  # same values, other layout
    y = x.clone().reshape(-1)
    y[[0, 1]] = y[[1, 0]]
    if not bool((y[0] == y[1])):
        assert guards.digest(x) != guards.digest(y.reshape(7, 5))


def test_device_digest_arithmetic():
    # The words digest (what CUDA tensors get), run on the CPU: exact,
    # layout-independent, sensitive to a permutation and to one flipped bit.
    x = torch.randn(1000, 37)
    raw = x.reshape(-1).view(torch.uint8)
    d = guards.word_digest(raw)
    assert d == guards.word_digest(x.t().contiguous().t().contiguous().reshape(-1).view(torch.uint8))
    assert d[0] == x.numel() * 4
    y = x.clone().reshape(-1)
    y[[3, 700]] = y[[700, 3]]
    assert guards.word_digest(y.view(torch.uint8)) != d
    z = raw.clone()
    z[12345] ^= 1
    assert guards.word_digest(z) != d
    assert guards.word_digest(raw[:13]) != guards.word_digest(raw[:14])  # padding is counted


def test_rounding_heuristic_ignores_zeros_and_constants():
    # A loose tolerance admits zeros for a tiny-valued reference: that is a
    # degenerate problem, not a rounded output.
    e = 1e-3 * torch.rand(64, 64) + 1e-5
    assert guards.rounded_to(e, torch.zeros_like(e)) is None
    assert guards.rounded_to(e, torch.full_like(e, 0.5)) is None
    assert guards.rounded_to(e, e.bfloat16().float()) == "bfloat16"


def test_poison_note_only_above_chance():
    """A written output may hold the poison word by chance (2^-16 a word):
    2 of 524288 words is chance, no note; the threshold (about 28 there)
    and a half-unwritten output are not."""
    from kgym_harness import audit
    n = 1 << 18  # float32: 524288 16-bit words
    assert 20 < audit.poison_threshold(2 * n) < 40
    t = torch.rand(n)
    w = t.view(torch.int16)
    w[:2] = guards.POISON16
    assert audit.poison_note([t], 0) == ""
    w[:64] = guards.POISON16
    assert "of 524288 16-bit words still hold" in audit.poison_note([t], 0)
    # as many as the expected output holds itself: no note
    ints = torch.full((4096,), -1, dtype=torch.int16)
    assert audit.poison_note([ints], 0, [ints.clone()]) == ""
    assert "4096 of 4096" in audit.poison_note([ints], 0)
