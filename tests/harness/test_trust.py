"""Trust separation: the candidate's process never holds expected outputs or
the secret seed. The test computes the expected outputs itself and hands a
candidate their bytes; the candidate searches everything it can reach (all
GC-tracked objects, what they reference, every frame's locals, tensor
storages) before computing its own output, and reports what it found."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

import kit
from kgym_harness import loader

SECRET_SEED = 987654321987

SCANNER = textwrap.dedent('''\
    import gc
    import hashlib
    import json
    import sys

    import numpy as np
    import numpy.ma  # noqa: F401  its masked singleton is in every scan, as in a long run


    def _blobs(obj):
        """Byte views of obj worth searching (tensor storages, bytes, arrays)."""
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu" or obj.is_sparse or obj.is_meta:
                return []
            st = obj.untyped_storage()
            if st.nbytes() == 0:
                return []
            raw = torch.empty(0, dtype=torch.uint8).set_(st)
            return [raw.numpy().tobytes()]
        if isinstance(obj, (bytes, bytearray)):
            return [bytes(obj)]
        if isinstance(obj, memoryview):
            try:
                return [obj.tobytes()]
            except Exception:
                return []
        if isinstance(obj, np.ndarray):
            # The base method: subclasses such as numpy.ma's masked singleton
            # override tobytes and raise from it.
            try:
                return [np.ndarray.tobytes(obj)]
            except Exception:
                return []
        return []


    def reachable():
        """Every object we can get at: GC objects, their referents, frame locals."""
        gc.collect()  # drop the cyclic leftovers of earlier scans
        roots = gc.get_objects()
        frame = sys._getframe(1)
        while frame is not None:
            roots.append(dict(frame.f_locals))
            frame = frame.f_back
        seen, out = set(), []
        for obj in roots:
            for o in [obj] + list(gc.get_referents(obj)):
                if id(o) not in seen:
                    seen.add(id(o))
                    out.append(o)
        return out


    def scan(patterns, exclude_ids, seed_int=None, seed_str=None):
        found = []
        for o in reachable():
            if id(o) in exclude_ids:
                continue
            if seed_int is not None and type(o) is int and o == seed_int:
                found.append("secret seed as int")
            if seed_str is not None and isinstance(o, str) and seed_str in o:
                found.append("secret seed in a string")
            for blob in _blobs(o):
                if any(p in blob for p in patterns):
                    found.append(f"pattern in {type(o).__name__}")
        return found


    def digest(t):
        return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()
    ''')

CANDIDATE_BODY = '''
key = digest(a) + digest(b)
if key in TARGETS:
    # Every expected output of every checked call, not only this one's.
    patterns = [bytes.fromhex(h) for h in TARGETS.values()]
    seed_str = SEED_REV[::-1]
    seed_int = int(seed_str)
    found = scan(patterns, {id(p) for p in patterns} | {id(seed_str), id(seed_int)},
                 seed_int, seed_str)
    REPORT["scans"] += 1
    REPORT["found"] += found
    with open(REPORT_PATH, "w") as f:
        json.dump(REPORT, f)
    if found:
        raise RuntimeError("KGYM-FOUND " + ", ".join(sorted(set(found))))
return add_relu_scale(a, b, self.scale)
'''


def _trial_data(labels: list[str]) -> list[tuple[list, torch.Tensor]]:
    """(inputs, expected output) per label, computed here, independently of the judge."""
    ref = loader.import_file(_write_ref(), "kgym_test_reference")
    model = ref.Model(*ref.get_init_inputs())
    out = []
    for label in labels:
        inputs = loader.draw_inputs(ref, loader.derive_seed(SECRET_SEED, label), "cpu")
        out.append((inputs, model(*inputs)))
    return out


def _write_ref() -> str:
    import tempfile
    d = tempfile.mkdtemp()
    return loader.write_source(d, "reference_for_test.py", kit.REF)


def _digest(t: torch.Tensor) -> str:
    import hashlib
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def _candidate(targets: dict[str, str], report_path: str) -> str:
    top = (SCANNER + f"\nTARGETS = {targets!r}\nSEED_REV = {str(SECRET_SEED)[::-1]!r}\n"
           f"REPORT_PATH = {report_path!r}\nREPORT = {{'scans': 0, 'found': []}}\n\n\n")
    return kit.cpu_kernel(kit.model_new(CANDIDATE_BODY), top=top)


LABELS = ["trial:0", "trial:1", "recheck:0", "recheck:1"]


def test_candidate_finds_no_expected_output_or_seed(tmp_path):
    data = _trial_data(LABELS)
    targets = {_digest(i[0]) + _digest(i[1]): exp.contiguous().numpy().tobytes().hex()
               for i, exp in data}
    report = tmp_path / "report.json"
    r = kit.run(_candidate(targets, str(report)), seed=SECRET_SEED)
    assert r["verdict"] == "pass", r["feedback"]
    got = json.loads(report.read_text())
    # Every correctness trial and every recheck was searched, and nothing was there.
    assert got == {"scans": len(LABELS), "found": []}


def test_scanner_control_finds_what_is_there(tmp_path):
    # Same candidate, but told to look for its inputs: it must find them,
    # which shows the search reaches what the judge sends.
    data = _trial_data(LABELS)
    targets = {_digest(i[0]) + _digest(i[1]): i[0].contiguous().numpy().tobytes().hex()
               for i, _ in data}
    report = tmp_path / "report.json"
    r = kit.run(_candidate(targets, str(report)), seed=SECRET_SEED)
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "FORWARD_EXCEPTION")
    assert "KGYM-FOUND" in r["error_message"] and "pattern in Tensor" in r["error_message"]


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_scanner_reaches_frame_locals_and_containers():
    ns: dict = {"torch": torch}
    exec(SCANNER, ns)
    pattern = (torch.arange(7, dtype=torch.float32) * 3.25 + 0.125).numpy().tobytes()

    def look() -> list:
        return ns["scan"]([pattern], {id(pattern)})

    def only_a_local() -> list:
        hidden = torch.frombuffer(bytearray(pattern), dtype=torch.float32).clone()  # noqa: F841
        return look()

    def inside_a_list() -> list:
        box = [bytearray(pattern)]  # noqa: F841
        return look()

    assert look() == []
    assert any("Tensor" in f for f in only_a_local())
    assert any("bytearray" in f for f in inside_a_list())
    assert look() == []
