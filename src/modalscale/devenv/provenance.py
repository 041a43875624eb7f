"""Which code produced a benchmark's figures: the checkout's commit, and whether tracked files differ from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from modalscale.devenv import checkout

REPO = checkout.ROOT
"""The repository root of this checkout (src/modalscale/devenv/ is three levels below it)."""


def code_version(root: Path = REPO) -> str:
    """``<short commit>`` of the checkout at ``root``, with ``+dirty`` when any tracked file differs from it.

    Anywhere in the tree, not only the benchmark's own files: a figure depends on the runtime, the gateway, the
    policy and the benchmark alike (``gateway_capacity.py`` once printed a clean commit for a changed gateway,
    because its header looked at ``runtime/`` only). Untracked files do not count. Outside a git checkout (or
    without git): ``(not a git checkout: <root>)``; never raises.
    """
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=False, timeout=30)
        if sha.returncode != 0 or not sha.stdout.strip():
            return f"(not a git checkout: {root})"
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return f"(not a git checkout: {root})"
    return sha.stdout.strip() + ("+dirty" if status.stdout.strip() else "")
