"""What the autoscaler observes: Prometheus answers about one InferenceService's real Triton traffic.

The scrape targets of an InferenceService carry the labels ``namespace`` and ``inferenceservice`` (a
ServiceMonitor/PodMonitor relabels them from the pod label ``modalscale.io/inferenceservice`` in a cluster; the
local dev setup gives the same labels to its static target). Everything is queried by these two labels, and by
``component``: the request gateway's series carry ``component="gateway"`` and a staged service's image encoder
pool's ``component="image-encoder"`` (the same Triton and runtime metric names), so the replicas' queries exclude
both and the pool's reading (``build_queries(component="image-encoder")``) reads its own series only.

Split into:

- :func:`build_queries` (pure): the PromQL, one instant query per key, over a stable window (60 s) and a short
  recent window (15 s, the policy's burst window);
- ``parse_answers`` (pure; in ``modalscale.autoscaler.metrics_parse``): the answers
  (``{key: [{"metric": {...}, "value": [ts, "v"]}, ...]}``, exactly
  what ``PrometheusConnect.custom_query`` returns) -> :class:`MetricsReading`;
- :func:`build_observation` (pure): a reading + the replica counts + the budget cap -> the policy's
  ``Observation``;
- :class:`PrometheusReader` (thin I/O): runs the queries with prometheus-api-client at one evaluation time.

Which series are demand. Request rates come from ``modalscale_requests_total`` (incremented by the model's
``execute`` for each accepted inference request) and Triton's ``nv_inference_count`` / ``exec_count`` of the
models that execute requests. Readiness probes (``/v2/health/ready``), metrics scrapes and model-statistics calls
never run ``execute``, so they never count as traffic.

Per-class features. The runtime exports ``modalscale_requests_total{modality}`` and the feature histograms
``modalscale_request_images`` (per request, 0 for text), ``modalscale_request_image_pixels`` (per image) and
``modalscale_request_text_tokens`` (per request with text), all labelled ``modality`` too. The features are per
request (pixels summed over a request's images), so every mean divides a histogram's ``_sum`` rate by the
class's request rate, both ``sum by (modality)`` over the InferenceService's targets::

    mean_<feature>_c = rate(<histogram>_sum{modality=c}) / rate(modalscale_requests_total{modality=c})

(for images and tokens that denominator equals the histogram's own ``_count`` rate; for pixels ``_count`` counts
images, not requests). When a histogram has no ``modality`` label (a runtime before the label, or a user's model
exporting the same names) or only some targets have it (a rolling upgrade), its means are pooled over the
classes that have the feature (images and pixels over ``image`` + ``image_text`` requests, tokens over ``text``
+ ``image_text``), summing every series, and given to each of them: exact when only one of those classes has
traffic.

Service time and batching. With modality-aware batching the runtime serves each class with its own Triton model
``<model>_<modality>`` behind a router model ``<model>``; otherwise one model ``<model>`` executes everything.
Triton adds a batch's full compute time (``compute_input + compute_infer + compute_output``) to every request
of the batch, so per executing model ``m`` over the window::

    mean_batch_size_m = count_rate_m / exec_rate_m
    busy_erlangs_m    = compute_rate_us_m / 1e6 / mean_batch_size_m       (slot-seconds busy per second)
    service_ms_m      = 1000 * busy_erlangs_m / count_rate_m              (a slot's time per request)

which is exact when the batches of the window have equal sizes (always so without batching) and overestimates
busy time when sizes vary (the request-weighted mean batch time exceeds the batch-weighted one). The profile
(``modalscale profile``) measures the same quantity per request. The router model (which only waits on the
modality models) is never counted as executing.

Each pod once. A pod scraped by two jobs (the chart's PodMonitor and a user's ServiceMonitor over the same
pods, kedacore/charts#277) or read through a querier without deduplication (Thanos) has each series twice; a
``sum`` over the targets counted its demand, busy time and queue twice (12 req/s sized as 24). So every instant
query keeps one row per series and pod identity (``max by (<labels>, pod, instance, job)``, which folds a
querier's replica label) and the parse takes one value per pod identity (``pod``, else ``instance``) and label
set, the largest, before summing (``extra["duplicate_series"]`` counts what was dropped); the scrape targets are
counted per pod too (a pod is up when any of its scrapes is). The per-bin counts fold duplicates with the same
``pod`` and ``instance`` in the subquery (two jobs that label one pod's ``instance`` differently are not folded
there).

Cross-checked counters. The runtime's ``modalscale_requests_total`` and Triton's ``nv_inference_count`` count
the same requests (the router's count equals the runtime's sum over classes). When Triton's request counters read
0 while the runtime's counter, or Triton's own execution count, compute or request time or queue, says the
service is serving (triton-inference-server/server#8125: the counters stuck at 0 in Triton 2.51), every
Triton-derived figure (busy time, batch size, service time, queue) is unknown, not zero; when the runtime's counter
reads 0 while Triton counts requests, the workload is unknown. Either way ``problem`` is ``MetricsContradict`` and
the modes that need the unknown figures hold (Utilization, and Predictive without a model, on Triton's; Predictive
on the runtime's), never picking the signal that says idle. A counter says serving from
:data:`modalscale.autoscaler.metrics_parse.CONTRADICTION_MIN_REQUESTS` requests in the window.

Two sources of demand: the replicas or the request gateway. Every scrape target also carries ``component``
(the chart's PodMonitors and the local setup set it: ``inference-server`` for a replica, ``gateway`` for the
request gateway, :data:`GATEWAY_COMPONENT`). The gateway exports the runtime's per-request series under the same
names (``modalscale_requests_total{modality}`` and the three feature histograms), for ANY model a user brings, so
with ``spec.gateway.enabled`` the arrivals, the per-class features and the per-bin counts are read from the
gateway's series (``component="gateway"``) and otherwise from the replicas' (``component!="gateway"``, which also
matches a target without the label): never both, since every request is counted by the gateway AND by the built-in
runtime behind it, and their sum would size twice the demand (the fault kind of issue 20's fault 1). Service time,
batch size, busy time, Triton's queue and p95 stay the replicas' (Triton's ``nv_*`` series exist for any model,
the Python backend's too): the gateway's upstream latency and ``modalscale_gateway_tenant_service_seconds_total``
run from sending a request to a replica to its answer, so they include the wait in Triton's queue and for a batch
to fill. The service-time model predicts compute per request and the queueing model adds the wait
(``modalscale.autoscaler.queueing``); fed the gateway's figure it would count the wait twice and read a queue as
slower compute, sizing more replicas the longer the queue, so the gateway gives no better measure of service time.
What the gateway adds is the queue in front of the replicas: its held queue (``modalscale_gateway_queue_depth``:
requests waiting at zero replicas or above ``maxInFlight``) and its in-flight requests
(``modalscale_gateway_inflight_requests``, at a replica or streaming back). With the gateway, requests in flight as
the client sees them are the sum of both over the gateway's pods (the observed-queue rule,
``ScaleUpForObservedQueue``, for any model), and queued requests are Triton's pending plus the gateway's held queue
(the backlog rule): a request held in the gateway has not reached Triton, so neither is counted twice. The
gateway's scrape targets are checked like the replicas': none, all down or an unreadable queue or in-flight gauge
leave the workload unknown (hold); some down make the reading partial (no scale-down, no scale to zero: the
rates of a gateway pod that did not answer are missing from the sums).

Bad answers. A non-finite value (``NaN``, ``+Inf``, ``-Inf``) in any series of a rate, feature or Triton answer
makes that answer unknown (``NonFiniteMetrics``): the workload is None and the policy holds, never reading it
as zero traffic. Counters are read only through ``rate()`` and ``increase()``, which correct counter resets (a
pod or Triton restart), so a negative rate is a counter read without that correction: unknown too
(``NegativeRate``), never clamped to zero traffic. Only Triton's p95 summary is read per series (a quantile is
NaN for a model with no request in its window). A scrape target that is down leaves its replicas' traffic out
of every sum: the reading reports ``targets_up`` and the policy does not scale down while fewer targets answered
than expected: than replicas are ready when the targets are pods (a ``pod`` label: a vanished pod target counts
too), else than Prometheus has.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from modalscale.api.conditions import PROMETHEUS_NOT_CONFIGURED, PROMETHEUS_UNREACHABLE
from modalscale.api.isvc_status import IsvcStatus
from modalscale.autoscaler.metrics_parse import RECENT_WINDOW_S, SERIES_IDENTITY_LABELS, STABLE_WINDOW_S, parse_answers
from modalscale.autoscaler.metrics_reading import MetricsReading, unavailable
from modalscale.autoscaler.policy import Observation
from modalscale.gateway.tenant_budget import TENANT_BUDGET_EXCEEDED
from modalscale.redaction import redact_for_url, redact_url

GATEWAY_COMPONENT = "gateway"
"""Value of the scrape label ``component`` on the request gateway's series (chart PodMonitor and devenv)."""
IMAGE_ENCODER_COMPONENT = "image-encoder"
"""Value of the scrape label ``component`` on a staged service's image encoder pool's series (its pods'
``app.kubernetes.io/component``: ``operator/isvc/objects.py`` ``image_encoder_labels``; the chart's PodMonitor
``<release>-image-encoders`` and the devenv relabel it)."""
OTHER_COMPONENTS = (GATEWAY_COMPONENT, IMAGE_ENCODER_COMPONENT)
"""The components whose series are not the replicas' (front or one piece): the replicas' selector excludes each,
so neither the gateway's request counters nor the encoder pool's Triton figures count as the replicas' demand or
busy time."""


