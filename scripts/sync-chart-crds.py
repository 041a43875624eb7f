#!/usr/bin/env python3
"""Copy the CRDs from ``crds/`` (the single source) into the CRD chart, byte for byte.

Why a copy: Helm can only read files inside a chart (``.Files``), and ``crds/`` lives at the top of the
repository. ``charts/modalscale-crds/templates/crds.yaml`` renders every file under
``charts/modalscale-crds/files/crds/`` as a template (so ``helm upgrade`` applies CRD changes, which Helm's
own ``crds/`` folder never does), adding only Helm's labels and the ``helm.sh/resource-policy: keep``
annotation. ``tests/unit/test_chart_crds.py`` fails when the copies differ from ``crds/``.

Usage::

    python scripts/sync-chart-crds.py          # rewrite the copies
    python scripts/sync-chart-crds.py --check  # exit 1 and list the differences, write nothing
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "crds"
TARGET = REPO / "charts" / "modalscale-crds" / "files" / "crds"
PATTERNS = ("*.yaml",)
"""CRD files copied (relative to ``crds/``): every top-level file, kopf's peering CRDs included, so that
``kubectl apply -f crds/`` and the chart install the same set; ``crds/examples/`` holds example objects, not CRDs."""


def expected_files(source: Path = SOURCE) -> dict[str, bytes]:
    """Relative path -> bytes of every CRD file the chart must carry."""
    files: dict[str, bytes] = {}
    for pattern in PATTERNS:
        for path in sorted(source.glob(pattern)):
            files[path.relative_to(source).as_posix()] = path.read_bytes()
    return files


def actual_files(target: Path = TARGET) -> dict[str, bytes]:
    """Relative path -> bytes of every YAML file now under the chart's ``files/crds/``."""
    if not target.is_dir():
        return {}
    return {p.relative_to(target).as_posix(): p.read_bytes() for p in sorted(target.rglob("*.yaml"))}


def differences(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """One line per missing, extra or changed file; empty when the chart is up to date."""
    want, have = expected_files(source), actual_files(target)
    out = [f"missing in chart: {name}" for name in sorted(want.keys() - have.keys())]
    out += [f"not in crds/ (stale copy): {name}" for name in sorted(have.keys() - want.keys())]
    out += [f"differs from crds/: {name}" for name in sorted(want.keys() & have.keys()) if want[name] != have[name]]
    return out


def sync(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """Make ``target`` an exact copy of the CRD files of ``source``; returns what changed."""
    changes = differences(source, target)
    want = expected_files(source)
    for name in actual_files(target).keys() - want.keys():
        (target / name).unlink()
    for folder in sorted((p for p in target.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()  # left empty by a stale copy
    for name, data in want.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report differences (exit 1 when any)")
    args = parser.parse_args(argv)
    if args.check:
        diff = differences()
        for line in diff:
            print(line)
        if diff:
            print("Run: python scripts/sync-chart-crds.py", file=sys.stderr)
        return 1 if diff else 0
    for line in sync():
        print(f"synced: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
