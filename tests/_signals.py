"""SIGTERM runs the session's teardown (a pytest plugin, loaded by ``tests/conftest.py``).

By default SIGTERM ends Python at once: no fixture teardown, so a killed run (CI's time limit, ``scripts/test.sh``
stopping its lanes, ``kill``) would leave its session cluster running (apiserver, etcd, kubelet, containerd, pods).
This plugin turns SIGTERM into ``KeyboardInterrupt``, which pytest handles like Ctrl-C: it stops the run and tears
the fixtures down. A second SIGTERM within :data:`REPEAT_IGNORED_S` is ignored; a later one interrupts the
teardown as well.
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

import pytest

REPEAT_IGNORED_S = 10.0
"""A SIGTERM this soon after the first is ignored: one stop is often delivered twice (``kill -TERM -<group>`` and
``scripts/test.sh``'s trap forwarding it to each lane), and the second would break off the teardown the first
started, leaving the session cluster running. A later one still interrupts a teardown that hangs."""

_first_at: float | None = None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _first_at
    now = time.monotonic()
    if _first_at is not None and now - _first_at < REPEAT_IGNORED_S:
        print(f"signal {signal.Signals(signum).name} again {now - _first_at:.1f} s after the first: ignored, the "
              "teardown goes on", file=sys.stderr, flush=True)
        return
    _first_at = now
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}: stopping, tearing the fixtures down")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
