"""Request validation and the result skeleton (docs/design.md is the contract).

normalize_request() never trusts its input: every field is type- and
range-checked, defaults are applied, and unknown fields are dropped.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import uuid
from typing import Any

from . import KGYM_VERSION


def _library_path() -> str:
    """libkgym.so: $KGYM_LIB, else the build/ of the tree this harness is in."""
    env = os.environ.get("KGYM_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "build", "libkgym.so"))


def _load() -> dict:
    """The schema libkgym holds (include/kgym/schema.h), as kg_schema_json
    writes it: the one copy of the request's fields, the verdicts, the hack
    reasons and the error codes that C and Python both read."""
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"kgym_harness.schema: cannot load libkgym ({path}): {e}; "
                          "run make, or set KGYM_LIB") from e
    fn = lib.kg_schema_json
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    n = fn(None, 0)
    if n < 0:
        raise ImportError("kgym_harness.schema: kg_schema_json failed")
    buf = ctypes.create_string_buffer(n + 1)
    fn(buf, n + 1)
    return json.loads(buf.value.decode())


SCHEMA = _load()
FIELDS = {f["name"]: f for f in SCHEMA["fields"]}


def _choices(name: str) -> tuple:
    return tuple(FIELDS[name]["choices"])


def _codes(group: str) -> tuple:
    return tuple(c for c, g in sorted(SCHEMA["error_codes"].items()) if g == group)


VERDICTS = tuple(SCHEMA["verdicts"])
BACKENDS = _choices("backend")
REFERENCE_BACKENDS = _choices("reference_backend")
PRIORITIES = _choices("priority")
HACK_REASONS = tuple(SCHEMA["hack_reasons"])

# Stable error codes, grouped by the verdict they lead to.
COMPILE_CODES = _codes("compile")
RUNTIME_CODES = _codes("runtime")
MISMATCH_CODES = _codes("mismatch")
HACK_CODES = _codes("hack")
OTHER_CODES = _codes("other")
# problem_error: the reference (problem) failed, not the candidate (problem.py)
PROBLEM_CODES = _codes("problem")
PROBLEM_BLAME = "the reference (problem) is at fault, not the kernel"

MAX_KERNEL_CODE = int(FIELDS["kernel_code"]["max"])
MAX_REFERENCE_CODE = int(FIELDS["reference_code"]["max"])
MAX_TASK_ID = int(FIELDS["task_id"]["max"])
MAX_SEED = int(FIELDS["seed"]["max"])  # exact in a JSON number (a double)
STRICT_TOL = FIELDS["atol"]["default_strict"]
DEFAULT_TOL = FIELDS["atol"]["default"]
MAX_TIMEOUT = FIELDS["timeout"]["max"]
_TASK_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_DEVICE = re.compile(r"^(cpu|cuda(:[0-9]{1,2})?)$")


def _int(d: dict, name: str, default: int, lo: int, hi: int) -> int:
    v = d.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name}: expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v} is outside {lo}..{hi}")
    return v


def _num(d: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = d.get(name, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{name}: expected a number, got {type(v).__name__}")
    v = float(v)
    if not (lo <= v <= hi):  # also rejects NaN
        raise ValueError(f"{name}: {v} is outside {lo}..{hi}")
    return v


def _bool(d: dict, name: str, default: bool) -> bool:
    v = d.get(name, default)
    if v is None:
        v = default
    if not isinstance(v, bool):
        raise ValueError(f"{name}: expected true or false, got {type(v).__name__}")
    return v


def _choice(d: dict, name: str, default: str, allowed: tuple) -> str:
    v = d.get(name, default)
    if v is None:
        v = default
    if not isinstance(v, str) or v not in allowed:
        raise ValueError(f"{name}: expected one of {', '.join(allowed)}, got {v!r}")
    return v


def _str(d: dict, name: str, limit: int, required: bool) -> str | None:
    v = d.get(name)
    if v is None:
        if required:
            raise ValueError(f"{name}: required")
        return None
    if not isinstance(v, str):
        raise ValueError(f"{name}: expected a string, got {type(v).__name__}")
    if len(v.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"{name}: longer than {limit} bytes")
    if required and not v.strip():
        raise ValueError(f"{name}: empty")
    return v


def _field(d: dict, f: dict, strict: bool) -> Any:
    """One request field checked and defaulted as the schema says, with the
    checks no table holds: task_id's characters (an id is drawn when
    absent), entry_point an identifier, the seed drawn when absent."""
    name, kind = f["name"], f["type"]
    if kind == "string":
        if name == "entry_point":
            v = d.get(name)
            v = f["default"] if v is None else v
            if not isinstance(v, str) or not _IDENT.match(v):
                raise ValueError(f"entry_point: not a Python identifier: {v!r}")
            return v
        v = _str(d, name, int(f["max"]), f["required"])
        if name == "task_id":
            if v is not None and not _TASK_ID.match(v):
                raise ValueError("task_id: use 1..100 characters of [A-Za-z0-9._:-]")
            return v if v is not None else uuid.uuid4().hex
        return v
    if kind == "enum":
        return _choice(d, name, f["default"], tuple(f["choices"]))
    if kind == "boolean":
        return _bool(d, name, f["default"])
    if kind == "integer":
        if name == "seed":
            seed = d.get("seed")
            seed = secrets.randbits(53) if seed is None else seed
            return _int({"seed": seed}, "seed", 0, 0, MAX_SEED)
        return _int(d, name, f["default"], int(f["min"]), int(f["max"]))
    default = f["default_strict"] if strict and "default_strict" in f else f["default"]
    return _num(d, name, default, float(f["min"]), float(f["max"]))


def normalize_request(d: Any) -> dict:
    """Validate a task request and return a new dict with every default applied.

    Raises ValueError whose message starts with the offending field's name.
    """
    if not isinstance(d, dict):
        raise ValueError("request: expected a JSON object")
    out: dict[str, Any] = {}
    strict = _bool(d, "strict", FIELDS["strict"]["default"])
    for name, f in FIELDS.items():
        out[name] = _field(d, f, strict)
    device = d.get("device")
    if device is not None and (not isinstance(device, str) or not _DEVICE.match(device)):
        raise ValueError(f"device: expected cpu, cuda or cuda:N, got {device!r}")
    out["device"] = device
    out["worker_id"] = _str(d, "worker_id", 200, False) or os.environ.get("KGYM_WORKER_ID")
    out["queued_ms"] = _num(d, "queued_ms", 0.0, 0.0, 1e12) if "queued_ms" in d else None
    # Absolute wall-clock deadline (Unix seconds) set by whoever enforces the
    # timeout, so the judge can report before it is killed.
    out["deadline"] = _num(d, "deadline", 0.0, 0.0, 1e11) if d.get("deadline") is not None else None
    # The worker's per-device lock file (devlock.py); absent: no locking.
    out["device_lock"] = _str(d, "device_lock", 4096, False) or None
    return out


def new_result(task_id: str | None, backend: str | None) -> dict:
    """A result object with every docs/design.md field present and nothing decided.

    The verdict starts as infra_error so that a result nobody finished is
    never a pass.
    """
    return {
        "task_id": task_id,
        "status": "failed",
        "verdict": "infra_error",
        "compiled": False,
        "correctness": False,
        "decoy_kernel": False,
        "hack_reasons": [],
        "speedup": None,
        "kernel_runtime": None,
        "reference_runtime": None,
        "runtime_stats": {"kernel": None, "reference": None},
        "profile": None,
        "error_message": None,
        "error_code": None,
        "error": None,
        "mismatch": None,
        "feedback": "",
        "device": {"worker_id": None, "name": None, "backend": backend,
                   "device": None},
        "timings": {"queued": None, "setup": None, "compile": None,
                    "correctness": None, "timing": None, "profiling": None,
                    "total": None},
        "checks": {},
        "warnings": [],
        "kgym_version": KGYM_VERSION,
    }


def set_error(result: dict, verdict: str, code: str, phase: str, etype: str,
              message: str, traceback: str = "", frames: list | None = None) -> None:
    """Record the first failure in result; later calls do not overwrite it."""
    if result.get("error") is not None:
        return
    result["verdict"] = verdict
    result["error_code"] = code
    result["error_message"] = message
    result["error"] = {"phase": phase, "type": etype, "message": message,
                       "traceback": traceback, "frames": frames or []}


def check_result(obj: Any) -> dict:
    """Sanity-check a result object read back from the judge.

    Raises ValueError when it could not have come from a finished judge; a
    pass must say correctness true and carry no error or hack reason.
    """
    if not isinstance(obj, dict):
        raise ValueError("result is not an object")
    verdict = obj.get("verdict")
    if verdict not in VERDICTS:
        raise ValueError(f"result has an unknown verdict {verdict!r}")
    if not isinstance(obj.get("correctness"), bool):
        raise ValueError("result.correctness is not a boolean")
    if (verdict == "pass") != obj["correctness"]:
        raise ValueError("result.correctness disagrees with the verdict")
    if verdict == "pass" and (obj.get("hack_reasons") or obj.get("error")):
        raise ValueError("a pass with hack reasons or an error")
    return obj
