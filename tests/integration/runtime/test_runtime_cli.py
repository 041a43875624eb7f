"""`modalscale runtime serve --configmap-dir` runs the real tritonserver on a repository laid out like a mounted
ConfigMap and drains in-flight requests on SIGTERM;
`modalscale load` replays a trace CSV against it and reports per-modality counts."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modalscale.cli import main
from modalscale.runtime.client import AsyncMultimodalClient, MultimodalResult, scrape_metrics
from modalscale.runtime.repo_config import RuntimeConfig, build_repository, to_configmap_data
from modalscale.runtime.server import free_port
from modalscale.runtime.workload import photo_at


def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    repo = tmp_path_factory.mktemp("cli-repo")
    configmap = tmp_path_factory.mktemp("cli-configmap")  # what a mounted ConfigMap looks like: flat files
    cfg = RuntimeConfig(max_batch_size=4, preferred_batch_sizes=(2, 4), response_cache=True)
    for key, text in to_configmap_data(build_repository(cfg)).items():
        (configmap / key).write_text(text)
    log_path = tmp_path_factory.mktemp("cli-log") / "serve.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "modalscale.cli", "runtime", "serve", "--http-port", str(ports["http"]),
         "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"]), "--model-repository",
         str(repo), "--configmap-dir", str(configmap), "--exit-timeout-s", "60"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_until(lambda: _ready(ports["http"]) or proc.poll() is not None, 300, "runtime serve to be ready")
        assert proc.poll() is None, "runtime serve exited during start-up"
        assert 'max_batch_size: 4' in (repo / "multimodal_image" / "config.pbtxt").read_text()
        yield proc, ports, log_path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def test_configmap_repository_is_served_with_its_response_cache(served: tuple) -> None:
    _, ports, _ = served
    metrics = scrape_metrics(f"http://127.0.0.1:{ports['metrics']}/metrics")
    assert "nv_cache_num_entries" in metrics  # only exported when tritonserver got --cache-config
    assert 'nv_inference_request_success{model="multimodal_image_text",version="1"}' in metrics


def test_load_replays_a_trace_csv(served: tuple, tmp_path: Path) -> None:
    _, ports, _ = served
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,image_count,image_width,image_height,text_tokens\n"
                     "0.0,1,320,240,0\n0.1,0,0,0,12\n0.2,2,640,480,8\n0.3,0,0,0,3\n0.4,1,100,80,0\n")
    report = tmp_path / "report.json"
    code = main(["load", "--url", f"127.0.0.1:{ports['grpc']}", "--trace", str(trace), "--json", str(report)])
    assert code == 0
    stats = {s["modality"]: s for s in json.loads(report.read_text())["stats"]}
    assert {k: v["requests"] for k, v in stats.items()} == {"image": 2, "text": 2, "image_text": 1, "all": 5}
    assert all(v["errors"] == 0 for v in stats.values())
    assert stats["all"]["p50_ms"] <= stats["all"]["p99_ms"]
    # runtime serve exports Triton's latency quantiles, as the operator's pods do (the autoscaler's observed p95).
    # Triton 2.51 exports no request summary for a model with the response cache on (here the router), so the
    # modality models carry them.
    metrics = scrape_metrics(f"http://127.0.0.1:{ports['metrics']}/metrics")
    for model in ("multimodal_image", "multimodal_text", "multimodal_image_text"):
        assert metrics.get(f'nv_inference_request_summary_us{{model="{model}",quantile="0.95",version="1"}}', 0) > 0


IN_FLIGHT = 10
"""Requests in flight at SIGTERM: with max_batch_size 4 they span three batches, so some wait in the router's
BLS call while others execute. Triton's own drain counts only queued requests; with ten in flight (and without
the runtime's drain step) it unloaded the models under the router and crashed (SIGSEGV) or hung, both seen."""


def test_sigterm_drains_in_flight_requests(served: tuple) -> None:
    proc, ports, log_path = served
    metrics_url = f"http://127.0.0.1:{ports['metrics']}/metrics"
    key = 'modalscale_requests_total{modality="image"}'

    async def run() -> list[object]:
        client = AsyncMultimodalClient(f"127.0.0.1:{ports['grpc']}", "grpc")
        try:
            base = scrape_metrics(metrics_url).get(key, 0.0)
            images = [photo_at(name, 384, 384) for name in ("astronaut", "coffee", "chelsea", "rocket")]
            tasks = [asyncio.create_task(client.infer(images=[img + bytes([k]) for img in images]))
                     for k in range(IN_FLIGHT)]
            deadline = time.monotonic() + 60
            while scrape_metrics(metrics_url).get(key, 0.0) < base + 1:  # the model has started on them
                assert time.monotonic() < deadline, "requests never reached the model"
                await asyncio.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await client.close()

    results = asyncio.run(run())
    code = proc.wait(120)
    log = log_path.read_text(errors="replace")  # serve's own lines and tritonserver's output (inherited)
    detail = f"{results}\n{log[-6000:]}"
    assert len(results) == IN_FLIGHT
    assert all(isinstance(r, MultimodalResult) and r.image_classes.shape == (4,) for r in results), detail
    assert code == 0, detail
    assert "Drain: Drained after" in log, detail
    assert not _ready(ports["http"])
