"""`modalscale runtime serve` leaves nothing behind: no tritonserver, stub or reaper process, no /dev/shm region and
no temporary repository when the launcher is killed (SIGKILL of its process group: tritonserver runs in its own
session, so the group kill itself does not reach it), and no temporary file after a normal stop. Real processes,
real tritonserver (one model, one instance: the cheapest server to start).

Seen before the fix (28629e8): after SIGKILL of the launcher's group, tritonserver (parent 1) and its stub kept
running, and the repository, the tritonserver-*.log and a 1 MiB /dev/shm region stayed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from modalscale.runtime.proctree import alive, descendants
from modalscale.runtime.reaper import shared_memory_files
from modalscale.runtime.repo_config import RuntimeConfig, build_repository
from modalscale.runtime.server import (
    TEMP_LOG_PREFIX,
    TEMP_REPOSITORY_PREFIX,
    TritonProcess,
    free_port,
    remove_stale_temp_files,
    write_repository,
)

NAIVE_FLAGS = ["--max-batch-size", "0", "--no-modality-aware-batching", "--no-embedding-cache"]
TORCH_CACHE = "torchinductor_"
"""torch creates its shared compile cache ``$TMPDIR/torchinductor_<user>`` on import: a cache reused by every run,
not a file of ours."""


def _wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _start_serve(tmp: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``runtime serve`` in its own process group with TMPDIR=tmp, ready; returns the launcher and its HTTP port."""
    http = free_port()
    env = dict(os.environ, TMPDIR=str(tmp))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "modalscale.cli", "runtime", "serve", *NAIVE_FLAGS, "--http-port", str(http),
             "--grpc-port", str(free_port()), "--metrics-port", str(free_port()), "--exit-timeout-s", "10"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    # "Serving ..." is printed once the server is ready and its reaper runs
    _wait_until(lambda: "Serving model=" in log.read_text(errors="replace") or proc.poll() is not None, 300,
                "runtime serve to be ready")
    assert proc.poll() is None and _ready(http), log.read_text(errors="replace")[-3000:]
    return proc, http


def _unmapped(regions: set[Path]) -> list[Path]:
    """``regions`` that still exist and that no living process maps."""
    mapped = {m for entry in Path("/proc").iterdir() if entry.name.isdigit()
              for m in shared_memory_files(int(entry.name))}
    return [f for f in regions if f.exists() and str(f) not in mapped]


def _ours(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith((TEMP_REPOSITORY_PREFIX, TEMP_LOG_PREFIX)))


