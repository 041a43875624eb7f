"""The autoscaler end to end, everything real: a control plane of its own (etcd, kube-apiserver, scheduler,
controller-manager, KWOK GPU nodes), the ``modalscale operator`` subprocess with ``MODALSCALE_PROMETHEUS_URL``, a
real Prometheus scraping a real ``tritonserver`` running the modalscale runtime, real requests (photographs,
texts), and a service-time model profiled from that server by ``modalscale profile``.

Local setup: the InferenceServices' pods are KWOK-simulated; ONE real Triton process serves every request. Which
InferenceService a request counts for is decided by the labels Prometheus gives the Triton scrape target
(``namespace``, ``inferenceservice``), as a ServiceMonitor would relabel them from the pod label in a cluster.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import concurrent.futures
import datetime as dt
import json
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from modalscale.devenv.cluster import LocalCluster, running_cluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget
from modalscale.runtime.repo_config import RuntimeConfig
from modalscale.runtime.server import TritonProcess, free_port, serve_config
from modalscale.runtime.workload import TraceRow
from tests.integration.operator.isvc_helpers import condition, create, get, make_isvc

REPO = Path(__file__).resolve().parents[3]
RATE_RPS = 1.5
"""Request rate of both the text-only and the image-heavy load."""
LOAD_S = 45.0
"""Length of each load, seconds (about 68 requests; the stable metrics window is 60 s)."""
INTERVAL_S = 5
"""decisionIntervalSeconds of the InferenceServices here (the CRD's minimum)."""
AUTOSCALER_REASONS = {"ScaleUpForSLO", "ScaleUpForBacklog", "SLOUnattainable", "ScaleUpForUtilization",
                      "ScaleUpForBurst", "ScaleUpForPanic", "ScaleUpForForecast", "LimitedByMaxStep", "BoundedByMax",
                      "ScaleUpStabilized", "Steady", "WithinTolerance", "HeldPartialMetrics"}


@pytest.fixture(scope="module")
def as_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("autoscale-cluster"), crd_dir=REPO / "crds") as c:
        yield c


@pytest.fixture(scope="module")
def as_api(as_cluster: LocalCluster) -> Iterator[Any]:
    api = as_cluster.api_client()
    yield api
    api.close()


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    """The runtime with its default configuration (router + per-modality batched models)."""
    repo = tmp_path_factory.mktemp("autoscale-triton-repo")
    log = tmp_path_factory.mktemp("autoscale-triton-log") / "tritonserver.log"
    with serve_config(RuntimeConfig(), repo, http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), log_path=log, exit_timeout_s=5) as server:
        yield server


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    prom = PrometheusProcess(tmp_path_factory.mktemp("autoscale-prometheus"), scrape_interval_s=1.0)
    prom.start([])
    yield prom
    prom.stop()


