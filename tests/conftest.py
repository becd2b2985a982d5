"""What a test needs from the machine, and what CI may not skip.

A developer's run skips a test whose machine cannot run it, with the
reason. CI (.ci/run, as root after scripts/install-deps) sets

* KGYM_REQUIRE_ROOT=1: a test that needs root fails instead of skipping
  when the run is not root;
* KGYM_REQUIRE_REDIS=1: a test that needs redis-server fails instead of
  skipping when it is not installed;

so that a suite CI cannot run shows up as failures, not as skips nobody
reads. Tests say what they need with

* ``@pytest.mark.needs_root("why")``, and
* the ``redis_server`` fixture (the redis-server path), or
  ``request.getfixturevalue("redis_server")`` where only some parameters
  need it.

A test whose store fails to open when redis-server is installed fails: it
is never a skip. As a safety net, with either variable set any other skip
whose reason says it needs root (or redis) fails too (tests written with a
plain skipif).
"""
from __future__ import annotations

import os
import re
import shutil

import pytest

REQUIRE_ROOT = "KGYM_REQUIRE_ROOT"
REQUIRE_REDIS = "KGYM_REQUIRE_REDIS"


def _required(var: str) -> bool:
    return os.environ.get(var) == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_root(reason): the test needs root; it skips when not root, "
        f"and fails instead when {REQUIRE_ROOT}=1 (CI)")


def not_root_outcome(reason: str) -> None:
    """Skip (or, under KGYM_REQUIRE_ROOT=1, fail) a test that needs root."""
    if _required(REQUIRE_ROOT):
        pytest.fail(f"needs root, and {REQUIRE_ROOT}=1 (CI) forbids skipping it: {reason} "
                    f"(running as uid {os.geteuid()})", pytrace=False)
    pytest.skip(f"needs root: {reason}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    m = item.get_closest_marker("needs_root")
    if m is not None and os.geteuid() != 0:
        not_root_outcome(m.args[0] if m.args else m.kwargs.get("reason", "needs root"))


@pytest.fixture(scope="session")
def redis_server() -> str:
    """The redis-server executable. Not installed: a skip, or a failure
    under KGYM_REQUIRE_REDIS=1 (CI, where scripts/install-deps installs it)."""
    exe = shutil.which("redis-server")
    if exe:
        return exe
    if _required(REQUIRE_REDIS):
        pytest.fail(f"redis-server is not installed, and {REQUIRE_REDIS}=1 (CI) forbids "
                    "skipping the Redis store's tests (scripts/install-deps installs it)",
                    pytrace=False)
    pytest.skip("redis-server not installed")


_ROOT_SKIP = re.compile(r"\broot\b", re.I)
_REDIS_SKIP = re.compile(r"\bredis", re.I)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """The safety net: under KGYM_REQUIRE_ROOT=1 (not root) or
    KGYM_REQUIRE_REDIS=1, a skip whose reason names root (redis) fails."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.skipped or hasattr(rep, "wasxfail") or not isinstance(rep.longrepr, tuple):
        return
    reason = str(rep.longrepr[2])
    if "forbids skipping" in reason:
        return
    why = None
    if _required(REQUIRE_ROOT) and os.geteuid() != 0 and _ROOT_SKIP.search(reason):
        why = f"{REQUIRE_ROOT}=1 (CI) and not root"
    elif _required(REQUIRE_REDIS) and _REDIS_SKIP.search(reason):
        why = f"{REQUIRE_REDIS}=1 (CI)"
    if why:
        rep.outcome = "failed"
        rep.longrepr = f"{why}: this test may not skip ({reason})"
