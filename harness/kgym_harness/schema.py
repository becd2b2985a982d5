"""Request validation and the result skeleton (docs/design.md is the contract).

normalize_request() never trusts its input: every field is type- and
range-checked, defaults are applied, and unknown fields are dropped.
"""

from __future__ import annotations

import os
import re
import secrets
import uuid
from typing import Any

from . import KGYM_VERSION

VERDICTS = ("pass", "mismatch", "compile_error", "runtime_error", "timeout",
            "hacked", "infra_error", "problem_error")
BACKENDS = ("triton", "cuda", "cpu")
REFERENCE_BACKENDS = ("eager", "torch_compile")
PRIORITIES = ("low", "normal", "high")

HACK_REASONS = ("no_custom_kernel", "side_stream", "output_cache",
                "input_mutation", "timer_tamper", "mode_branch",
                "aliases_input", "lazy_output", "thread_injection",
                "result_forgery", "stale_memory", "precision_downgrade",
                "l2_persist", "call_count_switch", "profile_forgery")

# Stable error codes, grouped by the verdict they lead to.
COMPILE_CODES = ("SYNTAX_ERROR", "IMPORT_ERROR", "BUILD_ERROR",
                 "TRITON_COMPILE_ERROR", "MISSING_MODEL_NEW")
RUNTIME_CODES = ("FORWARD_EXCEPTION", "INIT_EXCEPTION", "CUDA_ERROR",
                 "OUT_OF_MEMORY", "CHILD_DIED", "PROTOCOL_ERROR",
                 "RESULT_INCOMPLETE")
MISMATCH_CODES = ("SHAPE_MISMATCH", "DTYPE_MISMATCH", "NONFINITE_OUTPUT",
                  "VALUE_MISMATCH", "OUTPUT_TYPE")
HACK_CODES = ("NO_CUSTOM_KERNEL", "MODE_BRANCH", "OUTPUT_CACHE",
              "TIMER_TAMPER", "SIDE_STREAM", "LAZY_OUTPUT", "THREAD_INJECTION",
              "ALIASES_INPUT", "INPUT_MUTATION", "STALE_MEMORY",
              "PRECISION_DOWNGRADE", "L2_PERSIST", "CALL_COUNT_SWITCH",
              "PROFILE_FORGERY")
OTHER_CODES = ("TIMEOUT", "BAD_REQUEST", "REFERENCE_ERROR", "INFRA_ERROR")
# problem_error: the reference (problem) failed, not the candidate (problem.py)
PROBLEM_CODES = ("PROBLEM_ERROR",)
PROBLEM_BLAME = "the reference (problem) is at fault, not the kernel"

MAX_KERNEL_CODE = 256 * 1024
MAX_REFERENCE_CODE = 512 * 1024
MAX_TASK_ID = 100
MAX_SEED = 2**53 - 1  # exact in a JSON number (a double)
STRICT_TOL = 1e-4
DEFAULT_TOL = 1e-2
MAX_TIMEOUT = 3600.0
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


def normalize_request(d: Any) -> dict:
    """Validate a task request and return a new dict with every default applied.

    Raises ValueError whose message starts with the offending field's name.
    """
    if not isinstance(d, dict):
        raise ValueError("request: expected a JSON object")
    out: dict[str, Any] = {}
    task_id = _str(d, "task_id", MAX_TASK_ID, False)
    if task_id is not None and not _TASK_ID.match(task_id):
        raise ValueError("task_id: use 1..100 characters of [A-Za-z0-9._:-]")
    out["task_id"] = task_id if task_id is not None else uuid.uuid4().hex
    out["reference_code"] = _str(d, "reference_code", MAX_REFERENCE_CODE, True)
    out["kernel_code"] = _str(d, "kernel_code", MAX_KERNEL_CODE, True)
    out["backend"] = _choice(d, "backend", "triton", BACKENDS)
    entry = d.get("entry_point")
    entry = "Model" if entry is None else entry
    if not isinstance(entry, str) or not _IDENT.match(entry):
        raise ValueError(f"entry_point: not a Python identifier: {entry!r}")
    out["entry_point"] = entry
    out["num_correct_trials"] = _int(d, "num_correct_trials", 5, 1, 100)
    out["num_perf_trials"] = _int(d, "num_perf_trials", 100, 1, 10000)
    out["num_warmup"] = _int(d, "num_warmup", 3, 0, 1000)
    out["strict"] = _bool(d, "strict", False)
    tol = STRICT_TOL if out["strict"] else DEFAULT_TOL
    out["atol"] = _num(d, "atol", tol, 0.0, 1e6)
    out["rtol"] = _num(d, "rtol", tol, 0.0, 1e6)
    out["reference_backend"] = _choice(d, "reference_backend", "eager",
                                       REFERENCE_BACKENDS)
    out["timeout"] = _num(d, "timeout", 300.0, 1.0, MAX_TIMEOUT)
    out["priority"] = _choice(d, "priority", "normal", PRIORITIES)
    out["enable_profiling"] = _bool(d, "enable_profiling", True)
    out["run_hack_checks"] = _bool(d, "run_hack_checks", True)
    # TF32 as policy: the reference too computes and is timed with it
    out["allow_tf32"] = _bool(d, "allow_tf32", False)
    seed = d.get("seed")
    if seed is None:
        seed = secrets.randbits(53)
    out["seed"] = _int({"seed": seed}, "seed", 0, 0, MAX_SEED)
    out["force_refresh"] = _bool(d, "force_refresh", False)
    # A speedup above this is evaluated again before it is reported.
    out["speedup_recheck_bound"] = _num(d, "speedup_recheck_bound", 10.0, 1.0, 1e6)
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
