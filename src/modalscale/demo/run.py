"""The demo: everything modalscale does, end to end, on one machine, with no cloud and no Docker.

1. A local control plane (etcd, kube-apiserver, controller-manager, scheduler), a real kubelet node (containerd,
   runc, CNI bridge, kube-proxy), the CRDs and the operator (a subprocess); KWOK fake GPU nodes only in the
   fallback below.
2. The CPU runtime image and the operator image (``modalscale images build``, cached by content hash) imported
   into the real node. The InferenceService is created at zero replicas with its request gateway in front (2 pods
   of the operator image); its first request is a start from zero, held by the gateway until the replica it asked
   for is Ready. The replicas run the runtime image, 450m CPU each (a fixed CFS slice per replica, up to 3 on this
   node). ``modalscale profile`` measures the first real replica through its Service and fits the service-time
   model; then a real Prometheus discovers the pods through the apiserver (``kubernetes_sd_configs``, role pod).
3. The InferenceService turns Predictive (p95 SLO) and a BudgetPolicy with a small limit, three thresholds and a
   Slack webhook pointed at a local receiver that prints what the chat room would see.
4. An arrival trace of real photographs and real text prompts, whose modality mix shifts part-way through,
   replayed open-loop through the Service's ClusterIP (kube-proxy) to the gateway, a new connection per request;
   the gateway sends each request to one replica (consistent hashing on its image, bounded load).
5. A live view; then a report (HTML with plots, the measured capacity of each scale-up, the start from zero, the
   requests each replica served, which nodes were real and which KWOK) and a summary; then everything started
   is stopped.

Where the machine cannot run a real node (not root, no containerd, ...) the demo falls back to the old KWOK-only
mode and says so loudly: pods on KWOK nodes, every request served by one local Triton process, no capacity
measured.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from modalscale.api.isvc_status import read_isvc_status
from modalscale.costmodel.budget.status import read_budget_status
from modalscale.costmodel.ledger import Ledger
from modalscale.devenv.checkout import source_root

NAMESPACE = "demo"
ISVC = "vision-chat"
POLICY = "demo-budget"
SLO_MS = 800
"""p95 latency target of the demo InferenceService, in ms."""
TARGET_UTILIZATION_PERCENT = 25
"""Utilization target of the KWOK-only fallback: latency-sensitive GPU services run well below saturation."""
REAL_TARGET_UTILIZATION_PERCENT = 60
"""Utilization target of the real replicas (``REPLICA_CPU`` each): three fit on the real node."""
GPU_TYPE = "nvidia-l4"
REPLICA_CPU = "450m"
"""CPU request and limit of each real replica (CFS quota): each replica adds a fixed 0.45 core. With the gateway's
two pods of ``GATEWAY_CPU`` the real node of a 2-core machine (1500m allocatable) holds all three: 3 x 450m +
2 x 50m = 1450m (three 500m replicas, the demo before the gateway, filled it)."""
REPLICA_MEMORY = "3Gi"
"""Memory request and limit of each real replica. 2Gi was seen to OOM-kill the Python backend stub (anon RSS
2.0 GB) under a backlog of post-shift requests (full batches of 8 requests with up to 4 large images each)."""
MAX_REAL_REPLICAS = 3
"""Replicas that fit on the real node of a 2-core machine (allocatable ~1500m) beside the gateway's pods."""
GATEWAY_REPLICAS = 2
"""Gateway pods of the real-node demo (the product's default: a PodDisruptionBudget keeps one)."""
GATEWAY_CPU = "50m"
"""CPU request of each gateway pod in the real-node demo (the default is 100m; the pods have no CPU limit and use
what they need: about 0.6-0.8 CPU-ms per request, docs/gateway.md). 50m leaves room for the third replica."""
HTTP_PORT = 8000
COLD_START_TIMEOUT_S = 300.0
"""Longest the demo's first request waits at zero replicas (the gateway's ``queue.timeoutSeconds``), seconds."""
FALLBACK_FAKE_NODES = 4
"""KWOK fake GPU nodes of the KWOK-only fallback (8 ``GPU_TYPE`` GPUs each); a real-node demo starts none."""
KWOK_RATE_RPS = 3.0
"""Default request rate of the KWOK-only fallback (one local Triton process), req/s."""
PROBE_S = 20.0
"""Seconds of each closed-loop capacity probe of the first replica (pre-shift and post-shift mix)."""
PROBE_CONCURRENCY = 8
"""Closed-loop workers of the capacity probe: the replica's largest batch (``maxBatchSize``), so it saturates."""
REUSE_IMAGE_ENV = "MODALSCALE_DEMO_REUSE_IMAGE"
"""Set to 1 to use the runtime and operator images already in the real node's containerd instead of building the
working tree's (for iterating on the demo: each image's content hash covers the whole package, so any edit rebuilds
them); when either is missing, both are built, and the demo says which was missing."""
ARMED_SLACK_S = 240.0
"""Real mode: seconds of trace past ``--duration`` that the replay may use while the budget story finishes
(:mod:`modalscale.demo.budget_story`); it stops ``STOP_AFTER_SCALE_DOWN_S`` after the budget's scale-down."""
STOP_AFTER_SCALE_DOWN_S = 20.0
"""Seconds of replay after the budget's scale-down to one replica (requests that meet the capped service)."""
REQUEST_TIMEOUT_S = 600.0
"""Client timeout of one request: an overloaded replica queues, it must not fail the request."""

CACHE_PHASE_REQUESTS = 60
"""Requests of the embedding-cache phase after the story (real mode): one image each, sent one at a time through
the Service (the gateway)."""
CACHE_PHASE_IMAGES = 8
"""Pictures the phase draws from (the demo's photographs at 640x480, then at 800x600), none sent before in the
run."""
CACHE_PHASE_ZIPF_ALPHA = 0.8
"""Exponent of the phase's Zipf-like popularity (P(rank r) proportional to 1 / r^alpha): web object requests follow
Zipf-like laws with alpha 0.64-0.83 (Breslau et al., "Web caching and Zipf-like distributions", INFOCOM 1999)."""


def profile_summary(report: dict[str, Any]) -> str:
    """One line from ``modalscale profile --json``'s report: the last held-out split's model MAPE against the best
    baseline's, and the model's MAPE by modality (the console showed the last 3 lines of profile's rich table: a
    baseline's row and a border). A report without splits says so."""
    splits = report.get("splits") or []
    if not splits:
        return f"{report.get('rows', '?')} rows, no held-out split evaluated"
    split = splits[-1]
    results = split.get("results") or {}
    model = results.get("model") or {}
    baselines = sorted(((v.get("mape_ratio", float("inf")), k) for k, v in results.items() if k != "model"))
    line = (f"held-out {split.get('name')} ({model.get('n', '?')} requests): model MAPE "
            f"{100 * model.get('mape_ratio', float('nan')):.1f} %")
    if baselines:
        line += f", best baseline {baselines[0][1]} {100 * baselines[0][0]:.1f} %"
    by = split.get("model_mape_by_modality") or {}
    if by:
        line += "; by modality: " + ", ".join(f"{m} {100 * v:.1f} %" for m, v in by.items())
    return line


@dataclass
class DemoConfig:
    """Options of ``modalscale demo``."""

    duration_s: float = 300.0
    """Length of the replayed trace, in seconds."""
    trace: Path | None = None
    """A trace CSV (arrival_s, image_count, image_width, image_height, text_tokens); default: generated."""
    rate_rps: float | None = None
    """Constant request rate of the generated trace, req/s. None: on the real node, a lower rate before the modality
    shift and a higher one after it, both sized from one replica's measured capacity
    (:func:`modalscale.demo.capacity.plan_offered_rate`); KWOK-only, ``KWOK_RATE_RPS``."""
    shift_at_ratio: float = 0.25
    """Where in the trace the modality mix shifts (fraction of the duration)."""
    report_dir: Path = field(default_factory=lambda: Path("reports"))
    """Where the report (``demo-report.html``) and the run's data (``demo-run.json``) go."""
    workdir: Path | None = None
    """State of the demo's cluster, Triton, Prometheus; default: a temporary directory."""
    live: bool = True
    """Show the live view (rich); off for CI logs."""
    real_node: bool | None = None
    """Run the pods on the real node: None = where the machine supports it (else KWOK-only, said loudly)."""
    autoscaler_on_s: float = 60.0
    """Real mode: seconds of replayed traffic before the InferenceService turns Predictive (one Fixed replica until
    then), so that the autoscaler's 60 s window holds traffic only. Turned on before the first request, its first
    windows saw the 0 -> rate ramp as a burst (arrival SCV 13.7, a 'peak' forecast 3.7x the 60 s mean) and scaled
    up at 0.07 erlangs, before the shift. The modality shift comes at least 60 s after this."""
    wait_real_node_s: float = 900.0
    """How long to wait for the machine's one real node while another cluster holds it, in seconds."""


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


