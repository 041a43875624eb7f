"""The demo: everything modalscale does, end to end, on one machine, with no cloud and no Docker.

1. A local control plane (etcd, kube-apiserver, controller-manager, scheduler, KWOK fake GPU nodes), the CRDs
   and the operator (a subprocess, as in a cluster).
2. A real ``tritonserver`` with the built-in multimodal model, and a real Prometheus scraping it with the labels
   a ServiceMonitor would give it (``namespace``, ``inferenceservice``).
3. An InferenceService (Predictive, p95 SLO) and a BudgetPolicy with a small limit, three thresholds and a Slack
   webhook pointed at a local receiver that prints what the chat room would see.
4. An arrival trace of real photographs (shipped inside Python packages, resized to the trace's resolutions)
   and real text prompts, whose modality mix shifts part-way through, replayed with tritonclient.
5. A live view; then a report (HTML with plots) and a summary; then everything started is stopped.

What is simulated is said so: the InferenceService's pods run on KWOK nodes (no containers), while all requests
are served by the one local Triton process. Replica counts are the operator's real decisions on real metrics;
the capacity they would add is not measured here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

NAMESPACE = "demo"
ISVC = "vision-chat"
POLICY = "demo-budget"
SLO_MS = 800
"""p95 latency target of the demo InferenceService, in ms (2-core CPU: a 4-image request takes ~0.5 s)."""
TARGET_UTILIZATION_PERCENT = 25
"""Utilization target: latency-sensitive GPU services run well below saturation."""
GPU_TYPE = "nvidia-l4"


@dataclass
class DemoConfig:
    """Options of ``modalscale demo``."""

    duration_s: float = 240.0
    """Length of the replayed trace, in seconds."""
    trace: Path | None = None
    """A trace CSV (arrival_s, image_count, image_width, image_height, text_tokens); default: generated."""
    rate_rps: float = 3.0
    """Request rate of the generated trace, req/s (kept constant across the modality shift)."""
    shift_at_ratio: float = 0.35
    """Where in the trace the modality mix shifts (fraction of the duration)."""
    report_dir: Path = field(default_factory=lambda: Path("reports"))
    """Where the report (``demo-report.html``) and the run's data (``demo-run.json``) go."""
    workdir: Path | None = None
    """State of the demo's cluster, Triton, Prometheus; default: a temporary directory."""
    live: bool = True
    """Show the live view (rich); off for CI logs."""


@dataclass
class Sample:
    """One sample of the live view (every ``SAMPLE_S`` seconds)."""

    t_s: float
    rps_by_modality: dict[str, float]
    p95_ms: float | None
    desired: int | None
    ready: int | None
    replicas_kwok: int | None
    reason: str
    spent_usd: str | None
    limit_usd: str
    budget_state: str
    alerts: int
    image_share: float


SAMPLE_S = 2.0


def default_trace(duration_s: float, rate_rps: float, shift_at_s: float) -> list[Any]:
    """The modality-shift trace (constant rate; 10 % -> 70 % image requests, 4x pixels) as runtime rows.

    The generator and its published parameters are in :func:`modalscale.autoscaler.traces.modality_shift_trace`.
    Requests are capped at 4 images so one 2-core CPU keeps up with the replay.
    """
    from modalscale.autoscaler.traces import modality_shift_trace
    from modalscale.runtime.workload import TraceRow

    tr = modality_shift_trace(duration_s=duration_s, rate_rps=rate_rps, shift_at_s=shift_at_s,
                              pixel_scale_after=4.0, random_state=7)
    rows = []
    for i in range(len(tr)):
        count = min(int(tr.image_count[i]), 4)
        rows.append(TraceRow(float(tr.arrival_s[i]), count, int(tr.image_width[i]) if count else 0,
                             int(tr.image_height[i]) if count else 0, int(tr.text_tokens[i])))
    return rows


