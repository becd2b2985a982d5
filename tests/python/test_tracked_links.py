"""What git tracks as links stays inside the tree: a link to an absolute
path (a worktree's .venv pointing at another checkout's) breaks every
clone and, merged, replaced the main tree's virtualenv with a self-link."""
from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tracked_links() -> list[tuple[str, str]]:
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-s"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    links = []
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        if meta.split()[0] == "120000":
            links.append((path, os.readlink(os.path.join(ROOT, path))))
    return links


def test_tracked_links_are_relative_and_stay_inside_the_tree():
    for path, target in _tracked_links():
        assert not os.path.isabs(target), f"{path} -> {target}: an absolute link"
        resolved = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), target))
        assert resolved.startswith(ROOT + os.sep), f"{path} -> {target}: leaves the tree"


def test_the_virtualenvs_are_never_tracked():
    tracked = {p for p, _ in _tracked_links()}
    assert not tracked & {".venv", ".venv-verl"}