COLD_SCALING: dict[str, Any] = {"mode": "Predictive", "minReplicas": 0, "maxReplicas": MAX_REAL_REPLICAS,
                                 "scaleToZeroAfterSeconds": 3600, "decisionIntervalSeconds": 300}
"""``spec.scaling`` the real-node demo creates its InferenceService with: at zero replicas, so that its first request
is a start from zero (the gateway holds it and asks the operator for a replica). Prometheus does not run yet, so the
autoscaler holds at what it has; once the request is answered the demo makes the service Fixed at one replica
(``FIRST_REPLICA_SCALING``) for profiling, and later Predictive (:meth:`Demo.turn_predictive`)."""
FIRST_REPLICA_SCALING: dict[str, Any] = {"mode": "Fixed", "replicas": 1, "minReplicas": 1,
                                         "maxReplicas": MAX_REAL_REPLICAS, "scaleToZeroAfterSeconds": None,
                                         "decisionIntervalSeconds": None}
"""``spec.scaling`` patched after the start from zero: one Fixed replica (``None`` removes a field)."""


def gateway_spec(real: bool) -> dict[str, Any]:
    """``spec.gateway`` of the demo's InferenceService, said explicitly (never the CRD's default by omission).

    On the real node the gateway is on (issue 19): ``GATEWAY_REPLICAS`` pods of ``GATEWAY_CPU`` beside the
    replicas, every request going Service -> gateway -> replica. In the KWOK-only fallback it is off: the replicas
    are fake pods and one local Triton process serves every request, so no gateway pod could run or reach it.
    """
    if not real:
        return {"enabled": False}
    return {"enabled": True, "replicas": GATEWAY_REPLICAS, "resources": {"cpu": GATEWAY_CPU},
            "queue": {"timeoutSeconds": int(COLD_START_TIMEOUT_S)}}


def default_trace(duration_s: float, rate_rps: float, shift_at_s: float,
                  rate_before_rps: float | None = None) -> list[Any]:
    """The modality-shift trace (10 % -> 70 % image requests, 4x pixels) as runtime rows: Poisson arrivals at
    ``rate_rps`` req/s, or before ``shift_at_s`` at ``rate_before_rps`` (<= ``rate_rps``; None: the same rate).

    The generator and its published parameters are in :func:`modalscale.autoscaler.traces.modality_shift_trace`;
    the lower pre-shift rate is the same Poisson process thinned (each pre-shift arrival kept with probability
    ``rate_before_rps / rate_rps``, which leaves a Poisson process at the lower rate). Requests are capped at 4
    images so one 2-core CPU keeps up with the replay.

    Raises:
        ValueError: ``rate_before_rps`` is not in (0, ``rate_rps``].
    """
    import numpy as np

    from modalscale.autoscaler.traces import modality_shift_trace
    from modalscale.runtime.workload import TraceRow

    if rate_before_rps is not None and not 0 < rate_before_rps <= rate_rps:
        raise ValueError(f"rate_before_rps must be in (0, rate_rps={rate_rps}], got {rate_before_rps}")
    tr = modality_shift_trace(duration_s=duration_s, rate_rps=rate_rps, shift_at_s=shift_at_s,
                              pixel_scale_after=4.0, random_state=7)
    keep = np.random.default_rng(11).random(len(tr)) < (rate_before_rps or rate_rps) / rate_rps
    rows = []
    for i in range(len(tr)):
        if tr.arrival_s[i] < shift_at_s and not keep[i]:
            continue
        count = min(int(tr.image_count[i]), 4)
        rows.append(TraceRow(float(tr.arrival_s[i]), count, int(tr.image_width[i]) if count else 0,
                             int(tr.image_height[i]) if count else 0, int(tr.text_tokens[i])))
    return rows


def shift_at_s(cfg: DemoConfig, real: bool) -> float:
    """When the generated trace's modality mix shifts, s: ``shift_at_ratio`` of the duration, and on the real node
    at least 60 s after the autoscaler turns on (``autoscaler_on_s``), so it runs a minute on the pre-shift mix.

    Raises:
        ValueError: the shift would leave less than half the trace after it.
    """
    shift = cfg.duration_s * cfg.shift_at_ratio
    if real:
        shift = max(shift, cfg.autoscaler_on_s + 60.0)
    if shift > cfg.duration_s / 2:
        raise ValueError(f"--duration {cfg.duration_s:.0f} s is too short: the modality shift comes at {shift:.0f} s "
                         f"(the autoscaler runs a minute before it); use --duration {2 * shift:.0f} or more")
    return shift


def rates_query(namespace: str, name: str, gateway: bool, window_s: int = 20) -> str:
    """PromQL of the live view's request rate by modality (req/s over ``window_s`` s), from one source only.

    The gateway exports the runtime's ``modalscale_requests_total`` under the same name and labels, so with the
    gateway on every request is counted twice, once by the gateway (``component="gateway"``) and once by the
    replica that served it; a sum over all series would double the rate. The autoscaler's rule
    (:mod:`modalscale.operator.autoscale.observe`): with ``spec.gateway.enabled`` the gateway's series, else the
    replicas' (``component!~"gateway|image-encoder"``, which also matches a target without the label, e.g. the
    KWOK-only fallback's static target, and leaves out a staged service's image encoder pool).
    """
    from modalscale.devenv.prometheus import GATEWAY_COMPONENT, IMAGE_ENCODER_COMPONENT

    source = (f'component="{GATEWAY_COMPONENT}"' if gateway
              else f'component!~"{GATEWAY_COMPONENT}|{IMAGE_ENCODER_COMPONENT}"')
    return (f'sum by (modality) (rate(modalscale_requests_total{{namespace="{namespace}",'
            f'inferenceservice="{name}",{source}}}[{window_s}s]))')


def served_queries(namespace: str, name: str, span_s: int) -> tuple[str, str]:
    """PromQL of what the replicas served and how the gateway chose them over the last ``span_s`` seconds: (1)
    requests answered by each replica pod (``sum by (pod)``), (2) the gateway's replica choices by policy
    (``affinity_hit``, ``affinity_spill``, ``least_outstanding``; ``sum by (policy)`` over its pods).

    Each counter series counts from its pod's start; its largest minus its smallest sample in the span is what it
    counted while Prometheus scraped it (a pod's requests before its first scrape, e.g. the first replica's
    profiling, are left out, as are those of a pod's last second before it went away). ``increase()`` would
    extrapolate to the window's edges instead."""
    from modalscale.devenv.prometheus import GATEWAY_COMPONENT, IMAGE_ENCODER_COMPONENT

    sel = f'namespace="{namespace}",inferenceservice="{name}"'
    replicas = f'modalscale_requests_total{{{sel},component!~"{GATEWAY_COMPONENT}|{IMAGE_ENCODER_COMPONENT}"}}'
    picks = f'modalscale_gateway_picks_total{{{sel},component="{GATEWAY_COMPONENT}"}}'

    def counted(metric: str, by: str) -> str:
        return f"sum by ({by}) (max_over_time({metric}[{span_s}s]) - min_over_time({metric}[{span_s}s]))"

    return counted(replicas, "pod"), counted(picks, "policy")


def request_content(row: Any, i: int, salt: bytes = b"") -> tuple[list[bytes] | None, str | None]:
    """The images (real photographs resized to the row's size, JPEG) and text of trace row ``row``, the ``i``-th.

    ``salt`` (non-empty): each image gets ``salt`` and ``i`` appended after its end (decoders ignore bytes after a
    JPEG's end-of-image marker), so no two requests of a run carry the same image bytes and the embedding cache,
    keyed on the bytes, never hits: a repeated photograph of the same size costs what a new one does."""
    from modalscale.demo.prompts import prompt_for_tokens
    from modalscale.runtime.workload import photo_at, photo_names

    names = photo_names()
    images = [photo_at(names[(i + k) % len(names)], max(row.image_width, 16), max(row.image_height, 16))
              for k in range(row.image_count)] or None
    if images is not None and salt:
        images = [distinct(data, salt, i) for data in images]
    text = prompt_for_tokens(row.text_tokens) if row.text_tokens else None
    return images, text


def distinct(image: bytes, salt: bytes, n: int) -> bytes:
    """``image`` with ``salt`` and ``n`` (8 bytes, big-endian) appended: other bytes, the same picture."""
    return image + salt + n.to_bytes(8, "big")