class Replayer:
    """Open-loop replay of a trace against Triton over gRPC; records (arrival, latency, modality, ok)."""

    def __init__(self, rows: list[Any], grpc_url: str) -> None:
        self.rows = rows
        self.grpc_url = grpc_url
        self.records: list[tuple[float, float, str, bool]] = []
        self.lock = threading.Lock()
        self.started = threading.Event()
        self.t0 = 0.0

    def content(self, i: int) -> tuple[list[bytes] | None, str | None]:
        from modalscale.demo.prompts import prompt_for_tokens
        from modalscale.runtime.workload import photo_at, photo_names

        row = self.rows[i]
        names = photo_names()
        images = [photo_at(names[(i + k) % len(names)], max(row.image_width, 16), max(row.image_height, 16))
                  for k in range(row.image_count)] or None
        text = prompt_for_tokens(row.text_tokens) if row.text_tokens else None
        return images, text

    async def run(self) -> None:
        from modalscale.runtime.client import AsyncMultimodalClient, InferenceError

        contents = [self.content(i) for i in range(len(self.rows))]  # encode before the clock starts
        client = AsyncMultimodalClient(self.grpc_url, "grpc", "multimodal")
        gate = asyncio.Semaphore(64)
        self.t0 = time.monotonic()
        self.started.set()

        async def one(i: int) -> None:
            row = self.rows[i]
            scheduled = self.t0 + row.arrival_s
            await asyncio.sleep(max(0.0, scheduled - time.monotonic()))
            async with gate:
                images, text = contents[i]
                ok = True
                try:
                    await client.infer(images=images, text=text)
                except InferenceError:
                    ok = False
                with self.lock:
                    self.records.append((row.arrival_s, (time.monotonic() - scheduled) * 1000, row.modality, ok))

        try:
            await asyncio.gather(*(one(i) for i in range(len(self.rows))))
        finally:
            await client.close()

    def window(self, now_s: float, span_s: float = 20.0) -> list[tuple[float, float, str, bool]]:
        with self.lock:
            return [r for r in self.records if now_s - span_s <= r[0] + r[1] / 1000 <= now_s]


def _p95(values: list[float]) -> float | None:
    if len(values) < 5:
        return None
    return statistics.quantiles(values, n=20, method="inclusive")[18]


