"""The agent's default prompts and backend hints, read from libkgym
(include/kgym/prompt.h, lib/prompt_text.c): the text `kgym rollout` sends,
so the verl agent loop and its dataset ask the policy exactly what the C
agent asks. The library is found as kgym.rl finds it (KGYM_LIB, then
build/libkgym.so of this checkout)."""

from __future__ import annotations

import ctypes
import functools

from kgym.rl import library_path


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(library_path())
    for fn in (lib.kg_prompt_default, lib.kg_prompt_backend_hint):
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ctypes.c_char_p]
    return lib


def default(name: str) -> str:
    """The default template "system", "first" or "refine"."""
    text = _lib().kg_prompt_default(name.encode())
    if text is None:
        raise ValueError(f"no default prompt named {name!r} (system, first, refine)")
    return text.decode()


def backend_hint(backend: str) -> str:
    """What {backend_hint} says for backend (a generic line for unknown ones)."""
    return _lib().kg_prompt_backend_hint(backend.encode()).decode()


def fill(template: str, values: dict[str, str]) -> str:
    """Replaces each "{name}" of values in one pass, as kg_prompt_fill does:
    braces inside a value (a reference's own code) are not scanned, and any
    other brace of the template is kept."""
    keys = {"{" + k + "}": v for k, v in values.items()}
    out, i = [], 0
    while i < len(template):
        for k, v in keys.items():
            if template.startswith(k, i):
                out.append(v)
                i += len(k)
                break
        else:
            out.append(template[i])
            i += 1
    return "".join(out)