def zipf_draw(n: int, k: int, alpha: float, seed: int) -> list[int]:
    """``n`` ranks in ``[0, k)`` drawn independently with P(rank r) proportional to ``1 / (r + 1) ** alpha``.

    Raises:
        ValueError: ``n`` negative, ``k`` below 1 or ``alpha`` negative.
    """
    import random

    if n < 0 or k < 1 or alpha < 0:
        raise ValueError(f"zipf_draw: need n >= 0, k >= 1, alpha >= 0 (got n={n}, k={k}, alpha={alpha})")
    return random.Random(seed).choices(range(k), weights=[1 / (r + 1) ** alpha for r in range(k)], k=n)


def cache_lookups(metrics: dict[str, float]) -> tuple[float, float]:
    """``(hits, misses)`` of a replica's embedding cache from its parsed ``/metrics``
    (``modalscale_embedding_cache_lookups_total`` by ``result``, summed over its other labels; 0 when absent)."""
    from modalscale.runtime.model.metrics import EMBEDDING_CACHE_LOOKUPS_TOTAL

    def total(result: str) -> float:
        return sum(v for k, v in metrics.items()
                   if k.startswith(EMBEDDING_CACHE_LOOKUPS_TOTAL + "{") and f'result="{result}"' in k)

    return total("hit"), total("miss")


def cache_line(cache: dict[str, Any]) -> str:
    """One line on :meth:`Demo.cache_phase`'s record (``{}``: not run)."""
    if not cache:
        return "not measured"
    if "error" in cache:
        return f"not measured: {cache['error']}"
    by_pod = cache.get("by_pod") or {}
    hits = sum(v["hit"] for v in by_pod.values())
    lookups = sum(v["hit"] + v["miss"] for v in by_pod.values())
    pods = ", ".join(f"{pod} {v['hit']:.0f}/{v['hit'] + v['miss']:.0f}" for pod, v in sorted(by_pod.items()))
    return (f"{hits:.0f} hits of {lookups:.0f} image lookups on {cache['requests']} requests (one image each, "
            f"{cache['answered']} answered, {cache['failed']} failed; drawn Zipf alpha {cache['alpha']} from "
            f"{cache['images']} pictures never sent before, {cache['distinct']} of them drawn: at most "
            f"{cache['requests'] - cache['distinct']} hits, each one's first sight a miss); hits/lookups per replica "
            f"pod: {pods or 'none read'}")


def closed_loop_rps(url: str, contents: list[tuple[list[bytes] | None, str | None]], seconds: float,
                    concurrency: int) -> tuple[float, int, int]:
    """Closed-loop throughput at ``url`` (``host:port``, HTTP): ``concurrency`` workers send ``contents`` in turn
    (cycling; each send's images made distinct, :func:`distinct`), a new connection per request, for ``seconds``.
    Returns ``(answers per second, answered, failed)``; the rate divides the answers by the time until the last
    worker finished (its last request included)."""
    from modalscale.runtime.client import AsyncMultimodalClient

    async def go() -> tuple[float, int, int]:
        done, failed, nxt = [0], [0], [0]
        stop = time.monotonic() + seconds
        salt = os.urandom(8)  # every send's images distinct: no embedding-cache hit when the contents cycle

        async def worker() -> None:
            while time.monotonic() < stop:
                images, text = contents[nxt[0] % len(contents)]
                if images is not None:
                    images = [distinct(data, salt, nxt[0]) for data in images]
                nxt[0] += 1
                client = AsyncMultimodalClient(url, "http", "multimodal", timeout_s=REQUEST_TIMEOUT_S)
                try:
                    await client.infer(images=images, text=text)
                    done[0] += 1
                except Exception:  # counted; the caller reports failures
                    failed[0] += 1
                finally:
                    await client.close()

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done[0] / (time.monotonic() - started), done[0], failed[0]

    return asyncio.run(go())


class Replayer:
    """Open-loop replay of a trace; records (arrival, latency, modality, ok) of every request.

    Args:
        rows: The trace.
        url: ``host:port`` of the server.
        protocol: ``http``: a new client (connection) per request, each through the Service (kube-proxy) to a
            gateway pod, which picks the replica (a direct Service: kube-proxy's current endpoints, so a new
            replica takes its share either way); ``grpc``: one shared channel (one local Triton).
    """

    def __init__(self, rows: list[Any], url: str, protocol: str = "grpc", salt: bytes = b"") -> None:
        self.rows = rows
        self.url = url
        self.protocol = protocol
        self.salt = salt
        self.records: list[tuple[float, float, str, bool]] = []
        self.errors: list[str] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.t0 = 0.0
        self.t0_wall = 0.0

    def content(self, i: int) -> tuple[list[bytes] | None, str | None]:
        return request_content(self.rows[i], i, self.salt)

    async def run(self) -> None:
        from modalscale.runtime.client import AsyncMultimodalClient

        contents = [self.content(i) for i in range(len(self.rows))]  # encode before the clock starts
        shared = AsyncMultimodalClient(self.url, "grpc", "multimodal") if self.protocol == "grpc" else None
        gate = asyncio.Semaphore(64 if shared else 512)
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        self.started.set()

        async def one(i: int) -> None:
            row = self.rows[i]
            scheduled = self.t0 + row.arrival_s
            async with gate:
                images, text = contents[i]
                ok = True
                with self.lock:
                    self.sent += 1
                try:
                    if shared is not None:
                        await shared.infer(images=images, text=text)
                    else:
                        client = AsyncMultimodalClient(self.url, "http", "multimodal", timeout_s=REQUEST_TIMEOUT_S)
                        try:
                            await client.infer(images=images, text=text)
                        finally:
                            await client.close()
                except Exception as exc:  # every failure is counted and reported
                    ok = False
                    with self.lock:
                        self.errors.append(f"{row.arrival_s:.1f} s: {type(exc).__name__}: {exc}"[:300])
                with self.lock:
                    self.records.append((row.arrival_s, (time.monotonic() - scheduled) * 1000, row.modality, ok))

        tasks = []
        try:
            # One task per request, created at its arrival time (a sleeping task per row would hold the whole
            # trace in memory and could not be stopped); arrivals after :meth:`stop` are not sent.
            for i, row in enumerate(self.rows):
                delay = self.t0 + row.arrival_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.stopped.is_set():
                    break
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        finally:
            if shared is not None:
                await shared.close()

    def stop(self) -> None:
        """Send no request whose arrival is still to come (those in flight are answered and recorded)."""
        self.stopped.set()

    def window(self, now_s: float, span_s: float = 20.0) -> list[tuple[float, float, str, bool]]:
        with self.lock:
            return [r for r in self.records if now_s - span_s <= r[0] + r[1] / 1000 <= now_s]


def _p95(values: list[float]) -> float | None:
    if len(values) < 5:
        return None
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def _t(value: Any, t0_wall: float) -> float | None:
    """A Kubernetes timestamp (datetime) as seconds since the replay started."""
    return None if value is None else value.timestamp() - t0_wall


