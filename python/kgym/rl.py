"""ctypes bindings to libkgym's RL math (include/kgym/rl.h).

Each function is a ``kgym rl`` subcommand: it builds the subcommand's JSON
input from its arguments and its keyword options (which win over the
input's fields, as flags do) and calls libkgym's kg_rl_json, the one place
where ``kgym rl``'s input is read and checked (lib/rl_json.c,
include/kgym/rl_json.h). It returns what the subcommand prints: the value
of its one output field (``returns`` gives the K x T list, ``reward`` a
float or a list) or, for several fields, the dict (``mrs``, ``prs``,
``fastp``). Invalid entries are None. Bad input raises ValueError with the
message the command line prints after ``kgym rl <subcommand>: ``.

Python values become JSON here and are not checked: lists and tuples,
numpy arrays and scalars, dicts, numbers, bools, strings and None. A NaN
or an infinity is sent as "NaN", "Infinity" or "-Infinity" (JSON has no
such number; libkgym reads these strings as numbers), so it reaches the
library's check that names it (every option must be finite and in its
range: cap in [0, 1e6], s > 0, a non-empty p, ...: docs/rl.md); the seed
is sent as a string of digits, for the whole range [0, 2^64).

The library is found through KGYM_LIB, then build/libkgym.so of this
checkout, then ctypes.util.find_library("kgym"); it is loaded on first use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import math
import numbers
import os
from collections.abc import Mapping
from typing import Any, Optional, Sequence

DEFAULT_P = (1.0, 1.2, 1.5, 2.0)
DEFAULT_TAU = 0.3
DEFAULT_S = 0.1
DEFAULT_EPS = 1e-6
DEFAULT_W = 4

_LL_MIN, _LL_MAX = -(2**63), 2**63 - 1
_ERR_MAX = 256
_KG_ENOMEM = -3


class _Err(ctypes.Structure):
    _fields_ = [("msg", ctypes.c_char * _ERR_MAX)]


# ---- loading the library -------------------------------------------------


def library_path() -> str:
    """Where libkgym is taken from (see the module's docstring)."""
    env = os.environ.get("KGYM_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "build", "libkgym.so"))
    if os.path.exists(built):
        return built
    found = ctypes.util.find_library("kgym")
    if found:
        return found
    raise OSError("libkgym not found: set KGYM_LIB or run make (build/libkgym.so)")


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(library_path())
    lib.kg_rl_json.restype = ctypes.c_int
    lib.kg_rl_json.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(_Err),
    ]
    lib.kg_rl_json_free.restype = None
    lib.kg_rl_json_free.argtypes = [ctypes.c_void_p]
    return lib


# ---- Python values as JSON -------------------------------------------------


def _is_bool(v: Any) -> bool:
    t = type(v)
    return isinstance(v, bool) or (
        t.__module__ == "numpy" and t.__name__ in ("bool_", "bool")
    )


def _real(x: Any) -> Any:
    """A float, or the string libkgym reads as a non-finite number."""
    try:
        f = float(x)
    except OverflowError:  # an int beyond the doubles
        f = math.inf if x > 0 else -math.inf
    if math.isfinite(f):
        return f
    return "NaN" if f != f else ("Infinity" if f > 0 else "-Infinity")


def _json(v: Any, path: str) -> Any:
    """v as the values json.dumps writes; path names v in a message."""
    if v is None or isinstance(v, (str, bool)):
        return v
    if _is_bool(v):
        return bool(v)
    if isinstance(v, numbers.Integral):
        x = int(v)
        return x if _LL_MIN <= x <= _LL_MAX else _real(x)
    if isinstance(v, numbers.Real):
        return _real(v)
    if isinstance(v, Mapping):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                break
            out[k] = _json(x, f"{path}.{k}" if path else k)
        else:
            return out
    elif isinstance(v, (list, tuple)):
        return [_json(x, f"{path}[{i}]") for i, x in enumerate(v)]
    elif hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy
        return _json(v.tolist(), path)
    what = f"a {type(v).__name__} has no JSON form"
    raise ValueError(f'field "{path}": {what}' if path else f"input: {what}")


def _run(sub: str, data: Any, options: Mapping[str, Any]) -> dict:
    """kg_rl_json on data (the input object) and the options that are not
    None; the output object, or ValueError with the library's message."""
    opts = {k: _json(v, k) for k, v in options.items() if v is not None}
    text = json.dumps(_json(data, ""), allow_nan=False).encode()
    lib = _lib()
    out = ctypes.c_void_p()
    err = _Err()
    rc = lib.kg_rl_json(
        sub.encode(),
        text,
        len(text),
        json.dumps(opts, allow_nan=False).encode(),
        ctypes.byref(out),
        ctypes.byref(err),
    )
    if rc:
        msg = err.msg.decode("utf-8", "replace")
        raise MemoryError(msg) if rc == _KG_ENOMEM else ValueError(msg)
    try:
        return json.loads(ctypes.string_at(out.value))
    finally:
        lib.kg_rl_json_free(out)


# ---- the subcommands -------------------------------------------------------


def reward(
    turn: Any = None,
    /,
    *,
    cap: Optional[float] = None,
    w_pr: Optional[float] = None,
    penalty: Optional[float] = None,
    **fields: Any,
) -> Any:
    """Per-turn reward R = C * (1 + min(speedup, cap) + w_pr * coverage),
    C = correct and not hacked; other turns get the penalty. A kgym result
    whose verdict is problem_error (the problem's reference failed, not the
    kernel) gets None: not scored (an invalid turn for returns and
    advantages).

    turn is one turn's dict (-> float), a dict {"turns": [...]} or a list of
    turn dicts (-> list of floats); or give one turn's fields as keywords
    (reward(correct=True, speedup=1.5)). A turn dict may be a kgym result
    object. cap, w_pr and penalty default to the input's fields of those
    names, then to 3, 0 and 0.
    """
    if turn is None:
        data: Any = fields
    elif fields:
        raise TypeError("reward: give a turn object or its fields, not both")
    elif isinstance(turn, (list, tuple)) or (
        hasattr(turn, "tolist") and not isinstance(turn, (str, bytes, Mapping))
    ):
        data = {"turns": turn}
    else:
        data = turn
    out = _run("reward", data, {"cap": cap, "w_pr": w_pr, "penalty": penalty})
    return out["rewards"] if "rewards" in out else out["reward"]


def returns(rewards: Any, valid: Any = None, gamma: Optional[float] = 1.0) -> list:
    """Reward-to-go returns of a K x T reward matrix (None entries are
    invalid turns); a K x T list with None where invalid."""
    data = {"rewards": rewards, "valid": valid}
    return _run("returns", data, {"gamma": gamma})["returns"]


def advantages(
    returns: Any,
    valid: Any = None,
    estimator: Optional[str] = "trloo",
    norm_std: Optional[bool] = False,
    eps: Optional[float] = DEFAULT_EPS,
) -> list:
    """Per-turn group advantages of a K x T return matrix: "trloo" (G minus
    the mean of the other valid returns of its turn) or "grpo" (G minus the
    mean, over std + eps when norm_std). None where invalid."""
    data = {"returns": returns, "valid": valid}
    opts = {"estimator": estimator, "norm_std": norm_std, "eps": eps}
    return _run("advantages", data, opts)["advantages"]


def mrs(
    train_logprobs: Any,
    rollout_logprobs: Any,
    lo: Optional[float] = None,
    hi: Optional[float] = None,
    veto: Optional[float] = None,
) -> dict:
    """Mismatch rejection sampling over sequences of token logprobs (rows of
    any length, the two inputs of the same shape): {"ratio", "keep"}.
    lo, hi, veto default to the library's 0.999, 1.001, 1e-4."""
    data = {"train_logprobs": train_logprobs, "rollout_logprobs": rollout_logprobs}
    return _run("mrs", data, {"lo": lo, "hi": hi, "veto": veto})


def prs(
    coverage: Any,
    tau: Optional[float] = DEFAULT_TAU,
    s: Optional[float] = DEFAULT_S,
    seed: Optional[int] = 0,
) -> dict:
    """Profiling-based rejection sampling: {"keep_prob", "keep"}; a None
    coverage gives keep_prob None and keep False. The draws depend only on
    (seed, index), seed in [0, 2^64)."""
    if isinstance(seed, numbers.Integral) and not _is_bool(seed):
        seed = str(int(seed))  # a JSON integer stops at 2^63 - 1
    return _run("prs", {"coverage": coverage}, {"tau": tau, "s": s, "seed": seed})


def _pkey(p: float) -> str:
    """"1.2" for 1.2, "2" for 2.0: the key of a p in fastp's output."""
    r = repr(float(p))
    return r[:-2] if r.endswith(".0") else r


def fastp(attempts: Any, p: Optional[Sequence[float]] = DEFAULT_P) -> dict:
    """Fast@p by turn (last attempt, best of history), hacking ratio, overall
    and by level. Attempts ({"level", "problem", "sample" (0), "turn",
    "correct", "hacked", "speedup"}) group into trajectories by (level,
    problem, sample); turns are the sorted distinct turn values and a
    missing attempt is an invalid turn. An attempt with verdict
    problem_error is left out, as if not given."""
    return _run("fastp", {"attempts": attempts}, {"p": p})


def select(rewards: Any, w: Optional[int] = DEFAULT_W) -> list[int]:
    """Indices of the top-w turns of a history by reward (ties: the later
    turn), in chronological order."""
    return _run("select", {"rewards": rewards}, {"w": w})["selected"]
