"""The judged coverage: which profile rows are custom, and how much custom
time the judge's own clock allows (judge side; docs/harness-notes.md
"Coverage the judge stands behind").

The profile comes from the candidate's process (profiling.py), so its rows
are claims. The judge keeps from them only what it can stand behind:

* Names. A row is custom only when its kernel name, read exactly (the
  identifier of a CUDA signature, not a substring), is one the candidate
  compiled and launched: a Triton function defined with @jit (or autotune/
  heuristics) in the code and named in the launch records, or a
  ``__global__`` function of a source text the code hands to a builder
  (load_inline, load, cupy/nvrtc) once an extension call was recorded.
  Python comments and strings never reach the AST's decorated functions,
  C comments are cut out of the built sources, and a name the libraries
  use (cuBLAS, cuDNN, CUTLASS, PyTorch's and Inductor's kernels) is never
  custom, whoever declares it.
* Time. The profiled iterations must be the work that was timed. T, the
  judge's wall per timed call (the trusted clock's candidate blocks, or
  the claimed median when larger: a slower claim only costs speedup),
  bounds what one call can have done: device (or CPU) time per profiled
  iteration beyond FORGERY times T is work that only ran while profiled
  (``profile_forgery``), and below that the custom time counted per
  iteration is capped at CAP x T less the library time reported, so extra
  custom work in profiled calls cannot raise the figure.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .profiling import LIBRARY_ROW, assemble, global_names

# per device kind: the cap's factor on T, the forgery factor, their slack (us
# per iteration; the CPU's covers a loaded machine's jitter on a small call)
CAP = {"cuda": 1.15, "cpu": 1.25}
FORGERY = {"cuda": 1.5, "cpu": 3.0}
SLACK_US = {"cuda": 5.0, "cpu": 50.0}
FORGERY_SLACK_US = {"cuda": 20.0, "cpu": 1000.0}

# Kernel names of the libraries (cuBLAS/cuBLASLt, cuDNN, CUTLASS, PyTorch,
# Inductor's generated Triton): a row with one of these prefixes, or a
# library namespace anywhere in its signature, is never custom.
LIBRARY_PREFIXES = (
    "sm35_", "sm50_", "sm60_", "sm70_", "sm75_", "sm80_", "sm86_", "sm89_", "sm90_",
    "sm100_", "sm120_", "ampere_", "volta_", "turing_", "maxwell_", "pascal_", "kepler_",
    "hopper_", "ada_", "blackwell_", "xmma", "cutlass", "cublas", "cudnn", "nvjet",
    "gemv2", "gemvx", "gemvNSP", "gemmSN", "gemmk1", "gemm_kernel2", "splitKreduce",
    "reduce_1Block", "implicit_convolve", "precomputed_convolve", "explicit_convolve",
    "nchwToNhwc", "nhwcToNchw", "generateWinograd", "winograd", "regular_fft",
    "vector_fft", "fft2d", "flash_fwd", "flash_bwd", "fmha", "cask", "triton_poi_",
    "triton_per_", "triton_red_", "triton_tem_", "triton_for_", "softmax_warp_", "cunn_",
    "CatArrayBatchedCopy", "Memcpy", "Memset")
# anywhere in a row's signature (namespaces, template arguments)
LIBRARY_NAMESPACES = ("at::", "c10::", "caffe2::", "cutlass", "cub::", "thrust::", "cublas",
                      "cudnn", "flash::", "xmma", "cask", "nvjet", "cufft", "curand",
                      "cusparse", "cusolver")
_LIBRARY_QUALIFIERS = {"at", "c10", "caffe2", "cutlass", "cub", "thrust", "flash",
                       "pytorch_flash", "cudnn", "cublas", "cublasLt"}
_PREFIXES_LOW = tuple(p.lower() for p in LIBRARY_PREFIXES)
_NAMESPACE_RE = re.compile("|".join(r"(?<![a-z0-9_])" + re.escape(ns.lower())
                                    for ns in LIBRARY_NAMESPACES))
TRITON_DECORATORS = ("jit", "autotune", "heuristics")
BUILDERS = ("load_inline", "load", "RawKernel", "RawModule", "nvrtcCreateProgram",
            "compile_with_cache")
_SOURCE_KW = ("cpp_sources", "cuda_sources", "sources", "code", "src", "source")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def row_ident(name: str) -> tuple[str, str]:
    """(identifier, qualifier) of a profile row: the function's own name
    without "void ", template arguments, parameters or namespaces, and the
    namespace text before it ("" when none)."""
    text = name.strip().replace("(anonymous namespace)", "anonymous")
    if text.startswith("void "):
        text = text[5:].lstrip()
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the name ends at the first top-level ( or <
        if ch in "(<" and depth == 0:
            cut = i
            break
    head = text[:cut].strip()
    qual, _, ident = head.rpartition("::")
    m = _IDENT.fullmatch(ident.strip())
    return (m.group(0) if m else ident.strip()), qual


def is_library(name: str) -> bool:
    """A kernel of a library (or of PyTorch itself), by its profile row."""
    ident, qual = row_ident(name)
    low = name.lower()
    if ident.lower().startswith(_PREFIXES_LOW):
        return True
    return (_NAMESPACE_RE.search(low) is not None
            or qual.split("::")[0].strip() in _LIBRARY_QUALIFIERS)


def _strip_c_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#\s*if\s+0\b.*?^\s*#\s*endif\b", " ", text, flags=re.S | re.M)


def _func_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class _Sources:
    """String texts an expression can evaluate to, resolved statically
    through the module's assignments; None when it cannot be told."""

    def __init__(self, tree: ast.AST):
        self.env: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.env.setdefault(t.id, []).append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and \
                    isinstance(node.target, ast.Name) and node.value is not None:
                self.env.setdefault(node.target.id, []).append(node.value)

    def texts(self, node: ast.AST, depth: int = 0, seen: frozenset = frozenset()) -> \
            list[str] | None:
        if depth > 20:
            return None
        if isinstance(node, ast.Constant):
            return [node.value] if isinstance(node.value, str) else []
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    parts.append(v.value)
                elif isinstance(v, ast.FormattedValue):
                    sub = self.texts(v.value, depth + 1, seen)
                    if sub is None:
                        return None
                    parts.append("\n".join(sub))
            return ["".join(parts)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
            left = self.texts(node.left, depth + 1, seen)
            right = self.texts(node.right, depth + 1, seen) if isinstance(node.op, ast.Add) \
                else []
            return None if left is None or right is None else ["\n".join(left + right)]
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[str] = []
            for e in node.elts:
                sub = self.texts(e, depth + 1, seen)
                if sub is None:
                    return None
                out += sub
            return out
        if isinstance(node, ast.Name):
            if node.id in seen or node.id not in self.env:
                return None
            out = []
            for value in self.env[node.id]:
                sub = self.texts(value, depth + 1, seen | {node.id})
                if sub is None:
                    return None
                out += sub
            return out
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Attribute) and fn.attr in (
                    "format", "replace", "strip", "lstrip", "rstrip", "join"):
                if fn.attr == "join" and node.args:
                    return self.texts(node.args[0], depth + 1, seen)
                return self.texts(fn.value, depth + 1, seen)
            if _func_name(fn) in ("dedent", "str", "cleandoc") and node.args:
                return self.texts(node.args[0], depth + 1, seen)
        return None