class Demo:
    """Owns every process the demo starts, and stops them all in :meth:`close`."""

    def __init__(self, cfg: DemoConfig, say: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.say = say
        self.stack = contextlib.ExitStack()
        self.workdir = cfg.workdir or Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="msdemo-")))
        self.samples: list[Sample] = []
        self.events: list[tuple[float, str]] = []
        self.real = False
        self.kwok_reason: str | None = None
        self.pods: dict[str, Any] = {}
        self.node_real: dict[str, bool] = {}
        self.timings: dict[str, float] = {}
        self.t0_wall = 0.0
        self.load_plan: Any = None
        self.image_build: Future[Any] | None = None
        self.prometheus_build: Future[Any] | None = None
        self.cold: dict[str, Any] = {}
        """Real mode: the start from zero (:meth:`cold_start`)."""
        self.salt = os.urandom(8)
        """The replay's images are made distinct with it (:func:`request_content`), and the cache phase's."""
        self.cache: dict[str, Any] = {}
        """Real mode: the embedding-cache phase after the story (:meth:`cache_phase`)."""

    # ----------------------------------------------------------------------------------------- set-up
    def start_cluster(self) -> None:
        from modalscale.devenv.cluster import LocalCluster
        from modalscale.devenv.kube import install_crds

        self.cluster = LocalCluster(self.workdir / "cluster", log=self.say)
        if self.cfg.real_node is not False:
            self.wait_for_real_node()
        self.stack.callback(self.cluster.down)
        started = time.monotonic()
        # No fake nodes up front: on a real node the story uses none, and KWOK (about 2 minutes of cold Go build)
        # is built and started only for the KWOK-only fallback, below.
        self.cluster.up(nodes=0, real_node=self.cfg.real_node)
        self.real = self.cluster.has_real_node
        self.kwok_reason = None if self.real else (self.cluster.real_node_status().get("reason") or "not running")
        if not self.real and self.cfg.real_node:
            raise RuntimeError(f"--real-node: this cluster runs no real node ({self.kwok_reason})")
        if not self.real:
            self.cluster.ensure_gpu_nodes(FALLBACK_FAKE_NODES, 8, GPU_TYPE)
        self.timings["cluster up"] = time.monotonic() - started
        repo_crds = source_root("modalscale demo") / "crds"
        install_crds(self.cluster.api_client(), repo_crds)
        self.api = self.cluster.api_client()
        self.say(f"Control plane up with the real kubelet node (containerd + runc, {REPLICA_CPU} per replica)"
                 if self.real
                 else f"Control plane up: {FALLBACK_FAKE_NODES} KWOK fake nodes x 8 {GPU_TYPE} GPUs (simulated)")
        if not self.real:
            self.say(kwok_banner(self.kwok_reason))

    def wait_for_real_node(self) -> None:
        """One real node per machine: while another cluster (a test session) runs it, wait for it up to
        ``cfg.wait_real_node_s`` rather than fall back to KWOK-only on a machine that can run one."""
        from modalscale.devenv.realnode import current_owner

        started = time.monotonic()
        deadline = started + self.cfg.wait_real_node_s
        owner = current_owner()
        if owner is not None:
            self.say(f"The machine's real node is held by another cluster ({owner}); waiting up to "
                     f"{self.cfg.wait_real_node_s:.0f} s for it")
        while owner is not None and time.monotonic() < deadline:
            time.sleep(3)
            owner = current_owner()
        if time.monotonic() - started > 1.0:
            self.timings["wait for the real node"] = time.monotonic() - started

    def start_builds(self) -> None:
        """Start, in background threads, the builds the real-node story needs and the cluster does not: the CPU
        runtime image, the operator image (the gateway's pods) and the Prometheus binary. They overlap the control
        plane's Go builds (the images' stages are mostly downloads, debootstrap and archive writing; Prometheus
        waits for the Go build lock, then builds while the cluster starts and the images are imported). Nothing
        starts when the cluster will be KWOK-only. A failed build raises at the step that needs it, as it would
        without the overlap."""
        from modalscale.devenv.binaries import ensure_prometheus
        from modalscale.devenv.cluster import REAL_NODE_ENV
        from modalscale.devenv.images import build_images
        from modalscale.devenv.realnode import RealNodeError, machine_support, real_node_plan

        try:
            real, _ = real_node_plan(self.cfg.real_node, os.environ.get(REAL_NODE_ENV, ""),
                                     [] if self.cfg.real_node is False else machine_support())
        except RealNodeError:
            return  # start_cluster raises the same error with its message
        if not real:
            return
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="demo-build")
        self.stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        self.started_builds_s = time.monotonic()
        if os.environ.get(REUSE_IMAGE_ENV) != "1":
            self.image_build = pool.submit(build_images, ["runtime-cpu", "operator"], log=self.say)
        self.prometheus_build = pool.submit(ensure_prometheus, log=self.say)

    def import_images(self) -> None:
        """Build the CPU runtime image and the operator image (the gateway's pods run it), cached by content hash
        and started early by :meth:`start_builds` when it ran, and import both into the real node's containerd."""
        from modalscale.devenv.images import (
            build_images,
            import_into_cluster,
            operator_reference,
            runtime_cpu_reference,
        )
        from modalscale.devenv.realnode import list_images, node_addresses, normalize_image_ref

        if os.environ.get(REUSE_IMAGE_ENV) == "1":
            refs = [runtime_cpu_reference(), operator_reference()]
            addresses = node_addresses(self.cluster.workdir)  # every real node's containerd
            missing = sorted({ref for a in addresses for ref in refs
                              if normalize_image_ref(ref) not in list_images(self.cluster.workdir, a)})
            if addresses and not missing:
                self.image_ref = refs[0]
                self.say(f"{REUSE_IMAGE_ENV}=1: reusing {' and '.join(refs)} as already imported into the real "
                         "node's containerd (they may predate the working tree; nothing was built)")
                return
            self.say(f"{REUSE_IMAGE_ENV}=1, but the real node's containerd lacks "
                     f"{', '.join(missing) or 'every image (no node address)'}: building both images")
        started = time.monotonic()
        if self.image_build is not None:
            images = self.image_build.result()
            self.timings["images build (waited for after the cluster)"] = time.monotonic() - started
        else:
            images = build_images(["runtime-cpu", "operator"], log=self.say)
            self.timings["images build"] = time.monotonic() - started
        seconds = 0.0
        for image in images:
            how = "cached" if image.cached else f"built in {image.build_s:.0f} s"
            self.say(f"Image {image.full_ref}: {image.size_bytes / 1e6:.0f} MB of layers, {how}")
            seconds += import_into_cluster(image, self.cluster.workdir, log=self.say)
        self.timings["images import"] = seconds
        self.say(f"Runtime and operator images in the real node's containerd ({seconds:.1f} s to import)")
        self.image_ref = images[0].ref

    def start_runtime(self) -> None:
        """KWOK-only fallback: one local tritonserver serves every request."""
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

    def prepare_prometheus(self) -> str:
        """Real mode: the Prometheus that will discover the pods, not started yet; returns its URL (for the
        operator, which starts before the first replica). Its binary is built (or taken from the cache) here, before
        the first replica starts: a cold build (about 3 min) after it was charged to the budget and the story."""
        from modalscale.devenv.binaries import ensure_prometheus
        from modalscale.devenv.prometheus import PodDiscovery, PrometheusProcess

        started = time.monotonic()
        if self.prometheus_build is not None:
            self.prometheus_build.result()
        ensure_prometheus(log=self.say)
        if time.monotonic() - started > 5.0:
            self.timings["Prometheus build (waited for)"] = time.monotonic() - started

        self.prom = PrometheusProcess(self.workdir / "prometheus", scrape_interval_s=1.0,
                                      discovery=PodDiscovery.for_cluster(self.cluster, (NAMESPACE,)))
        return self.prom.url

    def start_prometheus(self) -> None:
        """Start scraping only after profiling, so that profile requests are never counted as demand."""
        from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget

        self.prom_started_s = time.monotonic()
        if self.real:
            self.prom.start([])
            self.stack.callback(self.prom.stop)
            self.say(f"Prometheus at {self.prom.url} discovering the InferenceService's pods through the apiserver "
                     "(kubernetes_sd_configs, role pod)")
            return
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

    def start_operator(self, prometheus_url: str | None = None) -> None:
        from modalscale.devenv.operator_process import OperatorProcess

        env = {"MODALSCALE_PROMETHEUS_URL": prometheus_url} if prometheus_url else {}
        if self.real:  # the gateway's pods run the operator image the demo imported, by that name
            from modalscale.devenv.images import operator_reference

            env["MODALSCALE_GATEWAY_IMAGE"] = operator_reference()
        self.operator = OperatorProcess(self.cluster.kubeconfig, self.workdir / "operator.log", extra_env=env,
                                        resync_s=5.0)
        self.stack.callback(self.operator.stop)
        self.operator.wait_healthy()
        self.say(f"Operator running as a subprocess (log: {self.workdir / 'operator.log'})")

    def _isvc_body(self) -> dict[str, Any]:
        if self.real:
            from modalscale.devenv.realnode import real_node_placement

            image, _, version = self.image_ref.rpartition(":")
            return {
                "apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
                "metadata": {"name": ISVC, "labels": {"team": "demo"}},
                "spec": {
                    "model": {"source": "BuiltIn", "name": "multimodal"},
                    "runtime": {"image": image, "version": version, "instanceCount": 1, "intraOpThreads": 1,
                                "modalityAwareBatching": False, "maxBatchSize": 8, "embeddingCache": True,
                                "dynamicBatching": {"preferredBatchSizes": [4, 8],
                                                    "maxQueueDelayMicroseconds": 2000}},
                    "resources": {"cpu": REPLICA_CPU, "memory": REPLICA_MEMORY},
                    "placement": real_node_placement(),
                    "scaling": COLD_SCALING,
                    "gateway": gateway_spec(real=True),
                },
            }
        return {
            "apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": ISVC, "labels": {"team": "demo"}},
            "spec": {
                "model": {"source": "BuiltIn", "name": "multimodal",
                          "costModelRef": {"name": "vision-chat-service-time-model", "key": "model.skops"}},
                "runtime": {"instanceCount": 1, "maxBatchSize": 8,
                            "dynamicBatching": {"preferredBatchSizes": [4, 8], "maxQueueDelayMicroseconds": 2000}},
                "resources": {"cpu": "4", "memory": "16Gi", "gpu": {"count": 1, "type": GPU_TYPE}},
                "scaling": self._scaling(),
                "gateway": gateway_spec(real=False),
            },
        }

    def _scaling(self) -> dict[str, Any]:
        return {"mode": "Predictive", "minReplicas": 1, "maxReplicas": MAX_REAL_REPLICAS if self.real else 12,
                "targetP95LatencyMilliseconds": SLO_MS, "decisionIntervalSeconds": 5,
                "targetUtilizationPercent": REAL_TARGET_UTILIZATION_PERCENT if self.real
                else TARGET_UTILIZATION_PERCENT,
                "scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 60}

    def start_first_replica(self) -> str:
        """Real mode: the InferenceService created at zero replicas with its gateway in front; its first request is
        a start from zero (:meth:`cold_start`); then one Fixed replica (``FIRST_REPLICA_SCALING``), profiled before
        it turns Predictive. Returns the Service's ``ClusterIP:port`` (the gateway's pods).

        Raises:
            RuntimeError: the gateway or the replica was not Ready in time (the message holds the status).
        """
        from kubernetes import client

        from modalscale.devenv.kube import wait_for

        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        apps = client.AppsV1Api(self.api)
        with contextlib.suppress(client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices",
                                               self._isvc_body())
        started = time.monotonic()

        def status() -> Any:
            return custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices",
                                                       ISVC).get("status")

        def gateway_serving() -> bool:
            with contextlib.suppress(client.exceptions.ApiException):
                svc = core.read_namespaced_service(ISVC, NAMESPACE)
                gw = core.list_namespaced_pod(NAMESPACE, label_selector=f"modalscale.io/gateway={ISVC}").items
                return (svc.spec.selector == {"modalscale.io/gateway": ISVC}
                        and sum(1 for p in gw if _pod_ready(p)) == GATEWAY_REPLICAS
                        and apps.read_namespaced_deployment(ISVC, NAMESPACE).spec.replicas == 0)
            return False

        self.say(f"InferenceService {NAMESPACE}/{ISVC} created at zero replicas, its gateway in front "
                 f"({GATEWAY_REPLICAS} pods of {GATEWAY_CPU} CPU on the real node)")
        try:
            wait_for(gateway_serving, 600, "the gateway's pods Ready and the Service on them, zero replicas")
        except TimeoutError:
            raise RuntimeError(f"the gateway was not serving in 600 s; status: {status()}") from None
        self.timings["gateway Ready at zero replicas"] = time.monotonic() - started
        url = f"{core.read_namespaced_service(ISVC, NAMESPACE).spec.cluster_ip}:{HTTP_PORT}"
        self.cold_start(url)
        custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices", ISVC,
                                              {"spec": {"scaling": FIRST_REPLICA_SCALING}})

        def ready() -> bool:
            with contextlib.suppress(client.exceptions.ApiException):
                return (apps.read_namespaced_deployment(ISVC, NAMESPACE).status.ready_replicas or 0) >= 1
            return False

        try:
            wait_for(ready, 600, "the first runtime replica Ready")
        except TimeoutError:
            raise RuntimeError(f"first replica not Ready in 600 s; status: {status()}") from None
        self.timings["first replica Ready"] = time.monotonic() - started
        self.say(f"One Fixed replica ({REPLICA_CPU} CPU, {REPLICA_MEMORY}) serving behind the gateway; Service "
                 f"{url}")
        return url

    def cold_start(self, url: str) -> None:
        """Send one request (an image and text) through the Service while the service is at zero replicas: the
        gateway holds it and asks the operator for a replica (Knative's activator). Records in ``self.cold``: the
        request's latency, the replica pod's own time to Ready (first seen listed -> first seen Ready, 0.2 s polls,
        so it reads up to 0.2 s late) and the answer or the error; the demo's check judges it.

        Raises:
            RuntimeError: no answer and no replica ever Ready (with the pods' and Events' state).
        """
        from kubernetes import client

        from modalscale.runtime.client import MultimodalClient
        from modalscale.runtime.workload import photo_at, photo_names

        core = client.CoreV1Api(self.api)
        image = photo_at(photo_names()[0], 640, 480)
        result: dict[str, Any] = {}

        def send() -> None:
            t0 = time.monotonic()
            try:
                with MultimodalClient(url, model_name="multimodal", timeout_s=COLD_START_TIMEOUT_S + 30) as c:
                    c.infer(images=[image], text="a request sent at zero replicas")
                result["latency_s"] = time.monotonic() - t0
            except Exception as exc:  # judged by the check: the answer is what the demo shows
                result["error"] = f"{type(exc).__name__}: {exc}"[:300]

        self.say("Sending the first request at zero replicas: the gateway holds it and asks for a replica")
        thread = threading.Thread(target=send, daemon=True)
        sent = time.monotonic()
        thread.start()
        created: float | None = None
        ready: float | None = None
        # Until the answer, and until the pod was seen Ready (an answer can come before the next poll saw it: then
        # Ready reads up to one poll late, after the answer).
        while ((thread.is_alive() or (ready is None and "latency_s" in result))
               and time.monotonic() - sent < COLD_START_TIMEOUT_S + 60):
            with contextlib.suppress(client.exceptions.ApiException):
                pods = core.list_namespaced_pod(NAMESPACE,
                                                label_selector=f"modalscale.io/inferenceservice={ISVC}").items
                now = time.monotonic()
                if pods and created is None:
                    created = now
                if ready is None and any(_pod_ready(p) for p in pods):
                    ready = now
            time.sleep(0.2)
        thread.join(timeout=5)
        self.cold = {"sent_to_pod_listed_s": None if created is None else created - sent,
                     "pod_time_to_ready_s": None if created is None or ready is None else ready - created,
                     **result}
        if "latency_s" in result and self.cold["pod_time_to_ready_s"] is not None:
            self.cold["added_s"] = result["latency_s"] - self.cold["pod_time_to_ready_s"]
        self.timings["start from zero (first request answered)"] = time.monotonic() - sent
        self.say("Start from zero: " + cold_start_line(self.cold))
        if "latency_s" not in result and ready is None:
            # No replica came up: nothing after this can run; say what the pods and the service looked like now
            # rather than wait out the first replica's own timeout.
            from modalscale.devenv.kube import describe_workload

            raise RuntimeError("the start from zero got no replica Ready: " + cold_start_line(self.cold) + "\n"
                               + describe_workload(self.api, NAMESPACE, f"modalscale.io/inferenceservice={ISVC}"))

    def cache_phase(self, url: str) -> None:
        """Real mode, after the story: ``CACHE_PHASE_REQUESTS`` requests through the Service (the gateway), one at a
        time, each one picture drawn (:func:`zipf_draw`) from ``CACHE_PHASE_IMAGES`` never sent before; each
        Ready replica pod's own embedding-cache counters (:func:`cache_lookups`, scraped from the pod) before and
        after. Records in ``self.cache``: ``requests``, ``answered``, ``failed``, ``images``, ``alpha``,
        ``distinct`` (images drawn), ``by_pod`` (pod -> ``{"hit", "miss"}`` during the phase); ``error`` when the
        pods could not be read. Never raises: the demo's check judges it."""
        from kubernetes import client

        from modalscale.runtime.client import MultimodalClient, scrape_metrics
        from modalscale.runtime.workload import photo_at, photo_names

        core = client.CoreV1Api(self.api)

        def counters() -> dict[str, tuple[float, float]]:
            """Each Ready replica pod's (hits, misses); a pod whose metrics cannot be read is left out."""
            pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"modalscale.io/inferenceservice={ISVC}").items
            out = {}
            for p in pods:
                if _pod_ready(p) and p.metadata.deletion_timestamp is None:
                    with contextlib.suppress(Exception):  # gone between the listing and the scrape
                        out[p.metadata.name] = cache_lookups(scrape_metrics(f"http://{p.status.pod_ip}:8002/metrics"))
            return out

        names = photo_names()
        # The demo's photographs at 640x480, then again at 800x600: CACHE_PHASE_IMAGES pictures.
        images = [distinct(photo_at(names[j % len(names)], *((640, 480) if j < len(names) else (800, 600))),
                           self.salt + b"cache", j) for j in range(CACHE_PHASE_IMAGES)]
        draw = zipf_draw(CACHE_PHASE_REQUESTS, CACHE_PHASE_IMAGES, CACHE_PHASE_ZIPF_ALPHA, seed=0)
        record: dict[str, Any] = {"requests": len(draw), "answered": 0, "failed": 0, "images": CACHE_PHASE_IMAGES,
                                  "alpha": CACHE_PHASE_ZIPF_ALPHA, "distinct": len(set(draw))}
        started = time.monotonic()
        try:
            before = counters()
            with MultimodalClient(url, model_name="multimodal", timeout_s=REQUEST_TIMEOUT_S) as c:
                for rank in draw:
                    try:
                        c.infer(images=[images[rank]], text=None)
                        record["answered"] += 1
                    except Exception:  # counted; the check judges it
                        record["failed"] += 1
            after = counters()
        except Exception as exc:  # the pods or their metrics could not be read: the report says so
            self.cache = {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}
            return
        # A pod not read before the phase counts from 0 then; counters lower after than before (its container
        # restarted) count from 0 too.
        record["by_pod"] = {pod: {"hit": hit - (b[0] if (b := before.get(pod)) and b[0] <= hit else 0.0),
                                  "miss": miss - (b[1] if (b := before.get(pod)) and b[1] <= miss else 0.0)}
                            for pod, (hit, miss) in after.items()}
        self.cache = record
        self.timings["embedding-cache phase"] = time.monotonic() - started
        self.say("Embedding cache: " + cache_line(record))

    def apply_objects(self, artifact_b64: str, limit_usd: Decimal, scale_down_percent: int) -> str:
        """Secret, service-time-model ConfigMap, the InferenceService (created; in real mode given its service-time
        model, still Fixed at one replica: :meth:`turn_predictive` turns it Predictive once traffic runs), BudgetPolicy
        with ``limit_usd`` and thresholds 50 % (Alert), 80 % (CapReplicas 2) and ``scale_down_percent`` (ScaleDown).
        Returns the limit (USD)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        with contextlib.suppress(client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "demo-slack"},
                                                  "stringData": {"url": self.receiver.url}})
        core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "vision-chat-service-time-model"},
                                                      "binaryData": {"model.skops": artifact_b64}})
        if self.real:
            custom.patch_namespaced_custom_object(
                "modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices", ISVC,
                {"spec": {"model": {"costModelRef": {"name": "vision-chat-service-time-model", "key": "model.skops"}}}})
        else:
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices",
                                                   self._isvc_body())
        limit = limit_usd
        policy = {
            "apiVersion": "modalscale.io/v1alpha1", "kind": "BudgetPolicy", "metadata": {"name": POLICY},
            "spec": {
                "selector": {"matchLabels": {"team": "demo"}},
                "period": "Daily", "timeZone": "UTC",
                "limit": {"amount": str(limit), "currency": "USD"},
                "thresholds": [{"percent": 50, "actions": ["Alert"]},
                               {"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
                               {"percent": scale_down_percent, "actions": ["Alert", "ScaleDown"]}],
                "enforcement": {"floorReplicas": 1},
                "evaluationIntervalSeconds": 5,
                "notifications": [{"name": "demo-room", "type": "Slack", "secretRef": {"name": "demo-slack"}}],
            },
        }
        custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "budgetpolicies", policy)
        return str(limit)

    def spent_usd(self) -> Decimal | None:
        """The day's spend of the demo's BudgetPolicy as its ledger last reported it (None before the first
        evaluation)."""
        _, pol = self.read_state()
        pst = read_budget_status(pol)
        ledger = [e.spent_usd for e in (pst.ledger or Ledger()).entries]
        if ledger:
            return sum(ledger, Decimal(0))
        return pst.spent_usd or None

    def set_limit(self, limit_usd: Decimal) -> None:
        """Patch the BudgetPolicy's limit (what a FinOps owner tightening today's budget does)."""
        from kubernetes import client

        client.CustomObjectsApi(self.api).patch_namespaced_custom_object(
            "modalscale.io", "v1alpha1", NAMESPACE, "budgetpolicies", POLICY,
            {"spec": {"limit": {"amount": str(limit_usd), "currency": "USD"}}})

    def turn_predictive(self) -> None:
        """Real mode: the InferenceService's scaling turns Predictive (p95 SLO, up to ``MAX_REAL_REPLICAS``)."""
        from kubernetes import client

        client.CustomObjectsApi(self.api).patch_namespaced_custom_object(
            "modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices", ISVC,
            {"spec": {"scaling": dict(self._scaling(), replicas=None)}})

    def fit_service_time_model(self, http_url: str, shapes: int = 24) -> str:
        """Profile the runtime at ``http_url`` with ``modalscale profile``; return the fitted artifact (skops zip)."""
        import subprocess
        import sys

        out = self.workdir / "profile"
        out.mkdir(exist_ok=True)
        self.say(f"Profiling the real runtime at {http_url} with `modalscale profile` to fit the service-time model")
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "modalscale.cli", "profile", "--url", http_url, "--shapes", str(shapes),
             "--repeats", "2", "--images", "1,2,4", "--tokens", "8,32,128", "--out-csv", str(out / "profile.csv"),
             "--out-model", str(out / "model.skops"), "--json", str(out / "evaluation.json")],
            capture_output=True, text=True, check=False, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"modalscale profile failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                               f"{proc.stderr[-2000:]}")
        self.timings["profile"] = time.monotonic() - started
        import json

        self.say("Service-time model fitted on the real runtime: "
                 + profile_summary(json.loads((out / "evaluation.json").read_text(encoding="utf-8"))))
        return base64.b64encode((out / "model.skops").read_bytes()).decode()

    def plan_load(self, url: str, shift_at_s: float) -> Any:
        """Real mode: measure the first replica's capacity, closed loop through the Service (``PROBE_S`` s each on
        the trace's pre-shift and post-shift requests, every image distinct: no embedding-cache hit), and size the
        trace's rates from it (:func:`modalscale.demo.capacity.plan_offered_rate`). Returns the ``LoadPlan``.

        Raises:
            RuntimeError: a probe got no answer (the replica cannot serve; nothing to size the load from).
        """
        from modalscale.demo.capacity import plan_offered_rate

        nominal = default_trace(self.cfg.duration_s, KWOK_RATE_RPS, shift_at_s)
        capacity: dict[str, float] = {}
        for phase, rows in (("pre-shift", [r for r in nominal if r.arrival_s < shift_at_s]),
                            ("post-shift", [r for r in nominal if r.arrival_s >= shift_at_s])):
            offset = 0 if phase == "pre-shift" else len(nominal)
            contents = [request_content(r, offset + i) for i, r in enumerate(rows)]
            started = time.monotonic()
            rps, answered, failed = closed_loop_rps(url, contents, PROBE_S, PROBE_CONCURRENCY)
            self.timings[f"capacity probe ({phase})"] = time.monotonic() - started
            if answered == 0:
                raise RuntimeError(f"capacity probe ({phase} mix) at {url}: no request answered ({failed} failed)")
            capacity[phase] = rps
            self.say(f"One replica's capacity on the {phase} mix: {rps:.2f} req/s (closed loop x{PROBE_CONCURRENCY}, "
                     f"{answered} answered, {failed} failed in {PROBE_S:.0f} s; load {_load()})")
        plan = plan_offered_rate(capacity["pre-shift"], capacity["post-shift"])
        self.load_plan = plan
        from modalscale.demo.report import plan_summary

        self.say(f"Offered load: {plan_summary(plan)}")
        return plan

    # ----------------------------------------------------------------------------------------- run
    def read_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        from kubernetes import client

        custom = client.CustomObjectsApi(self.api)
        isvc = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "inferenceservices", ISVC)
        pol = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NAMESPACE, "budgetpolicies", POLICY)
        return isvc, pol

    def rates(self) -> dict[str, float]:
        from prometheus_api_client import PrometheusConnect

        q = rates_query(NAMESPACE, ISVC, gateway=self.real)
        try:
            result = PrometheusConnect(url=self.prom.url, disable_ssl=True).custom_query(q)
        except Exception:  # the live view shows gaps; the report says so
            return {}
        return {r["metric"].get("modality", "?"): float(r["value"][1]) for r in result}

    def served_by(self) -> tuple[dict[str, int], dict[str, int]]:
        """Real mode, at the end: requests each replica pod served and the gateway's replica choices by policy, from
        Prometheus (:func:`served_queries`); empty dicts when it could not be read (the report says so)."""
        from prometheus_api_client import PrometheusConnect

        span_s = max(60, int(time.monotonic() - self.prom_started_s) + 30)
        out: list[dict[str, int]] = []
        for q, label in zip(served_queries(NAMESPACE, ISVC, span_s), ("pod", "policy"), strict=True):
            try:
                result = PrometheusConnect(url=self.prom.url, disable_ssl=True).custom_query(q)
            except Exception:  # the report says it was not read
                out.append({})
                continue
            out.append({r["metric"].get(label, "?"): round(float(r["value"][1])) for r in result})
        return out[0], out[1]

    def nodes(self) -> list[tuple[str, bool]]:
        """Every node of the cluster as (name, real?)."""
        from kubernetes import client

        from modalscale.devenv.realnode import NODE_TYPE_LABEL, NODE_TYPE_REAL

        out = []
        for n in client.CoreV1Api(self.api).list_node().items:
            out.append((n.metadata.name, (n.metadata.labels or {}).get(NODE_TYPE_LABEL) == NODE_TYPE_REAL))
        self.node_real.update(dict(out))
        return out

    def track_pods(self, now_s: float) -> None:
        """Record each pod of the service: node, created, first Ready, deleted (seconds since the replay start)."""
        from kubernetes import client

        from modalscale.demo.capacity import PodRecord

        try:
            items = client.CoreV1Api(self.api).list_namespaced_pod(
                NAMESPACE, label_selector=f"modalscale.io/inferenceservice={ISVC}").items
        except Exception:  # a missed sample leaves the last one; the next one catches up
            return
        seen = set()
        for p in items:
            name = p.metadata.name
            seen.add(name)
            rec = self.pods.get(name)
            if rec is None:
                node = p.spec.node_name
                if node and node not in self.node_real:
                    self.nodes()
                rec = self.pods[name] = PodRecord(name, node, self.node_real.get(node) if node else None,
                                                  _t(p.metadata.creation_timestamp, self.t0_wall) or now_s)
            if rec.node is None and p.spec.node_name:
                if p.spec.node_name not in self.node_real:
                    self.nodes()
                rec.node, rec.node_real = p.spec.node_name, self.node_real.get(p.spec.node_name)
            if rec.ready_s is None:
                for c in (p.status.conditions or []) if p.status else []:
                    if c.type == "Ready" and c.status == "True":
                        rec.ready_s = _t(c.last_transition_time, self.t0_wall) or now_s
            if rec.deleted_s is None and p.metadata.deletion_timestamp is not None:
                rec.deleted_s = _t(p.metadata.deletion_timestamp, self.t0_wall)
        for name, rec in self.pods.items():
            if name not in seen and rec.deleted_s is None:
                rec.deleted_s = now_s

    def sample(self, replayer: Replayer, limit: str) -> Sample:
        now_s = time.monotonic() - replayer.t0
        recent = replayer.window(now_s)
        if self.real:
            self.track_pods(now_s)
        isvc, pol = self.read_state()
        st, pst = read_isvc_status(isvc), read_budget_status(pol)
        history = st.scaling_history or ()
        images = [r for r in recent if r[2] != "text"]
        ledger = [e.spent_usd for e in (pst.ledger or Ledger()).entries]
        spent = (format(sum(ledger), "f") if ledger
                 else None if pst.spent_usd is None else format(pst.spent_usd, "f"))
        s = Sample(
            t_s=now_s, rps_by_modality=self.rates(), p95_ms=_p95([r[1] for r in recent if r[3]]),
            desired=st.desired_replicas, ready=st.ready_replicas, replicas_kwok=st.replicas,
            reason=(history[-1].reason if history else ""), spent_usd=spent, limit_usd=limit,
            budget_state="" if pst.alert_state.state is None else pst.alert_state.state.value,
            alerts=len(self.receiver.accepted),
            image_share=(len(images) / len(recent)) if recent else 0.0,
        )
        self.samples.append(s)
        return s

    def close(self) -> None:
        self.stack.close()