@pytest.fixture(scope="module")
def autoscale_operator(as_cluster: LocalCluster, prometheus: PrometheusProcess,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log = tmp_path_factory.mktemp("autoscale-operator") / "operator.log"
    op = OperatorProcess(as_cluster.kubeconfig, log, {"MODALSCALE_PROMETHEUS_URL": prometheus.url,
                                                      "MODALSCALE_STANDALONE": "true"})
    op.wait_healthy()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def profiled(triton: TritonProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``modalscale profile`` run against the test's Triton (small grid, to keep the test short)."""
    out = tmp_path_factory.mktemp("profile")
    cmd = [sys.executable, "-m", "modalscale.cli", "profile", "--url", triton.http_url, "--shapes", "15",
           "--repeats", "2", "--batched-shapes", "1", "--concurrency", "3", "--rounds", "1",
           "--image-sizes", "480x360,640x480,1024x768", "--images", "1,2", "--tokens", "8,32,64",
           "--out-csv", str(out / "profile.csv"), "--out-model", str(out / "model.skops"),
           "--json", str(out / "report.json"), "--configmap", "service-time", "--configmap-out", str(out / "cm.yaml")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"dir": out, "artifact": (out / "model.skops").read_bytes(), "stderr": proc.stderr,
            "report": json.loads((out / "report.json").read_text())}


def test_profile_measures_the_real_runtime_and_writes_a_model_that_beats_the_baselines(profiled: dict[str, Any]
                                                                                      ) -> None:
    import yaml

    from modalscale.autoscaler.features import features_from_columns
    from modalscale.autoscaler.profile_data import read_profile_csv
    from modalscale.autoscaler.regressor import loads_model

    table = read_profile_csv(profiled["dir"] / "profile.csv")
    assert set(table["modality"]) == {"text", "image", "image_text"}
    assert len(table["service_ms"]) >= 28 and (table["service_ms"] > 0).all()  # 30 sent one at a time (+ batched)
    assert (table["batch_size"] >= 1).all()
    model = loads_model(profiled["artifact"])
    two_images, text = model.predict(features_from_columns([2 * 640 * 480, 0], [2, 0], [0, 32]))
    assert two_images > text  # measured: an image takes far longer than a short text on this runtime
    (requests,) = [s for s in profiled["report"]["splits"] if s["name"] == "requests"]
    assert requests["results"]["model"]["mae_ms"] < requests["results"]["dummy_mean"]["mae_ms"]
    manifest = yaml.safe_load((profiled["dir"] / "cm.yaml").read_text())
    assert base64.b64decode(manifest["binaryData"]["model.skops"]) == profiled["artifact"]


# ---------------------------------------------------------------------------------------------- helpers
def _target(triton: TritonProcess, ns: str, name: str) -> ScrapeTarget:
    return ScrapeTarget(f"{triton.host}:{triton.metrics_port}", {"namespace": ns, "inferenceservice": name})


def _predictive(name: str, **scaling: Any) -> dict[str, Any]:
    """Predictive scaling with a low utilization target: one real Triton on a shared 2-core machine carries
    little load, and a low target maps that load to several replicas (text-only stays at 1: at 1.5 req/s it
    would need > 100 ms per request to exceed 0.15 erlangs)."""
    body = make_isvc(name, model={"costModelRef": {"name": "service-time"}})
    body["spec"]["scaling"] = {"mode": "Predictive", "minReplicas": 1, "maxReplicas": 6,
                               "decisionIntervalSeconds": INTERVAL_S, "targetP95LatencyMilliseconds": 3000,
                               "targetUtilizationPercent": 15, "scaleDownStabilizationSeconds": 0, **scaling}
    return body


def _configmap(api: Any, ns: str, name: str, artifact: bytes) -> None:
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": name}, "binaryData": {"model.skops": base64.b64encode(artifact).decode()}}
    try:
        core.create_namespaced_config_map(ns, body)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(name, ns, body)


def _autoscaler(api: Any, ns: str, name: str) -> dict[str, Any]:
    return (get(api, ns, name).get("status") or {}).get("autoscaler") or {}


def _decided_after(api: Any, ns: str, name: str, after: float, timeout_s: float = 60) -> dict[str, Any]:
    """The status once the autoscaler wrote a decision made after ``after`` (epoch seconds)."""
    def check() -> dict[str, Any] | None:
        status = get(api, ns, name).get("status") or {}
        stamp = (status.get("autoscaler") or {}).get("lastDecisionTime")
        if stamp and calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) >= after:
            return status
        return None
    return wait_for(check, timeout_s, f"an autoscaler decision on {ns}/{name}")


def _trace(image_heavy: bool, seed: int = 11) -> list[TraceRow]:
    """Poisson arrivals at RATE_RPS for LOAD_S: the same arrival times for both kinds of load."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    while True:
        t += rng.expovariate(RATE_RPS)
        if t >= LOAD_S:
            return rows
        rows.append(TraceRow(t, 3, 1024, 768, 0) if image_heavy else TraceRow(t, 0, 0, 0, 32))


def _run_load(triton: TritonProcess, api: Any, op: OperatorProcess, prometheus: PrometheusProcess, ns: str,
              name: str, image_heavy: bool) -> dict[str, Any]:
    """Replay the load in a thread while following the InferenceService; returns the peak desired replicas (with
    the decision behind it) and the peak offered load with the per-request service time of the class at that
    moment, both from the operator's metrics (exported every decision; status.autoscaler is rewritten only when
    the outcome changes), and what the operator's Prometheus reader sees once the load is over (``reading``)."""
    from modalscale.operator.autoscale.observe import PrometheusReader
    from modalscale.runtime.loadgen import replay

    peak: dict[str, Any] = {"desired": 0, "autoscaler": {}, "load_erlangs": 0.0, "service_ms": 0.0, "timeline": []}
    ids = {"namespace": ns, "inferenceservice": name}
    modality = "image" if image_heavy else "text"
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        load = pool.submit(lambda: asyncio.run(replay(_trace(image_heavy), triton.grpc_url)))
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            status = get(api, ns, name).get("status") or {}
            desired = int(status.get("desiredReplicas") or 0)
            auto = status.get("autoscaler") or {}
            if desired > peak["desired"]:
                peak.update(desired=desired, autoscaler=auto)
            load_erlangs = op.metric("modalscale_autoscaler_offered_load_erlangs", **ids)
            decisions = op.metric("modalscale_autoscaler_decisions_total", **ids)
            if not peak["timeline"] or peak["timeline"][-1][1:] != (desired, round(load_erlangs, 3), decisions):
                peak["timeline"].append((round(time.monotonic() - started, 1), desired, round(load_erlangs, 3),
                                         decisions))
            if load_erlangs > peak["load_erlangs"]:
                service_ms = op.metric("modalscale_autoscaler_predicted_service_milliseconds", modality=modality,
                                       **ids)
                peak.update(load_erlangs=load_erlangs, service_ms=service_ms)
            if deadline is None and load.done():
                deadline = time.monotonic() + 2 * INTERVAL_S  # decisions on the window's last requests
            time.sleep(0.5)
        report = load.result()
    assert all(s.errors == 0 for s in report.stats), report.errors
    peak["report"] = report
    # the whole load lies inside the 60 s stable window: LOAD_S plus the 2 decision intervals waited above
    peak["reading"] = PrometheusReader(prometheus.url).read(ns, name, "multimodal", dt.datetime.now(dt.UTC))
    return peak