def test_sigkill_of_the_launchers_group_leaves_no_tritonserver_or_stub(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc, _ = _start_serve(tmp, tmp_path / "serve.log")
    tree = descendants(proc.pid)
    try:
        names = sorted(p.comm for p in tree)
        assert "tritonserver" in names and any(n.startswith("triton_python") for n in names), names
        assert any(n.startswith("python") for n in names), names  # the reaper
        server = next(p.pid for p in tree if p.comm == "tritonserver")
        shm = shared_memory_files(server)
        assert shm and all(Path(f).exists() for f in shm)
        assert _ours(tmp), "serve generates its repository in the temp folder"
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher's group; tritonserver and the reaper have their own
        proc.wait(30)
        _wait_until(lambda: not any(alive(p.pid) for p in tree), 90,
                    f"tritonserver, its stubs and the reaper to exit after the launcher's SIGKILL: {names}")
        _wait_until(lambda: not _ours(tmp), 30, f"the launcher's temporary files to be removed: {_ours(tmp)}")
        assert not [f for f in shm if Path(f).exists()], "the Python backend's /dev/shm region was left"
    finally:
        for p in tree:  # only on failure: never leave a server running
            if alive(p.pid):
                os.kill(p.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [p.name for p in tmp.iterdir() if not p.name.startswith(TORCH_CACHE)] == []


def test_files_of_a_launcher_that_died_early_are_removed_by_the_next_start(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # a pid that is no longer running
    dead.wait()
    mine, running = f"{TEMP_REPOSITORY_PREFIX}{os.getpid()}-a", f"{TEMP_REPOSITORY_PREFIX}{os.getppid()}-b"
    stale_repo, stale_log = f"{TEMP_REPOSITORY_PREFIX}{dead.pid}-c", f"{TEMP_LOG_PREFIX}{dead.pid}-d.log"
    for name in (mine, running, stale_repo):
        (tmp_path / name / "m").mkdir(parents=True)
    for name in (stale_log, "tritonserver-unrelated.log", f"other-{dead.pid}-e"):
        (tmp_path / name).write_text("x")
    removed = remove_stale_temp_files(tmp_path)
    assert sorted(p.name for p in removed) == sorted([stale_repo, stale_log])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [mine, running, "tritonserver-unrelated.log", f"other-{dead.pid}-e"])


def test_a_stopped_serve_leaves_no_temporary_files(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    log = tmp_path / "serve.log"
    proc, http = _start_serve(tmp, log)
    try:
        assert _ours(tmp), "serve generates its repository in the temp folder"
        tree = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not _ready(http)
    assert not any(alive(p.pid) for p in tree)
    left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith(TORCH_CACHE))
    assert left == [], "temporary files left after a normal stop"
    assert "tritonserver exited with code 0" in log.read_text(errors="replace")


def test_triton_process_removes_its_own_temporary_log(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    repo = write_repository(build_repository(RuntimeConfig(max_batch_size=0, modality_aware_batching=False)),
                            tmp_path / "repo")
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           exit_timeout_s=5)
    # The session's control plane (etcd, kube-apiserver, ...) may already be children of this pytest process:
    # only what this server added is checked.
    before = {p.pid for p in descendants(os.getpid())}
    server.start(ready_timeout_s=300)
    try:
        own_log = server.log_path
        assert own_log is not None and own_log.parent == tmp and own_log.is_file()
        assert own_log.name.startswith(f"{TEMP_LOG_PREFIX}{os.getpid()}-")
        assert "Started HTTPService" in server.log_tail()
        assert server.pid is not None
        tree = [p for p in descendants(os.getpid()) if p.pid not in before]
        shm = shared_memory_files(server.pid)
        assert any(p.comm.startswith("triton_python") for p in tree) and shm
    finally:
        server.stop()
    assert not own_log.exists()
    assert _ours(tmp) == []
    # stop() returns only when the server, its stubs and the reaper are gone and the backend's /dev/shm is unlinked
    assert [p.comm for p in tree if alive(p.pid)] == []
    assert [f for f in shm if Path(f).exists()] == []


def test_a_launcher_killed_while_the_server_loads_leaves_nothing(tmp_path: Path) -> None:
    """The reaper starts with the server, not when it is ready: killed during model loading, nothing stays."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    shm_before = set(Path("/dev/shm").glob("triton_python_backend_shm_region_*"))
    log = tmp_path / "serve.log"
    env = dict(os.environ, TMPDIR=str(tmp))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "modalscale.cli", "runtime", "serve", *NAIVE_FLAGS, "--http-port", str(free_port()),
             "--grpc-port", str(free_port()), "--metrics-port", str(free_port())],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    tree: dict[int, str] = {}

    def stub_started() -> bool:
        tree.update({p.pid: p.comm for p in descendants(proc.pid)})
        return any(c.startswith("triton_python") for c in tree.values()) or proc.poll() is not None

    try:
        _wait_until(stub_started, 300, "a stub to start")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert any(c.startswith("python") for c in tree.values()), tree  # the reaper runs already
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        _wait_until(lambda: not any(alive(pid) for pid in tree), 90, f"{tree} to exit")
        _wait_until(lambda: not _ours(tmp), 30, f"the launcher's temporary files to be removed: {_ours(tmp)}")
        new_shm = set(Path("/dev/shm").glob("triton_python_backend_shm_region_*")) - shm_before
        # Only the regions no living process maps are this server's (its tree is gone): another lane's or test's
        # tritonserver on this machine may have made one meanwhile, and it maps it until it stops (ci101 waited on
        # such a region for 30 s).
        _wait_until(lambda: not _unmapped(new_shm), 30, "its /dev/shm regions to be unlinked")
    finally:
        for pid in tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
