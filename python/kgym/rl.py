"""ctypes bindings to libkgym's RL math (include/kgym/rl.h).

Each function mirrors a ``kgym rl`` subcommand (src/cli/cmd_rl.c): it takes
the same inputs as Python values (lists, dicts, numbers, None for null),
checks them in the same order with the same messages, and returns what the
subcommand prints: the value of its one output field (``returns`` gives
the K x T list, ``reward`` a float or a list) or, for several fields, the
dict (``mrs``, ``prs``, ``fastp``). Invalid entries are None. Bad input
raises ValueError with the message the command line would print after
``kgym rl <subcommand>: ``.

The library is found through KGYM_LIB, then build/libkgym.so of this
checkout, then ctypes.util.find_library("kgym"); it is loaded on first use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
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

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LL_MIN, _LL_MAX = -(2**63), 2**63 - 1
_U64_MAX = 2**64 - 1
_ERR_MAX = 256

_c_double_p = ctypes.POINTER(ctypes.c_double)
_c_uint8_p = ctypes.POINTER(ctypes.c_uint8)
_c_int_p = ctypes.POINTER(ctypes.c_int)


class _Err(ctypes.Structure):
    _fields_ = [("msg", ctypes.c_char * _ERR_MAX)]


class _RewardCfg(ctypes.Structure):
    _fields_ = [
        ("cap", ctypes.c_double),
        ("w_pr", ctypes.c_double),
        ("penalty", ctypes.c_double),
    ]


class _MrsCfg(ctypes.Structure):
    _fields_ = [
        ("lo", ctypes.c_double),
        ("hi", ctypes.c_double),
        ("veto", ctypes.c_double),
    ]


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


_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "kg_reward_cfg_default": (None, [ctypes.POINTER(_RewardCfg)]),
    "kg_rl_reward": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_uint8_p,
            _c_uint8_p,
            _c_double_p,
            _c_double_p,
            ctypes.c_size_t,
            ctypes.POINTER(_RewardCfg),
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_rl_returns": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_double_p,
            _c_uint8_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_double,
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_rl_grpo": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_double_p,
            _c_uint8_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_double,
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_rl_trloo": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_double_p,
            _c_uint8_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_mrs_cfg_default": (None, [ctypes.POINTER(_MrsCfg)]),
    "kg_rl_mrs": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_uint8_p,
            _c_double_p,
            _c_double_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_size_t,
            ctypes.POINTER(_MrsCfg),
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_rl_prs": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_uint8_p,
            _c_double_p,
            ctypes.c_size_t,
            ctypes.c_double,
            ctypes.c_double,
            ctypes.c_uint64,
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_rl_fastp": (
        ctypes.c_int,
        [
            _c_double_p,
            _c_double_p,
            _c_double_p,
            _c_uint8_p,
            _c_uint8_p,
            _c_double_p,
            _c_uint8_p,
            ctypes.c_int,
            ctypes.c_int,
            _c_double_p,
            ctypes.c_int,
            ctypes.POINTER(_Err),
        ],
    ),
    "kg_rl_select_topw": (
        ctypes.c_int,
        [
            _c_int_p,
            _c_int_p,
            _c_double_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Err),
        ],
    ),
}


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(library_path())
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _doubles(xs: Sequence[float]) -> Any:
    return (ctypes.c_double * (len(xs) + 1))(*xs)


def _bytes(xs: Sequence[int]) -> Any:
    return (ctypes.c_uint8 * (len(xs) + 1))(*xs)


# ---- checking values (messages as json_util.c writes them) ---------------


def _is_bool(v: Any) -> bool:
    t = type(v)
    return isinstance(v, bool) or (
        t.__module__ == "numpy" and t.__name__ in ("bool_", "bool")
    )


def _is_num(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not _is_bool(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not _is_bool(v)


def _seq(v: Any) -> Any:
    """numpy arrays (anything with tolist, but str/bytes) as lists."""
    if not isinstance(v, (list, tuple, str, bytes, Mapping)) and hasattr(v, "tolist"):
        return v.tolist()
    return v


def _is_arr(v: Any) -> bool:
    return isinstance(v, (list, tuple))


def _tname(v: Any) -> str:
    if v is None:
        return "null"
    if _is_bool(v):
        return "boolean"
    if isinstance(v, str):
        return "string"
    if isinstance(v, Mapping):
        return "object"
    if _is_arr(v):
        return "array"
    if _is_num(v):
        return "number"
    return type(v).__name__


def _fmt(x: float) -> str:
    """A real as the command line prints it (Python's repr of a float)."""
    return repr(float(x))


def _err(name: str, what: str) -> ValueError:
    return ValueError(f'field "{name}": {what}')


def _as_number(v: Any, name: str) -> float:
    if not _is_num(v):
        raise _err(name, f"expected a number, got {_tname(v)}")
    return float(v)


def _as_bool(v: Any, name: str) -> bool:
    if not _is_bool(v):
        raise _err(name, f"expected true or false, got {_tname(v)}")
    return bool(v)


def _as_int(v: Any, name: str, lo: int, hi: int) -> int:
    if not _is_int(v):
        got = _fmt(v) if _is_num(v) else _tname(v)
        raise _err(name, f"expected an integer, got {got}")
    x = int(v)
    if x < lo or x > hi:
        raise _err(name, f"{x} is out of range [{lo}, {hi}]")
    return x



def _opt_number(obj: Mapping, key: str, name: Optional[str] = None) -> Optional[float]:
    v = obj.get(key)
    return None if v is None else _as_number(v, name or key)


def _opt_bool(obj: Mapping, key: str, name: Optional[str] = None) -> Optional[bool]:
    v = obj.get(key)
    return None if v is None else _as_bool(v, name or key)


def _shape(v: Any, name: str) -> tuple[list, int]:
    v = _seq(v)
    if not _is_arr(v):
        raise _err(name, f"expected an array of arrays, got {_tname(v)}")
    if len(v) > _INT_MAX:
        raise _err(name, f"{len(v)} rows, at most {_INT_MAX}")
    rows = [_seq(r) for r in v]
    cols = 0
    for i, row in enumerate(rows):
        if not _is_arr(row):
            raise _err(name, f"row {i}: expected an array, got {_tname(row)}")
        if i == 0:
            cols = len(row)
        elif len(row) != cols:
            raise _err(name, f"row {i} has {len(row)} entries, expected {cols}")
    return rows, cols


class _Matrix:
    """rows x cols numbers, row-major, with the null holes (present 0)."""

    def __init__(self, rows: int, cols: int, x: list, present: list):
        self.rows, self.cols, self.x, self.present = rows, cols, x, present


def _matrix(v: Any, name: str, allow_null: bool) -> _Matrix:
    rows, cols = _shape(v, name)
    x: list[float] = []
    present: list[int] = []
    for i, row in enumerate(rows):
        for j, e in enumerate(row):
            if _is_num(e):
                x.append(float(e))
                present.append(1)
            elif allow_null and e is None:
                x.append(0.0)
                present.append(0)
            else:
                what = "a number or null" if allow_null else "a number"
                raise _err(
                    name, f"row {i}, entry {j}: expected {what}, got {_tname(e)}"
                )
    return _Matrix(len(rows), cols, x, present)


def _bool_matrix(v: Any, name: str) -> tuple[int, int, list[int]]:
    rows, cols = _shape(v, name)
    out: list[int] = []
    for i, row in enumerate(rows):
        for j, e in enumerate(row):
            if not _is_bool(e):
                raise _err(
                    name,
                    f"row {i}, entry {j}: expected true or false, got {_tname(e)}",
                )
            out.append(1 if e else 0)
    return len(rows), cols, out


def _vector(v: Any, name: str, allow_null: bool) -> tuple[list[float], list[int]]:
    v = _seq(v)
    if not _is_arr(v):
        raise _err(name, f"expected an array, got {_tname(v)}")
    x: list[float] = []
    present: list[int] = []
    for i, e in enumerate(v):
        if _is_num(e):
            x.append(float(e))
            present.append(1)
        elif allow_null and e is None:
            x.append(0.0)
            present.append(0)
        else:
            what = "a number or null" if allow_null else "a number"
            raise _err(name, f"entry {i}: expected {what}, got {_tname(e)}")
    return x, present


def _rows(v: Any, name: str) -> tuple[list[float], list[int]]:
    """Ragged rows of numbers: flat values and offsets (len rows + 1)."""
    v = _seq(v)
    if not _is_arr(v):
        raise _err(name, f"expected an array of arrays, got {_tname(v)}")
    rows = [_seq(r) for r in v]
    off = [0]
    for i, row in enumerate(rows):
        if not _is_arr(row):
            raise _err(name, f"row {i}: expected an array, got {_tname(row)}")
        off.append(off[-1] + len(row))
    x: list[float] = []
    for i, row in enumerate(rows):
        for j, e in enumerate(row):
            if not _is_num(e):
                raise _err(
                    name, f"row {i}, entry {j}: expected a number, got {_tname(e)}"
                )
            x.append(float(e))
    return x, off


def _need(v: Any, name: str) -> Any:
    if v is None:
        raise _err(name, "missing")
    return v


def _reals(x: Any, n: int, mask: Optional[Sequence[int]], name: str) -> list:
    """n results as floats (None where mask is 0); like kg_json_real_array."""
    out: list[Optional[float]] = []
    for i in range(n):
        if mask is not None and not mask[i]:
            out.append(None)
        elif not math.isfinite(x[i]):
            raise _err(name, f"result entry {i} is not finite")
        else:
            out.append(float(x[i]))
    return out


def _real_matrix(x: Any, mask: Sequence[int], rows: int, cols: int, name: str) -> list:
    out = []
    for i in range(rows):
        row: list[Optional[float]] = []
        for j in range(cols):
            k = i * cols + j
            if not mask[k]:
                row.append(None)
            elif not math.isfinite(x[k]):
                raise _err(name, f"result row {i}, entry {j} is not finite")
            else:
                row.append(float(x[k]))
        out.append(row)
    return out


def _lib_error(err: _Err, amap: Mapping[str, str], default: str) -> ValueError:
    """The library's message under the input field of the argument it names
    (the word after "fn: "), as cmd_rl.c's lib_error does."""
    msg = err.msg.decode("utf-8", "replace")
    k = msg.find(": ")
    rest = msg[k + 2 :] if k >= 0 else msg
    n = 0
    while n < len(rest) and (rest[n].isascii() and (rest[n].isalpha() or rest[n] == "_")):
        n += 1
    return _err(amap.get(rest[:n], default), msg)


def _option(value: Any, name: str, default: float) -> float:
    return default if value is None else _as_number(value, name)


# ---- per-turn reward -----------------------------------------------------


def _path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _read_pr(t: Mapping, prefix: str) -> Optional[float]:
    pr = _opt_number(t, "coverage", _path(prefix, "coverage"))
    if pr is not None:
        return pr
    pr = _opt_number(t, "pr", _path(prefix, "pr"))
    if pr is not None:
        return pr
    prof = t.get("profile")
    if prof is None:
        return None
    if not isinstance(prof, Mapping):
        raise _err(_path(prefix, "profile"), f"expected an object, got {_tname(prof)}")
    return _opt_number(prof, "coverage", _path(prefix, "profile.coverage"))


def _excluded(t: Mapping, prefix: str) -> bool:
    """A kgym result whose verdict is problem_error: the problem's reference
    failed, not the kernel, so the turn is not the policy's to score (see
    read_turn in cmd_rl.c)."""
    v = t.get("verdict")
    if v is not None and not isinstance(v, str):
        raise _err(_path(prefix, "verdict"), f"expected a string, got {_tname(v)}")
    return v == "problem_error"


def _read_turn(
    t: Mapping, prefix: str, noun: str, want_pr: bool
) -> tuple[bool, bool, float, float]:
    """(correct, hacked, speedup, pr) of one turn or attempt, NaN for a
    missing number; see read_turn in cmd_rl.c."""
    correct = _opt_bool(t, "correct", _path(prefix, "correct"))
    if correct is None:
        correct = _opt_bool(t, "correctness", _path(prefix, "correctness"))
    if correct is None:
        raise _err(_path(prefix, "correct"), 'missing (or "correctness")')
    hacked = False
    for key in ("hacked", "decoy_kernel"):
        hacked |= bool(_opt_bool(t, key, _path(prefix, key)))
    reasons = _seq(t.get("hack_reasons"))
    if reasons is not None:
        if not _is_arr(reasons):
            raise _err(
                _path(prefix, "hack_reasons"),
                f"expected an array, got {_tname(reasons)}",
            )
        hacked |= len(reasons) > 0
    sp_name = _path(prefix, "speedup")
    speedup = _opt_number(t, "speedup", sp_name)
    pr = _read_pr(t, prefix) if want_pr else None

    if correct and not hacked:
        if speedup is None:
            raise _err(
                sp_name, f"missing (a correct, unhacked {noun} needs a speedup)"
            )
        if speedup < 0:
            raise _err(sp_name, f"must be >= 0, got {_fmt(speedup)}")
        if want_pr and pr is None:
            raise _err(
                _path(prefix, "coverage"),
                f"missing (a correct, unhacked {noun} needs a coverage when "
                "w_pr != 0)",
            )
        if want_pr and not (pr >= 0 and pr <= 1):
            raise _err(_path(prefix, "coverage"), f"must be in [0, 1], got {_fmt(pr)}")
    nan = math.nan
    return (
        correct,
        hacked,
        nan if speedup is None else speedup,
        nan if pr is None else pr,
    )


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
        obj: Any = fields
    elif fields:
        raise TypeError("reward: give a turn object or its fields, not both")
    elif _is_arr(_seq(turn)):
        obj = {"turns": _seq(turn)}
    else:
        obj = turn
    if not isinstance(obj, Mapping):
        raise ValueError(f"input: expected a JSON object, got {_tname(obj)}")

    lib = _lib()
    cfg = _RewardCfg()
    lib.kg_reward_cfg_default(ctypes.byref(cfg))
    opts = {"cap": cap, "w_pr": w_pr, "penalty": penalty}
    for key, given in opts.items():
        v = given if given is not None else obj.get(key)
        if v is not None:
            setattr(cfg, key, _as_number(v, key))
    err = _Err()
    # cfg is checked first, and n = 0 has nothing else: options before turns
    if lib.kg_rl_reward(None, None, None, None, None, 0, ctypes.byref(cfg), ctypes.byref(err)):
        raise _lib_error(err, {"cap": "cap", "w_pr": "w_pr", "penalty": "penalty"}, "cap")
    want_pr = cfg.w_pr != 0

    turns = _seq(obj.get("turns"))
    batch = turns is not None
    if batch and not _is_arr(turns):
        raise _err("turns", f"expected an array, got {_tname(turns)}")
    items = list(turns) if batch else [obj]
    rows = []
    scored = []  # False: excluded (problem_error), reward None
    for i, t in enumerate(items):
        prefix = f"turns[{i}]" if batch else ""
        if batch and not isinstance(t, Mapping):
            raise _err(prefix, f"expected an object, got {_tname(t)}")
        if _excluded(t, prefix):
            rows.append((False, False, math.nan, math.nan))
            scored.append(False)
            continue
        rows.append(_read_turn(t, prefix, "turn", want_pr))
        scored.append(True)

    n = len(rows)
    R = (ctypes.c_double * (n + 1))()
    rc = lib.kg_rl_reward(
        R,
        _bytes([1 if r[0] else 0 for r in rows]),
        _bytes([1 if r[1] else 0 for r in rows]),
        _doubles([r[2] for r in rows]),
        _doubles([r[3] for r in rows]) if want_pr else None,
        n,
        ctypes.byref(cfg),
        ctypes.byref(err),
    )
    if rc:
        amap = {
            "cap": "cap",
            "w_pr": "w_pr",
            "penalty": "penalty",
            "speedup": "turns" if batch else "speedup",
            "pr": "turns" if batch else "coverage",
        }
        raise _lib_error(err, amap, "turns" if batch else "correct")
    if batch:
        return _reals(R, n, [1 if k else 0 for k in scored], "rewards")
    return float(R[0]) if scored[0] else None


# ---- returns and advantages ----------------------------------------------


def _valid(valid: Any, m: _Matrix, of: str) -> list[int]:
    """The given mask (default all true) and m's non-null entries."""
    if valid is None:
        return list(m.present)
    rows, cols, b = _bool_matrix(valid, "valid")
    if rows != m.rows or cols != m.cols:
        raise _err(
            "valid",
            f'shape {rows}x{cols} does not match "{of}" ({m.rows}x{m.cols})',
        )
    return [v & p for v, p in zip(b, m.present)]


def returns(rewards: Any, valid: Any = None, gamma: Optional[float] = 1.0) -> list:
    """Reward-to-go returns of a K x T reward matrix (None entries are
    invalid turns); a K x T list with None where invalid."""
    g = _option(gamma, "gamma", 1.0)
    m = _matrix(_need(rewards, "rewards"), "rewards", True)
    mask = _valid(valid, m, "rewards")
    G = (ctypes.c_double * (m.rows * m.cols + 1))()
    if m.rows and m.cols:
        err = _Err()
        rc = _lib().kg_rl_returns(
            G, _doubles(m.x), _bytes(mask), m.rows, m.cols, g, ctypes.byref(err)
        )
        if rc:
            amap = {"gamma": "gamma", "R": "rewards", "valid": "valid"}
            raise _lib_error(err, amap, "rewards")
    return _real_matrix(G, mask, m.rows, m.cols, "returns")


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
    est = "trloo" if estimator is None else estimator
    if not isinstance(est, str):
        raise _err("estimator", f"expected a string, got {_tname(est)}")
    if est not in ("grpo", "trloo"):
        raise _err("estimator", f'expected "grpo" or "trloo", got "{est}"')
    ns = False if norm_std is None else _as_bool(norm_std, "norm_std")
    e = _option(eps, "eps", DEFAULT_EPS)
    m = _matrix(_need(returns, "returns"), "returns", True)
    mask = _valid(valid, m, "returns")
    A = (ctypes.c_double * (m.rows * m.cols + 1))()
    if m.rows and m.cols:
        err = _Err()
        lib = _lib()
        G, V = _doubles(m.x), _bytes(mask)
        if est == "grpo":
            rc = lib.kg_rl_grpo(
                A, G, V, m.rows, m.cols, 1 if ns else 0, e, ctypes.byref(err)
            )
        else:
            rc = lib.kg_rl_trloo(A, G, V, m.rows, m.cols, ctypes.byref(err))
        if rc:
            amap = {"eps": "eps", "G": "returns", "valid": "valid"}
            raise _lib_error(err, amap, "returns")
    return _real_matrix(A, mask, m.rows, m.cols, "advantages")


# ---- rejection sampling --------------------------------------------------


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
    lib = _lib()
    cfg = _MrsCfg()
    lib.kg_mrs_cfg_default(ctypes.byref(cfg))
    for key, v in (("lo", lo), ("hi", hi), ("veto", veto)):
        if v is not None:
            setattr(cfg, key, _as_number(v, key))
    _need(train_logprobs, "train_logprobs")
    _need(rollout_logprobs, "rollout_logprobs")
    xt, ot = _rows(train_logprobs, "train_logprobs")
    xr, orr = _rows(rollout_logprobs, "rollout_logprobs")
    nt, nr = len(ot) - 1, len(orr) - 1
    if nr != nt:
        raise _err(
            "rollout_logprobs", f'{nr} rows, expected {nt} (as "train_logprobs")'
        )
    for s in range(nt):
        a, b = orr[s + 1] - orr[s], ot[s + 1] - ot[s]
        if a != b:
            raise _err(
                "rollout_logprobs",
                f'row {s} has {a} entries, expected {b} (as "train_logprobs")',
            )
    ratio = (ctypes.c_double * (nt + 1))()
    keep = (ctypes.c_uint8 * (nt + 1))()
    off = (ctypes.c_size_t * len(ot))(*ot)
    err = _Err()
    rc = lib.kg_rl_mrs(
        ratio, keep, _doubles(xt), _doubles(xr), off, nt, ctypes.byref(cfg),
        ctypes.byref(err),
    )
    if rc:
        amap = {
            "need": "lo",
            "veto": "veto",
            "lp_train": "train_logprobs",
            "lp_rollout": "rollout_logprobs",
        }
        raise _lib_error(err, amap, "train_logprobs")
    return {
        "ratio": _reals(ratio, nt, None, "ratio"),
        "keep": [bool(keep[i]) for i in range(nt)],
    }


def prs(
    coverage: Any,
    tau: Optional[float] = DEFAULT_TAU,
    s: Optional[float] = DEFAULT_S,
    seed: Optional[int] = 0,
) -> dict:
    """Profiling-based rejection sampling: {"keep_prob", "keep"}; a None
    coverage gives keep_prob None and keep False. The draws depend only on
    (seed, index), seed in [0, 2^64)."""
    t = _option(tau, "tau", DEFAULT_TAU)
    sv = _option(s, "s", DEFAULT_S)
    sd = 0 if seed is None else _as_int(seed, "seed", 0, _U64_MAX)
    pr, present = _vector(_need(coverage, "coverage"), "coverage", True)
    n = len(pr)
    p = (ctypes.c_double * (n + 1))()
    keep = (ctypes.c_uint8 * (n + 1))()
    err = _Err()
    rc = _lib().kg_rl_prs(p, keep, _doubles(pr), n, t, sv, sd, ctypes.byref(err))
    if rc:
        raise _lib_error(err, {"tau": "tau", "s": "s", "pr": "coverage"}, "coverage")
    return {
        "keep_prob": _reals(p, n, present, "keep_prob"),
        "keep": [bool(keep[i] and present[i]) for i in range(n)],
    }


# ---- Fast@p --------------------------------------------------------------


def _read_attempt(a: Any, i: int) -> Optional[tuple]:
    """(level, problem key, sample, turn, correct, hacked, speedup); None for
    an attempt with verdict problem_error, which is left out."""
    prefix = f"attempts[{i}]"
    if not isinstance(a, Mapping):
        raise _err(prefix, f"expected an object, got {_tname(a)}")
    vals: dict[str, Any] = {"sample": 0}
    for key in ("level", "problem", "sample", "turn"):
        v = a.get(key)
        name = _path(prefix, key)
        if v is None:
            if key == "sample":
                continue
            raise _err(name, "missing")
        if key == "problem" and isinstance(v, str):
            vals[key] = ("s", v)
            continue
        if key == "problem" and not _is_int(v):
            got = _fmt(v) if _is_num(v) else _tname(v)
            raise _err(name, f"expected a string or an integer, got {got}")
        x = _as_int(v, name, _LL_MIN, _LL_MAX)
        vals[key] = ("i", x) if key == "problem" else x
    if _excluded(a, prefix):
        return None
    correct, hacked, speedup, _ = _read_turn(a, prefix, "attempt", False)
    return (
        vals["level"],
        vals["problem"],
        vals["sample"],
        vals["turn"],
        correct,
        hacked,
        speedup,
    )


def _pkey(p: float) -> str:
    """"1.2" for 1.2, "2" for 2.0: the output's key of a p."""
    r = _fmt(p)
    return r[:-2] if r.endswith(".0") else r


def _read_ps(p: Any) -> list[float]:
    if p is None:
        ps = list(DEFAULT_P)
    else:
        ps, _ = _vector(p, "p", False)
    if len(ps) > _INT_MAX:
        raise _err("p", "too many values")
    for a in range(len(ps)):
        for b in range(a):
            if ps[a] == ps[b]:
                raise _err("p", f"duplicate value {_fmt(ps[a])}")
    return ps


def _fastp_group(trajs: list, T: int, ps: list[float]) -> dict:
    """Metrics of trajectories (lists of T attempts or None), as in
    fastp_group of cmd_rl.c."""
    S, P = len(trajs), len(ps)
    last = (ctypes.c_double * (P * T + 1))()
    best = (ctypes.c_double * (P * T + 1))()
    hack = (ctypes.c_double * (T + 1))()
    if S > 0 and T > 0:
        n = S * T
        correct = (ctypes.c_uint8 * (n + 1))()
        hacked = (ctypes.c_uint8 * (n + 1))()
        valid = (ctypes.c_uint8 * (n + 1))()
        speedup = (ctypes.c_double * (n + 1))()
        for s, row in enumerate(trajs):
            for t, att in enumerate(row):
                if att is None:
                    continue
                x = s * T + t
                c, h, sp = att
                correct[x], hacked[x], valid[x] = int(c), int(h), 1
                speedup[x] = sp if c and not h else 0.0
        err = _Err()
        rc = _lib().kg_rl_fastp(
            last, best, hack, correct, hacked, speedup, valid, S, T,
            _doubles(ps), P, ctypes.byref(err),
        )
        if rc:
            raise _lib_error(err, {"ps": "p"}, "attempts")
    out_last: dict[str, list] = {}
    out_best: dict[str, list] = {}
    for j, p in enumerate(ps):
        k = _pkey(p)
        out_last[k] = _reals(last[j * T : (j + 1) * T], T, None, "last")
        out_best[k] = _reals(best[j * T : (j + 1) * T], T, None, "best")
    return {
        "last": out_last,
        "best": out_best,
        "hacking_ratio": _reals(hack, T, None, "hacking_ratio"),
        "n": S,
    }


def fastp(attempts: Any, p: Optional[Sequence[float]] = DEFAULT_P) -> dict:
    """Fast@p by turn (last attempt, best of history), hacking ratio, overall
    and by level. Attempts ({"level", "problem", "sample" (0), "turn",
    "correct", "hacked", "speedup"}) group into trajectories by (level,
    problem, sample); turns are the sorted distinct turn values and a
    missing attempt is an invalid turn. An attempt with verdict
    problem_error is left out, as if not given."""
    ps = _read_ps(p)
    attempts = _seq(_need(attempts, "attempts"))
    if not _is_arr(attempts):
        raise _err("attempts", f"expected an array, got {_tname(attempts)}")
    read = [_read_attempt(a, i) for i, a in enumerate(attempts)]
    rows = [r for r in read if r is not None]  # problem_error: as if not given

    seen: set = set()
    for i, (level, prob, sample, turn, *_rest) in enumerate(rows):
        key = (level, prob, sample, turn)
        if key in seen:
            if prob[0] == "i":
                ptext = str(prob[1])
            else:
                ptext = '"' + prob[1].encode()[:64].decode("utf-8", "replace") + '"'
            raise _err(
                f"attempts[{i}]",
                f"duplicate attempt (level {level}, problem {ptext}, "
                f"sample {sample}, turn {turn})",
            )
        seen.add(key)

    turns = sorted({r[3] for r in rows})
    tindex = {t: i for i, t in enumerate(turns)}
    T = len(turns)
    trajs: dict[tuple, list] = {}
    for level, prob, sample, turn, c, h, sp in rows:
        row = trajs.setdefault((level, prob, sample), [None] * T)
        row[tindex[turn]] = (c, h, sp)
    levels = sorted({k[0] for k in trajs})
    by_level_rows = {lv: [r for k, r in trajs.items() if k[0] == lv] for lv in levels}
    overall_rows = [r for lv in levels for r in by_level_rows[lv]]
    overall = _fastp_group(overall_rows, T, ps)
    by_level = {str(lv): _fastp_group(by_level_rows[lv], T, ps) for lv in levels}
    return {
        "p": [float(x) for x in ps],
        "turns": turns,
        "overall": overall,
        "by_level": by_level,
    }


# ---- test-time scaling selection -----------------------------------------


def select(rewards: Any, w: Optional[int] = DEFAULT_W) -> list[int]:
    """Indices of the top-w turns of a history by reward (ties: the later
    turn), in chronological order."""
    wv = DEFAULT_W if w is None else _as_int(w, "w", _INT_MIN, _INT_MAX)
    r, _ = _vector(_need(rewards, "rewards"), "rewards", False)
    T = len(r)
    if T > _INT_MAX:
        raise _err("rewards", "too many turns")
    idx = (ctypes.c_int * (T + 1))()
    nout = ctypes.c_int(0)
    err = _Err()
    rc = _lib().kg_rl_select_topw(
        idx, ctypes.byref(nout), _doubles(r), T, wv, ctypes.byref(err)
    )
    if rc:
        raise _lib_error(err, {"w": "w", "reward": "rewards"}, "rewards")
    return [idx[i] for i in range(nout.value)]
