"""bench/variants.py: distinct Triton sources for the concurrency bench."""
import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import variants  # noqa: E402

SOL = os.path.join(ROOT, "problems", "gpu", "level1", "solutions", "3_LayerNorm.triton.py")


def _kernel_sources(src: str) -> dict[str, str]:
    tree = ast.parse(src)
    return {fn.name: ast.get_source_segment(src, fn) for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef) and fn.decorator_list}


def test_each_kernel_body_changes_and_nothing_else():
    with open(SOL) as f:
        src = f.read()
    a, b = variants.distinct(src, "1"), variants.distinct(src, "2")
    ka, kb, k0 = _kernel_sources(a), _kernel_sources(b), _kernel_sources(src)
    assert ka.keys() == k0.keys() and ka
    assert all(ka[n] != kb[n] != k0[n] for n in k0)
    assert ast.dump(ast.parse(a)) == ast.dump(ast.parse(src))  # comments only


def test_triton_sees_a_different_function_source():
    triton = pytest.importorskip("triton")
    src = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
           "def k(x_ptr,\n      n):\n    tl.store(x_ptr, n)\n")
    srcs = []
    for tag in ("1", "2"):
        ns: dict = {}
        code = variants.distinct(src, tag)
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kgym_variant_{tag}.py")
        with open(path, "w") as f:
            f.write(code)  # triton reads the source back from the file
        exec(compile(code, path, "exec"), ns)
        assert isinstance(ns["k"], triton.runtime.jit.JITFunction)
        srcs.append(ns["k"].src)
        os.unlink(path)
    assert srcs[0] != srcs[1] and "kgym variant 1" in srcs[0]


def test_a_source_without_a_kernel_is_refused():
    with pytest.raises(ValueError):
        variants.distinct("x = 1\n", "1")