def demand_from_gateway(gateway_enabled: bool, status: IsvcStatus) -> bool:
    """Whether demand is read from the gateway's series: where the Service ``<name>`` sends requests.

    The plan switches the Service to the gateway pods only while ``spec.gateway.enabled`` and a gateway pod is
    Ready (``operator/isvc/plan.py``), and writes that Deployment's ready count to ``status.gateway.readyReplicas``
    from the same observation. While no gateway pod is Ready (Pending, an image that cannot be pulled) requests go
    straight to the replicas and the gateway exports nothing: reading its series there would hold the autoscaler
    for good (no scrape targets) while the replicas serve.

    Args:
        gateway_enabled: ``spec.gateway.enabled``.
        status: The InferenceService's status (``read_isvc_status``; no ``gateway``: no gateway pod Ready).
    """
    return gateway_enabled and status.ready_gateway_pods > 0


# RECENT_WINDOW_S (15 s, the recent/burst window) needs a scrape interval of at most ~7 s to hold two samples.
COUNT_BIN_S = 15.0
"""Bin of the per-bin request counts (arrival SCV and demand forecast), s; needs a scrape interval <= ~7 s."""
COUNT_SPAN_S = 600.0
"""How far back the per-bin request counts reach, s (40 bins of 15 s)."""
QUERY_TIMEOUT_S = 5.0
"""Timeout of one Prometheus HTTP query, s."""