class Demo:
    """Owns every process the demo starts, and stops them all in :meth:`close`."""

    def __init__(self, cfg: DemoConfig, say: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.say = say
        self.stack = contextlib.ExitStack()
        self.workdir = cfg.workdir or Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="msdemo-")))
        self.samples: list[Sample] = []
        self.events: list[tuple[float, str]] = []

    # ----------------------------------------------------------------------------------------- set-up
    def start_cluster(self) -> None:
        from modalscale.devenv.cluster import LocalCluster
        from modalscale.devenv.kube import install_crds

        self.cluster = LocalCluster(self.workdir / "cluster", log=self.say)
        self.stack.callback(self.cluster.down)
        self.cluster.up(nodes=4, gpus_per_node=8, gpu_type=GPU_TYPE)
        repo_crds = Path(__file__).resolve().parents[3] / "crds"
        install_crds(self.cluster.api_client(), repo_crds)
        self.api = self.cluster.api_client()
        self.say(f"Control plane up: 4 KWOK fake nodes x 8 {GPU_TYPE} GPUs (simulated capacity)")

    def start_runtime(self) -> None:
        from modalscale.runtime.repo_config import RuntimeConfig, build_repository, server_arguments
        from modalscale.runtime.server import TritonProcess, free_port, write_repository

        cfg = RuntimeConfig(instance_count=1, intra_op_threads=1, max_batch_size=8,
                            preferred_batch_sizes=(4, 8), max_queue_delay_microseconds=2000)
        repo = write_repository(build_repository(cfg), self.workdir / "model-repository")
        self.triton = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                                    extra_args=server_arguments(cfg), log_path=self.workdir / "tritonserver.log")
        self.say("Starting tritonserver with the built-in multimodal model (EfficientNet-Lite0 + MiniLM)")
        self.triton.start(ready_timeout_s=300)
        self.stack.callback(self.triton.stop)
        self.say(f"Triton serving on gRPC {self.triton.grpc_url}")

    def start_prometheus(self) -> None:
        """Start scraping only after profiling, so that profile requests are never counted as demand."""
        from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget

        self.prom = PrometheusProcess(self.workdir / "prometheus", scrape_interval_s=1.0)
        self.prom.start([ScrapeTarget(f"127.0.0.1:{self.triton.metrics_port}",
                                      {"namespace": NAMESPACE, "inferenceservice": ISVC})])
        self.stack.callback(self.prom.stop)
        self.say(f"Prometheus at {self.prom.url} scraping Triton's metrics as {NAMESPACE}/{ISVC}")

    def start_receiver(self) -> None:
        from modalscale.devenv.receivers import ChatReceiver

        self.receiver = ChatReceiver("Slack").start()
        self.stack.callback(self.receiver.stop)
        self.say("Local Slack receiver listening (it prints what the chat room would see)")

    def start_operator(self) -> None:
        from modalscale.devenv.operator_process import OperatorProcess

        self.operator = OperatorProcess(self.cluster.kubeconfig, self.workdir / "operator.log",
                                        extra_env={"MODALSCALE_PROMETHEUS_URL": self.prom.url}, resync_s=5.0)
        self.stack.callback(self.operator.stop)
        self.operator.wait_healthy()
        self.say(f"Operator running (log: {self.workdir / 'operator.log'})")

    def apply_objects(self, artifact_b64: str, replica_usd_per_hour: Decimal, expected_hours: float) -> str:
        """Namespace, Secret, cost-model ConfigMap, InferenceService, BudgetPolicy. Returns the limit (USD)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        with contextlib.suppress(client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "demo-slack"},
                                                  "stringData": {"url": self.receiver.url}})
        core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "vision-chat-cost-model"},
                                                      "binaryData": {"model.skops": artifact_b64}})
        isvc = {
            "apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": ISVC, "labels": {"team": "demo"}},
            "spec": {
                "model": {"source": "BuiltIn", "name": "multimodal",
                          "costModelRef": {"name": "vision-chat-cost-model", "key": "model.skops"}},
                "runtime": {"instanceCount": 1, "maxBatchSize": 8,
                            "dynamicBatching": {"preferredBatchSizes": [4, 8], "maxQueueDelayMicroseconds": 2000}},
                "resources": {"cpu": "4", "memory": "16Gi", "gpu": {"count": 1, "type": GPU_TYPE}},
                "scaling": {"mode": "Predictive", "minReplicas": 1, "maxReplicas": 12,
                            "targetP95LatencyMilliseconds": SLO_MS, "decisionIntervalSeconds": 5,
                            "targetUtilizationPercent": TARGET_UTILIZATION_PERCENT,
                            "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 60},
            },
        }
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices", isvc)
        # A tiny budget at real catalog prices, sized so that it runs out before the trace ends: with one replica
        # before the shift (35 % of the run) and two after it, spend reaches the limit at ~78 % of the run
        # (at ~63 % with three).
        limit = (replica_usd_per_hour * Decimal(str(expected_hours)) * Decimal("1.2")).quantize(Decimal("0.0001"))
        policy = {
            "apiVersion": "modalscale.io/v1alpha1", "kind": "BudgetPolicy", "metadata": {"name": POLICY},
            "spec": {
                "selector": {"matchLabels": {"team": "demo"}},
                "period": "Daily", "timeZone": "UTC",
                "limit": {"amount": str(limit), "currency": "USD"},
                "thresholds": [{"percent": 50, "actions": ["Alert"]},
                               {"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
                               {"percent": 100, "actions": ["Alert", "ScaleDown"]}],
                "enforcement": {"floorReplicas": 1},
                "evaluationIntervalSeconds": 5,
                "notifications": [{"name": "demo-room", "type": "Slack", "secretRef": {"name": "demo-slack"}}],
            },
        }
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "budgetpolicies", policy)
        return str(limit)

    def fit_cost_model(self) -> str:
        """Profile the running Triton with ``modalscale profile`` and return the fitted artifact (skops zip)."""
        import subprocess
        import sys

        out = self.workdir / "profile"
        out.mkdir(exist_ok=True)
        self.say("Profiling the real runtime with `modalscale profile` to fit the service-time model")
        proc = subprocess.run(
            [sys.executable, "-m", "modalscale.cli", "profile", "--url", self.triton.http_url, "--shapes", "24",
             "--repeats", "2", "--images", "1,2,4", "--tokens", "8,32,128", "--out-csv", str(out / "profile.csv"),
             "--out-model", str(out / "model.skops"), "--json", str(out / "evaluation.json")],
            capture_output=True, text=True, check=False, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"modalscale profile failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                               f"{proc.stderr[-2000:]}")
        self.say("Cost model fitted on the real runtime: " + " ".join(proc.stdout.strip().splitlines()[-3:]))
        return base64.b64encode((out / "model.skops").read_bytes()).decode()

    # ----------------------------------------------------------------------------------------- run
    def read_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        from kubernetes import client

        custom = client.CustomObjectsApi(self.api)
        isvc = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices", ISVC)
        pol = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "budgetpolicies", POLICY)
        return isvc, pol

    def rates(self) -> dict[str, float]:
        from prometheus_api_client import PrometheusConnect

        q = (f'sum by (modality) (rate(modalscale_requests_total{{namespace="{NAMESPACE}",'
             f'inferenceservice="{ISVC}"}}[20s]))')
        try:
            result = PrometheusConnect(url=self.prom.url, disable_ssl=True).custom_query(q)
        except Exception:  # noqa: BLE001 - the live view shows gaps; the report says so
            return {}
        return {r["metric"].get("modality", "?"): float(r["value"][1]) for r in result}

    def sample(self, replayer: Replayer, limit: str) -> Sample:
        now_s = time.monotonic() - replayer.t0
        recent = replayer.window(now_s)
        isvc, pol = self.read_state()
        st, pst = isvc.get("status") or {}, pol.get("status") or {}
        history = st.get("scalingHistory") or []
        images = [r for r in recent if r[2] != "text"]
        ledger = [Decimal(x["spent"]) for x in (pst.get("ledger") or {}).get("services") or [] if x.get("spent")]
        spent = format(sum(ledger), "f") if ledger else pst.get("spent")
        s = Sample(
            t_s=now_s, rps_by_modality=self.rates(), p95_ms=_p95([r[1] for r in recent if r[3]]),
            desired=st.get("desiredReplicas"), ready=st.get("readyReplicas"), replicas_kwok=st.get("replicas"),
            reason=(history[-1]["reason"] if history else ""), spent_usd=spent, limit_usd=limit,
            budget_state=pst.get("state", ""), alerts=len(self.receiver.accepted),
            image_share=(len(images) / len(recent)) if recent else 0.0,
        )
        self.samples.append(s)
        return s

    def close(self) -> None:
        self.stack.close()


def run_demo(cfg: DemoConfig, say: Callable[[str], None] = print) -> int:
    """Run the demo; returns the exit code (0 when every expected behaviour was observed)."""
    from modalscale.demo.report import Checks, write_report

    demo = Demo(cfg, say)
    try:
        demo.start_cluster()
        demo.start_runtime()
        artifact = demo.fit_cost_model()
        demo.start_prometheus()
        demo.start_receiver()
        demo.start_operator()
        if cfg.trace:
            from modalscale.runtime.workload import read_trace

            rows = read_trace(cfg.trace)
            shift_at = None
        else:
            shift_at = cfg.duration_s * cfg.shift_at_ratio
            rows = default_trace(cfg.duration_s, cfg.rate_rps, shift_at)
        duration = rows[-1].arrival_s if rows else 0.0
        price = _replica_price()
        limit = demo.apply_objects(artifact, price, duration / 3600)
        say(f"Applied InferenceService {NAMESPACE}/{ISVC} (Predictive, p95 SLO {SLO_MS} ms) and BudgetPolicy "
            f"{NAMESPACE}/{POLICY} (limit {limit} USD; one replica costs {price} USD/h at catalog prices)")
        say(f"Replaying {len(rows)} requests over {duration:.0f} s"
            + (f"; the modality mix shifts at {shift_at:.0f} s" if shift_at else ""))
        say("NOTE: the InferenceService's pods run on KWOK fake nodes (simulated capacity); every request is "
            "served by the one local Triton process. Replica counts are real decisions on real metrics.")
        replayer = Replayer(rows, demo.triton.grpc_url)
        thread = threading.Thread(target=lambda: asyncio.run(replayer.run()), daemon=True)
        thread.start()
        replayer.started.wait(timeout=600)
        from modalscale.demo.live import LiveView

        with LiveView(enabled=cfg.live, say=say) as view:
            while thread.is_alive():
                view.update(demo.sample(replayer, limit), demo.receiver)
                time.sleep(SAMPLE_S)
            # Let the last decisions and budget evaluations land: until the budget is exceeded and enforced,
            # at most 60 s after the trace.
            for _ in range(30):
                s = demo.sample(replayer, limit)
                view.update(s, demo.receiver)
                if s.budget_state == "Exceeded" and s.reason == "CappedByBudget":
                    break
                time.sleep(SAMPLE_S)
        isvc, pol = demo.read_state()
        checks = Checks.evaluate(isvc, pol, demo.receiver, shift_at, demo.samples)
        cfg.report_dir.mkdir(parents=True, exist_ok=True)
        report = write_report(cfg.report_dir, demo.samples, replayer.records, isvc, pol, demo.receiver, checks,
                              slo_ms=SLO_MS, shift_at_s=shift_at)
        say(checks.summary())
        say(f"Report: {report}")
        return 0 if checks.all_passed else 1
    finally:
        say("Stopping everything the demo started")
        demo.close()


def _replica_price() -> Decimal:
    from modalscale.costmodel.catalog import ReplicaResources, default_catalog

    return default_catalog().price_replica(ReplicaResources.from_quantities("4", "16Gi", 1, GPU_TYPE), "OnDemand")
