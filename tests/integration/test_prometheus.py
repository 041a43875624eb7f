"""The real Prometheus used by the autoscaler tests and the demo: it scrapes a target with our labels."""

from __future__ import annotations

from pathlib import Path

from prometheus_api_client import PrometheusConnect
from prometheus_client import CollectorRegistry, Counter, start_http_server

from modalscale.devenv.kube import wait_for
from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget


def test_prometheus_scrapes_a_target_with_inferenceservice_labels(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    counter = Counter("modalscale_probe_requests", "probe", ["modality"], registry=registry)
    counter.labels(modality="image").inc(7)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_address[1]
    prom = PrometheusProcess(tmp_path, scrape_interval_s=0.5)
    try:
        prom.start([ScrapeTarget(f"127.0.0.1:{port}", {"namespace": "ml", "inferenceservice": "vc"})])
        client = PrometheusConnect(url=prom.url, disable_ssl=True)
        query = 'modalscale_probe_requests_total{namespace="ml",inferenceservice="vc",modality="image"}'
        result = wait_for(lambda: client.custom_query(query), 30, "the probe series")
        assert float(result[0]["value"][1]) == 7.0
    finally:
        prom.stop()
        server.shutdown()
    assert prom.proc is not None and prom.proc.poll() is not None
