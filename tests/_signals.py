"""SIGTERM runs the session's teardown (a pytest plugin, loaded by ``tests/conftest.py``).

By default SIGTERM ends Python at once: no fixture teardown, so a killed run (CI's time limit, ``scripts/test.sh``
stopping its lanes, ``kill``) would leave its session cluster running (apiserver, etcd, kubelet, containerd, pods).
This plugin turns SIGTERM into ``KeyboardInterrupt``, which pytest handles like Ctrl-C: it stops the run and tears
the fixtures down. A second SIGTERM during that teardown interrupts it as well.
"""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}: stopping, tearing the fixtures down")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
