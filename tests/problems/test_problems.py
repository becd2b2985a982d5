"""Tests of the project's example problems and reference solutions (problems/).

- layout: file names, ids, every problem has its solutions, no stray files;
- references: import, get_init_inputs()/get_inputs(), forward. cpu set: at
  its real shapes. gpu set: at full shape on the meta device (shapes only,
  no memory, no compute) and for real at get_small_inputs() shapes; the
  output must not be near-constant (a constant answer must fail 1e-2);
- solutions, statically: defines ModelNew with the reference's constructor
  and forward arity, holds a kernel and launches it;
- solutions, run: cpu-set `cpu` and `triton` solutions and gpu-set `triton`
  solutions (small shapes) against the reference on two seeds, in fresh
  processes (check_solution.py), Triton through its interpreter;
- on a machine with a CUDA GPU only: every gpu-set solution (triton and
  cuda) at full shape on the GPU. Without one (CI), CUDA solutions are
  only checked statically.

The solution runs are spread over the machine's cores by one session
fixture, since each builds a C++ extension or interprets Triton kernels.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problems"
CHECKER = Path(__file__).resolve().parent / "check_solution.py"

SETS = {"cpu": ("level1", "level2"), "gpu": ("level1", "level2", "level3")}
BACKENDS = {"cpu": ("cpu", "triton"), "gpu": ("triton", "cuda")}
NAME_RE = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.py$")
SOLUTION_RE = re.compile(r"^(\d+_[A-Za-z0-9_]+)\.(cpu|triton|cuda)\.py$")
TOL = 1e-4  # the solutions are fp32 throughout; the harness default is 1e-2
MIN_GPU_BYTES = 64 << 20  # gpu-set inputs + parameters + output, at least


def _problems(set_name: str) -> list[Path]:
    return sorted(p for level in SETS[set_name] for p in (PROBLEMS / set_name / level).glob("*.py"))


def _solution(problem: Path, backend: str) -> Path:
    return problem.parent / "solutions" / f"{problem.stem}.{backend}.py"


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


ALL_PROBLEMS = [(s, p) for s in SETS for p in _problems(s)]
ALL_SOLUTIONS = [(s, b, p) for s, p in ALL_PROBLEMS for b in BACKENDS[s]]
RUN_JOBS = [(s, b, p) for s, b, p in ALL_SOLUTIONS if s == "cpu" or b == "triton"]


def _import_reference(path: Path) -> types.ModuleType:
    name = "kgym_problem_" + re.sub(r"\W", "_", _rel(path))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- layout


def test_layout() -> None:
    for set_name, levels in SETS.items():
        problems = _problems(set_name)
        assert len(problems) >= 6, f"{set_name} set has only {len(problems)} problems"
        for level in levels:
            ids = []
            for p in sorted((PROBLEMS / set_name / level).glob("*.py")):
                m = NAME_RE.match(p.name)
                assert m, f"{_rel(p)}: expected <id>_<Name>.py"
                ids.append(int(m.group(1)))
                for backend in BACKENDS[set_name]:
                    assert _solution(p, backend).is_file(), f"{_rel(p)} has no {backend} solution"
            assert len(ids) == len(set(ids)), f"{set_name}/{level}: duplicate ids"
            for s in sorted((PROBLEMS / set_name / level / "solutions").glob("*")):
                m = SOLUTION_RE.match(s.name)
                assert m, f"{_rel(s)}: expected <id>_<Name>.<backend>.py"
                assert (s.parent.parent / f"{m.group(1)}.py").is_file(), f"{_rel(s)}: no such problem"
                assert m.group(2) in BACKENDS[set_name], f"{_rel(s)}: backend not used in the {set_name} set"
    assert (PROBLEMS / "gpu" / "level2" / "1_Linear_ReLU.py").is_file()


# ---------------------------------------------------------------- references


def _tensors(xs: list[Any]) -> list[torch.Tensor]:
    return [x for x in xs if isinstance(x, torch.Tensor)]


def _assert_not_degenerate(out: torch.Tensor, what: str) -> None:
    # A constant or all-zero answer must not pass the harness's default tolerance.
    for const in (torch.full_like(out, float(out.mean())), torch.zeros_like(out)):
        assert not torch.allclose(const, out, atol=1e-2, rtol=1e-2), f"{what}: output is near-constant"


@pytest.mark.parametrize("set_name,problem", ALL_PROBLEMS, ids=[_rel(p) for _, p in ALL_PROBLEMS])
def test_reference(set_name: str, problem: Path) -> None:
    ref = _import_reference(problem)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        assert hasattr(ref, attr), f"{_rel(problem)} lacks {attr}"
    if set_name == "gpu":
        assert hasattr(ref, "get_small_inputs"), "gpu-set problems provide get_small_inputs()"
        with torch.device("meta"):
            init = list(ref.get_init_inputs())
            model = ref.Model(*init)
            inputs = list(ref.get_inputs())
            out = model(*inputs)
        assert all(x.dtype == torch.float32 for x in _tensors(inputs))
        nbytes = sum(t.numel() * t.element_size() for t in [*_tensors(inputs), *model.parameters(), out])
        assert nbytes >= MIN_GPU_BYTES, f"gpu-set problem moves only {nbytes >> 20} MiB"
        get_init = getattr(ref, "get_small_init_inputs", ref.get_init_inputs)
        get_inputs = ref.get_small_inputs
    else:
        get_init, get_inputs = ref.get_init_inputs, ref.get_inputs
    torch.manual_seed(0)
    model = ref.Model(*get_init())
    inputs = list(get_inputs())
    assert all(x.device.type == "cpu" and x.dtype == torch.float32 for x in _tensors(inputs))
    with torch.no_grad():
        out = model(*inputs)
    assert isinstance(out, torch.Tensor) and torch.isfinite(out).all()
    _assert_not_degenerate(out, _rel(problem))


# ---------------------------------------------------------------- solutions, static


def _init_and_forward_arity(tree: ast.Module, cls: str) -> tuple[int, int]:
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    assert node is not None, f"no class {cls}"
    methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    assert "__init__" in methods and "forward" in methods, f"{cls} needs __init__ and forward"
    return len(methods["__init__"].args.args), len(methods["forward"].args.args)


def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr in ("jit", "autotune")) or (
        isinstance(target, ast.Name) and target.id == "jit")


@pytest.mark.parametrize("set_name,backend,problem", ALL_SOLUTIONS,
                         ids=[_rel(_solution(p, b)) for _, b, p in ALL_SOLUTIONS])
def test_solution_static(set_name: str, backend: str, problem: Path) -> None:
    path = _solution(problem, backend)
    tree = ast.parse(path.read_text(), filename=str(path))
    ref_tree = ast.parse(problem.read_text(), filename=str(problem))
    assert _init_and_forward_arity(tree, "ModelNew") == _init_and_forward_arity(ref_tree, "Model"), \
        "ModelNew's __init__/forward arity differs from Model's"

    nodes = list(ast.walk(tree))
    if backend == "triton":
        kernels = {n.name for n in nodes if isinstance(n, ast.FunctionDef) and any(map(_is_triton_jit, n.decorator_list))}
        launched = {n.func.value.id for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                    and isinstance(n.func.value, ast.Name)}
        assert kernels, "no @triton.jit kernel"
        assert kernels & launched, "no kernel[grid](...) launch of a @triton.jit kernel"
        return
    builds = [n for n in nodes if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
              and getattr(n.value.func, "id", getattr(n.value.func, "attr", None)) == "load_inline"]
    assert len(builds) == 1, "expected one module-level `name = load_inline(...)`"
    keywords = {k.arg: k.value for k in builds[0].value.keywords}
    assert ("cuda_sources" in keywords) == (backend == "cuda"), "cuda_sources iff the cuda backend"
    name = keywords.get("name")
    assert isinstance(name, ast.Constant) and str(name.value).startswith(f"kgym_{set_name}_"), \
        "extension name should be derived from the file (kgym_<set>_<level>_<id>_<Name>_<backend>)"
    ext = builds[0].targets[0].id
    calls = [n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == ext]
    assert calls, f"the extension module {ext} is never called"


def test_extension_names_unique() -> None:
    names = [re.search(r'name="([^"]+)"', _solution(p, b).read_text()) for _, b, p in ALL_SOLUTIONS if b != "triton"]
    found = [m.group(1) for m in names if m]
    assert len(found) == len(set(found)), "two solutions share an extension name"


# ---------------------------------------------------------------- solutions, run


def _has_cxx() -> bool:
    return shutil.which(os.environ.get("CXX", "c++")) is not None


def _run_jobs(jobs: list[dict[str, Any]], env: dict[str, str], tmp: Path) -> dict[str, dict[str, Any]]:
    """Run jobs through check_solution.py in up to 4 processes; results keyed by solution path."""
    if not jobs:
        return {}
    workers = max(1, min(len(jobs), os.cpu_count() or 1, 4))
    chunks = [jobs[i::workers] for i in range(workers)]

    def run(i: int) -> list[dict[str, Any]]:
        job_file = tmp / f"jobs{i}.json"
        job_file.write_text(json.dumps(chunks[i]))
        proc = subprocess.run([sys.executable, str(CHECKER), str(job_file)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if len(lines) != len(chunks[i]):
            raise RuntimeError(f"checker exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-4000:]}")
        return lines

    with ThreadPoolExecutor(workers) as pool:
        return {r["solution"]: r for rs in pool.map(run, range(workers)) for r in rs}


@pytest.fixture(scope="session")
def solution_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """RUN_JOBS on the CPU: cpu-set solutions, gpu-set Triton ones at small shapes (interpreter)."""
    jobs = [{"problem": str(problem), "solution": str(_solution(problem, backend)), "backend": backend,
             "small": set_name == "gpu", "seeds": [0, 1], "atol": TOL, "rtol": TOL, "device": "cpu"}
            for set_name, backend, problem in RUN_JOBS if backend != "cpu" or _has_cxx()]
    tmp = tmp_path_factory.mktemp("problems")
    env = dict(os.environ, TRITON_INTERPRET="1", TORCH_EXTENSIONS_DIR=str(tmp / "torch_extensions"),
               MAX_JOBS="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return _run_jobs(jobs, env, tmp)


@pytest.mark.parametrize("set_name,backend,problem", RUN_JOBS, ids=[_rel(_solution(p, b)) for _, b, p in RUN_JOBS])
def test_solution_matches_reference(set_name: str, backend: str, problem: Path,
                                    solution_results: dict[str, dict[str, Any]]) -> None:
    if backend == "cpu" and not _has_cxx():
        pytest.skip("no C++ compiler")
    result = solution_results[str(_solution(problem, backend))]
    assert result["ok"], f"{result.get('error')}\n{result.get('traceback', '')}"
    assert result["launches"]["eval"] > 0 and result["launches"]["train"] > 0
    assert result["max_abs_err"] <= TOL * 10


GPU_JOBS = [(b, p) for s, b, p in ALL_SOLUTIONS if s == "gpu"]


@pytest.fixture(scope="session")
def gpu_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """gpu-set solutions at full shapes on the GPU (compiled Triton, CUDA extensions)."""
    jobs = [{"problem": str(problem), "solution": str(_solution(problem, backend)), "backend": backend,
             "small": False, "seeds": [0], "atol": TOL, "rtol": TOL, "device": "cuda"}
            for backend, problem in GPU_JOBS]
    tmp = tmp_path_factory.mktemp("problems_gpu")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TORCH_EXTENSIONS_DIR=str(tmp / "torch_extensions"), PYTHONUNBUFFERED="1")
    return _run_jobs(jobs, env, tmp)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend,problem", GPU_JOBS, ids=[_rel(_solution(p, b)) for b, p in GPU_JOBS])
def test_gpu_solution_full_shape(backend: str, problem: Path, gpu_results: dict[str, dict[str, Any]]) -> None:
    result = gpu_results[str(_solution(problem, backend))]
    assert result["ok"], f"{result.get('error')}\n{result.get('traceback', '')}"