def _load() -> str:
    import os

    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def kwok_banner(reason: str | None) -> str:
    """The loud notice of the KWOK-only fallback."""
    bar = "!" * 100
    return (f"{bar}\n!! KWOK-ONLY FALLBACK: this machine runs no real node ({reason}).\n"
            "!! The InferenceService's pods are KWOK fakes (no containers); every request is served by ONE local\n"
            "!! Triton process. Replica counts are real decisions on real metrics, but NO capacity is measured.\n"
            f"{bar}")


REAL_NOTE = (f"Pods run for real on the real kubelet node (CPU runtime image, {REPLICA_CPU} each); requests go "
             "through the Service's ClusterIP (kube-proxy) to the gateway, which picks a replica per request.")
KWOK_NOTE = "KWOK-ONLY FALLBACK: pods are simulated on KWOK nodes; requests are served by one local Triton process."


def run_demo(cfg: DemoConfig, say: Callable[[str], None] = print) -> int:
    """Run the demo; returns the exit code (0 when every expected behaviour was observed)."""
    from modalscale.demo import budget_story, capacity
    from modalscale.demo.report import Checks, write_report

    demo = Demo(cfg, say)
    started = time.monotonic()
    try:
        demo.start_builds()
        demo.start_cluster()
        if demo.real:
            demo.import_images()
            demo.start_operator(demo.prepare_prometheus())
            url = demo.start_first_replica()
            artifact = demo.fit_service_time_model(url)
            if cfg.trace is None and cfg.rate_rps is None:
                demo.plan_load(url, shift_at_s(cfg, real=True))
            demo.start_prometheus()
        else:
            demo.start_runtime()
            artifact = demo.fit_service_time_model(demo.triton.http_url)
            demo.start_prometheus()
            demo.start_operator(demo.prom.url)
        demo.start_receiver()
        if cfg.trace:
            from modalscale.runtime.workload import read_trace

            rows = read_trace(cfg.trace)
            shift_at = None
        else:
            shift_at = shift_at_s(cfg, demo.real)
            plan = demo.load_plan
            rate = cfg.rate_rps or (plan.rate_after_rps if plan else KWOK_RATE_RPS)
            rows = default_trace(cfg.duration_s, rate, shift_at, plan.rate_before_rps if plan else None)
        duration = rows[-1].arrival_s if rows else 0.0
        price = _replica_price(demo.real)
        story = demo.real and cfg.trace is None
        if story:
            # Real mode: the budget holds (no threshold reachable) while the scale-up is measured, then the demo
            # arms it from the spend at that moment (modalscale.demo.budget_story); the replay runs on past the
            # nominal duration until the budget's scale-down was seen (at most ARMED_SLACK_S more).
            nominal_s = duration
            rows = default_trace(cfg.duration_s + ARMED_SLACK_S, rate, shift_at,
                                 plan.rate_before_rps if plan else None)
            duration = rows[-1].arrival_s if rows else 0.0
            # The ledger charges the gateway's pods with the service (docs/budgets.md): the worst case holds them.
            worst_usd_per_hour = price * MAX_REAL_REPLICAS + _gateway_price() * GATEWAY_REPLICAS
            limit = budget_story.hold_limit_usd(worst_usd_per_hour, 1, time.monotonic() - started, duration + 60.0)
            scale_down_percent = budget_story.SCALE_DOWN_PERCENT
        else:
            # KWOK-only or a user's trace: a tiny budget at catalog prices that runs out before the trace ends.
            limit = (price * Decimal(str(duration / 3600)) * Decimal("1.2")).quantize(Decimal("0.000001"))
            scale_down_percent = 100
        limit_s = demo.apply_objects(artifact, limit, scale_down_percent)
        say(f"Applied InferenceService {NAMESPACE}/{ISVC} (Predictive, p95 SLO {SLO_MS} ms"
            + (f", from {cfg.autoscaler_on_s:.0f} s into the replay" if demo.real else "")
            + f") and BudgetPolicy {NAMESPACE}/{POLICY} (limit {limit_s} USD; one replica costs {price} USD/h at "
            "catalog prices" + ("; held out of reach until the scale-up is measured" if story else "") + ")")
        say(f"Replaying {len(rows)} requests over {duration:.0f} s"
            + (f" (at most; it stops {STOP_AFTER_SCALE_DOWN_S:.0f} s after the budget's scale-down)" if story else "")
            + (f"; the modality mix shifts at {shift_at:.0f} s" if shift_at else ""))
        say("NOTE: " + (REAL_NOTE if demo.real else KWOK_NOTE))
        if demo.real:
            replayer = Replayer(rows, url, "http", demo.salt)
        else:
            replayer = Replayer(rows, demo.triton.grpc_url, "grpc", demo.salt)
        thread = threading.Thread(target=lambda: asyncio.run(replayer.run()), daemon=True)
        thread.start()
        replayer.started.wait(timeout=600)
        demo.t0_wall = replayer.t0_wall
        from modalscale.demo.live import LiveView

        predictive = not demo.real  # KWOK-only: created Predictive
        armed = not story
        scaled_down_s: float | None = None
        with LiveView(enabled=cfg.live, say=say, note=REAL_NOTE if demo.real else KWOK_NOTE) as view:
            while thread.is_alive():
                s = demo.sample(replayer, limit_s)
                if not predictive and s.t_s >= cfg.autoscaler_on_s:
                    demo.turn_predictive()
                    predictive = True
                    demo.timings["autoscaler on (s into the replay)"] = s.t_s
                    say(f"t={s.t_s:.0f}s: InferenceService {NAMESPACE}/{ISVC} turned Predictive after "
                        f"{cfg.autoscaler_on_s:.0f} s of traffic on one Fixed replica")
                if not armed:
                    history = read_isvc_status(demo.read_state()[0]).scaling_history or ()
                    due, why = budget_story.arm_due(
                        capacity.scale_ups(history, demo.t0_wall, list(demo.pods.values())), s.t_s,
                        fallback_s=nominal_s - 30.0)
                    spent = demo.spent_usd() if due else None
                    if spent is not None and spent > 0:
                        limit = budget_story.armed_limit_usd(spent)
                        demo.set_limit(limit)
                        limit_s, armed = str(limit), True
                        demo.timings["budget armed (s into the replay)"] = s.t_s
                        say(f"t={s.t_s:.0f}s: {why}; today's limit lowered to {limit} USD (spent {spent} USD, "
                            f"{budget_story.ARMED_SPEND_SHARE:.0%}): the 80 % cap and the "
                            f"{budget_story.SCALE_DOWN_PERCENT} % scale-down follow within about "
                            f"{budget_story.seconds_to_scale_down(spent, price, budget_story.CAP_REPLICAS)} s")
                if armed and story and scaled_down_s is None and any(
                        h.to_replicas == 1 for h in capacity.budget_scale_downs(
                            read_isvc_status(demo.read_state()[0]).scaling_history or ())):
                    scaled_down_s = s.t_s
                    say(f"t={s.t_s:.0f}s: the budget scaled the service down to one replica; the replay stops in "
                        f"{STOP_AFTER_SCALE_DOWN_S:.0f} s")
                if scaled_down_s is not None and s.t_s >= scaled_down_s + STOP_AFTER_SCALE_DOWN_S:
                    replayer.stop()
                view.update(s, demo.receiver)
                time.sleep(SAMPLE_S)
            # Let the last decisions and budget evaluations land: until the budget is exceeded and enforced,
            # at most 60 s after the trace.
            for _ in range(30):
                s = demo.sample(replayer, limit_s)
                view.update(s, demo.receiver)
                if s.budget_state == "Exceeded" and s.reason == "CappedByBudget":
                    break
                time.sleep(SAMPLE_S)
        if replayer.records:
            duration = min(duration, max(r[0] for r in replayer.records) + 1.0)
        isvc, pol = demo.read_state()
        served_picks = demo.served_by() if demo.real else ({}, {})  # the story's, before the cache phase
        if demo.real:
            demo.cache_phase(url)
        checks = Checks.evaluate(isvc, pol, demo.receiver, shift_at, demo.samples)
        history = read_isvc_status(isvc).scaling_history or ()
        pods = list(demo.pods.values())
        ups: list[capacity.ScaleUp] = []
        answered = sum(1 for r in replayer.records if r[3])
        failed = sum(1 for r in replayer.records if not r[3])
        request_path: dict[str, Any] | None = None
        if demo.real:
            checks.items.insert(0, ("a request sent at zero replicas was held by the gateway and answered",
                                    "latency_s" in demo.cold, cold_start_line(demo.cold)))
            hits = sum(v["hit"] for v in (demo.cache.get("by_pod") or {}).values())
            checks.items.insert(1, ("repeated images were answered from the embedding cache, none failed",
                                    hits > 0 and demo.cache.get("failed") == 0 and "error" not in demo.cache,
                                    cache_line(demo.cache)))
            served, picks = served_picks
            request_path = {"cold_start": demo.cold, "served_by_pod": served, "gateway_picks": picks,
                            "cache": demo.cache}
            caps = [h.time.timestamp() - demo.t0_wall for h in capacity.budget_scale_downs(history)]
            ups = capacity.measure(capacity.scale_ups(history, demo.t0_wall, pods), replayer.records, duration,
                                   caps[0] if caps else None)
            ok, seen = capacity.judge_scale_ups(ups, SLO_MS)
            checks.items.append(("scale-up lowered the measured p95 under the same offered load", ok, seen))
            after_cap = sum(1 for r in replayer.records if caps and r[0] >= caps[0])
            ok, seen = capacity.judge_budget_scale_down(history, demo.t0_wall, pods, replayer.sent, answered, failed)
            ok = ok and after_cap > 0
            checks.items.append(("budget scale-down removed a real pod with no failed request", ok,
                                 f"{seen}; {after_cap} requests arrived after the first cap"))
        nodes = demo.nodes()
        cfg.report_dir.mkdir(parents=True, exist_ok=True)
        report = write_report(cfg.report_dir, demo.samples, replayer.records, isvc, pol, demo.receiver, checks,
                              slo_ms=SLO_MS, shift_at_s=shift_at, real=demo.real, kwok_reason=demo.kwok_reason,
                              scale_ups=ups, pods=pods, nodes=nodes, timings=demo.timings, load_plan=demo.load_plan,
                              request_path=request_path)
        say(capacity_summary(demo.real, demo.kwok_reason, ups, pods, nodes, replayer, demo.timings, demo.load_plan,
                             request_path))
        say(checks.summary())
        say(f"Report: {report} (demo ran {time.monotonic() - started:.0f} s)")
        return 0 if checks.all_passed else 1
    finally:
        say("Stopping everything the demo started")
        demo.close()


