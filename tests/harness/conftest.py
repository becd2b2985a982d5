"""Shared setup: import path, one extension/ref-time cache for the session."""

from __future__ import annotations

import os
import sys

import pytest

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness")
if os.path.abspath(HARNESS) not in [os.path.abspath(p) for p in sys.path]:
    sys.path.insert(0, os.path.abspath(HARNESS))
os.environ["PYTHONPATH"] = os.path.abspath(HARNESS) + (
    os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")


@pytest.fixture(scope="session", autouse=True)
def kgym_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """KGYM_CACHE_DIR for the whole session (KGYM_TEST_CACHE_DIR keeps one across runs).

    Extension builds are keyed by source hash, so every cpu candidate that
    uses kit.EXT_C shares one build.
    """
    path = os.environ.get("KGYM_TEST_CACHE_DIR") or str(tmp_path_factory.mktemp("kgym-cache"))
    saved = {k: os.environ.get(k) for k in ("KGYM_CACHE_DIR", "KGYM_EXT_CACHE_DIR")}
    os.environ["KGYM_CACHE_DIR"] = path
    os.environ.pop("KGYM_EXT_CACHE_DIR", None)
    yield path
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session", autouse=True)
def warm_spawner(kgym_cache: str):
    """Roles forked from one warm server (torch imported once) for kit.run.

    KGYM_TEST_COLD=1 starts every role cold instead. Launcher tests that
    need the cold path call launcher.evaluate without a spawner.
    """
    import kit
    from kgym_harness.warm import WarmSpawner
    if os.environ.get("KGYM_TEST_COLD") == "1":
        yield None
        return
    spawner = WarmSpawner()
    kit.SPAWNER = spawner
    yield spawner
    kit.SPAWNER = None
    spawner.close()