# ---------------------------------------------------------------------------------------------- scaling
@pytest.fixture(scope="module")
def scaled(as_api: Any, triton: TritonProcess, prometheus: PrometheusProcess, autoscale_operator: OperatorProcess,
           profiled: dict[str, Any]) -> dict[str, Any]:
    """Text-only load on ``text-svc``, then image-heavy load at the same rate on ``image-svc``."""
    ns = "autoscale"
    client.CoreV1Api(as_api).create_namespace({"metadata": {"name": ns}})
    _configmap(as_api, ns, "service-time", profiled["artifact"])
    for name in ("text-svc", "image-svc"):
        create(as_api, ns, _predictive(name))

    # Phase A: the Triton target counts for text-svc. Probes and scrapes first: they are not demand.
    prometheus.set_targets([_target(triton, ns, "text-svc")])
    for _ in range(30):
        with urllib.request.urlopen(f"http://{triton.http_url}/v2/health/ready", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(triton.metrics_url, timeout=5) as r:
            assert r.status == 200
    probed = time.time()
    wait_for(lambda: _autoscaler(as_api, ns, "text-svc").get("metricsAvailable"), 90, "text-svc metrics")
    idle = _decided_after(as_api, ns, "text-svc", probed + 2)
    text = _run_load(triton, as_api, autoscale_operator, prometheus, ns, "text-svc", image_heavy=False)

    # Phase B: the same Triton now counts for image-svc.
    prometheus.set_targets([_target(triton, ns, "image-svc")])
    wait_for(lambda: _autoscaler(as_api, ns, "image-svc").get("metricsAvailable"), 90, "image-svc metrics")
    image = _run_load(triton, as_api, autoscale_operator, prometheus, ns, "image-svc", image_heavy=True)
    return {"ns": ns, "idle": idle, "text": text, "image": image}


@pytest.mark.timeout(1200)
def test_health_checks_and_scrapes_are_not_demand(scaled: dict[str, Any]) -> None:
    auto = scaled["idle"]["autoscaler"]
    assert auto["valid"] is True and auto["mode"] == "Predictive" and auto["metricsAvailable"] is True
    assert auto["features"].get("arrival_rps", 0.0) == 0.0, auto
    assert auto["reason"] in ("Steady", "ScaleDownIdle", "BoundedByMin")
    assert scaled["idle"]["desiredReplicas"] == 1


@pytest.mark.timeout(1200)
def test_image_heavy_load_raises_desired_replicas_more_than_text_only_at_the_same_rate(
        as_api: Any, scaled: dict[str, Any], autoscale_operator: OperatorProcess) -> None:
    text, image, ns = scaled["text"], scaled["image"], scaled["ns"]
    print(f"\nfigure: peak desired replicas at {RATE_RPS} req/s: text-only {text['desired']}, image-heavy "
          f"{image['desired']}; image-heavy decision: {image['autoscaler'].get('message')}")
    assert image["desired"] > text["desired"], (text["timeline"], image["timeline"])
    assert image["desired"] >= 2
    assert image["autoscaler"]["mode"] == "Predictive" and image["autoscaler"]["features"]["image_rps"] > 0
    # same rate, more work per request: the offered load and the per-request service time tell the classes apart
    assert image["load_erlangs"] > text["load_erlangs"] > 0
    image_ms, text_ms = image["service_ms"], text["service_ms"]
    assert image_ms > text_ms > 0, (image_ms, text_ms)
    print(f"figure: peak offered load text-only {text['load_erlangs']:.2f} erlangs ({text_ms:.0f} ms/request), "
          f"image-heavy {image['load_erlangs']:.2f} erlangs ({image_ms:.0f} ms/request)")
    # the Deployment followed (reconcile_isvc is the one writer) and the history names the autoscaler's reason
    history = (get(as_api, ns, "image-svc").get("status") or {}).get("scalingHistory") or []
    ups = [h for h in history if h["to"] >= 2 and h["to"] > h["from"]]
    assert ups and all(h["reason"] in AUTOSCALER_REASONS for h in ups), history
    assert autoscale_operator.metric("modalscale_autoscaler_decisions_total", namespace=ns,
                                     inferenceservice="image-svc") > 0


@pytest.mark.timeout(1200)
def test_prometheus_answers_give_each_class_its_own_features_and_a_p95(scaled: dict[str, Any]) -> None:
    """The runtime's modality-labelled histograms, read by the operator's own reader through the real Prometheus:
    the trace's features come back per class (3 images of 1024x768; 32 tokens), and Triton's p95 is there."""
    for load, modality in ((scaled["text"], "text"), (scaled["image"], "image")):
        reading = load["reading"]
        assert reading.problem is None, reading.problem
        assert [c.modality for c in reading.workload] == [modality], reading.workload
        (cls,) = reading.workload
        # rates of _sum and of the request counter come from the same scrapes; 2 % covers Prometheus clamping one
        # series' extrapolation at zero and not the other's
        if modality == "image":
            assert (cls.mean_image_count, cls.mean_text_tokens) == (pytest.approx(3, rel=0.02), 0.0)
            assert cls.mean_image_pixels == pytest.approx(3 * 1024 * 768, rel=0.02)
        else:
            assert (cls.mean_image_count, cls.mean_image_pixels) == (0.0, 0.0)
            assert cls.mean_text_tokens == pytest.approx(32, rel=0.02)
        # the per-bin request counts (15 s bins over 10 min, a subquery) answer from the real Prometheus: together
        # they hold the load's requests (increase() extrapolates each bin to its edges, hence the loose bounds)
        sent = load["report"].by_modality()["all"].requests
        assert reading.arrival_counts is not None and len(reading.arrival_counts) >= 2, reading.arrival_counts
        assert 0.5 * sent <= sum(reading.arrival_counts) <= 1.5 * sent, (sent, reading.arrival_counts)
        # --metrics-config=summary_latencies=true on the local server, as in the operator's pods
        assert reading.p95_latency_ms is not None and reading.p95_latency_ms > 0, reading.extra
        print(f"\nfigure: {modality} load: Triton p95 {reading.p95_latency_ms:.0f} ms, mean "
              f"{reading.extra.get('mean_latency_ms', float('nan')):.0f} ms")


@pytest.mark.timeout(1200)
def test_prometheus_stopped_holds_replicas_and_reports_metrics_unavailable(
        as_api: Any, scaled: dict[str, Any], prometheus: PrometheusProcess, triton: TritonProcess) -> None:
    ns = scaled["ns"]
    apps = client.AppsV1Api(as_api)
    before = int(apps.read_namespaced_deployment("image-svc", ns).spec.replicas)
    assert before >= 2  # still scaled for the image load that just ended
    prometheus.stop()
    stopped = time.time()
    try:
        c = wait_for(lambda: (lambda x: x if x and x["status"] == "False" else None)(
            condition(get(as_api, ns, "image-svc"), "MetricsAvailable")), 60, "MetricsAvailable=False")
        assert c["reason"] == "PrometheusUnreachable" and prometheus.url in c["message"]
        # several decisions later the replicas are what they were (scale-down stabilization is 0 s here, so
        # treating missing data as no traffic would have scaled down at once)
        status = _decided_after(as_api, ns, "image-svc", stopped + 3 * INTERVAL_S, timeout_s=90)
        assert status["autoscaler"]["valid"] is False and status["autoscaler"]["reason"] == "HeldNoMetrics"
        assert int(apps.read_namespaced_deployment("image-svc", ns).spec.replicas) == before
    finally:
        prometheus.start([_target(triton, ns, "image-svc")])


@pytest.mark.timeout(1200)
def test_corrupt_service_time_model_sets_the_condition_and_falls_back_to_utilization(
        as_api: Any, scaled: dict[str, Any], prometheus: PrometheusProcess, triton: TritonProcess,
        profiled: dict[str, Any]) -> None:
    ns = scaled["ns"]
    _configmap(as_api, ns, "broken", b"PK\x03\x04 this is not a model artifact")
    body = _predictive("fallback-svc", minReplicas=1)
    body["spec"]["model"] = {"costModelRef": {"name": "broken"}}
    create(as_api, ns, body)
    prometheus.set_targets([_target(triton, ns, "fallback-svc")])

    def fell_back() -> dict[str, Any] | None:
        obj = get(as_api, ns, "fallback-svc")
        c = condition(obj, "CostModelLoaded")
        auto = (obj.get("status") or {}).get("autoscaler") or {}
        return obj if c and c["status"] == "False" and auto.get("mode") == "Utilization" and auto.get("valid") else None

    obj = wait_for(fell_back, 90, "CostModelLoaded=False and the Utilization fallback")
    c = condition(obj, "CostModelLoaded")
    assert c["reason"] == "InvalidCostModel" and "falls back to the Utilization policy" in c["message"]
    assert "utilization_ratio" in obj["status"]["autoscaler"]["features"]

    # Repairing the ConfigMap (new resourceVersion) brings the Predictive policy back.
    _configmap(as_api, ns, "broken", profiled["artifact"])
    wait_for(lambda: (lambda o: condition(o, "CostModelLoaded")["status"] == "True"
                      and o["status"]["autoscaler"]["mode"] == "Predictive")(get(as_api, ns, "fallback-svc")),
             90, "CostModelLoaded=True and Predictive again")
