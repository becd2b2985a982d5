"""The judge's memory on problems large relative to its device
(docs/harness-notes.md "Memory"): the reference runs on the judge's inputs
themselves, drawn again when it changed them; a trial's kept sample of a
large output is a sketch; the allocator's cache is given back only when
large work is short of memory. KGYM_LARGE_BYTES makes every problem large
on the CPU, standing for an 8 GiB problem on an 80 GB device."""
from __future__ import annotations

import contextlib
import textwrap
import types

import pytest
import torch

import kit
from kgym_harness import audit, chunked, compare, guards, loader, memstat, problem
from kgym_harness.stages.correctness import Correctness
from kgym_harness.stages.precision import Precision

# relu(a + b) * scale, then both inputs changed in place (a zeroed, b tripled)
REF_MUTATES = kit.REF.replace(
    "        return torch.relu(a + b) * self.scale\n",
    "        out = torch.relu(a + b) * self.scale\n"
    "        a.zero_()\n"
    "        b.mul_(3.0)\n"
    "        return out\n")
# relu(a + b) * scale written into a and returned: the output is input 0
REF_IN_PLACE = kit.REF.replace(
    "        return torch.relu(a + b) * self.scale\n",
    "        return a.add_(b).relu_().mul_(self.scale)\n")
assert REF_MUTATES != kit.REF and REF_IN_PLACE != kit.REF


class Stub(Correctness):
    """Correctness with the reference loaded here, on the CPU."""

    def __init__(self, src: str = kit.REF, guard: bool = True):
        self.device = "cpu"
        self.req = {"seed": 1234, "atol": 1e-2, "rtol": 1e-2, "run_hack_checks": guard}
        self.facts = audit.ReferenceFacts()
        self.samples: list = []
        self.footprint = None
        self.ref_forward_ms = self.ref_launch_ms = self.input_draw_ms = None
        self.result = {"checks": {}, "warnings": []}
        self.ref_module = types.ModuleType("kgym_reference_test")
        exec(compile(src, "reference.py", "exec"), self.ref_module.__dict__)
        self.ref_model = self.ref_module.Model(2.0)
        self.draws = 0

    def reference(self, phase, what):
        return contextlib.nullcontext()

    def lock_device(self, exclusive, label=""):
        pass

    def draw(self, seed, send=False):
        self.draws += 1
        return super().draw(seed, send)


@pytest.fixture
def large(monkeypatch):
    monkeypatch.setenv("KGYM_LARGE_BYTES", "1")


@pytest.fixture
def clones(monkeypatch):
    """How many times the judge copied an input set."""
    calls = []
    real = loader.clone_inputs

    def counting(value):
        if isinstance(value, list):  # an input set (its tensors come back one by one)
            calls.append(1)
        return real(value)

    monkeypatch.setattr(loader, "clone_inputs", counting)
    return calls


def _forward(stub: Stub, guard: bool = True):
    seed = loader.derive_seed(stub.req["seed"], "trial:0")
    inputs = stub.draw(seed)
    fresh = stub.draw(seed)
    sent = guards.digests(inputs) if guard else None
    out = stub.reference_forward(inputs, sent=sent, seed=seed)
    return inputs, fresh, out


def test_large_is_off_on_the_cpu_unless_set(monkeypatch):
    monkeypatch.delenv("KGYM_LARGE_BYTES", raising=False)
    assert memstat.large_bytes("cpu") is None
    assert not memstat.is_large(torch.empty(1 << 20), "cpu")
    monkeypatch.setenv("KGYM_LARGE_BYTES", "4096")
    assert memstat.is_large(torch.empty(1024), "cpu")
    assert not memstat.is_large([torch.empty(1023)], "cpu")


@pytest.mark.parametrize("guard", [True, False])
def test_a_mutating_reference_on_large_inputs_leaves_them_as_drawn(large, clones, guard):
    stub = Stub(REF_MUTATES, guard)
    inputs, fresh, out = _forward(stub, guard)
    assert clones == []  # no copy of the input set
    assert stub.draws == 3  # the trial's, the test's, and one again after the change
    assert all(torch.equal(x, y) for x, y in zip(inputs, fresh))
    assert torch.equal(out, torch.relu(fresh[0] + fresh[1]) * 2.0)
    # what the reference does to its inputs is still learnt (with the digests)
    assert stub.facts.mutated == ({0, 1} if guard else set())


def test_the_clone_path_learns_the_same(monkeypatch, clones):
    monkeypatch.delenv("KGYM_LARGE_BYTES", raising=False)
    stub = Stub(REF_MUTATES)
    inputs, fresh, out = _forward(stub)
    assert len(clones) == 1 and stub.draws == 2
    assert all(torch.equal(x, y) for x, y in zip(inputs, fresh))
    assert stub.facts.mutated == {0, 1}


