"""The demo's background Go build (modalscale.devenv.prebuild): stdlib-only, and one build lock that a second
process waits on, says so, and then finds the binaries built by the first."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from modalscale.devenv import binaries
from modalscale.devenv.binaries import build_lock
from modalscale.devenv.prebuild import wants_node_binaries

SRC = Path(__file__).resolve().parents[2] / "src"


def test_prebuild_imports_with_the_standard_library_alone() -> None:
    """scripts/demo.sh runs it with the machine's Python before .venv exists: site-packages off (-S), every
    module it loads is stdlib or modalscale's own."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import modalscale.devenv.prebuild; "
            "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(SRC)], capture_output=True, text=True, check=True)
    ours = ("modalscale", "__main__")
    outside = [m for m in out.stdout.split() if m not in sys.stdlib_module_names and m not in ours]
    assert outside == []


def test_build_lock_says_once_that_it_waits_for_another_holder(tmp_path: Path) -> None:
    said: list[float] = []
    entered: list[float] = []
    with open(tmp_path / ".build.lock", "w") as other:  # another open file description: another holder
        fcntl.flock(other, fcntl.LOCK_EX)

        def second() -> None:
            with build_lock(tmp_path, lambda: said.append(time.monotonic())):
                entered.append(time.monotonic())

        thread = threading.Thread(target=second)
        thread.start()
        deadline = time.monotonic() + 5
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(said) == 1 and entered == []  # told, and still waiting
        released = time.monotonic()
        fcntl.flock(other, fcntl.LOCK_UN)
    thread.join(timeout=5)
    assert len(said) == 1 and len(entered) == 1 and entered[0] >= released


def test_build_lock_free_is_silent(tmp_path: Path) -> None:
    said: list[str] = []
    with build_lock(tmp_path, lambda: said.append("waiting")):
        pass
    assert said == []


def test_ensure_waits_for_the_other_build_and_does_not_build_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODALSCALE_CACHE_DIR", str(tmp_path))
    lines: list[str] = []
    built: list[Path] = []
    result: list[Path] = []
    with open(tmp_path / ".build.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        thread = threading.Thread(target=lambda: result.append(
            binaries._ensure("tool", "v1", ("tool",), built.append, lines.append)))
        thread.start()
        deadline = time.monotonic() + 5
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines and lines[0].startswith("Waiting for another process's build to finish before tool v1")
        assert str(tmp_path / binaries.PREBUILD_LOG) in lines[0]
        time.sleep(1.1)  # the other process builds...
        out = tmp_path / "bin" / "tool-v1"
        out.mkdir(parents=True)
        (out / "tool").write_text("built by the other process")
        fcntl.flock(other, fcntl.LOCK_UN)
    thread.join(timeout=5)
    assert built == [] and result == [out]
    assert lines[-1].startswith("tool v1 built by the other process (")


@pytest.mark.parametrize(("env", "tools", "expected"), [
    ({}, {"containerd", "runc"}, True),
    ({"MODALSCALE_REAL_NODE": "0"}, {"containerd", "runc"}, False),
    ({}, {"runc"}, False),
    ({"MODALSCALE_REAL_NODE": "1"}, {"containerd", "runc"}, True),
])
def test_node_binaries_are_built_ahead_only_where_the_real_node_can_run(
        env: dict[str, str], tools: set[str], expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("modalscale.devenv.prebuild.shutil.which", lambda t: f"/usr/bin/{t}" if t in tools else None)
    assert wants_node_binaries(env) is expected
