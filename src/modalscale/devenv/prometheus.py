"""A real Prometheus server (Debian's ``prometheus`` package) for tests and the demo, on 127.0.0.1.

Scrape targets carry the labels a ServiceMonitor would give them in a cluster (``namespace``,
``inferenceservice``), so the autoscaler queries the same series locally and in production. Two ways to name
them: a static list (:class:`ScrapeTarget`, for processes on this machine) or discovery of the InferenceService
pods through ``kubernetes_sd_configs`` (role ``pod``) against the local apiserver (:class:`PodDiscovery`, for
pods on the real node), with the selection and relabelings of the chart's PodMonitors
(``charts/modalscale/templates/podmonitor.yaml``: one for the replicas, one for the request gateway's pods, one for
a staged service's image encoder pool).

Every target also carries ``component``: ``inference-server`` for a replica, ``gateway`` for the request gateway
(:data:`GATEWAY_COMPONENT`), ``image-encoder`` for an image encoder pool replica (:data:`IMAGE_ENCODER_COMPONENT`).
The gateway and the pool export the runtime's series under the same names, so the autoscaler tells the sources
apart by this label (``modalscale.operator.autoscale.observe``); a static :class:`ScrapeTarget` of a local gateway
or encoder pool process must set it (:func:`gateway_target`, :func:`image_encoder_target`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from modalscale.runtime.server import free_port


class PrometheusError(RuntimeError):
    """Prometheus is not installed or did not become ready; the message says how to fix it or where the log is."""


@dataclass(frozen=True)
class ScrapeTarget:
    """One ``host:port`` scraped at ``metrics_path`` with extra target ``labels``."""

    address: str
    labels: dict[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"
    job: str = "triton"


GATEWAY_COMPONENT = "gateway"
"""Value of the target label ``component`` on the request gateway's series (its pods' ``app.kubernetes.io/component``,
operator/isvc/objects.py gateway_labels); the replicas' is ``inference-server``."""
IMAGE_ENCODER_COMPONENT = "image-encoder"
"""Value of the target label ``component`` on an image encoder pool's series (its pods' ``app.kubernetes.io/component``,
operator/isvc/objects.py image_encoder_labels)."""
COMPONENT_RELABELING = ("__meta_kubernetes_pod_label_app_kubernetes_io_component", "component")
POD_MONITOR_RELABELINGS = (
    ("__meta_kubernetes_pod_label_modalscale_io_inferenceservice", "inferenceservice"),
    ("__meta_kubernetes_namespace", "namespace"),
    COMPONENT_RELABELING,
)
"""(source label, target label) of the replicas' PodMonitor relabelings, in its order."""
GATEWAY_POD_MONITOR_RELABELINGS = (
    ("__meta_kubernetes_pod_label_modalscale_io_gateway", "inferenceservice"),
    ("__meta_kubernetes_namespace", "namespace"),
    COMPONENT_RELABELING,
)
"""(source label, target label) of the gateway pods' PodMonitor relabelings, in its order."""
IMAGE_ENCODER_POD_MONITOR_RELABELINGS = (
    ("__meta_kubernetes_pod_label_modalscale_io_image_encoder", "inferenceservice"),
    ("__meta_kubernetes_namespace", "namespace"),
    COMPONENT_RELABELING,
)
"""(source label, target label) of the image encoder pools' PodMonitor relabelings, in its order."""
POD_MONITOR_MATCH_LABELS = {"app.kubernetes.io/managed-by": "modalscale-operator",
                            "app.kubernetes.io/part-of": "modalscale"}
"""Every PodMonitor's ``selector.matchLabels`` (operator/isvc/objects.py owned_labels, gateway_labels and
image_encoder_labels)."""
POD_MONITOR_REQUIRED_LABEL = "modalscale.io/inferenceservice"
"""The replicas' PodMonitor's ``matchExpressions``: this label must exist."""
GATEWAY_POD_MONITOR_REQUIRED_LABEL = "modalscale.io/gateway"
"""The gateway pods' PodMonitor's ``matchExpressions``: this label must exist."""
IMAGE_ENCODER_POD_MONITOR_REQUIRED_LABEL = "modalscale.io/image-encoder"
"""The image encoder pools' PodMonitor's ``matchExpressions``: this label must exist."""
POD_MONITOR_PORT = "metrics"
"""The container port the PodMonitor scrapes, by name."""


def _meta_label(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label)


