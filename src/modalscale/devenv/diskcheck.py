"""Free disk space for a first ``scripts/demo.sh``, checked before anything is downloaded or built (standard library
only: it runs with the machine's own Python before ``.venv`` exists).

A cold demo writes about 30 GB (measured 3 Dec 2026 on a fresh clone: ``.venv`` 6.7 GB, pip's cache about 3 GB,
Go's module and build caches 3.5 GB plus the binaries 0.7 GB, the runtime image's build store, wheelhouse and
archive 12 GB, and the real node's containerd root 8.5 GB once the image is imported), and since the demo runs
through the gateway, the operator image's 1.2 GB and its import. A disk that fills
midway fails the demo after 15 minutes with ``no space left on device`` from whichever build got there first;
this check fails in a second instead, naming what is missing, where it goes and how much is free. Parts already
built (a warm machine) need nothing.

Run as ``PYTHONPATH=src python3 -m modalscale.devenv.diskcheck``: exit 0 when there is room, 1 with the message
otherwise. ``MODALSCALE_SKIP_DISK_CHECK=1`` skips it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from modalscale.devenv import checkout
from modalscale.devenv.binaries import cache_dir

GB = 1024**3
MARGIN_BYTES = 2 * GB
"""Kept free beyond the parts' own sizes (logs, the cluster's etcd, Prometheus' data, temporary files)."""


@dataclass(frozen=True)
class Part:
    """One thing a cold demo writes: its name, where it goes (a folder on the filesystem that holds it) and about
    how many bytes it takes when built from nothing."""

    name: str
    where: Path
    bytes_needed: int


def cold_parts(repo: Path, home: Path, cache: Path) -> list[Part]:
    """What a demo writes that is not there yet (figures in the module docstring), on this machine's state."""
    parts = []
    if not (repo / ".venv" / "bin" / "python").exists():
        parts += [Part(".venv (Python packages)", repo, 7 * GB), Part("pip's download cache", home, 3 * GB)]
    bins = cache / "bin"
    if not bins.is_dir() or sum(1 for _ in bins.iterdir()) < 4:
        parts += [Part("Go module and build caches", home, 4 * GB),
                  Part("control-plane binaries", cache, 1 * GB)]
    if not any((cache / "images").glob("runtime-cpu-*.oci.tar")):
        parts.append(Part("CPU runtime image (build store, wheelhouse, archive)", cache, 12 * GB))
    if not any((cache / "images").glob("operator-*.oci.tar")):
        # The gateway's pods run it: its dependency image 0.79 GB in the build store, wheelhouse 0.11 GB, archive
        # 0.28 GB (measured 5 Dec 2026), and its layers unpacked in the node's containerd (under 1 GB).
        parts.append(Part("operator image (the gateway's pods: build store, wheelhouse, archive)", cache, 2 * GB))
    if not (cache / "node" / "containerd-root").is_dir():
        parts.append(Part("real node's containerd (the imported image)", cache, 9 * GB))
    return parts


def shortfall(parts: Sequence[Part], free_bytes: Callable[[Path], int], device: Callable[[Path], int],
              margin_bytes: int = MARGIN_BYTES) -> list[str]:
    """One line per filesystem whose free space is less than its parts plus ``margin_bytes`` (pure given the two
    callables; empty when everything fits).

    Args:
        parts: What will be written (:func:`cold_parts`).
        free_bytes: Free bytes of the filesystem holding a folder.
        device: An identifier of the filesystem holding a folder (``st_dev``).
    """
    by_device: dict[int, list[Part]] = {}
    for part in parts:
        by_device.setdefault(device(part.where), []).append(part)
    out = []
    for group in by_device.values():
        need = sum(p.bytes_needed for p in group) + margin_bytes
        free = free_bytes(group[0].where)
        if free < need:
            what = ", ".join(f"{p.name} ~{p.bytes_needed / GB:.0f} GB in {p.where}" for p in group)
            out.append(f"needs about {need / GB:.0f} GB free ({what}, {margin_bytes / GB:.0f} GB to spare) and "
                       f"{free / GB:.1f} GB are free there")
    return out


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def main(env: Mapping[str, str] = os.environ) -> int:
    """Check and print the verdict: 0 when there is room (or the check is skipped), 1 otherwise."""
    if env.get("MODALSCALE_SKIP_DISK_CHECK") == "1":
        return 0
    repo = checkout.ROOT
    parts = cold_parts(repo, Path.home(), cache_dir())
    short = shortfall(parts, lambda p: shutil.disk_usage(_existing(p)).free, lambda p: _existing(p).stat().st_dev)
    if not short:
        return 0
    print("Not enough free disk for the demo's first run: " + "; ".join(short) + ". Free some space, or put the "
          "caches on a larger disk (MODALSCALE_CACHE_DIR, and HOME for pip's and Go's caches); "
          "MODALSCALE_SKIP_DISK_CHECK=1 runs anyway.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
