"""``tests/_signals.py``: a pytest run stopped by SIGTERM still tears its session fixtures down (without the plugin
Python dies at once and a session cluster would be left running)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = '''
import pathlib, time
import pytest

OUT = pathlib.Path(__file__).with_name("events")


@pytest.fixture(scope="session")
def cluster():
    OUT.write_text("setup\\n")
    yield
    OUT.write_text(OUT.read_text() + "teardown started\\n")
    time.sleep(1.5)
    OUT.write_text(OUT.read_text() + "teardown\\n")


def test_runs_long(cluster):
    OUT.write_text(OUT.read_text() + "running\\n")
    time.sleep(60)
'''


def run_and_terminate(tmp_path: Path, plugin: bool, signals: int = 1) -> tuple[int, str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    events = tmp_path / "events"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_probe.py")]
    if plugin:
        args[3:3] = ["-p", "tests._signals"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while "running" not in (events.read_text() if events.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        if signals == 2:  # the same stop delivered twice, once the teardown has begun
            while "teardown started" not in events.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, events.read_text()


def test_sigterm_runs_the_session_teardown(tmp_path: Path) -> None:
    rc, events = run_and_terminate(tmp_path, plugin=True)
    assert events.splitlines() == ["setup", "running", "teardown started", "teardown"], events
    assert rc == 2, rc  # pytest's "interrupted"


def test_a_second_sigterm_right_after_the_first_does_not_break_off_the_teardown(tmp_path: Path) -> None:
    """A stop delivered twice (process group + ``scripts/test.sh``'s trap) left a session cluster running."""
    rc, events = run_and_terminate(tmp_path, plugin=True, signals=2)
    assert events.splitlines() == ["setup", "running", "teardown started", "teardown"], events


def test_without_the_plugin_sigterm_skips_it(tmp_path: Path) -> None:
    """The probe's control: what the plugin prevents."""
    rc, events = run_and_terminate(tmp_path, plugin=False)
    assert events.splitlines() == ["setup", "running"] and rc == -signal.SIGTERM, (rc, events)