@dataclass(frozen=True)
class PodDiscovery:
    """Discover pods through the apiserver like the chart's PodMonitor (``kubernetes_sd_configs``, role pod).

    Attributes:
        api_server: ``https://127.0.0.1:<port>`` of the apiserver.
        ca_file: CA that signed the apiserver's certificate.
        cert_file: Client certificate (any identity that may list and watch pods).
        key_file: Its key.
        namespaces: Namespaces to watch; empty = all (the PodMonitor's ``namespaceSelector.any``).
        metrics_path: Path scraped on the ``metrics`` port.
    """

    api_server: str
    ca_file: str
    cert_file: str
    key_file: str
    namespaces: tuple[str, ...] = ()
    metrics_path: str = "/metrics"

    @classmethod
    def for_cluster(cls, cluster: object, namespaces: tuple[str, ...] = ()) -> PodDiscovery:
        """Discovery against a :class:`modalscale.devenv.cluster.LocalCluster` with its admin certificate."""
        pki = Path(getattr(cluster, "workdir")) / "pki"
        return cls(api_server=str(getattr(cluster, "server_url")), ca_file=str(pki / "ca.crt"),
                   cert_file=str(pki / "admin.crt"), key_file=str(pki / "admin.key"), namespaces=namespaces)

    def scrape_configs(self) -> list[dict[str, object]]:
        """The ``scrape_configs`` entries of the chart's PodMonitors, in its order: the replicas' pods, the gateway's
        pods, the image encoder pools' pods."""
        return [self.scrape_config(),
                self.scrape_config("gateway-pods", GATEWAY_POD_MONITOR_REQUIRED_LABEL, GATEWAY_POD_MONITOR_RELABELINGS),
                self.scrape_config("image-encoder-pods", IMAGE_ENCODER_POD_MONITOR_REQUIRED_LABEL,
                                   IMAGE_ENCODER_POD_MONITOR_RELABELINGS)]

    def scrape_config(self, job_name: str = "inferenceservice-pods",
                      required_label: str = POD_MONITOR_REQUIRED_LABEL,
                      relabelings: tuple[tuple[str, str], ...] = POD_MONITOR_RELABELINGS) -> dict[str, object]:
        """One ``scrape_configs`` entry: keep one PodMonitor's pods (``required_label`` present) and port, then its
        ``relabelings`` ((source label, target label) pairs)."""
        sd: dict[str, object] = {
            "role": "pod", "api_server": self.api_server,
            "tls_config": {"ca_file": self.ca_file, "cert_file": self.cert_file, "key_file": self.key_file},
        }
        if self.namespaces:
            sd["namespaces"] = {"names": list(self.namespaces)}
        keep = [{"action": "keep", "source_labels": [f"__meta_kubernetes_pod_label_{_meta_label(k)}"], "regex": v}
                for k, v in POD_MONITOR_MATCH_LABELS.items()]
        keep.append({"action": "keep", "regex": "true", "source_labels": [
            f"__meta_kubernetes_pod_labelpresent_{_meta_label(required_label)}"]})
        keep.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                     "regex": POD_MONITOR_PORT})
        # As the Prometheus operator does for PodMonitors: finished pods are no targets.
        keep.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                     "regex": "(Failed|Succeeded)"})
        relabel = [{"source_labels": [src], "target_label": dst} for src, dst in relabelings]
        relabel.append({"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"})
        return {"job_name": job_name, "metrics_path": self.metrics_path,
                # Prometheus 3 refuses a scrape whose Content-Type is not a metrics format unless told a fallback.
                "fallback_scrape_protocol": "PrometheusText0.0.4",
                "kubernetes_sd_configs": [sd], "relabel_configs": keep + relabel}


def gateway_target(address: str, namespace: str, inferenceservice: str) -> ScrapeTarget:
    """A local ``modalscale gateway`` process's metrics port (``host:port``) as the chart's gateway PodMonitor labels
    it: ``namespace``, ``inferenceservice`` and ``component="gateway"``."""
    return ScrapeTarget(address, {"namespace": namespace, "inferenceservice": inferenceservice,
                                  "component": GATEWAY_COMPONENT}, job="gateway")


def image_encoder_target(address: str, namespace: str, inferenceservice: str) -> ScrapeTarget:
    """A local image encoder pool process's Triton metrics port (``host:port``, a ``modalscale runtime serve --stage
    image-encoder``) as the chart's image encoder PodMonitor labels it: ``namespace``, ``inferenceservice`` and
    ``component="image-encoder"``."""
    return ScrapeTarget(address, {"namespace": namespace, "inferenceservice": inferenceservice,
                                  "component": IMAGE_ENCODER_COMPONENT}, job="image-encoder")


class PrometheusProcess:
    """Prometheus with a generated config; ``start``/``stop``; targets can be replaced while it runs.

    Args:
        workdir: Directory for its config, TSDB and log.
        scrape_interval_s: Scrape and evaluation interval, seconds.
        rule_files: Prometheus rule files (recording/alerting rules, e.g. the chart's
            ``files/showback-rules.yaml``), loaded as the config's ``rule_files`` and evaluated every
            ``scrape_interval_s``.
    """

    def __init__(self, workdir: Path, scrape_interval_s: float = 1.0, port: int | None = None,
                 discovery: PodDiscovery | None = None, rule_files: tuple[Path, ...] = ()) -> None:
        self.workdir = Path(workdir)
        self.scrape_interval_s = scrape_interval_s
        self.port = port or free_port()
        self.discovery = discovery
        self.rule_files = tuple(Path(f).resolve() for f in rule_files)
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
        cfg: dict[str, object] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "rule_files": [str(f) for f in self.rule_files],
            "scrape_configs": [
                {"job_name": f"{job}-{i}", "metrics_path": path,
                 "static_configs": [{"targets": [t.address], "labels": t.labels} for t in ts]}
                for i, ((job, path), ts) in enumerate(sorted(jobs.items()))
            ] + (self.discovery.scrape_configs() if self.discovery else []),
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    def start(self, targets: list[ScrapeTarget] | None = None, timeout_s: float = 30.0) -> None:
        """Write the config (the static ``targets`` and the pod discovery, if any) and start the server; returns
        when ``/-/ready`` answers.

        With pod discovery the pinned Prometheus 3 built from the Go module proxy runs
        (:func:`modalscale.devenv.binaries.ensure_prometheus`; Debian's leaves Kubernetes discovery out).

        Raises:
            PrometheusError: The binary is missing (``apt-get install prometheus``) or it did not get ready.
            modalscale.devenv.binaries.BuildError: Building the discovery-capable Prometheus failed.
        """
        if self.discovery is not None:
            from modalscale.devenv.binaries import ensure_prometheus

            binary: str | None = str(ensure_prometheus())
        else:
            binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusError("the `prometheus` binary is not on PATH: apt-get install prometheus "
                                  "(scripts/test.sh and scripts/demo.sh do this when run as root)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_config(targets or [])
        log = open(self.workdir / "prometheus.log", "ab")  # handed to the child
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
