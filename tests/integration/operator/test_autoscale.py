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
import contextlib
import datetime as dt
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
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
from tests.integration.operator.meter import pod_lifetime_usd

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
    """The runtime with its default configuration (router + per-modality batched models). Exit timeout 1 s: at the
    module's end nothing is in flight, and unloading the Python-backend models ran past 5 s ("Exit timeout expired.
    Exiting immediately", 6 s of the module's teardown alone, 7 Dec 2026)."""
    repo = tmp_path_factory.mktemp("autoscale-triton-repo")
    log = tmp_path_factory.mktemp("autoscale-triton-log") / "tritonserver.log"
    with serve_config(RuntimeConfig(), repo, http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), log_path=log, exit_timeout_s=1) as server:
        _favour_cpu(server.pid)
        yield server


def _favour_cpu(pid: int | None, nice: int = -10) -> None:
    """Give the test's one real Triton (every thread of the server and its Python-backend stubs) a CFS weight about
    10x a default process's. Its observed service time is what the autoscaler sizes with; beside CI's other lanes on
    2 cores it rose 541 -> 633 ms within 15 s after the Prometheus-down scenario's recovery (ci69 at 7bc2a68,
    ``sized as observed``), and at the scenario's 15 % utilization target that crossed a replica (5 -> 6). As
    ``benchmarks/real_node.py --cpu-shares`` does for its pods."""
    todo = [pid] if pid is not None else []
    while todo:
        proc = todo.pop()
        for task in Path(f"/proc/{proc}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
                todo.extend(int(c) for c in (task / "children").read_text().split())


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
        # one real Triton serves the image-heavy load on the suite's shared CPUs: its queue passed the client's
        # default 60 s deadline when the machine was busier still (9 of ~68 requests, ci77: a cold run with two
        # benchmarks beside it). The deadline is the test's, not the product's (as in the Prometheus-outage test).
        load = pool.submit(lambda: asyncio.run(replay(_trace(image_heavy), triton.grpc_url, timeout_s=300.0)))
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
    # each new count posted its Event, with the decision's reason (what `kubectl describe` shows, as for an HPA);
    # Events go through the operator's queue after the status, so the last one may come a little after it
    def scale_ups() -> tuple[list[tuple[int, int, str]], list[str]]:
        events = client.CoreV1Api(as_api).list_namespaced_event(
            ns, field_selector="involvedObject.name=image-svc").items
        counts = [re.fullmatch(r"replicas: (\d+) -> (\d+) \((\w+)(: .*)?\)", e.message or "", re.S)
                  for e in events]
        return [(int(m[1]), int(m[2]), m[3]) for m in counts if m and int(m[2]) > int(m[1])], [
            e.message for e in events]

    with contextlib.suppress(TimeoutError):
        wait_for(lambda: max((after for _, after, _ in scale_ups()[0]), default=0) >= image["desired"] or None, 30,
                 "the Event of the highest count")
    scaled_up, messages = scale_ups()
    assert scaled_up and all(reason in AUTOSCALER_REASONS for *_, reason in scaled_up), messages
    assert max(after for _, after, _ in scaled_up) == image["desired"], (scaled_up, image["desired"])


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


OUTAGE_S = float(os.environ.get("MODALSCALE_CHAOS_PROMETHEUS_OUTAGE_S", "70"))
"""How long Prometheus stays down in the chaos test (issue 21's scenario 4 says 5 minutes; CI runs 70 s: more than
3 decision intervals and past the 60 s rate window, so every window after recovery straddles the gap)."""


class _Sampler:
    """Samples the InferenceService's desired replicas, its autoscaler's last decision and its Deployment's
    spec/status replicas every 0.5 s (wall-clock epoch seconds), in a thread."""

    def __init__(self, api: Any, ns: str, name: str) -> None:
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._args = (api, ns, name)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        api, ns, name = self._args
        apps = client.AppsV1Api(api)
        while not self._stop.is_set():
            try:
                status = get(api, ns, name).get("status") or {}
                d = apps.read_namespaced_deployment(name, ns, _request_timeout=(5, 5))
            except Exception as exc:  # the sampler outlives one failed read
                self.errors.append(repr(exc)[:200])
            else:
                auto = status.get("autoscaler") or {}
                self.samples.append({"t": time.time(), "desired": int(status.get("desiredReplicas") or 0),
                                     "spec": int(d.spec.replicas or 0), "actual": int(d.status.replicas or 0),
                                     "decided": auto.get("lastDecisionTime"), "valid": auto.get("valid"),
                                     "reason": auto.get("reason")})
            self._stop.wait(0.5)

    def between(self, t0: float, t1: float) -> list[dict[str, Any]]:
        return [s for s in self.samples if t0 <= s["t"] <= t1]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _stamp(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


@pytest.mark.timeout(1800)
def test_prometheus_down_under_a_load_change_holds_then_catches_up_in_one_decision_and_the_ledger_loses_nothing(
        as_api: Any, prometheus: PrometheusProcess, triton: TritonProcess, profiled: dict[str, Any],
        autoscale_operator: OperatorProcess) -> None:
    """Issue 21, chaos scenario 4 (KWOK replicas; one real Triton serves every request and a real Prometheus scrapes
    it): text-only load at 1.5 req/s holds the service at its text-only size (1 replica at the first decision; 1 or
    2 before the outage: 2 under the suite's own load on the 2-core Zen 1 of 3 Dec 2026, CI of c5fc583); Prometheus
    is stopped and the load turns
    image-heavy at the same rate while it is down (``OUTAGE_S``). Meanwhile the autoscaler holds
    (``MetricsAvailable=False``, ``PrometheusUnreachable``) and no replica count goes down; the BudgetPolicy's
    ledger, priced from the API server's pod records, charges the outage (= a meter of the pods' own start times x
    the catalog's price) and alerts its threshold during it. After Prometheus is back, every rate window that
    straddles the gap holds partial data: no decision acts on one, and the first decision on a whole window
    catches up to the image-heavy size in one step."""
    from modalscale.costmodel.catalog import ReplicaResources, load_catalog
    from modalscale.costmodel.ledger import parse_time
    from modalscale.devenv.receivers import ChatReceiver
    from modalscale.runtime.loadgen import replay
    from tests.integration.operator.test_budget import (
        get_policy,
        ledger_spent,
        make_policy,
        make_secret,
        percents_in,
        titles,
    )

    ns, name = "promdown", "outage-svc"
    core, apps = client.CoreV1Api(as_api), client.AppsV1Api(as_api)
    core.create_namespace({"metadata": {"name": ns}})
    _configmap(as_api, ns, "service-time", profiled["artifact"])
    # One step can reach maxReplicas. No demand forecast: the p95 target is the forecast horizon (a new replica's
    # start-up time, 60 s), so none is left to forecast over (``autoscaler.policy._forecast_need``). Its 1.3x peak
    # over 3 s spans of this Poisson load sat at a replica boundary under the suite's load (CI of 52c9c6d: 1 -> 4 on
    # the first whole window, 4 -> 5 ScaleUpForForecast a decision later), a step this test would read as a
    # staircase; the forecast has its own tests. The utilization target sizes both phases, as before. maxReplicas 3:
    # the image-heavy phase needs more (1.5 req/s x >= 0.3 s per request at 15 % in every CI log: 4 to 7 replicas,
    # with three 1024x768 images a request; two since 6 Dec 2026, below, so > 0.2 s).
    # One real Triton serves every KWOK replica, so the scale-up adds no capacity and the observed service time
    # can keep rising under the suite's load after it; with room above, sizing as observed then asked once more
    # (ci64, ci67, ci69, ci75: 1 -> 5 at 500 ms, then 5 -> 6 at 728 ms), a second step that is not a partial
    # window's. At the bound, the first decision on a whole window is the only scale-up whatever the contention.
    create(as_api, ns, _predictive(name, maxReplicas=3, maxStepReplicas=5, targetP95LatencyMilliseconds=60000))
    prometheus.set_targets([_target(triton, ns, name)])
    price = load_catalog().price_replica(ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"), "OnDemand")

    # One trace: text-only for PRE_S, then image-heavy (same arrival rate) through the outage and the recovery.
    # post_s: the first decision on a whole window comes 60 s after the recovery (+63 and +64 s in two runs of this
    # test alone at load 8-11, 7 Dec 2026; +68 s in the clean-clone run at 9024e7c) and the checks end 3 decisions
    # later (~+80 to +85 s); the trace runs to ~+102 s, so every window they read is whole image-heavy load. 110 s
    # ran that load ~25 s past the checks, and every request of it queued on the one Triton is waited for (at load
    # 11 the call took 473 s of its 220 s trace, the queue draining for ~250 s). pre_s stays: the arrivals of the
    # windows after the recovery are this seed's at these offsets (at pre_s 30, another stretch of the same trace
    # read 1.41 req/s at +74 s on a quiet machine, and the need fell to 2 replicas).
    pre_s, post_s = 40.0, 100.0
    rng, rows, t = random.Random(21), [], 0.0
    while t < pre_s + OUTAGE_S + post_s:
        t += rng.expovariate(RATE_RPS)
        # Two images a request: with three the one Triton ran at 0.98 erlangs (605 ms a request, beside two
        # simulator runs), so beside CI's other lanes its queue grew through the trace and drained for minutes after
        # it (the test took 404 s of its 220 s trace in ci85; in ci81 36 requests passed the 300 s deadline). Two
        # keep the premise (> 0.2 s a request sizes >= 3 replicas at 15 %: 218 ms with nothing else running, 262
        # beside two simulator runs, 6 Dec 2026, more beside CI's lanes) at about two thirds of the work.
        rows.append(TraceRow(t, 0, 0, 0, 32) if t < pre_s else TraceRow(t, 2, 1024, 768, 0))
    sampler = _Sampler(as_api, ns, name)
    with concurrent.futures.ThreadPoolExecutor(1) as pool, ChatReceiver("Slack") as slack:
        started = time.time()
        # One real Triton serves every KWOK replica, so the scale-up adds no capacity here: under the whole suite's
        # load its queue passed the client's default 60 s deadline (75 of 325 requests, CI of 1b842d2). The
        # deadline is the test's, not the product's: 300 s, so a request is lost only if it is never answered.
        load = pool.submit(lambda: asyncio.run(replay(rows, triton.grpc_url, timeout_s=300.0)))
        try:
            wait_for(lambda: _autoscaler(as_api, ns, name).get("metricsAvailable"), 30, f"{name} metrics")
            steady = get(as_api, ns, name)["status"]
            assert steady["autoscaler"]["valid"] and int(steady["desiredReplicas"]) == 1, steady["autoscaler"]
            pods = core.list_namespaced_pod(ns, label_selector=f"modalscale.io/inferenceservice={name}").items
            assert len(pods) == 1
            # The policy: its 50 % threshold falls in the middle of the outage at 1 replica; at 2 from here on (the
            # text-only size under load) it falls inside the outage still, as long as the stop comes within 35 s.
            now = dt.datetime.now(dt.UTC)
            spent_now = pod_lifetime_usd(pods, now, price)
            limit = 2 * (spent_now + price * Decimal(str(pre_s - (time.time() - started) + OUTAGE_S / 2)) / 3600)
            make_secret(as_api, ns, "slack-hook", url=slack.url)
            client.CustomObjectsApi(as_api).create_namespaced_custom_object(
                "modalscale.io", "v1alpha1", ns, "budgetpolicies", make_policy(
                    "budget", f"{limit:.6f}", [{"percent": 50, "actions": ["Alert"]}],
                    [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
            wait_for(lambda: (get_policy(as_api, ns, "budget").get("status") or {}).get("ledger"), 30, "a ledger")
            assert time.time() < started + pre_s - 3, "the text-only phase ran out before Prometheus was stopped"
            time.sleep(max(0.0, started + pre_s - 3 - time.time()))  # the trace's own clock: image load in 3 s

            ids = {"namespace": ns, "inferenceservice": name}
            prometheus.stop()
            stopped = time.time()
            decisions_before = autoscale_operator.metric("modalscale_autoscaler_decisions_total", **ids)
            c = wait_for(lambda: (lambda x: x if x and x["status"] == "False" else None)(
                condition(get(as_api, ns, name), "MetricsAvailable")), 30, "MetricsAvailable=False")
            assert c["reason"] == "PrometheusUnreachable" and prometheus.url in c["message"], c
            time.sleep(max(0.0, stopped + OUTAGE_S - time.time()))  # the outage: the sampler watches
            held = _autoscaler(as_api, ns, name)
            prometheus.start([_target(triton, ns, name)])
            restarted = time.time()

            during = sampler.between(stopped, restarted)
            assert len(during) >= OUTAGE_S, len(during)  # about 2 samples a second
            # the count at the stop never moves while Prometheus is down: one (desired, spec, actual), all equal
            held_at = {(s["desired"], s["spec"], s["actual"]) for s in during}
            assert len(held_at) == 1, during
            before = next(iter(held_at))[0]
            assert next(iter(held_at)) == (before, before, before) and 1 <= before <= 2, during
            assert held["valid"] is False and held["reason"] == "HeldNoMetrics", held
            decided = autoscale_operator.metric("modalscale_autoscaler_decisions_total", **ids) - decisions_before
            # it kept deciding and each decision held (measured: 10 in 70 s; a read of a stopped Prometheus takes
            # longer than an answer, so fewer than one per interval)
            assert decided >= OUTAGE_S / (2 * INTERVAL_S), decided

            # Catch-up: the Deployment grows once, then stays (several decisions later).
            wait_for(lambda: int(apps.read_namespaced_deployment(name, ns).spec.replicas) > 1, 120,
                     "the scale-up after recovery")
            at_growth = autoscale_operator.metric("modalscale_autoscaler_decisions_total", **ids)
            wait_for(lambda: autoscale_operator.metric("modalscale_autoscaler_decisions_total", **ids)
                     >= at_growth + 3, 60, "3 decisions after the scale-up")
            obj = get(as_api, ns, name)
            c = condition(obj, "MetricsAvailable")
            assert c and c["status"] == "True", c
            after = [h for h in obj["status"].get("scalingHistory") or [] if _stamp(h["time"]) >= restarted - 1]
            final = int(apps.read_namespaced_deployment(name, ns).spec.replicas)
            first_valid = next((s for s in sampler.between(restarted, time.time())
                                if s["valid"] and s["decided"] and _stamp(s["decided"]) >= restarted), None)
            assert first_valid is not None
            steps = [(h["from"], h["to"], h["reason"], f"+{_stamp(h['time']) - restarted:.0f} s") for h in after]
            print(f"\nfigure: Prometheus down {restarted - stopped:.1f} s ({len(during)} samples, replicas "
                  f"desired/spec/actual always {before}/{before}/{before}); after recovery: first valid decision at "
                  f"+{_stamp(first_valid['decided']) - restarted:.0f} s ({first_valid['reason']}, desired "
                  f"{first_valid['desired']}), scale-ups {steps}, final {final}")
            assert final > before  # image-heavy needs more than text-only at the same rate
            assert final == 3, (steps, after)  # the premise above: the image-heavy need is at or over maxReplicas
            # One decision catches up: a single scale-up, to at least where the service settles (no staircase). A
            # trim after it is not a catch-up step: the clean-clone run at 9024e7c went 1 -> 5 at +68 s, then 5 -> 4
            # at +73 s (the forecast at the 4/5 boundary; scale-down stabilization is 0 s here, the product's
            # default 60 s window would have held 5 for a minute).
            ups = [(h["from"], h["to"]) for h in after if h["to"] > h["from"]]
            for h in after:  # every step whole: pytest cuts the assertion's message (CI of ce73dc0 hid a 3 -> 6's)
                print(f"  {h['from']} -> {h['to']} {h['reason']} +{_stamp(h['time']) - restarted:.0f} s: "
                      f"{h['message']}")
            # the compact steps first: pytest cuts the middle of a long message (CI of 52c9c6d hid the first step's end)
            assert len(ups) == 1 and ups[0][0] == before and ups[0][1] >= final, (steps, after)
            assert all(h["to"] >= final for h in after), (steps, after)
            # never on a partial window: the first valid decision comes once the window no longer straddles the gap
            # (60 s after the first scrape, less the 2.5 scrape intervals a window's first sample may lag its start
            # and the second the decision time's format drops)
            assert _stamp(first_valid["decided"]) >= restarted + 60 - 2.5 - 1, (first_valid, restarted)
        finally:
            if prometheus.proc is None or prometheus.proc.poll() is not None:
                prometheus.start([_target(triton, ns, name)])
            sampler.stop()
        report = load.result()

        # The ledger charged the whole time, the outage included: each pod's own run x the catalog's price, never
        # less. A pod bound to its node but not yet given status.startTime by the kubelet when an evaluation lists
        # it is charged for that evaluation's whole interval (pod_runs: an unknown start is an upper bound), so the
        # catch-up's new pods may cost up to an interval each above their own runs: the evaluations run every
        # second, and under the suite's own load here (the 2-core Zen 1, CI of c5fc583's clean-clone run) 0.00517
        # USD = 31 replica-seconds over 5 new pods were seen; at most 15 s a pod is allowed.
        status = get_policy(as_api, ns, "budget")["status"]
        observed = parse_time(status["ledger"]["observedTime"], "observedTime")
        pods = core.list_namespaced_pod(ns, label_selector=f"modalscale.io/inferenceservice={name}").items
        meter = pod_lifetime_usd(pods, observed, price)
        spent = ledger_spent(status)
        assert spent >= meter - Decimal("0.000001"), (spent, meter)  # nothing lost
        assert spent - meter <= price * Decimal(15 * len(pods)) / 3600, (spent, meter, len(pods))
        assert observed.timestamp() >= restarted
        got = titles(slack)
        fifty = [r for r, t in zip(slack.accepted, got, strict=True) if percents_in([t]) == [50]]
        assert len(fifty) == 1, got  # delivered during the outage, once (a 300 s outage then crosses 100 % too)
        alert = fifty[0]
        assert stopped < alert.received_at < restarted, (stopped, alert.received_at, restarted)
        assert len(percents_in(got)) == len(set(percents_in(got))), got  # one alert per threshold
        sent = len(rows)
        answered = report.by_modality()["all"].requests - report.by_modality()["all"].errors
        print(f"figure: requests {sent} sent / {answered} answered / {report.by_modality()['all'].errors} failed; "
              f"ledger {spent} USD vs meter {meter:.9f} USD at {status['ledger']['observedTime']} "
              f"({len(pods)} pods); alerts {got}, the 50 % one at +{alert.received_at - stopped:.0f} s into the outage")
        assert answered == sent, report.errors


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
