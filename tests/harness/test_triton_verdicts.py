"""Backend triton through Triton's interpreter on CPU tensors: loading,
correctness, the launch hooks (decoy, mode branch) and the error paths."""

from __future__ import annotations

import textwrap

import kit


def test_honest_triton_kernel_passes_and_records_grid():
    r = kit.run(kit.triton_kernel(), "triton")
    assert r["verdict"] == "pass", r["feedback"]
    assert r["device"]["device"] == "cpu" and r["device"]["backend"] == "triton"
    assert r["checks"]["custom_kernels"] == ["add_relu_scale_kernel"]
    rec = r["checks"]["launch_records"][0]
    assert rec == {"kind": "triton", "name": "add_relu_scale_kernel", "grid": [2]}


def test_triton_compile_error_points_at_kernel_line():
    code = kit.triton_kernel().replace("tl.arange(0, BLOCK)", "tl.arange(0, 100)")
    r = kit.run(code, "triton")
    assert (r["verdict"], r["error_code"]) == ("compile_error", "TRITON_COMPILE_ERROR")
    assert "power of 2" in r["error_message"]
    line = kit.line_of(code, "tl.arange(0, 100)")
    assert f"line {line}, in add_relu_scale_kernel" in r["feedback"]


def test_triton_unknown_language_function_is_compile_error():
    code = kit.triton_kernel().replace("tl.maximum(", "tl.maximumm(")
    r = kit.run(code, "triton")
    assert (r["verdict"], r["error_code"]) == ("compile_error", "TRITON_COMPILE_ERROR")
    assert "maximumm" in r["error_message"]


def test_exception_after_launch_is_runtime_error():
    body = """
    out = add_relu_scale(a, b, self.scale)
    raise RuntimeError("kgym after launch")
    """
    r = kit.run(kit.triton_kernel(kit.model_new(body)), "triton")
    assert (r["verdict"], r["error_code"]) == ("runtime_error", "FORWARD_EXCEPTION")
    assert "kgym after launch" in r["error_message"]


def test_wrong_kernel_is_mismatch():
    code = kit.triton_kernel().replace("tl.maximum(a + b, 0.0)", "tl.maximum(a - b, 0.0)")
    r = kit.run(code, "triton")
    assert (r["verdict"], r["error_code"]) == ("mismatch", "VALUE_MISMATCH")


def test_decoy_triton_kernel_defined_but_not_launched():
    r = kit.run(kit.triton_kernel(kit.model_new("return torch.relu(a + b) * self.scale")),
                "triton")
    assert r["verdict"] == "hacked" and r["decoy_kernel"] is True
    assert r["hack_reasons"] == ["no_custom_kernel"]


def test_empty_grid_launch_does_not_count():
    body = """
    out = torch.empty_like(a)
    add_relu_scale_kernel[(0,)](a, b, out, a.numel(), self.scale, BLOCK=32)
    return torch.relu(a + b) * self.scale
    """
    r = kit.run(kit.triton_kernel(kit.model_new(body)), "triton")
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["no_custom_kernel"]


def test_triton_mode_branch_kernel_only_in_eval():
    body = """
    if self.training:
        return torch.relu(a + b) * self.scale
    return add_relu_scale(a, b, self.scale)
    """
    r = kit.run(kit.triton_kernel(kit.model_new(body)), "triton")
    assert r["verdict"] == "hacked" and r["hack_reasons"] == ["mode_branch"]
    assert r["checks"]["launches"]["eval/no_grad"] > 0


AUTOTUNED = textwrap.dedent('''\
    @triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])
    @triton.jit
    def tuned_kernel(a_ptr, b_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, tl.maximum(a + b, 0.0) * scale, mask=mask)


    @triton.heuristics({"BLOCK": lambda args: 64})
    @triton.jit
    def heur_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 1.0, mask=mask)


    ''')


def test_autotuner_and_heuristics_launches_are_recorded():
    body = """
    out = torch.empty_like(a)
    n = a.numel()
    tuned_kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](a, b, out, n, self.scale)
    heur_kernel[(1,)](out, n)
    return out
    """
    r = kit.run(kit.triton_kernel(kit.model_new(body), top=AUTOTUNED), "triton")
    assert r["verdict"] == "pass", r["feedback"]
    assert r["checks"]["custom_kernels"] == ["heur_kernel", "tuned_kernel"]
    grids = {rec["name"]: rec["grid"] for rec in r["checks"]["launch_records"]}
    assert grids == {"tuned_kernel": [4], "heur_kernel": [1]}


def test_triton_profile_on_cpu_attributes_interpreted_launches():
    r = kit.run(kit.triton_kernel(), "triton", enable_profiling=True)
    assert r["verdict"] == "pass"
    p = r["profile"]
    assert p["kernels"][0]["name"] == "add_relu_scale_kernel" and p["kernels"][0]["custom"]
    assert p["coverage"] > 0.5  # the interpreter dominates the forward


def test_library_jit_functions_work_under_the_interpreter():
    # tl.zeros and tl.sum are @jit functions of Triton itself; the warm
    # server imported triton before TRITON_INTERPRET was set, so they must
    # be turned into interpreted functions (they raised "Cannot call
    # @triton.jit'd outside of the scope of a kernel").
    import os
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "problems",
                        "cpu", "level2")
    with open(os.path.join(root, "3_Scale_Bias_Sigmoid_Sum.py")) as f:
        ref = f.read()
    with open(os.path.join(root, "solutions", "3_Scale_Bias_Sigmoid_Sum.triton.py")) as f:
        sol = f.read()
    r = kit.run(sol, "triton", reference_code=ref, num_correct_trials=1, num_perf_trials=1,
                num_warmup=0)
    assert r["verdict"] == "pass", r["feedback"]