_STABLE_KEYS = ("requests", "images", "pixels", "tokens")


def selector(namespace: str, name: str) -> str:
    """PromQL label matchers of one InferenceService's series (values escaped for a double-quoted string)."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')
    return f'namespace="{esc(namespace)}",inferenceservice="{esc(name)}"'


def build_queries(namespace: str, name: str, window_s: float = STABLE_WINDOW_S,
                  recent_window_s: float = RECENT_WINDOW_S, count_bin_s: float = COUNT_BIN_S,
                  count_span_s: float = COUNT_SPAN_S, *, gateway: bool = False,
                  component: str | None = None) -> dict[str, str]:
    """The instant queries of one observation (pure).

    Args:
        namespace: The InferenceService's namespace (label ``namespace`` of its scrape targets).
        name: Its name (label ``inferenceservice``).
        window_s: Stable window, s.
        recent_window_s: Recent window, s.
        gateway: ``spec.gateway.enabled``: demand (``requests``, ``images``, ``pixels``, ``tokens``, their
            ``recent_`` twins and ``arrival_counts``) from the gateway's series (``component="gateway"``), plus
            ``gateway_up``, ``gateway_scraped``, ``gateway_queue`` and ``gateway_inflight`` (gauges per series)
            and ``gateway_refused`` (requests its admission refused over the stable window, per series);
            False: demand from the replicas' series. Every other key reads the replicas'.
        component: None: the replicas (the one-piece or front pool): every series but the gateway's and the image
            encoder pool's (``component!~"gateway|image-encoder"``; a target without the label is a replica).
            :data:`IMAGE_ENCODER_COMPONENT`: a staged service's image encoder pool, every key (demand, Triton
            figures, targets and the window's scrapes) from its series only (``component="image-encoder"``);
            ``gateway`` must be False then.
    Returns:
        ``{key: PromQL}``. Keys ``requests|images|pixels|tokens`` (stable window) and the same with a ``recent_``
        prefix are rates per ``modality`` and series (``max by (modality, pod, instance, job)``); ``nv_*`` keys
        per ``model``, ``version`` and series, but ``nv_p95_us`` (``max by (model)``); the parse sums them once per
        pod (:data:`SERIES_IDENTITY_LABELS`). ``up`` and ``scraped`` (sample timestamp of ``up``) are per target;
        ``arrival_counts`` is a subquery (a range vector): the requests of every ``count_bin_s`` bin over the last
        ``count_span_s``, summed over classes and pods (a pod's duplicate series folded by ``max``);
        ``int8_fallback`` is the runtime's ``modalscale_image_int8_fallback`` gauge per series (1: the pod's INT8
        image encoder fell back to FP32 at load).
    Raises:
        ValueError: ``component`` is not None or :data:`IMAGE_ENCODER_COMPONENT`, or is set with ``gateway``.
    """
    if component not in (None, IMAGE_ENCODER_COMPONENT) or (component is not None and gateway):
        raise ValueError(f"component must be None or {IMAGE_ENCODER_COMPONENT!r} (without the gateway), "
                         f"got {component!r} with gateway={gateway}")
    if component is None:  # the replicas' series: neither the gateway's nor the encoder pool's
        s = f'{selector(namespace, name)},component!~"{"|".join(OTHER_COMPONENTS)}"'
        every = f'{selector(namespace, name)},component!="{IMAGE_ENCODER_COMPONENT}"'  # replicas and gateway
    else:
        s = every = f'{selector(namespace, name)},component="{component}"'
    gw = f'{selector(namespace, name)},component="{GATEWAY_COMPONENT}"'  # the gateway's series
    demand = gw if gateway else s
    w, r = f"{int(round(window_s))}s", f"{int(round(recent_window_s))}s"
    per_series = ", ".join(SERIES_IDENTITY_LABELS)

    def by_modality(metric: str, window: str) -> str:
        return f"max by (modality, {per_series}) (rate({metric}{{{demand}}}[{window}]))"

    def by_model(metric: str) -> str:
        return f"max by (model, version, {per_series}) (rate({metric}{{{s}}}[{w}]))"

    metrics = {"requests": "modalscale_requests_total", "images": "modalscale_request_images_sum",
               "pixels": "modalscale_request_image_pixels_sum", "tokens": "modalscale_request_text_tokens_sum"}
    queries: dict[str, str] = {}
    for key, metric in metrics.items():
        queries[key] = by_modality(metric, w)
        queries["recent_" + key] = by_modality(metric, r)
    queries["nv_count"] = by_model("nv_inference_count")
    queries["nv_exec"] = by_model("nv_inference_exec_count")
    queries["nv_compute_us"] = " + ".join(
        by_model(f"nv_inference_compute_{part}_duration_us") for part in ("input", "infer", "output"))
    queries["nv_success"] = by_model("nv_inference_request_success")
    queries["nv_request_us"] = by_model("nv_inference_request_duration_us")
    queries["nv_pending"] = f"max by (model, version, {per_series}) (nv_inference_pending_request_count{{{s}}})"
    queries["inflight"] = f"max by (model, {per_series}) (modalscale_inflight_requests{{{s}}})"
    queries["nv_p95_us"] = f'max by (model) (nv_inference_request_summary_us{{{s},quantile="0.95"}})'
    # 1 per pod whose INT8 image encoder missed its fidelity bound at load (every image FP32), 0 where INT8 serves;
    # exported only where INT8 images were asked for (informational: never part of a decision)
    queries["int8_fallback"] = f"max by ({per_series}) (modalscale_image_int8_fallback{{{s}}})"
    b, span = f"{int(round(count_bin_s))}s", f"{int(round(count_span_s))}s"
    increase = f"increase(modalscale_requests_total{{{demand}}}[{b}])"
    queries["arrival_counts"] = f"sum(max by (modality, pod, instance) ({increase}))[{span}:{b}]"
    queries["up"] = f"up{{{s}}}"
    queries["scraped"] = f"timestamp(up{{{s}}})"
    # every scrape of the window (a range vector: raw samples), and whether each target was scraped before it: a
    # window that starts in a gap of the data is partial (metrics_parse._window_holes); the replicas' reading checks
    # the replicas' and the gateway's targets, the encoder pool's its own
    queries["window_up"] = f"up{{{every}}}[{w}]"
    queries["window_before"] = f"max_over_time(up{{{every}}}[{span}] offset {w})"
    if gateway:
        queries["gateway_up"] = f"up{{{gw}}}"
        queries["gateway_scraped"] = f"timestamp(up{{{gw}}})"
        queries["gateway_queue"] = f"max by ({per_series}) (modalscale_gateway_queue_depth{{{gw}}})"
        queries["gateway_inflight"] = f"max by ({per_series}) (modalscale_gateway_inflight_requests{{{gw}}})"
        # requests the gateway's admission refused (counted as demand on arrival; never reach Triton)
        queries["gateway_refused"] = (f"max by ({per_series}) (increase(modalscale_gateway_rejected_total"
                                      f"{{{gw},reason!=\"{TENANT_BUDGET_EXCEEDED}\"}}[{w}]))")
    return queries


def build_observation(reading: MetricsReading, *, current_replicas: int, ready_replicas: int,
                      slots_per_replica: int, budget_max_replicas: int | None, now: dt.datetime,
                      window_s: float = STABLE_WINDOW_S, recent_window_s: float = RECENT_WINDOW_S) -> Observation:
    """The policy's ``Observation`` from a reading and the replica counts (pure).

    Args:
        reading: From :func:`parse_answers` (or :func:`unavailable`).
        current_replicas: The Deployment's ``spec.replicas`` (the /scale target).
        ready_replicas: Its ``status.readyReplicas``.
        slots_per_replica: ``spec.runtime.instanceCount``.
        budget_max_replicas: The BudgetPolicy cap (``api.annotations.budget_cap``), None = no cap.
        now: Timezone-aware UTC; stands in for ``observed_at`` when no sample time is known (then the reading
            carries no data anyway).
    Returns:
        The observation; with the gateway's targets read (``reading.gateway_targets_total > 0``) they count in
        ``targets_up`` and ``targets_expected`` too (each gateway pod a target), so a gateway pod that did not
        answer makes the observation partial;
        ``utilization_ratio = busy_erlangs / (ready_replicas * slots_per_replica)`` (may exceed
        1 when the work exceeds the slots, as HPA's utilization may exceed 100 %), None when unknown or no
        replica is ready; ``targets_up`` the scrape targets that answered (None when Prometheus has none), which
        the policy compares with ``ready_replicas`` when every target is a pod, else with the targets Prometheus
        has (``targets_expected``; one shared target, as in the local setup, stands for every replica), or with
        the pod targets Prometheus has when they are more than the ready replicas (a starting or terminating pod
        scraped too: a down target is not made up for by it); fewer: no scale-down.
    """
    utilization = None
    if reading.busy_erlangs is not None and ready_replicas > 0 and reading.observed_at is not None:
        utilization = reading.busy_erlangs / (ready_replicas * max(1, slots_per_replica))
    targets_up = reading.targets_up if reading.targets_total > 0 else None
    targets_expected = None if reading.per_pod_targets else reading.targets_total
    if reading.per_pod_targets and reading.targets_total > ready_replicas:
        # more pod targets than ready replicas (a starting or terminating pod is scraped too): each is expected, so
        # one that is down still makes the reading partial instead of being made up for by the unready pod's
        targets_expected = reading.targets_total
    if targets_up is not None and reading.gateway_targets_total > 0:
        targets_up += reading.gateway_targets_up
        targets_expected = ((ready_replicas if targets_expected is None else targets_expected)
                            + reading.gateway_targets_total)
    return Observation(
        observed_at=reading.observed_at or now,
        current_replicas=current_replicas,
        ready_replicas=ready_replicas,
        workload=reading.workload,
        p95_latency_ms=reading.p95_latency_ms,
        utilization_ratio=utilization,
        window_s=window_s,
        recent_workload=reading.recent_workload,
        recent_window_s=recent_window_s,
        queued_requests=reading.queued_requests,
        budget_max_replicas=budget_max_replicas,
        targets_up=targets_up,
        targets_expected=targets_expected,
        arrival_counts=reading.arrival_counts,
        count_bin_s=COUNT_BIN_S,
        in_flight_requests=reading.in_flight_requests,
        in_flight_at=reading.in_flight_at,
    )


class PrometheusReader:
    """Runs :func:`build_queries` against one Prometheus with prometheus-api-client (thin I/O).

    Args:
        url: Prometheus base URL (``MODALSCALE_PROMETHEUS_URL``); empty = not configured.
        timeout_s: Per-query HTTP timeout, s.
    """

    def __init__(self, url: str, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.url = url
        self.shown_url = redact_url(url)
        """``url`` as messages show it: user info (``user:password@``) redacted."""
        self.timeout_s = timeout_s
        self._client: Any = None

    def answers(self, namespace: str, name: str, at: dt.datetime, *, gateway: bool = False,
                component: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Every query of :func:`build_queries` (``gateway``, ``component``: its arguments), evaluated at ``at`` (one
        consistent instant).

        Raises:
            Exception: whatever prometheus-api-client / requests raise when Prometheus cannot answer.
        """
        if self._client is None:
            from prometheus_api_client import PrometheusConnect

            self._client = PrometheusConnect(url=self.url, disable_ssl=True, timeout=self.timeout_s)
        params = {"time": f"{at.timestamp():.3f}"}
        return {key: self._client.custom_query(q, params=params)
                for key, q in build_queries(namespace, name, gateway=gateway, component=component).items()}

    def read(self, namespace: str, name: str, model_name: str, at: dt.datetime, *,
             gateway: bool = False, component: str | None = None) -> MetricsReading:
        """Query and parse; never raises for Prometheus trouble (returns an unusable reading instead).

        ``gateway``: ``spec.gateway.enabled``, demand from the gateway's series (module docstring). ``component``:
        None = the replicas; :data:`IMAGE_ENCODER_COMPONENT` = a staged service's image encoder pool (``model_name``
        then its Triton model, ``image_encoder``)."""
        if not self.url:
            return unavailable(PROMETHEUS_NOT_CONFIGURED,
                               "MODALSCALE_PROMETHEUS_URL is not set; the autoscaler has no metrics and holds")
        from prometheus_api_client.exceptions import PrometheusApiClientException
        from requests.exceptions import RequestException

        try:
            answers = self.answers(namespace, name, at, gateway=gateway, component=component)
        except (RequestException, PrometheusApiClientException, ValueError) as exc:
            text = redact_for_url(str(exc), self.url)
            first = text.splitlines()[0][:300] if text else type(exc).__name__
            return unavailable(PROMETHEUS_UNREACHABLE, f"Prometheus at {self.shown_url} did not answer: {first}")
        return parse_answers(answers, model_name, gateway=gateway, recent_window_s=RECENT_WINDOW_S)