def test_an_unchanged_large_input_set_is_not_drawn_again(large, clones):
    stub = Stub(kit.REF)
    seed = loader.derive_seed(stub.req["seed"], "trial:0")
    inputs = stub.draw(seed)
    held = list(inputs)
    out = stub.reference_forward(inputs, sent=guards.digests(inputs), seed=seed)
    assert clones == [] and stub.draws == 1
    assert all(x is y for x, y in zip(inputs, held))
    assert torch.equal(out, torch.relu(held[0] + held[1]) * 2.0)
    assert stub.facts.mutated == set()
    # a caller that reads no inputs afterwards (no seed) pays no digests, no draw
    stub.reference_forward(inputs)
    assert clones == [] and stub.draws == 1


def test_an_output_that_is_its_changed_input_keeps_its_values(large, clones):
    stub = Stub(REF_IN_PLACE)
    inputs, fresh, out = _forward(stub)
    assert clones == []
    assert all(torch.equal(x, y) for x, y in zip(inputs, fresh))
    assert all(out is not x for x in inputs)
    assert torch.equal(out, torch.relu(fresh[0] + fresh[1]) * 2.0)
    assert (0, 0) in stub.facts.aliases and stub.facts.mutated == {0}


def test_the_mode_probe_sees_the_inputs_as_drawn(large):
    # its second forward runs on inputs the first one changed, unless drawn again
    assert Stub(REF_MUTATES).mode_dependent() is False


# ---- the kept samples ------------------------------------------------------------------

# 16 x 64 Ki float32 (4 MiB) outputs: over the sample size, so a sketch is smaller
BIG = "torch.randn(16, 65536), torch.randn(16, 65536)"


def _keep(stub: Stub, src_outputs: list) -> None:
    for i, expected in enumerate(src_outputs):
        stub.keep_sample([torch.full((3,), float(i))], None, expected)


def _kept_tensor_bytes(samples: list) -> list[int]:
    out = []
    for _, kept in samples:
        leaves = kept.sample if isinstance(kept, audit.Sketch) else compare.flatten(kept)
        out += [x.numel() * x.element_size() for x in leaves if isinstance(x, torch.Tensor)]
    return out


def test_kept_samples_of_large_outputs_hold_no_whole_output(monkeypatch):
    g = torch.Generator().manual_seed(0)
    outs = [torch.randn(16, 65536, generator=g) for _ in range(2)]
    limit = 1 << 20
    monkeypatch.setenv("KGYM_LARGE_BYTES", str(limit))
    stub = Stub()
    _keep(stub, outs)
    assert len(stub.samples) == 2
    assert all(isinstance(k, audit.Sketch) for _, k in stub.samples)
    sizes = _kept_tensor_bytes(stub.samples)
    assert sizes and max(sizes) <= 4 * 2 * compare.MATCH_SAMPLE < limit
    assert all(not any(x.data_ptr() == o.data_ptr() for o in outs)
               for _, k in stub.samples for x in k.sample)
    # a small output is kept whole, as before
    stub.samples = []
    _keep(stub, [torch.randn(8, 8)])
    assert isinstance(stub.samples[0][1], torch.Tensor)


def _warnings(outs: list, digests_same: bool = False) -> list[str]:
    stub = Stub()
    for i, expected in enumerate(outs):
        stub.keep_sample([torch.full((3,), 0.0 if digests_same else float(i))], None, expected)
    stub.degenerate()
    assert stub.samples == []
    return stub.result["warnings"]


@pytest.mark.parametrize("case", ["ordinary", "constant", "same_output", "same_inputs"])
def test_degenerate_reads_sketches_as_it_read_outputs(monkeypatch, case):
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(16, 65536, generator=g) for _ in range(2))
    outs = {"ordinary": [a, b], "constant": [1e-4 * torch.tanh(a), 1e-4 * torch.tanh(b)],
            "same_output": [a, a.clone()], "same_inputs": [a, b]}[case]
    monkeypatch.delenv("KGYM_LARGE_BYTES", raising=False)
    whole = _warnings(outs, case == "same_inputs")
    monkeypatch.setenv("KGYM_LARGE_BYTES", "4096")
    sketched = _warnings(outs, case == "same_inputs")
    assert sketched == whole
    assert bool(whole) == (case != "ordinary"), whole


def test_a_sketch_and_a_whole_output_compare():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(4, 70000, generator=g)
    s = audit.Sketch(a, 1e-2, 1e-2)
    assert audit._same_output(s, a.clone(), 1e-2, 1e-2)
    assert not audit._same_output(a + 1.0, s, 1e-2, 1e-2)
    # same samples, other shape: not the same output
    assert not audit._same_output(s, audit.Sketch(a.reshape(70000, 4), 1e-2, 1e-2), 1e-2, 1e-2)
    # strided: every layout gives the same positions
    assert torch.equal(compare.strided_sample(a.t().contiguous().t()), compare.strided_sample(a))


def test_constant_passes_checks_every_chunk(monkeypatch):
    # extremes -1 and 5 pass (3 <= 1 + 2 * 1); the 0 does not (2 > 1), in the last chunk
    fails, passes = torch.tensor([-1.0, 5.0, 2.0, 0.0]), torch.tensor([-1.0, 5.0, 2.0, 1.0])
    for chunk in (chunked.CHUNK, 2):
        monkeypatch.setattr(chunked, "CHUNK", chunk)
        assert not guards.constant_passes(fails, 1.0, 2.0)
        assert guards.constant_passes(passes, 1.0, 2.0)


