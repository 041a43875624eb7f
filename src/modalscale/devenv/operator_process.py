"""``modalscale operator`` as a child process with its own metrics and health ports (tests and the demo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from modalscale.runtime.server import free_port

RESYNC_S = 2.0
"""Resync period used by tests, in seconds."""


class OperatorProcess:
    """``modalscale operator`` as a child process with its own metrics port and log file."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None,
                 resync_s: float = RESYNC_S) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODALSCALE_") or k == "MODALSCALE_CACHE_DIR"}
        env.update({
            "KUBECONFIG": str(kubeconfig),
            "MODALSCALE_RESYNC_INTERVAL_SECONDS": str(resync_s),
            "MODALSCALE_CONFLICT_HOLD_SECONDS": "30",
            "MODALSCALE_METRICS_PORT": str(self.metrics_port),
            "MODALSCALE_HEALTH_PORT": str(self.health_port),
            **(extra_env or {}),
        })
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "modalscale.cli", "operator"], env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"operator not healthy within {timeout_s} s:\n{self.log()[-3000:]}")

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def peering_active(self) -> bool:
        """Whether this replica acts now under kopf peering: its log's latest peering verdict is "resumed" (kopf
        logs ``Resuming operations after the pause`` and ``Pausing operations in favour of ...``)."""
        log = self.log()
        return log.rfind("Resuming operations after the pause") > log.rfind("Pausing operations in favour of")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        self._log.close()

    def stop(self, grace_s: float = 20.0) -> bool:
        """SIGTERM the operator's process group and wait ``grace_s`` for it to exit, then SIGKILL it.

        Returns:
            True when it had exited already or exited on SIGTERM within ``grace_s`` (the chart gives the pod 30 s);
            False when it had to be killed (its shutdown hung: a test can say so).
        """
        clean = True
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                clean = False
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        return clean


