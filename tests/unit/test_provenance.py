"""``modalscale.devenv.provenance.code_version`` on a real temporary git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from modalscale.devenv.provenance import REPO, code_version


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def test_a_changed_tracked_file_anywhere_marks_the_commit_dirty_and_an_untracked_one_does_not(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "proxy.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "one")
    sha = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert code_version(tmp_path) == sha
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert code_version(tmp_path) == sha
    (tmp_path / "gateway" / "proxy.py").write_text("x = 2\n")
    assert code_version(tmp_path) == sha + "+dirty"


def test_outside_a_checkout_it_says_so(tmp_path: Path) -> None:
    assert code_version(tmp_path) == f"(not a git checkout: {tmp_path})"


def test_the_default_root_is_this_repository() -> None:
    assert (REPO / "pyproject.toml").is_file() and (REPO / "src" / "modalscale").is_dir()
