"""A candidate that runs out of device memory, after which the reference
also runs out on the same inputs (the device still filled by the
candidate's process: seen on an H100, a GPU bomb holding 70 GiB), keeps its
runtime_error: the judge's check that the reference does not fail too must
not turn a hoarder's failure into an unscored infra_error. A reference
that fails any other way, or after any other failure, stays infra_error."""
from __future__ import annotations

import textwrap

import kit

OOM = 'torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB")'

REF_OOM = kit.REF.replace("        return torch.relu(a + b) * self.scale",
                          f"        raise {OOM}")
REF_BROKEN = kit.REF.replace("        return torch.relu(a + b) * self.scale",
                             "        raise ValueError('the problem is broken')")


def _cand(raise_what: str) -> str:
    return textwrap.dedent(f'''\
        import torch
        import torch.nn as nn


        class ModelNew(nn.Module):
            def __init__(self, scale):
                super().__init__()

            def forward(self, a, b):
                raise {raise_what}
        ''')


def test_candidate_oom_then_reference_oom_is_the_candidates():
    assert REF_OOM != kit.REF
    r = kit.run(_cand(OOM), reference_code=REF_OOM)
    assert r["verdict"] == "runtime_error" and r["error_code"] == "OUT_OF_MEMORY", (
        r["verdict"], r["error_code"], r.get("error_message"))


def test_other_candidate_failure_then_reference_oom_stays_infra():
    r = kit.run(_cand("ValueError('mine')"), reference_code=REF_OOM)
    assert r["verdict"] == "infra_error" and r["error_code"] == "REFERENCE_ERROR", (
        r["verdict"], r["error_code"], r.get("error_message"))


def test_candidate_oom_then_a_broken_reference_is_not_the_candidates():
    r = kit.run(_cand(OOM), reference_code=REF_BROKEN)
    assert r["verdict"] != "runtime_error", (r["verdict"], r.get("error_message"))