def _pod_ready(pod: Any) -> bool:
    """Whether a pod (kubernetes client object) is Ready and not terminating."""
    if pod.metadata.deletion_timestamp is not None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def cold_start_line(cold: dict[str, Any]) -> str:
    """One line on the demo's start from zero (:meth:`Demo.cold_start`'s record)."""
    if "error" in cold:
        return f"the request held at zero replicas FAILED: {cold['error']}"
    if "latency_s" not in cold:
        return "the request held at zero replicas got no answer in time"
    own = cold.get("pod_time_to_ready_s")
    return (f"the request held at zero replicas answered after {cold['latency_s']:.1f} s; the replica pod's own "
            f"time to Ready {'-' if own is None else f'{own:.1f} s'}"
            + (f" (added latency {cold['added_s']:.2f} s)" if "added_s" in cold else ""))


def capacity_summary(real: bool, kwok_reason: str | None, ups: list[Any], pods: list[Any],
                     nodes: list[tuple[str, bool]], replayer: Replayer, timings: dict[str, float],
                     load_plan: Any = None, request_path: dict[str, Any] | None = None) -> str:
    """The measured-capacity part of the summary: nodes, pods, each scale-up's windows, requests, the request path
    (``request_path``: the start from zero, requests per replica, the gateway's choices) and set-up times."""
    from modalscale.demo.report import plan_summary, request_path_lines

    lines = ["Nodes: " + ", ".join(f"{n} ({'REAL' if r else 'KWOK'})" for n, r in nodes)]
    if load_plan is not None:
        lines.append("Offered load: " + plan_summary(load_plan))
    if not real:
        lines.append(kwok_banner(kwok_reason))
    for p in pods:
        where = "REAL" if p.node_real else ("KWOK" if p.node_real is False else "?")
        lines.append(f"  pod {p.name} on {p.node} ({where}): created {p.created_s:.0f} s, Ready "
                     f"{'-' if p.ready_s is None else f'{p.ready_s:.0f} s'}, deleted "
                     f"{'-' if p.deleted_s is None else f'{p.deleted_s:.0f} s'}")
    for up in ups:
        ready = "never" if up.ready_s is None else f"{up.ready_s:.0f} s ({up.decision_to_ready_s:.0f} s after)"
        partial = ("" if up.ready_replicas in (None, up.to_replicas)
                   else f" (only {up.ready_replicas} ever Ready at once; measured at {up.ready_replicas})")
        lines.append(f"Scale-up {up.from_replicas}->{up.to_replicas}{partial} ({', '.join(up.reasons)}): decided at "
                     f"{up.decision_s:.0f} s, Ready at {ready}")
        lines.append(f"  before: {up.before.line() if up.before else 'not measured'}")
        lines.append(f"  after:  {up.after.line() if up.after else 'not measured'}")
    answered = sum(1 for r in replayer.records if r[3])
    lines.append(f"Requests: sent {replayer.sent}, answered {answered}, failed {len(replayer.records) - answered}"
                 + (f" (first errors: {replayer.errors[:3]})" if replayer.errors else ""))
    if request_path is not None:
        lines += request_path_lines(request_path)
    lines.append("Set-up: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return "\n".join(lines)


def _replica_price(real: bool = False) -> Decimal:
    from modalscale.costmodel.catalog import ReplicaResources, default_catalog

    resources = (ReplicaResources.from_quantities(REPLICA_CPU, REPLICA_MEMORY) if real
                 else ReplicaResources.from_quantities("4", "16Gi", 1, GPU_TYPE))
    return default_catalog().price_replica(resources, "OnDemand")


def _gateway_price() -> Decimal:
    """Catalog on-demand price of one of the real-node demo's gateway pods (``GATEWAY_CPU``, the default memory),
    USD/h, as the ledger charges it."""
    from modalscale.api.inferenceservice import GatewaySpec
    from modalscale.costmodel.catalog import ReplicaResources, default_catalog

    resources = ReplicaResources.from_quantities(GATEWAY_CPU, GatewaySpec().memory)
    return default_catalog().price_replica(resources, "OnDemand")
