/* prompt_text.c - the agent's default prompts and backend hints
 * (include/kgym/prompt.h), written for kgym after the structure of the Dr.
 * Kernel paper's: the task and the reference program on the first turn,
 * the environment's feedback on each later one. In libkgym so that the C
 * agent and the Python side (kgym.prompts: the verl agent loop and its
 * dataset) ask the same text. `kgym rollout --write-prompts DIR` writes
 * them out as files to edit; --prompt-system, --prompt-first and
 * --prompt-refine read them back.
 *
 * Placeholders: {reference} (the reference program), {backend},
 * {backend_hint} (kg_prompt_backend_hint), {entry_point} in the first;
 * {feedback} and {turn} (1-based) in the refinement. */
#include <stddef.h>
#include <string.h>

#include "kgym/prompt.h"

const char kg_prompt_default_system[] =
    "You are an expert in high-performance GPU and CPU kernels and in "
    "PyTorch. You make PyTorch programs faster by replacing their operators "
    "with custom kernels, and you keep their results the same.";

const char kg_prompt_default_first[] =
    "Below is a PyTorch program: a module `{entry_point}` with its "
    "`forward`, and the functions `get_inputs()` and `get_init_inputs()` "
    "that make its inputs and its constructor's arguments.\n"
    "\n"
    "```python\n"
    "{reference}\n"
    "```\n"
    "\n"
    "Write a faster version of it as a class `ModelNew`:\n"
    "- `ModelNew` takes the same constructor arguments as `{entry_point}` "
    "and its `forward` takes the same inputs and returns the same outputs "
    "(shapes, dtypes, values within a small tolerance).\n"
    "- The work must run in custom kernels that you write. "
    "{backend_hint}\n"
    "- You are free to choose which operators to replace: fuse several "
    "into one kernel, change the algorithm, keep some in PyTorch where a "
    "kernel would not help.\n"
    "- Do not special-case the inputs, cache results between calls, read "
    "the timer or the caller's frames, or hand the work back to the "
    "reference: such a program is caught and scores nothing.\n"
    "\n"
    "Think briefly about where the time goes, then give your answer as ONE "
    "fenced ```python block holding the complete module: imports, kernels, "
    "and `class ModelNew`. Only the last ```python block of your reply is "
    "run; no test code in it.";

const char kg_prompt_default_refine[] =
    "Your program of turn {turn} was compiled, checked against the reference "
    "on fresh inputs, timed and profiled. What the environment reported:\n"
    "\n"
    "{feedback}\n"
    "\n"
    "Improve your program: if it failed, fix the cause shown above; if it "
    "is correct, make it faster (a larger share of the time in your own "
    "kernels, fewer launches, more fusion). Give the complete new module as "
    "ONE fenced ```python block defining `class ModelNew`, as before.";

const char *kg_prompt_backend_hint(const char *backend)
{
    if (backend && !strcmp(backend, "triton"))
        return "Write the kernels in Triton (functions decorated with "
               "@triton.jit, launched from ModelNew.forward).";
    if (backend && !strcmp(backend, "cuda"))
        return "Write the kernels in CUDA C++, compiled with "
               "torch.utils.cpp_extension.load_inline and called from "
               "ModelNew.forward.";
    if (backend && !strcmp(backend, "cpu"))
        return "Write the kernels in C++ for the CPU (loops, OpenMP, SIMD), "
               "compiled with torch.utils.cpp_extension.load_inline and "
               "called from ModelNew.forward.";
    return "Write the kernels in the language the backend runs.";
}

const char *kg_prompt_default(const char *name)
{
    if (name && !strcmp(name, "system"))
        return kg_prompt_default_system;
    if (name && !strcmp(name, "first"))
        return kg_prompt_default_first;
    if (name && !strcmp(name, "refine"))
        return kg_prompt_default_refine;
    return NULL;
}