def _all_strings(tree: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def built_sources(tree: ast.AST) -> tuple[list[str], bool]:
    """(source texts handed to a builder, whether one was a load_inline/
    load build); texts that cannot be resolved statically (read from a
    file, computed) fall back to every string constant of the code."""
    env = _Sources(tree)
    texts: list[str] = []
    ext = False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fname = _func_name(node.func)
        if fname not in BUILDERS:
            continue
        if fname in ("load_inline", "load"):
            ext = True
        args = list(node.args[1:3] if fname in ("load_inline", "load") else node.args[:1])
        args += [kw.value for kw in node.keywords if kw.arg in _SOURCE_KW]
        for a in args:
            sub = env.texts(a)
            texts += _all_strings(tree) if sub is None else sub
    return texts, ext


def compiled_names(kernel_code: str, launched: dict[str, set[str]],
                   records_complete: bool) -> dict[str, set[str]]:
    """Kernel names the candidate compiled and launched, by kind:
    "triton": @jit functions of the code with a launch record (every one
    defined when the records were cut short); "cuda": __global__ functions
    of the sources handed to builders (an extension built with load_inline/
    load counts once an extension call was recorded). Library names are
    left out."""
    out: dict[str, set[str]] = {"triton": set(), "cuda": set()}
    try:
        tree = ast.parse(kernel_code or "")
    except (SyntaxError, ValueError, RecursionError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                w in ast.unparse(d) for d in node.decorator_list for w in TRITON_DECORATORS):
            if not records_complete or node.name in launched.get("triton", set()):
                out["triton"].add(node.name)
    texts, ext = built_sources(tree)
    if texts and (launched.get("ext") or not ext or not records_complete):
        for t in texts:
            out["cuda"] |= global_names(_strip_c_comments(t))
    for kind in out:
        out[kind] = {n for n in out[kind] if not is_library(n)}
    return out


_TRITON2_SUFFIX = re.compile(r"_[0-9]+d[0-9cde]*$")


def row_is_custom(name: str, names: dict[str, set[str]]) -> bool:
    if is_library(name):
        return False
    ident, _ = row_ident(name)
    if ident in names["cuda"] or ident in names["triton"]:
        return True
    base = _TRITON2_SUFFIX.sub("", ident)  # older Triton: name_0d1d2de
    return base != ident and base in names["triton"]


def attribute(prof: dict, kernel_code: str, launched: dict[str, set[str]],
              records_complete: bool) -> dict:
    """The profile with custom flags the judge decided (cuda_profiler: by
    compiled_names; cpu_wall: recorded custom calls of launched names)."""
    rows = prof["kernels"]
    if prof["method"] == "cuda_profiler":
        names = compiled_names(kernel_code, launched, records_complete)
        for r in rows:
            r["custom"] = row_is_custom(r["name"], names)
    else:
        known = set().union(*launched.values()) if launched else set()
        for r in rows:
            r["custom"] = (r["name"] != LIBRARY_ROW and not is_library(r["name"])
                           and (r["name"] in known or not records_complete))
    # what the candidate sent as its total stays the denominator: rows it
    # left out are its loss; rows judged non-custom move to the library side
    custom = sum(r["device_us"] for r in rows if r["custom"])
    total = max(prof["total_device_us"], sum(r["device_us"] for r in rows))
    out = assemble(rows, custom, total, prof["iterations"], prof["method"], keep=len(rows) or 1)
    for key in ("iter_us", "iter_custom_us"):
        if key in prof:
            out[key] = prof[key]
    return out


def _iterations(prof: dict, cuda: bool) -> tuple[list[float], list[float]]:
    """(wall or device us, custom us) of each profiled iteration: the CPU
    profile's own per-iteration figures (the custom ones scaled to the
    judged custom total), else the totals spread evenly."""
    iters = max(int(prof.get("iterations") or 0), 1)
    custom, total = prof["custom_device_us"], prof["total_device_us"]
    each, each_c = prof.get("iter_us"), prof.get("iter_custom_us")
    if not cuda and isinstance(each, list) and isinstance(each_c, list) and \
            len(each) == len(each_c) == iters and sum(each) > 0:
        claimed = sum(each_c)
        scale = custom / claimed if claimed > 0 else 0.0
        return list(each), [min(c * scale, w) for c, w in zip(each_c, each)]
    return [total / iters] * iters, [custom / iters] * iters


def bound(prof: dict, wall_ms: float | None, claimed_ms: float | None, cuda: bool) -> dict:
    """Caps the profile's custom time by the time of a timed call.

    wall_ms: the judge's wall per call of the candidate's wall blocks (the
    trusted clock); claimed_ms: the median the candidate claimed for its
    timed calls, which the trusted clock keeps from being too small (a
    larger claim costs speedup). Against the larger of the two, custom time
    is capped per iteration and profile_forgery is named when the middle
    iteration is far above it (work in the profiled calls that neither the
    timed loop nor the wall blocks did). None: no bound.
    Returns {"profile": judged profile, "check": what was compared,
    "forgery": a message or None}."""
    kind = "cuda" if cuda else "cpu"
    custom, total = prof["custom_device_us"], prof["total_device_us"]
    library = max(total - custom, 0.0)
    each, each_c = _iterations(prof, cuda)
    # the middle iteration: a stall on a loaded machine hits a few, work
    # that runs only while profiled (to raise the figure) most
    per_iter = sorted(each)[len(each) // 2]
    times = [t for t in (wall_ms, claimed_ms) if isinstance(t, (int, float)) and t > 0]
    check: dict[str, Any] = {"wall_ms": _r(wall_ms), "claimed_ms": _r(claimed_ms),
                             "profiled_ms_per_iter": round(per_iter / 1e3, 5),
                             "capped": False}
    if not times:
        return {"profile": prof, "check": check, "forgery": None}
    # the larger of the two: a claim below the wall is the trusted clock's
    # finding (timer_tamper), not the profile's; and on a loaded CPU the
    # fastest wall block can be several times faster than every profiled
    # call an instant later (5.6 ms against 19-25 ms, an honest extension)
    high_us = max(times) * 1e3
    forgery = None
    if per_iter > FORGERY[kind] * high_us + FORGERY_SLACK_US[kind]:
        forgery = (f"the profiled calls took {per_iter / 1e3:.3f} ms each "
                   f"({'device' if cuda else 'CPU'} time), a timed call "
                   f"{high_us / 1e3:.3f} ms: work that ran only while profiled")
    if not cuda and forgery is None:
        # the CPU's load moves between the timing phase and the profile: the
        # middle profiled iteration counts as a timed call too (a trick in
        # most iterations is profile_forgery above, in a few it is capped)
        high_us = max(high_us, per_iter)
    # per iteration, custom time beyond what a timed call leaves after its
    # library part does not count; a library part above the middle one is
    # a stall (a loaded machine, a thread pool waiting), not less room
    limit = CAP[kind] * high_us + SLACK_US[kind]
    libs = [w - c for w, c in zip(each, each_c)]
    mid_lib = sorted(libs)[len(libs) // 2]
    allowed = sum(min(c, max(limit - min(lib, mid_lib), 0.0)) for c, lib in zip(each_c, libs))
    if custom > allowed + 1e-9:
        check["capped"] = True
        check["custom_cap_us"] = round(allowed, 3)
        rows = [dict(r) for r in prof["kernels"]]
        for r in rows:  # the custom rows keep their share of the cap
            if r["custom"] and custom > 0:
                r["device_us"] *= allowed / custom
        out = assemble(rows, allowed, allowed + library, prof["iterations"], prof["method"],
                       keep=len(rows) or 1)
        for key in ("iter_us", "iter_custom_us"):
            if key in prof:
                out[key] = prof[key]
    else:
        out = prof
    return {"profile": out, "check": check, "forgery": forgery}


def _r(v: Any) -> float | None:
    return round(float(v), 5) if isinstance(v, (int, float)) and v > 0 else None


# the per-kernel ablation (stages/integrity.py coverage_ablation): kernels
# with at least this share of the judged custom time, the largest first
ABLATE_MIN_SHARE = 0.05
ABLATE_MAX_UNITS = 4


def ablation_units(prof: dict, kernel_code: str, launched: dict[str, set[str]],
                   records_complete: bool) -> list[dict]:
    """The custom kernels the judged coverage rests on, as the per-kernel
    ablation replaces them: {"label", "names": launch names whose results
    are replaced, "rows": profile row names, "us": their custom time}.
    A cpu_wall row is a launch name; a cuda_profiler row is a Triton
    function (its launch name) or a __global__ function of a built
    extension, which has no launch name of its own: the extension's calls
    are replaced together. Units below ABLATE_MIN_SHARE of the custom time
    are left out; at most ABLATE_MAX_UNITS, the largest first."""
    custom = prof.get("custom_device_us") or 0.0
    if custom <= 0:
        return []
    units: dict[str, dict] = {}
    compiled = compiled_names(kernel_code, launched, records_complete) \
        if prof.get("method") == "cuda_profiler" else None
    for r in prof.get("kernels", []):
        if not r.get("custom") or r["device_us"] <= 0:
            continue
        if compiled is None:
            label, names = r["name"], {r["name"]}
        else:
            ident, _ = row_ident(r["name"])
            base = _TRITON2_SUFFIX.sub("", ident)
            if ident in compiled["triton"] or base in compiled["triton"]:
                name = ident if ident in compiled["triton"] else base
                label, names = name, {name}
            else:  # a __global__ function: every extension call at once
                label, names = "extension", set(launched.get("ext", set()))
        if not names:
            continue
        u = units.setdefault(label, {"label": label, "names": names, "rows": [], "us": 0.0})
        u["rows"].append(r["name"])
        u["us"] += r["device_us"]
    for u in units.values():
        if u["label"] == "extension":  # named by its kernels in checks and warnings
            u["label"] = ",".join(sorted({row_ident(n)[0] for n in u["rows"]}))[:200]
    keep = [u for u in units.values() if u["us"] >= ABLATE_MIN_SHARE * custom]
    keep.sort(key=lambda u: -u["us"])
    return keep[:ABLATE_MAX_UNITS]


def drop_rows(prof: dict, rows: set[str]) -> dict:
    """The profile with the named custom rows no longer custom: their time
    leaves the custom total and stays in the forward's total (the time was
    spent; it did no work the output shows), so the coverage falls."""
    out = dict(prof)
    kernels = [dict(r) for r in prof["kernels"]]
    removed = 0.0
    for r in kernels:
        if r.get("custom") and r["name"] in rows:
            r["custom"] = False
            r["unreached"] = True
            removed += r["device_us"]
    custom = max(prof["custom_device_us"] - removed, 0.0)
    out.update(assemble(kernels, custom, prof["total_device_us"], prof["iterations"],
                        prof["method"], keep=len(kernels) or 1))
    # rows cut from the result before count as they did
    out["num_custom_kernels"] = max(prof["num_custom_kernels"] - sum(
        1 for r in kernels if r.get("unreached")), 0)
    out["num_total_kernels"] = prof["num_total_kernels"]
    return out
