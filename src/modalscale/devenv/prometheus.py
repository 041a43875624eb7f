"""A real Prometheus server (Debian's ``prometheus`` package) for tests and the demo, on 127.0.0.1.

Scrape targets carry the labels a ServiceMonitor would give them in a cluster (``namespace``,
``inferenceservice``), so the autoscaler queries the same series locally and in production.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class PrometheusError(RuntimeError):
    """Prometheus is not installed or did not become ready; the message says how to fix it or where the log is."""


@dataclass(frozen=True)
class ScrapeTarget:
    """One ``host:port`` scraped at ``metrics_path`` with extra target ``labels``."""

    address: str
    labels: dict[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"
    job: str = "triton"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusProcess:
    """Prometheus with a generated config; ``start``/``stop``; targets can be replaced while it runs.

    Args:
        workdir: Directory for its config, TSDB and log.
        scrape_interval_s: Scrape and evaluation interval, seconds.
    """

    def __init__(self, workdir: Path, scrape_interval_s: float = 1.0, port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.scrape_interval_s = scrape_interval_s
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:9090``."""
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self, targets: list[ScrapeTarget]) -> None:
        jobs: dict[tuple[str, str], list[ScrapeTarget]] = {}
        for t in targets:
            jobs.setdefault((t.job, t.metrics_path), []).append(t)
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        cfg = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "scrape_configs": [
                {"job_name": f"{job}-{i}", "metrics_path": path,
                 "static_configs": [{"targets": [t.address], "labels": t.labels} for t in ts]}
                for i, ((job, path), ts) in enumerate(sorted(jobs.items()))
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    def start(self, targets: list[ScrapeTarget], timeout_s: float = 30.0) -> None:
        """Write the config and start the server; returns when ``/-/ready`` answers.

        Raises:
            PrometheusError: The binary is missing (``apt-get install prometheus``) or it did not get ready.
        """
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusError("the `prometheus` binary is not on PATH: apt-get install prometheus "
                                  "(scripts/test.sh and scripts/demo.sh do this when run as root)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_config(targets)
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--web.enable-lifecycle", "--storage.tsdb.retention.time=1d", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}; see "
                                      f"{self.workdir / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready in {timeout_s:.0f} s; see {self.workdir / 'prometheus.log'}")

    def set_targets(self, targets: list[ScrapeTarget]) -> None:
        """Replace the scrape targets of the running server (config reload)."""
        self._write_config(targets)
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            if r.status != 200:
                raise PrometheusError(f"reload answered {r.status}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
