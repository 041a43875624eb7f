"""Read a process tree and its CPU time from Linux ``/proc`` (tests and benchmarks of the runtime).

``tritonserver`` runs each Python-backend model instance in its own stub process, so the CPU a server spends is
that of the whole tree: the server and every stub. Figures come from ``/proc/<pid>/stat`` (fields 14-17:
utime, stime, cutime, cstime in clock ticks, see ``proc(5)``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
"""Kernel clock ticks per second (``USER_HZ``), the unit of the stat CPU fields."""


@dataclass(frozen=True)
class ProcInfo:
    """One process as seen in ``/proc/<pid>/stat``."""

    pid: int
    ppid: int
    comm: str
    """Executable name, at most 15 characters (``tritonserver``, ``triton_python_b``)."""
    state: str
    """One letter: R running, S sleeping, Z zombie, ..."""
    cpu_s: float
    """utime + stime of the process itself, in seconds."""


def parse_stat(text: str) -> ProcInfo:
    """Parse the one line of ``/proc/<pid>/stat``.

    Raises:
        ValueError: Not a stat line.
    """
    open_paren, close_paren = text.index("("), text.rindex(")")
    pid = int(text[:open_paren])
    comm = text[open_paren + 1:close_paren]
    fields = text[close_paren + 2:].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15
    return ProcInfo(pid=pid, ppid=int(fields[1]), comm=comm, state=fields[0],
                    cpu_s=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S)


def read_proc(pid: int) -> ProcInfo | None:
    """The process ``pid``, or None when it does not exist (or vanished while being read)."""
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError):
        return None


def all_processes() -> dict[int, ProcInfo]:
    """Every process visible now, by pid."""
    out = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            info = read_proc(int(entry.name))
            if info is not None:
                out[info.pid] = info
    return out


def descendants(pid: int, table: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
    """All living descendants of ``pid`` (children, grandchildren, ...), not ``pid`` itself."""
    table = all_processes() if table is None else table
    children: dict[int, list[ProcInfo]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info)
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child.pid)
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    info = read_proc(pid)
    return info is not None and info.state != "Z"


def tree_cpu_s(pid: int) -> dict[int, ProcInfo]:
    """``pid`` and its living descendants with their own CPU seconds, by pid (sum ``cpu_s`` for the tree)."""
    table = all_processes()
    root = table.get(pid)
    return {p.pid: p for p in ([root] if root else []) + descendants(pid, table)}


def loadavg() -> tuple[float, float, float]:
    """1, 5 and 15 minute load averages."""
    parts = (PROC / "loadavg").read_text().split()
    return float(parts[0]), float(parts[1]), float(parts[2])


def cpu_jiffies() -> dict[str, int]:
    """Machine-wide CPU time by kind (``user``, ``system``, ``idle``, ``steal`` ...) from ``/proc/stat``, in ticks."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for line in (PROC / "stat").read_text().splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:1 + len(names)]]
            return dict(zip(names, values, strict=False))
    raise ValueError("/proc/stat has no cpu line")


def steal_fraction(before: dict[str, int], after: dict[str, int]) -> float:
    """Share of all CPU ticks between two :func:`cpu_jiffies` readings that the hypervisor stole."""
    total = sum(after.values()) - sum(before.values())
    return (after.get("steal", 0) - before.get("steal", 0)) / total if total > 0 else 0.0
