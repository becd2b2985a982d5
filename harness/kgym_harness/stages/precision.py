"""Precision: whether a full-precision problem was computed in less.

Three kinds of evidence, each the judge's own: custom kernels launched with
low-precision tensors (the launch records, then hooks' source notes), the
rounding fingerprint (the output lands on the reference run on bf16- or
fp16-rounded operands), and the float64 measurement (precision.py). Tested
by tests/harness/test_precision64.py and test_integrity_outputs.py.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import audit, guards, loader, memstat, precision, timing


class Precision:
    """The precision stage of Judge: reads trial 0's inputs and outputs
    (from correctness), self.low_precision and self.float_dtypes; writes
    checks.rounding_fingerprint, checks.precision64 and checks.low_precision."""

    def full_precision(self) -> bool:
        """Every float tensor of the problem (trial 0's inputs and expected
        outputs, the reference's parameters and buffers) is fp32 or fp64."""
        params = [t for t in list(self.ref_model.parameters()) + list(self.ref_model.buffers())
                  if t.is_floating_point()]
        dtypes = self.float_dtypes | {t.dtype for t in params}
        return bool(dtypes) and dtypes <= {torch.float32, torch.float64}

    def reference_rounded(self, inputs: list, low: torch.dtype) -> Any:
        """The reference (train mode, no grad) with its float inputs,
        parameters and buffers rounded to `low` and back; None when the
        rounding overflows (fp16) or the model cannot be called that way.
        The model itself is untouched (torch.func.functional_call)."""
        def rounded(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                r = t.detach().to(low).to(t.dtype)
                if not bool((torch.isfinite(r) | ~torch.isfinite(t)).all()):
                    raise OverflowError
                return r
            return t.clone() if isinstance(t, torch.Tensor) else t
        try:
            state = {k: rounded(v) for k, v in list(self.ref_model.named_parameters())
                     + list(self.ref_model.named_buffers())}
            args = tuple(rounded(x) for x in inputs)
            loader.set_mode(self.ref_model, "train")
            with self.marker.mark("reference:forward"), torch.no_grad():
                out = torch.func.functional_call(self.ref_model, state, args)
            timing.sync(self.device)
            return out
        except Exception:
            return None

    def rounding_fingerprint(self, inputs: list, got: Any, expected: Any) -> list[audit.Finding]:
        """precision_downgrade by the rounding fingerprint (guards.
        computed_rounded): the output lands on the reference computed from
        bf16-rounded inputs and parameters (and, on the CPU only, fp16:
        on a GPU an honest TF32 matmul rounds its operands to fp16's
        mantissa). One extra reference forward per format, on trial 0;
        skipped, with checks.rounding_fingerprint.skipped and a warning,
        when the device has less free than that forward needs (a rounded
        copy of the inputs and parameters, the pass's work and output: the
        footprint and the parameters, about)."""
        if not self.full_precision():
            return []
        need = (self.footprint or 0) + memstat.tensor_bytes(
            [t for t in list(self.ref_model.parameters()) + list(self.ref_model.buffers())])
        free = precision.free_bytes(expected)
        if free is not None and need > free:
            why = (f"memory: the rounded reference needs about {need / 2**30:.1f} GiB, "
                   f"{free / 2**30:.1f} GiB free")
            self.result["checks"]["rounding_fingerprint"] = {"skipped": why}
            self.result["warnings"].append(f"rounding_fingerprint skipped: {why}")
            return []
        lows = [torch.bfloat16] + ([] if timing.is_cuda(self.device) else [torch.float16])
        for low in lows:
            alt = self.reference_rounded(inputs, low)
            if alt is not None and guards.computed_rounded(got, expected, alt):
                name = str(low).replace("torch.", "")
                d = guards.float_distance(got, expected) or 0.0
                d_low = guards.float_distance(got, alt) or 0.0
                self.result["checks"]["rounding_fingerprint"] = {
                    "format": name, "distance": d, "distance_rounded": d_low}
                return [("precision_downgrade", "PRECISION_DOWNGRADE",
                         f"the output matches the reference computed on {name}-rounded inputs "
                         f"and parameters (distance {d_low:.3g}) far better than the reference "
                         f"itself (distance {d:.3g}): the kernel computes with {name} operands")]
        return []

    def state_before_forward(self) -> dict:
        """The reference's parameters (unchanged by a no-grad forward) and
        copies of its buffers (which a forward may update), for precision64."""
        state = dict(self.ref_model.named_parameters())
        state.update({k: v.detach().clone() for k, v in self.ref_model.named_buffers()})
        return state

    def precision64(self, inputs: list, got: Any, expected: Any, state: dict | None,
                    ref_s: float) -> list[audit.Finding]:
        """precision_downgrade by measurement (precision.py): on a
        full-precision problem, the candidate's error against the judge's
        float64 reference is more than precision.KAPPA times the float32
        reference's own and above precision.FLOOR of the output's norm.
        checks.precision64 says what was measured, or why it was skipped."""
        if not self.full_precision():
            return []
        loader.set_mode(self.ref_model, "train")
        with self.marker.mark("reference:forward"):
            m = precision.measure(self.ref_model, inputs, got, expected, state,
                                  lambda: timing.sync(self.device), ref_s,
                                  self.req["allow_tf32"])
        self.result["checks"]["precision64"] = m
        if str(m.get("skipped", "")).startswith(("memory:", "out of memory")):
            self.result["warnings"].append(f"precision64 skipped: {m['skipped']}")
        if not m.get("downgrade"):
            return []
        rel = m["e_c"] / m["norm"]
        return [("precision_downgrade", "PRECISION_DOWNGRADE",
                 f"the output's error against the reference computed in float64 is "
                 f"{m['e_c']:.3g} ({rel:.2g} of its norm), more than {precision.KAPPA:g}x "
                 f"the float32 reference's own ({m['e_ref']:.3g}): the kernel computes "
                 f"with less than fp32 precision (TF32, bf16/fp16 or reduced-precision "
                 f"reductions)")]

    def precision_evidence(self) -> None:
        """precision_downgrade by direct evidence: on a problem whose float
        tensors are all fp32/fp64, custom kernels launched with fp16/bf16/
        fp8 tensors, Triton sources that convert to them, or extension
        sources that use half/bfloat16 types (hooks._note_precision). Not
        when the reference's own code names a low-precision type (.half(),
        torch.bfloat16, autocast): a kernel may then do what it does."""
        if (not self.low_precision or not self.full_precision()
                or guards.LOW_PRECISION_CODE.search(self.req["reference_code"])):
            return  # the reference itself computes in fp16/bf16 somewhere
        found = sorted(self.low_precision)
        self.result["checks"]["low_precision"] = found[:8]
        self.hack("precision_downgrade", "PRECISION_DOWNGRADE",
                  "the problem is full precision but its custom kernels compute in lower "
                  "precision: " + "; ".join(found[:3]))
