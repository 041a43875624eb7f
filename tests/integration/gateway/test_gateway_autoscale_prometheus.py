"""Predictive's inputs for a user's own model, read from the real gateway's series by a real Prometheus.

What is real: two tritonservers serving a Python-backend model that exports none of the runtime's feature series
(``byo``, conftest), the ``modalscale gateway`` process in front of them (``python -m modalscale.cli gateway
--endpoints ...``), the Prometheus server (``PrometheusProcess``) scraping both with the labels the chart's
PodMonitors give them (``namespace``, ``inferenceservice``, ``component``, ``pod``), and the operator's observation
code (``PrometheusReader`` -> ``parse_answers`` -> ``build_observation``). No Kubernetes cluster is started.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modalscale.api.conditions import NO_REQUEST_METRICS
from modalscale.autoscaler.features import Modality
from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget, gateway_target
from modalscale.gateway.features import features_from_http
from modalscale.operator.autoscale.observe import PrometheusReader, build_observation
from modalscale.runtime.server import TritonProcess, free_port
from tests.integration.gateway.conftest import MODEL, text_request
from tests.integration.gateway.test_gateway_proxy import binary_request, png

NS, SVC = "ml", "vc"
INFER = f"/v2/models/{MODEL}/infer"
MAX_INFLIGHT = 2


class GatewayProcess:
    """``modalscale gateway`` as its own process, with fixed replicas and at most :data:`MAX_INFLIGHT` in flight."""

    def __init__(self, replicas: tuple[TritonProcess, ...]) -> None:
        self.ports = {"HTTP": free_port(), "GRPC": free_port(), "METRICS": free_port()}
        env = {**os.environ, **{f"MODALSCALE_GATEWAY_{k}_PORT": str(v) for k, v in self.ports.items()},
               "MODALSCALE_GATEWAY_SHUTDOWN_DELAY_S": "0", "MODALSCALE_GATEWAY_MAX_INFLIGHT": str(MAX_INFLIGHT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "modalscale.cli", "gateway", "--endpoints",
             ",".join(f"{r.host}:{r.http_port}:{r.grpc_port}" for r in replicas)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.metrics}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"modalscale gateway did not get ready: {self.output}")
            time.sleep(0.2)

    output = ""

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.ports['HTTP']}"

    @property
    def metrics(self) -> str:
        return f"http://127.0.0.1:{self.ports['METRICS']}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.output, _ = self.proc.communicate(timeout=30)


@pytest.fixture
def stack(replicas: tuple[TritonProcess, TritonProcess], tmp_path: Path
          ) -> Iterator[tuple[GatewayProcess, PrometheusProcess]]:
    gateway = GatewayProcess(replicas)
    prom = PrometheusProcess(tmp_path / "prometheus", scrape_interval_s=1.0)
    try:
        targets = [ScrapeTarget(f"127.0.0.1:{r.metrics_port}", {"namespace": NS, "inferenceservice": SVC,
                                                                 "component": "inference-server",
                                                                 "pod": f"{SVC}-replica-{i}"})
                   for i, r in enumerate(replicas)]
        targets.append(gateway_target(f"127.0.0.1:{gateway.ports['METRICS']}", NS, SVC))
        prom.start(targets)
        yield gateway, prom
    finally:
        prom.stop()
        gateway.stop()


def _wait_scraped(prom: PrometheusProcess, seconds: float = 2.5) -> dt.datetime:
    """Wait until Prometheus has scraped every target (the first scrape can take seconds on a busy machine),
    then ``seconds`` more (two scrapes at 1 s); returns the time to evaluate the queries at."""
    deadline = time.monotonic() + 60
    while True:
        up = httpx.get(f"{prom.url}/api/v1/query", params={"query": f'up{{namespace="{NS}"}} == 1'}, timeout=5)
        if len(up.json()["data"]["result"]) == 3:
            break
        assert time.monotonic() < deadline, up.text
        time.sleep(0.2)
    time.sleep(seconds)
    return dt.datetime.now(dt.UTC)


def test_gateway_features_of_a_model_that_exports_none_reach_the_observation(
        stack: tuple[GatewayProcess, PrometheusProcess]) -> None:
    gateway, prom = stack
    image_body, image_headers = binary_request([png(64, 48), png(32, 24)])
    text_body = httpx.Request("POST", "http://x", json=text_request("the quick brown fox jumps over it")).content
    text_headers = {"Content-Type": "application/json"}
    tokens = features_from_http(text_body, text_headers).text_tokens
    assert tokens is not None and tokens > 0
    _wait_scraped(prom)  # the gateway's series exist (at 0) before the first request

    stop = threading.Event()
    sent = {"image": 0, "text": 0}

    def client(kind: str, body: bytes, headers: dict[str, str]) -> None:
        with httpx.Client(base_url=gateway.http, timeout=30) as c:
            while not stop.is_set():
                response = c.post(INFER, content=body, headers=headers)
                assert response.status_code == 200, response.text
                sent[kind] += 1
                time.sleep(0.1)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(client, "image", image_body, image_headers),
                   pool.submit(client, "text", text_body, text_headers)]
        time.sleep(12)
        stop.set()
        for f in futures:
            f.result()
    at = _wait_scraped(prom)
    reader = PrometheusReader(prom.url)
    reading = reader.read(NS, SVC, MODEL, at, gateway=True)
    assert reading.problem is None, reading.problem
    assert reading.workload is not None
    classes = {c.modality: c for c in reading.workload}
    assert set(classes) == {Modality.IMAGE, Modality.TEXT}
    image, text = classes[Modality.IMAGE], classes[Modality.TEXT]
    assert image.mean_image_count == pytest.approx(2.0)
    assert image.mean_image_pixels == pytest.approx(64 * 48 + 32 * 24)  # per request, from the PNG headers
    assert text.mean_text_tokens == pytest.approx(tokens)
    assert image.rate_rps > 0 and text.rate_rps > 0
    # Service time is Triton's compute of the user's model (the gateway's latency would include queueing).
    assert image.observed_service_ms is not None and image.observed_service_ms > 0
    assert reading.busy_erlangs is not None
    # Demand counted once: the gateway's request rate matches Triton's own count of the same requests.
    triton = reader.answers(NS, SVC, at, gateway=True)["nv_count"]
    triton_rps = sum(float(s["value"][1]) for s in triton)
    assert sum(c.rate_rps for c in reading.workload) == pytest.approx(triton_rps, rel=0.05)
    assert (reading.targets_up, reading.gateway_targets_up, reading.gateway_targets_total) == (2, 1, 1)
    obs = build_observation(reading, current_replicas=2, ready_replicas=2, slots_per_replica=2,
                            budget_max_replicas=None, now=at)
    assert obs.workload == reading.workload and (obs.targets_up, obs.targets_expected) == (3, 3)
    assert obs.in_flight_requests == 0 and obs.queued_requests == 0

    # Without the gateway, the replicas of this model export no feature series: nothing to read, hold.
    direct = reader.read(NS, SVC, MODEL, at, gateway=False)
    assert direct.workload is None and direct.problem is not None and direct.problem[0] == NO_REQUEST_METRICS


def test_a_queue_held_in_the_gateway_is_read_as_requests_in_flight(
        stack: tuple[GatewayProcess, PrometheusProcess]) -> None:
    """Eight 6 s requests against at most two in flight: six wait in the gateway, which the replicas never see."""
    gateway, prom = stack
    body = httpx.Request("POST", "http://x", json=text_request("sleep:6 slow")).content
    _wait_scraped(prom, 0.0)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(httpx.post, gateway.http + INFER, content=body,
                               headers={"Content-Type": "application/json"}, timeout=60) for _ in range(8)]
        deadline = time.monotonic() + 5
        while "modalscale_gateway_queue_depth 6.0" not in httpx.get(f"{gateway.metrics}/metrics", timeout=5).text:
            assert time.monotonic() < deadline, "six requests did not queue in the gateway"
            time.sleep(0.1)
        at = _wait_scraped(prom, 2.0)  # two scrapes of the queue (the first pair finishes 6 s after it started)
        reading = PrometheusReader(prom.url).read(NS, SVC, MODEL, at, gateway=True)
        codes = [f.result().status_code for f in futures]
    assert codes == [200] * 8
    assert reading.problem is None, reading.problem
    assert reading.extra["gateway_queue_requests"] == 6 and reading.extra["gateway_in_flight_requests"] == 2
    assert reading.in_flight_requests == 8
    assert reading.queued_requests is not None and reading.queued_requests >= 6
