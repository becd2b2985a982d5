"""Where kgym keeps caches (standard library only).

KGYM_CACHE_DIR (default ~/.cache/kgym) holds ext/ (extension builds keyed by
source hash), reftime/ (reference timings) and inductor/ (torch.compile's
cache for the judge). The candidate is told only KGYM_EXT_CACHE_DIR.
"""

from __future__ import annotations

import os


def cache_dir(sub: str) -> str:
    base = os.environ.get("KGYM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kgym")
    return os.path.join(base, sub)


def ext_cache_root() -> str:
    return os.environ.get("KGYM_EXT_CACHE_DIR") or cache_dir("ext")
