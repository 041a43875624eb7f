"""How many CPU cores this process may use: the cgroup CPU quota (a pod's CPU limit), else the CPU affinity.

Pure parsers of the kernel files plus one reader (:func:`available_cores`); the repository generator sizes its
process counts from the result (``RuntimeConfig.cpu_cores``, ``repo_config.router_instances_for``).
"""

from __future__ import annotations

import os
from pathlib import Path


def parse_cpu_max(text: str) -> float | None:
    """Cores allowed by a cgroup v2 ``cpu.max`` (``"<quota_us> <period_us>"`` or ``"max <period_us>"``).

    Returns:
        quota / period in cores (``"50000 100000"`` -> 0.5), or None for no limit (``max``) or unreadable text.
    """
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """Cores allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = no limit -> None)."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_paths(proc_self_cgroup: str) -> tuple[str | None, str | None]:
    """The process's cgroup v2 path and cgroup v1 ``cpu`` controller path from ``/proc/self/cgroup``.

    Lines are ``<id>:<controllers>:<path>``; v2 has id 0 and no controllers, v1's cpu line lists ``cpu``.
    """
    v2 = v1 = None
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def cgroup_quota_cores(sys_cgroup: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> float | None:
    """The tightest CPU quota on the way from this process's cgroup up to the root, in cores; None if none.

    Reads cgroup v2 ``cpu.max`` files (in a pod with its own cgroup namespace the path is ``/``, so the pod's
    limit is ``/sys/fs/cgroup/cpu.max``) and cgroup v1 ``cpu/cpu.cfs_quota_us`` (both on a hybrid host). Missing
    files mean no limit.
    """
    try:
        v2, v1 = cgroup_paths((proc / "self" / "cgroup").read_text())
    except OSError:
        return None
    found: list[float] = []
    if v2 is not None:
        for directory in _up_to_root(sys_cgroup, v2):
            value = _read(directory / "cpu.max")
            cores = parse_cpu_max(value) if value is not None else None
            if cores is not None:
                found.append(cores)
    if v1 is not None:  # cgroup v1, or a hybrid host whose cpu controller is still on v1
        for base in (sys_cgroup / "cpu", sys_cgroup / "cpu,cpuacct"):
            for directory in _up_to_root(base, v1):
                quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
                cores = parse_cfs(quota, period) if quota is not None and period is not None else None
                if cores is not None:
                    found.append(cores)
    return min(found) if found else None


def available_cores() -> float:
    """CPU cores this process may use: min(CPU affinity count, cgroup quota), e.g. 0.5 in a ``500m`` pod, 2.0 on
    the 2-vCPU dev machine. Always > 0."""
    affinity = float(len(os.sched_getaffinity(0)))
    quota = cgroup_quota_cores()
    return min(affinity, quota) if quota is not None else affinity


def _up_to_root(root: Path, cgroup_path: str) -> list[Path]:
    parts = [p for p in cgroup_path.strip("/").split("/") if p]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
