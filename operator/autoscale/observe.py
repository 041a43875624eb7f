"""What the autoscaler observes: Prometheus answers about one InferenceService's real Triton traffic.

The scrape targets of an InferenceService carry the labels ``namespace`` and ``inferenceservice`` (a
ServiceMonitor/PodMonitor relabels them from the pod label ``modalscale.io/inferenceservice`` in a cluster; the
local dev setup gives the same labels to its static target). Everything is queried by these two labels.

Split into:

- :func:`build_queries` (pure): the PromQL, one instant query per key, over a stable window (60 s) and a short
  recent window (15 s, the policy's burst window);
- :func:`parse_answers` (pure): the answers (``{key: [{"metric": {...}, "value": [ts, "v"]}, ...]}``, exactly
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
:data:`CONTRADICTION_MIN_REQUESTS` requests in the window.

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
import math
from collections.abc import Mapping, Sequence
from typing import Any

from modalscale.api.conditions import (  # condition types and reasons: one module per kind
    INCOMPLETE_FEATURES,
    METRICS_CONTRADICT,
    NEGATIVE_RATE,
    NO_REQUEST_METRICS,
    NO_SCRAPE_TARGETS,
    NON_FINITE_METRICS,
    PARTIAL_TARGETS,
    PROMETHEUS_NOT_CONFIGURED,
    PROMETHEUS_UNREACHABLE,
    SCRAPE_TARGETS_DOWN,
)
from modalscale.autoscaler.features import MODALITIES, Modality
from modalscale.autoscaler.metrics_reading import MetricsReading, unavailable
from modalscale.autoscaler.policy import Observation, WorkloadClass

STABLE_WINDOW_S = 60.0
"""Length of the stable metrics window, s (the policy's ``Observation.window_s``)."""
RECENT_WINDOW_S = 15.0
"""Length of the recent (burst) window, s; needs a scrape interval of at most ~7 s to hold two samples."""
COUNT_BIN_S = 15.0
"""Bin of the per-bin request counts (arrival SCV and demand forecast), s; needs a scrape interval <= ~7 s."""
COUNT_SPAN_S = 600.0
"""How far back the per-bin request counts reach, s (40 bins of 15 s)."""
QUERY_TIMEOUT_S = 5.0
"""Timeout of one Prometheus HTTP query, s."""

CONTRADICTION_MIN_REQUESTS = 3.0
"""Requests over the stable window from which a counter says the service is serving while another reads 0
(:func:`_contradiction`); below it one request in flight at the window's edge, seen by one counter and not yet by
the other, could read as a contradiction."""
SERIES_IDENTITY_LABELS = ("pod", "instance", "job")
"""Labels a query keeps per series so that the parse counts each pod once (:func:`_series_key`): ``pod`` (a
PodMonitor, a ServiceMonitor's endpoints or pod discovery) else ``instance`` (a static target), and ``job`` to
tell two scrape jobs of one pod apart. Every other label a scrape or a querier adds (``service``, ``endpoint``,
a Thanos replica label) is dropped by the queries' ``max by``."""

_STABLE_KEYS = ("requests", "images", "pixels", "tokens")


def selector(namespace: str, name: str) -> str:
    """PromQL label matchers of one InferenceService's series (values escaped for a double-quoted string)."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')
    return f'namespace="{esc(namespace)}",inferenceservice="{esc(name)}"'


def build_queries(namespace: str, name: str, window_s: float = STABLE_WINDOW_S,
                  recent_window_s: float = RECENT_WINDOW_S, count_bin_s: float = COUNT_BIN_S,
                  count_span_s: float = COUNT_SPAN_S) -> dict[str, str]:
    """The instant queries of one observation (pure).

    Args:
        namespace: The InferenceService's namespace (label ``namespace`` of its scrape targets).
        name: Its name (label ``inferenceservice``).
        window_s: Stable window, s.
        recent_window_s: Recent window, s.
    Returns:
        ``{key: PromQL}``. Keys ``requests|images|pixels|tokens`` (stable window) and the same with a ``recent_``
        prefix are rates per ``modality`` and series (``max by (modality, pod, instance, job)``); ``nv_*`` keys
        per ``model``, ``version`` and series, but ``nv_p95_us`` (``max by (model)``); the parse sums them once per
        pod (:data:`SERIES_IDENTITY_LABELS`). ``up`` and ``scraped`` (sample timestamp of ``up``) are per target;
        ``arrival_counts`` is a subquery (a range vector): the requests of every ``count_bin_s`` bin over the last
        ``count_span_s``, summed over classes and pods (a pod's duplicate series folded by ``max``).
    """
    s = selector(namespace, name)
    w, r = f"{int(round(window_s))}s", f"{int(round(recent_window_s))}s"
    per_series = ", ".join(SERIES_IDENTITY_LABELS)

    def by_modality(metric: str, window: str) -> str:
        return f"max by (modality, {per_series}) (rate({metric}{{{s}}}[{window}]))"

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
    b, span = f"{int(round(count_bin_s))}s", f"{int(round(count_span_s))}s"
    increase = f"increase(modalscale_requests_total{{{s}}}[{b}])"
    queries["arrival_counts"] = f"sum(max by (modality, pod, instance) ({increase}))[{span}:{b}]"
    queries["up"] = f"up{{{s}}}"
    queries["scraped"] = f"timestamp(up{{{s}}})"
    return queries


def _value(sample: Mapping[str, Any]) -> float | None:
    """The sample's value; None when it is unparsable or not finite (``NaN``, ``+Inf``, ``-Inf``)."""
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _series_key(labels: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(pod identity, what the series measures)`` of one series' labels: the identity is ``pod`` when the
    series has one, else ``instance``; what it measures is every other label but ``job`` (``modality``, or
    ``model`` and ``version``). Two series with the same key are the same counter read twice."""
    pod = str(labels.get("pod") or "")
    identity = f"pod/{pod}" if pod else f"instance/{labels.get('instance', '')}"
    content = tuple(sorted((str(k), str(v)) for k, v in labels.items() if k not in SERIES_IDENTITY_LABELS))
    return identity, content


def _by_label(answer: Sequence[Mapping[str, Any]] | None, label: str, *, per_series: bool = False,
              rate: bool = True) -> dict[str, float] | None:
    """``{label value: value}`` of one answer: one value per pod identity and label set (the largest when a pod's
    series arrives more than once, under two ``job`` values or two ``instance`` values; :func:`_series_key`),
    then summed per label value (a series without the label is keyed ``""``).

    None when any series' value is not a finite number (Prometheus answers ``NaN`` for a ratio over no samples
    and ``+-Inf`` for a division by zero; a sum with one unknown term is unknown: missing data, never zero) or,
    for a ``rate``, is negative (``rate``/``increase`` correct counter resets, so a negative rate is a counter
    read without that correction, e.g. by a recording rule with ``delta``; missing data, never zero either).
    With ``per_series`` such a series is left out instead (only that label value is unknown: a Triton summary
    quantile is NaN for a model with no request in its window)."""
    best: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in answer or ():
        v = _value(sample)
        if v is None or (rate and v < 0):
            if per_series:
                continue
            return None
        key = _series_key(sample.get("metric") or {})
        best[key] = max(v, best.get(key, v))
    out: dict[str, float] = {}
    for (_, content), v in best.items():
        name = dict(content).get(label, "")
        out[name] = out.get(name, 0.0) + v
    return out


def _duplicates(answer: Sequence[Mapping[str, Any]] | None) -> int:
    """Series of one answer that repeat a pod's series already counted (see :func:`_series_key`)."""
    keys = [_series_key(s.get("metric") or {}) for s in answer or ()]
    return len(keys) - len(set(keys))


def _unreadable(key: str, answer: Sequence[Mapping[str, Any]] | None = None) -> tuple[str, str]:
    """``(reason, message)`` of an answer :func:`_by_label` refused: a negative rate, else a non-finite value."""
    negative = [v for v in (_value(s) for s in answer or ()) if v is not None and v < 0]
    if negative:
        return (NEGATIVE_RATE, f"Prometheus answered a negative rate ({min(negative):g}) for {key!r}: a counter "
                               f"read without reset correction (rate() and increase() correct resets); that is "
                               f"missing data, not zero traffic: holding")
    return (NON_FINITE_METRICS, f"Prometheus answered a non-finite value (NaN or +-Inf) for {key!r}; that is "
                                f"missing data, not zero traffic: holding")


def _workload(answers: Mapping[str, Sequence[Mapping[str, Any]]], prefix: str,
              batch: Mapping[Modality, float], service_ms: Mapping[Modality, float | None]
              ) -> tuple[tuple[WorkloadClass, ...] | None, tuple[str, str] | None]:
    """Per-class workload from one window's answers (``prefix`` "" or "recent_")."""
    if not answers.get(prefix + "requests"):
        return None, (NO_REQUEST_METRICS, "no modalscale_requests_total series for this InferenceService "
                                          "(is the modalscale runtime serving it, and scraped?)")
    by_modality = _by_label(answers[prefix + "requests"], "modality")
    if by_modality is None:
        return None, _unreadable(prefix + "requests", answers[prefix + "requests"])
    rates = {m: v for m, v in by_modality.items() if m}
    classes = {m: max(0.0, rates.get(m.value, 0.0)) for m in MODALITIES}
    if sum(classes.values()) <= 0:
        return (), None
    sums: dict[str, dict[str, float]] = {}
    for k in ("images", "pixels", "tokens"):
        read = _by_label(answers.get(prefix + k), "modality")
        if read is None:
            return None, _unreadable(prefix + k, answers.get(prefix + k))
        sums[k] = read
    users = {"images": (Modality.IMAGE, Modality.IMAGE_TEXT), "pixels": (Modality.IMAGE, Modality.IMAGE_TEXT),
             "tokens": (Modality.TEXT, Modality.IMAGE_TEXT)}
    means: dict[str, dict[Modality, float]] = {}
    for key, who in users.items():
        active = [m for m in who if classes[m] > 0]
        means[key] = {}
        if not active:
            continue
        by_class = sums[key]
        if by_class and "" not in by_class:  # labelled by modality: per-class means
            for m in active:
                if m.value not in by_class:
                    return None, (INCOMPLETE_FEATURES, f"no {key} series for modality {m.value}")
                means[key][m] = max(0.0, by_class[m.value]) / classes[m]
        elif by_class:  # unlabelled (or a mix of both): pooled over the classes that carry the feature
            mean = max(0.0, sum(by_class.values())) / sum(classes[m] for m in active)
            for m in active:
                means[key][m] = mean
        else:
            return None, (INCOMPLETE_FEATURES, f"no {key} histogram series although {active[0].value} requests "
                                               f"arrive; the runtime's feature metrics are missing")
    out = []
    for m in MODALITIES:
        rate = classes[m]
        if rate <= 0:
            continue
        images = means["images"].get(m, 0.0)
        pixels = means["pixels"].get(m, 0.0)
        tokens = means["tokens"].get(m, 0.0)
        if m != Modality.TEXT and (images <= 0 or pixels <= 0):
            return None, (INCOMPLETE_FEATURES, f"{m.value} requests arrive but their image features read 0")
        if m == Modality.IMAGE_TEXT and tokens <= 0:
            return None, (INCOMPLETE_FEATURES, "image_text requests arrive but their token feature reads 0")
        out.append(WorkloadClass(
            modality=m, rate_rps=rate, mean_image_pixels=pixels, mean_image_count=images,
            mean_text_tokens=0.0 if m == Modality.IMAGE else tokens, mean_batch_size=max(1.0, batch.get(m, 1.0)),
            observed_service_ms=service_ms.get(m)))
    return tuple(out), None


def _counts(answer: Sequence[Mapping[str, Any]] | None) -> tuple[float, ...] | None:
    """The per-bin counts of the ``arrival_counts`` range vector (one series of ``[ts, "v"]`` values); None when
    absent, malformed or any value is not finite."""
    if not answer or len(answer) != 1:
        return None
    values = answer[0].get("values")
    if not isinstance(values, Sequence) or not values:
        return None
    out = []
    for point in values:
        try:
            v = float(point[1])
        except (IndexError, TypeError, ValueError):
            return None
        if not math.isfinite(v):
            return None
        out.append(max(0.0, v))
    return tuple(out)


def _targets(answers: Mapping[str, Sequence[Mapping[str, Any]]]
             ) -> tuple[dict[str, bool], dict[str, float], bool]:
    """The scrape targets per pod identity: ``({identity: any of its targets up}, {identity: newest sample time of
    its up targets, s}, every target has a pod label)``. A pod scraped by two jobs (or read twice through a
    querier) is one target, up when either of its scrapes is (its series are read from that one)."""
    def scrape(labels: Mapping[str, Any]) -> tuple[str, str]:
        return str(labels.get("instance", "?")), str(labels.get("job", ""))

    stamps = {scrape(s.get("metric") or {}): _value(s) for s in answers.get("scraped") or ()}
    up: dict[str, bool] = {}
    newest: dict[str, float] = {}
    rows = answers.get("up") or ()
    for sample in rows:
        labels = sample.get("metric") or {}
        pod = str(labels.get("pod") or "")
        identity = pod or str(labels.get("instance", "?"))
        live = _value(sample) == 1.0
        up[identity] = up.get(identity, False) or live
        stamp = stamps.get(scrape(labels))
        if live and stamp is not None:
            newest[identity] = max(stamp, newest.get(identity, stamp))
    return up, newest, bool(rows) and all((s.get("metric") or {}).get("pod") for s in rows)


def _contradiction(requests: Mapping[str, float] | None, counts: Mapping[str, float] | None,
                   execs: Mapping[str, float], compute_us: Mapping[str, float], request_us: Mapping[str, float],
                   pending: Mapping[str, float] | None, window_s: float) -> tuple[str, str] | None:
    """Which demand signal reads idle while another says the service is serving (pure).

    The request counters are two: the runtime's own ``modalscale_requests_total`` (``requests``, req/s by
    modality) and Triton's ``nv_inference_count`` (``counts``, req/s by model). Triton's execution count, compute
    and request durations and pending requests are evidence of serving too. A counter "says serving" when it
    counts at least :data:`CONTRADICTION_MIN_REQUESTS` requests over the window; "reads idle" when its rate is 0.

    Returns:
        ``("triton", why)`` when Triton's request counters read 0 while the runtime's counter or Triton's other
        figures say serving (triton-inference-server/server#8125: ``nv_inference_count``, ``..._exec_count``,
        ``..._request_success`` and the pending gauge stuck at 0 in Triton 2.51 while requests are served);
        ``("runtime", why)`` when the runtime's counter reads 0 while Triton counts requests; None otherwise
        (a counter that is missing altogether is missing data, handled on its own, not a contradiction).
    """
    if not counts:
        return None
    runtime_rps = sum(max(0.0, v) for v in (requests or {}).values())
    triton_rps = max(counts.values())  # the client-facing model's count (router or the only model) is the largest
    least = CONTRADICTION_MIN_REQUESTS
    if triton_rps <= 0:
        evidence = []
        if runtime_rps * window_s >= least:
            evidence.append(f"modalscale_requests_total counts {runtime_rps * window_s:.0f} requests "
                            f"({runtime_rps:.2f} req/s)")
        for what, figures in (("executions (nv_inference_exec_count)", execs),
                              ("compute time (nv_inference_compute_*_duration_us)", compute_us),
                              ("request time (nv_inference_request_duration_us)", request_us),
                              ("pending requests (nv_inference_pending_request_count)", pending or {})):
            if sum(figures.values()) > 0:
                evidence.append(f"Triton reports {what} {sum(figures.values()):g}")
        if evidence:
            return ("triton", f"Triton's request counters (nv_inference_count) read 0 over the last {window_s:g} s "
                              f"while {'; '.join(evidence)}: the signals contradict each other (a Triton metrics "
                              f"fault such as triton-inference-server/server#8125), so Triton's utilization, batch "
                              f"size, service time and queue are unknown: holding what needs them")
        return None
    if requests is not None and runtime_rps <= 0 and triton_rps * window_s >= least:
        return ("runtime", f"modalscale_requests_total reads 0 over the last {window_s:g} s while Triton counts "
                           f"{triton_rps * window_s:.0f} requests ({triton_rps:.2f} req/s, nv_inference_count): the "
                           f"signals contradict each other, so the request rates are unknown: holding what needs "
                           f"them")
    return None


def parse_answers(answers: Mapping[str, Sequence[Mapping[str, Any]]], model_name: str,
                  window_s: float = STABLE_WINDOW_S) -> MetricsReading:
    """Turn the answers to :func:`build_queries` into a :class:`MetricsReading` (pure).

    Args:
        answers: ``{key: result list}`` as ``PrometheusConnect.custom_query`` returns it per key; a missing key
            is an empty answer.
        model_name: ``spec.model.name`` (Triton's client-facing model); ``<model_name>_<modality>`` are the
            per-class models of modality-aware batching.
        window_s: The stable window the answers cover, s (for the request counts of the cross-check).
    Returns:
        The reading. Every series is counted once per pod (a pod scraped by two jobs, or read twice through a
        querier without deduplication, is one pod: :func:`_by_label`). ``workload`` is None (with ``problem``)
        when no target is up, the request counter is missing, a feature the traffic needs is missing, or the
        runtime's request counter reads 0 while Triton's counts requests (``MetricsContradict``);
        ``busy_erlangs`` is None without Triton compute metrics or when Triton's request counters read 0 while
        the service is serving (``MetricsContradict``, :func:`_contradiction`). Targets that are down are left
        out of the sums (``partial``).
    """
    up, newest, per_pod = _targets(answers)
    total = len(up)
    live = sorted(i for i, v in up.items() if v)
    down = tuple(sorted(i for i, v in up.items() if not v))
    if total == 0:
        return MetricsReading(None, None, problem=(NO_SCRAPE_TARGETS, (
            "Prometheus has no scrape target labelled with this InferenceService (labels namespace and "
            "inferenceservice; add a ServiceMonitor/PodMonitor)")))
    if not live:
        return MetricsReading(None, None, targets_total=total, down_targets=down, problem=(
            SCRAPE_TARGETS_DOWN, f"all {total} scrape target(s) are down: {', '.join(down)}"))
    stamps = [newest[i] for i in live if i in newest]
    observed_at = dt.datetime.fromtimestamp(max(stamps), dt.UTC) if stamps else None

    # Executing models: the per-modality models when present (router layout), else every model reported.
    # A non-finite count, exec count or compute time makes every Triton-derived figure unknown.
    triton = {k: _by_label(answers.get(k), "model") for k in ("nv_count", "nv_exec", "nv_compute_us")}
    bad_triton = [k for k, v in triton.items() if v is None]
    counts = triton["nv_count"] or {}
    execs, compute = ({}, {}) if bad_triton else (triton["nv_exec"] or {}, triton["nv_compute_us"] or {})
    success = _by_label(answers.get("nv_success"), "model")
    request_us = _by_label(answers.get("nv_request_us"), "model")
    pending = _by_label(answers.get("nv_pending"), "model", rate=False)
    requests = _by_label(answers.get("requests"), "modality") if answers.get("requests") else None
    contradicts = _contradiction(requests, None if bad_triton else counts, execs, compute, request_us or {},
                                 pending, window_s)
    if contradicts and contradicts[0] == "triton":  # Triton's figures are unknown, not zero
        counts, execs, compute, success, request_us, pending = {}, {}, {}, None, None, None

    per_class = {m: f"{model_name}_{m.value}" for m in MODALITIES}
    routed = any(n in counts for n in per_class.values())
    executing = [n for n in per_class.values() if n in counts] if routed else [n for n in counts if n]
    busy: dict[str, float] = {}
    batch_of: dict[str, float] = {}
    for n in executing:
        c, e, us = counts.get(n, 0.0), execs.get(n, 0.0), compute.get(n)
        if c <= 0 or e <= 0 or us is None:
            continue
        batch_of[n] = max(1.0, c / e)
        busy[n] = max(0.0, us) / 1e6 / batch_of[n]
    busy_erlangs = sum(busy.values()) if compute else None
    extra: dict[str, float] = {"targets_up": float(len(live)), "targets_total": float(total)}
    if busy_erlangs is not None:
        extra["busy_erlangs"] = busy_erlangs
    duplicates = _duplicates(answers.get("requests")) + _duplicates(answers.get("up"))
    if duplicates:
        extra["duplicate_series"] = float(duplicates)

    batch: dict[Modality, float] = {}
    service_ms: dict[Modality, float | None] = {}
    if routed:
        for m, n in per_class.items():
            if n in busy and counts.get(n, 0.0) > 0 and busy[n] > 0:
                batch[m] = batch_of[n]
                service_ms[m] = 1000.0 * busy[n] / counts[n]
    else:
        pooled_count = sum(counts.get(n, 0.0) for n in busy)
        pooled_exec = sum(execs.get(n, 0.0) for n in busy)
        if pooled_count > 0 and pooled_exec > 0 and sum(busy.values()) > 0:
            for m in MODALITIES:
                batch[m] = max(1.0, pooled_count / pooled_exec)
                service_ms[m] = 1000.0 * sum(busy.values()) / pooled_count
    for m in MODALITIES:
        if m in batch:
            extra[f"{m.value}_batch_size"] = batch[m]

    workload, problem = _workload(answers, "", batch, service_ms)
    recent, _ = _workload(answers, "recent_", batch, {})
    if contradicts and contradicts[0] == "runtime":  # the request rates are unknown, not zero
        workload, recent = None, None
    if contradicts:  # the more severe fault: it names why a mode holds
        problem = (METRICS_CONTRADICT, contradicts[1])

    # Latency of the client-facing model: the router when present, else the executing models.
    front = model_name if model_name in counts or not executing else None
    names = [front] if front else executing
    if success is not None and request_us is not None and not bad_triton:
        n_ok = sum(success.get(n, 0.0) for n in names)
        if n_ok > 0 and any(n in request_us for n in names):
            extra["mean_latency_ms"] = sum(request_us.get(n, 0.0) for n in names) / n_ok / 1000.0
    p95s = _by_label(answers.get("nv_p95_us"), "model", per_series=True, rate=False) or {}
    p95_us = p95s.get(front) if front else (max((p95s[n] for n in executing if n in p95s), default=None))
    p95_ms = p95_us / 1000.0 if p95_us is not None and p95_us > 0 else None
    queued = sum(max(0.0, v) for v in pending.values()) if pending else None
    # in flight as the client sees it: the client-facing model's requests inside execute (a router counts its
    # requests until answered, so inner models are not added again) plus those waiting in its Triton queue
    inside = _by_label(answers.get("inflight"), "model", rate=False)
    in_flight = (max(0.0, inside[model_name]) + max(0.0, pending.get(model_name, 0.0))
                 if inside is not None and model_name in inside and pending is not None else None)

    if problem is None and down:
        problem = (PARTIAL_TARGETS, f"{len(down)} of {total} scrape target(s) down ({', '.join(down)}); "
                                    f"deciding on the {len(live)} that answered (no scale-down on them)")
    if problem is None and bad_triton:
        problem = _unreadable(", ".join(bad_triton), [s for k in bad_triton for s in answers.get(k) or ()])
    return MetricsReading(observed_at=observed_at, workload=workload, recent_workload=recent,
                          busy_erlangs=busy_erlangs, p95_latency_ms=p95_ms, queued_requests=queued,
                          targets_up=len(live), targets_total=total, down_targets=down,
                          per_pod_targets=per_pod, problem=problem,
                          extra=extra, arrival_counts=_counts(answers.get("arrival_counts")),
                          in_flight_requests=in_flight)


def build_observation(reading: MetricsReading, *, current_replicas: int, ready_replicas: int,
                      slots_per_replica: int, budget_max_replicas: int | None, now: dt.datetime,
                      window_s: float = STABLE_WINDOW_S, recent_window_s: float = RECENT_WINDOW_S) -> Observation:
    """The policy's ``Observation`` from a reading and the replica counts (pure).

    Args:
        reading: From :func:`parse_answers` (or :func:`unavailable`).
        current_replicas: The Deployment's ``spec.replicas`` (the /scale target).
        ready_replicas: Its ``status.readyReplicas``.
        slots_per_replica: ``spec.runtime.instanceCount``.
        budget_max_replicas: The BudgetPolicy cap (``isvc.plan.budget_cap``), None = no cap.
        now: Timezone-aware UTC; stands in for ``observed_at`` when no sample time is known (then the reading
            carries no data anyway).
    Returns:
        The observation; ``utilization_ratio = busy_erlangs / (ready_replicas * slots_per_replica)`` (may exceed
        1 when the work exceeds the slots, as HPA's utilization may exceed 100 %), None when unknown or no
        replica is ready; ``targets_up`` the scrape targets that answered (None when Prometheus has none), which
        the policy compares with ``ready_replicas`` when every target is a pod, else with the targets Prometheus
        has (``targets_expected``; one shared target, as in the local setup, stands for every replica); fewer:
        no scale-down.
    """
    utilization = None
    if reading.busy_erlangs is not None and ready_replicas > 0 and reading.observed_at is not None:
        utilization = reading.busy_erlangs / (ready_replicas * max(1, slots_per_replica))
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
        targets_up=reading.targets_up if reading.targets_total > 0 else None,
        targets_expected=None if reading.per_pod_targets else reading.targets_total,
        arrival_counts=reading.arrival_counts,
        count_bin_s=COUNT_BIN_S,
        in_flight_requests=reading.in_flight_requests,
    )


class PrometheusReader:
    """Runs :func:`build_queries` against one Prometheus with prometheus-api-client (thin I/O).

    Args:
        url: Prometheus base URL (``MODALSCALE_PROMETHEUS_URL``); empty = not configured.
        timeout_s: Per-query HTTP timeout, s.
    """

    def __init__(self, url: str, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client: Any = None

    def answers(self, namespace: str, name: str, at: dt.datetime) -> dict[str, list[dict[str, Any]]]:
        """Every query of :func:`build_queries`, evaluated at ``at`` (one consistent instant).

        Raises:
            Exception: whatever prometheus-api-client / requests raise when Prometheus cannot answer.
        """
        if self._client is None:
            from prometheus_api_client import PrometheusConnect

            self._client = PrometheusConnect(url=self.url, disable_ssl=True, timeout=self.timeout_s)
        params = {"time": f"{at.timestamp():.3f}"}
        return {key: self._client.custom_query(q, params=params)
                for key, q in build_queries(namespace, name).items()}

    def read(self, namespace: str, name: str, model_name: str, at: dt.datetime) -> MetricsReading:
        """Query and parse; never raises for Prometheus trouble (returns an unusable reading instead)."""
        if not self.url:
            return unavailable(PROMETHEUS_NOT_CONFIGURED,
                               "MODALSCALE_PROMETHEUS_URL is not set; the autoscaler has no metrics and holds")
        from prometheus_api_client import PrometheusApiClientException
        from requests.exceptions import RequestException

        try:
            answers = self.answers(namespace, name, at)
        except (RequestException, PrometheusApiClientException, ValueError) as exc:
            first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            return unavailable(PROMETHEUS_UNREACHABLE, f"Prometheus at {self.url} did not answer: {first}")
        return parse_answers(answers, model_name)
