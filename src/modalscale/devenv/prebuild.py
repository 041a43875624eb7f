"""Build the Go binaries a local cluster needs, with nothing but the standard library: ``scripts/demo.sh`` runs
this with the machine's own Python, in the background, while ``.venv`` installs, so that on a fresh machine the
control plane's cold Go builds (about 11 minutes on 2 cores) overlap the Python packages' download and install
(about 2 minutes) instead of following them.

Run as ``PYTHONPATH=src python3 -m modalscale.devenv.prebuild``. It builds, in the order the demo needs them,
Prometheus, the control plane (kube-apiserver, -controller-manager, -scheduler, kubectl), etcd and, where the
machine can run the real kubelet node, kubelet and kube-proxy; elsewhere KWOK (the demo's fake nodes are only its
fallback without a real node). Every build holds the cache's build lock
(:func:`modalscale.devenv.binaries.build_lock`), so the demo's own ``ensure_*`` calls wait for it, say so, and
then find the binaries cached; nothing is built twice. Exit status 0 when all are built or cached, 1 after the
first failed build (the demo then fails at the same build with the same message).

Importing this module (and :mod:`modalscale.devenv.binaries`) must need only the standard library:
``tests/unit/devenv/test_prebuild.py`` checks it with site-packages switched off.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from modalscale.devenv.binaries import (
    BuildError,
    ensure_binaries,
    ensure_kwok,
    ensure_node_binaries,
    ensure_prometheus,
)

REAL_NODE_TOOLS = ("containerd", "runc")
"""What the real node needs on the machine (Debian packages; :mod:`modalscale.devenv.realnode` checks the rest):
without them the cluster runs KWOK-only and KWOK, not kubelet, is built ahead."""


def wants_node_binaries(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the cluster will run the real kubelet node: ``MODALSCALE_REAL_NODE`` is not ``0`` and containerd
    and runc are installed."""
    return env.get("MODALSCALE_REAL_NODE", "") != "0" and all(shutil.which(t) for t in REAL_NODE_TOOLS)


def main() -> int:
    """Build (or find cached) every binary; print one line per step with the seconds since the start (nothing
    when every binary is cached)."""
    started = time.monotonic()
    said: list[str] = []

    def log(message: str) -> None:
        said.append(message)
        print(f"[background Go build, {time.monotonic() - started:.0f} s] {message}", flush=True)

    try:
        ensure_prometheus(log)
        ensure_binaries(log)
        if wants_node_binaries():
            ensure_node_binaries(log)
        else:
            ensure_kwok(log)
    except BuildError as exc:
        log(f"Build failed: {exc}")
        return 1
    if said:  # a warm machine (everything cached) prints nothing
        log("All Go binaries built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
