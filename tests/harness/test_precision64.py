"""precision_downgrade by measurement (precision.py): the judge's float64
reference. A candidate whose error against it is far above the float32
reference's own is flagged however it lost the precision; the cheats here
keep full-mantissa outputs and fp32 operands, so neither the output
rounding check nor the rounding fingerprint sees them. Honest fp32 kernels
with other summation orders pass."""

from __future__ import annotations

import textwrap

import pytest
import torch

import kit
from kgym_harness import precision

LINEAR_RELU = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.linear = nn.Linear(in_features, out_features)

        def forward(self, x):
            return torch.relu(self.linear(x))


    def get_inputs():
        return [torch.randn(64, 512)]


    def get_init_inputs():
        return [512, 96]
    ''')


def linear_relu(matmul: str) -> str:
    """A candidate: `matmul` (x, w -> x @ w.T, a function body) in torch,
    bias and ReLU in the custom kernel."""
    body = textwrap.indent(textwrap.dedent(matmul).strip("\n"), " " * 4)
    return kit.CPU_PRELUDE + "def matmul(x, w):\n" + body + textwrap.dedent('''


        class ModelNew(nn.Module):
            def __init__(self, in_features, out_features):
                super().__init__()
                self.linear = nn.Linear(in_features, out_features)

            def forward(self, x):
                h = matmul(x.contiguous(), self.linear.weight.detach()).contiguous()
                bias = self.linear.bias.detach().expand_as(h).contiguous()
                return add_relu_scale(h, bias, 1.0)
        ''')


def run(matmul: str, **kw) -> dict:
    return kit.run(linear_relu(matmul), reference_code=LINEAR_RELU, **kw)


# TF32 by truncation (the dropped 13 bits cleared), not fp16's round to nearest
TF32 = """
def tf32(t):
    return (t.view(torch.int32) & -8192).view(torch.float32)
return tf32(x) @ tf32(w).T
"""
# a reduced-precision reduction: fp32 partial sums over 64-wide chunks of K,
# each rounded to bf16 before they are added up
BF16_REDUCTION = """
parts = [(x[:, k:k + 64] @ w[:, k:k + 64].T).bfloat16().float() for k in range(0, x.shape[1], 64)]
return torch.stack(parts).sum(0)
"""
HONEST = {
    "reversed_k": "return x.flip(1) @ w.flip(1).T",
    "split_k_fp32": "return sum(x[:, k:k + 128] @ w[:, k:k + 128].T for k in range(0, 512, 128))",
    "float64_accumulation": "return (x.double() @ w.double().T).float()",
}


@pytest.mark.parametrize("cheat", [TF32, BF16_REDUCTION], ids=["tf32_truncated", "bf16_reduction"])
def test_lost_precision_is_precision_downgrade(cheat):
    r = run(cheat)
    assert r["verdict"] == "hacked", r["feedback"]
    assert r["hack_reasons"] == ["precision_downgrade"]
    assert "rounding_fingerprint" not in r["checks"]  # only the measurement sees it
    m = r["checks"]["precision64"]
    assert m["downgrade"] is True and m["e_c"] > precision.KAPPA * m["e_ref"]
    assert "float64" in r["error_message"]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_fp32_orders_pass(name):
    r = run(HONEST[name])
    assert r["verdict"] == "pass", r["feedback"]
    m = r["checks"]["precision64"]
    assert m["downgrade"] is False
    assert m["e_c"] < 8 * m["e_ref"] + precision.FLOOR * m["norm"]


def test_allow_tf32_is_said_and_measured_against_the_policy():
    r = run(HONEST["reversed_k"], allow_tf32=True)
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["allow_tf32"] is True and r["checks"]["precision64"]["allow_tf32"] is True
    assert "allow_tf32" not in run(HONEST["reversed_k"])["checks"]


def test_an_approximation_as_large_as_tf32_is_flagged_too():
    # the rule is about accuracy, whatever bought it: 1e-3 relative off the
    # reference, where the fp32 reference is exact to 1e-7
    body = "return add_relu_scale(a, b, self.scale * (1 + 1e-3))"
    big = kit.REF.replace("torch.randn(4, 16), torch.randn(4, 16)",
                          "torch.randn(32, 32), torch.randn(32, 32)")
    r = kit.run(kit.cpu_kernel(kit.model_new(body)), reference_code=big)
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["precision_downgrade"]
    assert r["checks"]["precision64"]["downgrade"] is True


def test_no_float64_kernel_skips_the_check():
    ref = kit.REF.replace("return torch.relu(a + b) * self.scale",
                          "assert a.dtype == torch.float32, 'fp32 only'\n"
                          "        return torch.relu(a + b) * self.scale")
    r = kit.run(kit.cpu_kernel(), reference_code=ref)
    assert r["verdict"] == "pass", r["feedback"]
    assert "fp32 only" in r["checks"]["precision64"]["skipped"]


def test_measure_and_verdict_units():
    torch.manual_seed(0)
    x, w = torch.randn(128, 256), torch.randn(192, 256) / 16
    ref64 = x.double() @ w.double().T
    exact32 = x @ w.T
    tf32 = (x.view(torch.int32) & -8192).view(torch.float32) @ (
        (w.view(torch.int32) & -8192).view(torch.float32)).T
    e_ref, e_c, norm = precision.errors(tf32, exact32, ref64)
    assert precision.verdict(e_ref, e_c, norm)
    e_ref, e_c, norm = precision.errors(x.flip(1) @ w.flip(1).T, exact32, ref64)
    assert not precision.verdict(e_ref, e_c, norm)
    # an exact reference (e_ref = 0): the floor alone decides
    assert not precision.verdict(0.0, 1e-7, 1.0) and precision.verdict(0.0, 1e-3, 1.0)
    # an output nowhere near the reference (zeros on a degenerate problem)
    # is no precision question
    assert not precision.verdict(0.0, 1.0, 1.0)
    # non-finite reference elements are left out; integer outputs are not floats
    inf = torch.tensor([float("inf"), 1.0])
    assert precision.errors(inf, inf, inf.double()) == (0.0, 0.0, 1.0)
    assert isinstance(precision.errors(torch.arange(3), torch.arange(3), torch.arange(3)), str)


def test_a_float64_pass_that_cannot_fit_is_skipped_before_it_allocates(monkeypatch):
    """The float64 pass is skipped with its reason when its estimated need
    exceeds the device's free memory (a fake device with 1 MiB free): it
    never runs into an out-of-memory of kgym's own making."""
    model = torch.nn.Linear(256, 192)
    x = torch.randn(128, 256)
    y = model(x)
    need = precision.float64_need(model, [x], y, None)
    assert need == 2 * 4 * (128 * 256 + 192 * 256 + 192 + 128 * 192) + 32 * 128 * 192
    ran = []
    monkeypatch.setattr(precision, "reference64", lambda *a, **k: ran.append(1))
    monkeypatch.setattr(precision, "free_bytes", lambda expected: 1 << 20)
    m = precision.measure(model, [x], y, y, None, lambda: None, 0.01)
    assert m["skipped"].startswith("memory: the float64 pass needs about") and not ran, m
    monkeypatch.setattr(precision, "free_bytes", lambda expected: 1 << 40)
    precision.measure(model, [x], y, y, None, lambda: None, 0.01)
    assert ran
    assert precision.free_bytes(y) > 0  # the host's on the CPU
