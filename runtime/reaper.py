"""Clean up after a ``tritonserver`` whose launcher died: ``python -m modalscale.runtime.reaper``.

:meth:`modalscale.runtime.server.TritonProcess.start` starts one reaper per server right after the server, in its own
session (so a kill of the launcher's process group does not reach it). While the server runs, the reaper re-reads which
``/dev/shm`` files it maps (every second: stubs start while models load). The kernel already kills the server when the
launcher dies (``PR_SET_PDEATHSIG``), but not what the server leaves: its Python-backend stubs (which exit on their own
a few seconds later), the shared-memory region of the Python backend in ``/dev/shm`` (1 MiB or more; Triton unlinks it
only on a clean exit) and the launcher's temporary files. The reaper waits until either

* the server exits while the launcher lives (a normal stop: the launcher cleans up itself), then it exits; or
* the launcher is gone (the reaper's parent changed), then it kills the server's process group (server and
  stubs) with SIGKILL, waits until they are gone, unlinks the shared-memory files the server had mapped (and any
  region created since the server started that nothing maps any more) and
  removes the temporary paths, then exits.

Usage: ``python -m modalscale.runtime.reaper --launcher PID --server PID [--shm /dev/shm/NAME ...]
[--remove PATH ...]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from modalscale.runtime.proctree import alive, read_proc

POLL_S = 0.25
"""How often the reaper looks at its parent and the server."""
MAPS_EVERY = 4
"""Re-read the server's shared-memory files every this many polls."""
SHM_PREFIX = "/dev/shm/triton_python_backend_shm_region"
"""Shared-memory files of Triton's Python backend (``triton_python_backend_shm_region_<uuid>``)."""
START_SLACK_S = 2.0
"""Regions created this long before the reaper started still count as its server's (it starts right after it)."""


def shared_memory_files(pid: int) -> list[str]:
    """The Python backend's ``/dev/shm`` files mapped by process ``pid`` (from ``/proc/<pid>/maps``)."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return []
    paths = (line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6)
    return sorted({p for p in paths if p.startswith(SHM_PREFIX)})


def unmapped_regions_since(since: float) -> list[str]:
    """Python-backend ``/dev/shm`` files created at or after ``since`` (epoch seconds, by their ctime) that no living
    process maps. A region the server created within the last map re-read before it was killed (a stub starting while
    models load) is not in the reaper's list; once the server and its stubs are gone, nothing maps it."""
    candidates = []
    for path in Path("/dev/shm").glob(Path(SHM_PREFIX).name + "*"):
        try:
            if path.stat().st_ctime >= since:
                candidates.append(str(path))
        except OSError:
            continue
    if not candidates:
        return []
    mapped: set[str] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            mapped.update(shared_memory_files(int(entry.name)))
    return [c for c in candidates if c not in mapped]


def group_members(pgid: int) -> list[int]:
    """Living processes of process group ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid and alive(int(entry.name)):
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def clean_up(server: int, shm: Sequence[str], remove: Sequence[str], timeout_s: float = 30.0,
             since: float | None = None) -> None:
    """SIGKILL the server's process group, wait (at most ``timeout_s``) until it is gone, then unlink ``shm`` (and,
    with ``since``, every region created since then that nothing maps any more: :func:`unmapped_regions_since`) and
    remove ``remove`` (files or directory trees). Errors are ignored: everything is best effort."""
    try:
        os.killpg(server, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + timeout_s
    while group_members(server) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for path in [*shm, *(unmapped_regions_since(since) if since is not None else [])]:
        Path(path).unlink(missing_ok=True)
    for path in remove:
        target = Path(path)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


def watch(launcher: int, server: int, shm: Sequence[str], remove: Sequence[str],
          parent: Callable[[], int] = os.getppid, sleep: Callable[[float], None] = time.sleep) -> str:
    """Wait for the server's exit or the launcher's death and act as the module docstring says.

    Args:
        shm: Shared-memory files known at start; those the server maps later are added as they appear.
    Returns:
        ``"server-exited"`` (nothing done) or ``"launcher-died"`` (cleaned up).
    """
    known = set(shm)
    since = time.time() - START_SLACK_S
    polls = 0
    while True:
        if parent() != launcher:
            clean_up(server, sorted(known), remove, since=since)
            return "launcher-died"
        info = read_proc(server)
        if info is None or info.state == "Z":
            return "server-exited"
        if polls % MAPS_EVERY == 0:
            known.update(shared_memory_files(server))
        polls += 1
        sleep(POLL_S)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m modalscale.runtime.reaper", description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", type=int, required=True, help="pid of the process that started the server")
    parser.add_argument("--server", type=int, required=True, help="pid (and process group) of tritonserver")
    parser.add_argument("--shm", nargs="*", default=[], help="shared-memory files to unlink")
    parser.add_argument("--remove", nargs="*", default=[], help="temporary files or directories to remove")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the launcher's business
    watch(args.launcher, args.server, args.shm, args.remove)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