# ---- the allocator's cache -------------------------------------------------------------

def test_the_cache_is_emptied_only_for_large_work_short_of_memory():
    gib = 1 << 30
    assert memstat.should_trim(16 * gib, 2 * gib, free=6 * gib, cached=8 * gib)
    assert not memstat.should_trim(16 * gib, 2 * gib, free=20 * gib, cached=8 * gib)
    assert not memstat.should_trim(16 * gib, 2 * gib, free=6 * gib, cached=0)
    assert not memstat.should_trim(gib, 2 * gib, free=0, cached=8 * gib)  # small work
    assert not memstat.should_trim(16 * gib, None, free=0, cached=8 * gib)  # on the CPU
    assert memstat.trim("cpu", 1 << 40) is False


# ---- whole evaluations ------------------------------------------------------------------

@pytest.mark.parametrize("guard", [True, False])
def test_a_mutating_reference_judges_an_honest_kernel_on_large_inputs(large, guard):
    r = kit.run(kit.cpu_kernel(), reference_code=REF_MUTATES, run_hack_checks=guard)
    assert r["verdict"] == "pass", r["feedback"]
    # the inputs' digests after the reference are the drawn ones again
    assert r["checks"]["degenerate"] is False and r["warnings"] == [], r["warnings"]
    mem = r["memory"]
    assert mem["footprint_bytes"] and mem["judge"]["host_peak_bytes"]


def test_a_large_problem_keeps_its_memory_report(large):
    r = kit.run(kit.cpu_kernel(), reference_code=kit.REF.replace(
        "torch.randn(4, 16), torch.randn(4, 16)", BIG))
    assert r["verdict"] == "pass", r["feedback"]
    # inputs, output (no clone in it): 3 x 4 MiB
    assert r["memory"]["footprint_bytes"] == 3 * 16 * 65536 * 4
    assert r["checks"]["degenerate"] is False


# ---- the rounding fingerprint ----------------------------------------------------------

class PrecisionStub(Precision):
    def __init__(self, footprint: int):
        self.ref_model = torch.nn.Linear(8, 8)
        self.float_dtypes = {torch.float32}
        self.footprint = footprint
        self.device = "cpu"
        self.result = {"checks": {}, "warnings": []}
        self.marker = problem.Marker(None)


def test_the_rounding_fingerprint_is_skipped_short_of_memory():
    x = torch.randn(4, 8)
    stub = PrecisionStub(footprint=1 << 60)  # more than any host has free
    expected = stub.ref_model(x).detach()
    assert stub.rounding_fingerprint([x], expected.bfloat16().float(), expected) == []
    assert stub.result["checks"]["rounding_fingerprint"]["skipped"].startswith("memory:")
    assert stub.result["warnings"][0].startswith("rounding_fingerprint skipped: memory:")
    # with the memory there, a bf16-rounded output is found as before
    stub = PrecisionStub(footprint=1 << 20)
    w = {k: v.detach().bfloat16().float() for k, v in stub.ref_model.named_parameters()}
    got = torch.nn.functional.linear(x.bfloat16().float(), w["weight"], w["bias"])
    found = stub.rounding_fingerprint([x], got, stub.ref_model(x).detach())
    assert found and found[0][0] == "precision_downgrade", stub.result
    assert stub.result["warnings"] == []


def test_float_distance_sums_every_chunk(monkeypatch):
    a, b = torch.zeros(10), torch.zeros(10)
    b[9] = 3.0
    b[0] = 4.0
    for chunk in (chunked.CHUNK, 3):
        monkeypatch.setattr(chunked, "CHUNK", chunk)
        assert guards.float_distance(a, b) == 5.0
        assert guards.float_distance([a], [b.new_zeros(()).expand(b.shape)]) == 0.0


def test_a_large_output_keeps_one_spot_check(large):
    """Each spot check kept is a whole timed output in the candidate's
    process: with a large output one, not three (three 6 GiB copies once
    left KernelBench's Swish no room for the reference's recheck)."""
    from kgym_harness import timing
    r = kit.run(kit.cpu_kernel(), num_perf_trials=10)
    assert r["verdict"] == "pass", r["feedback"]
    spots = r["checks"]["spot_checks"]
    assert spots["n"] == timing.SPOT_CHECKS_LARGE < timing.SPOT_CHECKS, spots


def test_the_estimate_reads_shapes_on_the_meta_device():
    """memstat.estimate (the judge's set-up note to the worker's admission):
    parameters plus 3x the inputs, from get_inputs() on the meta device (no
    memory taken, whatever the size); None when get_inputs() needs values."""
    big = types.SimpleNamespace(get_inputs=lambda: [torch.randn(4096, 393216), 7])
    model = torch.nn.Linear(10, 10)
    assert memstat.estimate(big, model) == 3 * 4096 * 393216 * 4 + 110 * 4
    needs_values = types.SimpleNamespace(get_inputs=lambda: [torch.randn(4).sum().item()])
    assert memstat.estimate(needs_values, model) is None
