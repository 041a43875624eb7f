"""The pure parse of Prometheus' answers about one InferenceService's traffic into a :class:`MetricsReading`.

The queries and the HTTP call live with the operator (``modalscale.operator.autoscale.observe``, whose docstring
describes which series are demand, the per-class features, service time and batching, each pod once, the
cross-checked counters and the bad answers this parse refuses); this module only reads the answers, as
``PrometheusConnect.custom_query`` returns them per key.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modalscale.api.conditions import (  # condition types and reasons: one module per kind
    INCOMPLETE_FEATURES,
    METRICS_CONTRADICT,
    NEGATIVE_RATE,
    NO_REQUEST_METRICS,
    NO_SCRAPE_TARGETS,
    NON_FINITE_METRICS,
    PARTIAL_TARGETS,
    PARTIAL_WINDOW,
    SCRAPE_TARGETS_DOWN,
    UNKNOWN_SAMPLE_TIME,
)
from modalscale.autoscaler.features import MODALITIES, Modality
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import WorkloadClass

STABLE_WINDOW_S = 60.0
"""Length of the stable metrics window, s (the policy's ``Observation.window_s``)."""
RECENT_WINDOW_S = 15.0
"""Length of the recent (burst) window, s (the policy's ``Observation.recent_window_s``)."""
RATE_EXTRAPOLATION_MAX = 3.2
"""Most that ``rate()``/``increase()`` can overstate a counter's increase over its window: Prometheus extrapolates
the increase between the first and last samples in the window towards each edge by up to 1.1 average sample
intervals (``extrapolatedRate``, promql/functions.go), so (1 + 2 x 1.1) / 1 with two samples in the window (a
series younger than the window, e.g. a gateway or replica started seconds ago, or long scrape intervals); with
more samples it is less. The cross-check (:func:`_contradiction`) counts the arrivals it holds against Triton at
this discount: a burst of 8 requests read as 12 from a gateway started seconds before."""
CONTRADICTION_MIN_REQUESTS = 3.0
"""Requests over the stable window from which a counter says the service is serving while another reads 0
(:func:`_contradiction`); below it one request in flight at the window's edge, seen by one counter and not yet by
the other, could read as a contradiction."""
SERIES_IDENTITY_LABELS = ("pod", "instance", "job")
"""Labels a query keeps per series so that the parse counts each pod once (:func:`_series_key`): ``pod`` (a
PodMonitor, a ServiceMonitor's endpoints or pod discovery) else ``instance`` (a static target), and ``job`` to
tell two scrape jobs of one pod apart. Every other label a scrape or a querier adds (``service``, ``endpoint``,
a Thanos replica label) is dropped by the queries' ``max by``."""


def _value(sample: Mapping[str, Any]) -> float | None:
    """The sample's value; None when it is unparsable or not finite (``NaN``, ``+Inf``, ``-Inf``)."""
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _epoch_s(sample: Mapping[str, Any]) -> float | None:
    """A ``timestamp(up)`` sample's value, s since the epoch; None when it is not a finite number that is a time
    (a value in ms by a units slip, ``1e20``, or a negative one outside ``datetime``'s range, as much as ``NaN``)."""
    v = _value(sample)
    if v is None:
        return None
    try:
        dt.datetime.fromtimestamp(v, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return v


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
    and ``+-Inf`` for a division by zero; a sum with one unknown term is unknown: missing data, never zero), when
    a sum of finite values is not (it overflows to ``+-Inf``), or,
    for a ``rate``, is negative (``rate``/``increase`` correct counter resets, so a negative rate is a counter
    read without that correction, e.g. by a recording rule with ``delta``; missing data, never zero either).
    With ``per_series`` such a series is left out instead (only that label value is unknown: a Triton summary
    quantile is NaN for a model with no request in its window)."""
    best = _largest_per_series(answer, per_series=per_series, rate=rate)
    if best is None:
        return None
    out: dict[str, float] = {}
    for (_, content), v in best.items():
        name = dict(content).get(label, "")
        out[name] = out.get(name, 0.0) + v
    if not all(math.isfinite(v) for v in out.values()):
        return None  # finite values whose sum is not (+-Inf): no number either
    return out


def _largest_per_series(answer: Sequence[Mapping[str, Any]] | None, *, per_series: bool, rate: bool
                        ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """``{series key: value}`` of one answer (:func:`_series_key`; the largest when a pod's series arrives more than
    once). A value that is not finite or, for a ``rate``, negative makes the answer None, or with ``per_series``
    leaves that series out (see :func:`_by_label`)."""
    best: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in answer or ():
        v = _value(sample)
        if v is None or (rate and v < 0):
            if per_series:
                continue
            return None
        key = _series_key(sample.get("metric") or {})
        best[key] = max(v, best.get(key, v))
    return best


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
              batch: Mapping[Modality, float], service_ms: Mapping[Modality, float | None], gateway: bool = False
              ) -> tuple[tuple[WorkloadClass, ...] | None, tuple[str, str] | None]:
    """Per-class workload from one window's answers (``prefix`` "" or "recent_"; ``gateway``: they are the
    request gateway's series)."""
    if not answers.get(prefix + "requests"):
        where = ("from the request gateway (component=\"gateway\"; spec.gateway.enabled: is `modalscale gateway` "
                 "running, and scraped?)" if gateway else "(is the modalscale runtime serving it, and scraped?)")
        return None, (NO_REQUEST_METRICS, f"no modalscale_requests_total series for this InferenceService {where}")
    by_modality = _by_label(answers[prefix + "requests"], "modality")
    if by_modality is None:
        return None, _unreadable(prefix + "requests", answers[prefix + "requests"])
    rates = {m: v for m, v in by_modality.items() if m}
    unclassed = {m or "(none)": v for m, v in by_modality.items() if m not in {c.value for c in MODALITIES} and v > 0}
    if unclassed:  # requests arrive that no class counts: unread demand, never zero traffic
        return None, (INCOMPLETE_FEATURES, f"{prefix}requests arrive under modality label(s) "
                                           f"{', '.join(sorted(unclassed))} ({sum(unclassed.values()):.2f} req/s), "
                                           f"none of {', '.join(m.value for m in MODALITIES)}: their class and "
                                           f"features are unknown, so is the workload: holding")
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
        if not all(math.isfinite(v) for v in (images, pixels, tokens)):  # finite sums over a rate near 0
            return None, (NON_FINITE_METRICS, f"a {prefix}feature mean per {m.value} request is not finite (its "
                                              f"histogram's rate over a request rate of {rate:g} req/s); that is "
                                              f"missing data, not a number: holding")
        if m != Modality.TEXT and (images <= 0 or pixels <= 0):
            return None, (INCOMPLETE_FEATURES, f"{m.value} requests arrive but their image features read 0")
        if m == Modality.IMAGE_TEXT and tokens <= 0:
            return None, (INCOMPLETE_FEATURES, "image_text requests arrive but their token feature reads 0")
        out.append(WorkloadClass(
            modality=m, rate_rps=rate, mean_image_pixels=pixels, mean_image_count=images,
            mean_text_tokens=0.0 if m == Modality.IMAGE else tokens, mean_batch_size=max(1.0, batch.get(m, 1.0)),
            observed_service_ms=service_ms.get(m)))
    return tuple(out), None


HOLE_STEPS = 1.5
"""Consecutive ``arrival_counts`` bins further apart than this many steps have a hole between them (:func:`_counts`)."""


def _counts(answer: Sequence[Mapping[str, Any]] | None) -> tuple[float, ...] | None:
    """The per-bin counts of the ``arrival_counts`` range vector (one series of ``[ts, "v"]`` values), oldest first
    (pure).

    Bins missing from the answer (Prometheus down or not scraping: a hole) split the series. The bin on each side
    of a hole reads low (``increase()`` over a window holding only part of the data extrapolates at most 1.1
    scrape intervals towards its edges) and the bins before a hole are not consecutive with those after it, so
    only the run after the newest hole is kept, less its first bin; the step is the smallest spacing of the
    answer's timestamps (the subquery's resolution).

    Returns:
        The counts, or None when absent, malformed, any value is not finite, or a hole leaves no whole bin.
    """
    if not answer or len(answer) != 1:
        return None
    values = answer[0].get("values")
    if not isinstance(values, Sequence) or not values:
        return None
    points = []
    for point in values:
        try:
            t, v = float(point[0]), float(point[1])
        except (IndexError, TypeError, ValueError):
            return None
        if not (math.isfinite(v) and math.isfinite(t)):
            return None
        points.append((t, max(0.0, v)))
    points.sort()
    spacings = [b[0] - a[0] for a, b in zip(points, points[1:]) if b[0] > a[0]]
    if spacings:
        step = min(spacings)
        holes = [i + 1 for i, (a, b) in enumerate(zip(points, points[1:])) if b[0] - a[0] > HOLE_STEPS * step]
        if holes:
            points = points[holes[-1] + 1:]  # after the newest hole, less its first (partial) bin
    return tuple(v for _, v in points) or None


def _targets(answers: Mapping[str, Sequence[Mapping[str, Any]]], up_key: str = "up", scraped_key: str = "scraped"
             ) -> tuple[dict[str, bool], dict[str, float], bool]:
    """The scrape targets per pod identity: ``({identity: any of its targets up}, {identity: newest sample time of
    its up targets, s}, every target has a pod label)``. A pod scraped by two jobs (or read twice through a
    querier) is one target, up when either of its scrapes is (its series are read from that one). ``up_key`` and
    ``scraped_key``: the answers of ``up`` and its sample timestamps (the replicas', or the gateway's)."""
    def scrape(labels: Mapping[str, Any]) -> tuple[str, str]:
        return str(labels.get("instance", "?")), str(labels.get("job", ""))

    stamps = {scrape(s.get("metric") or {}): _epoch_s(s) for s in answers.get(scraped_key) or ()}
    up: dict[str, bool] = {}
    newest: dict[str, float] = {}
    rows = answers.get(up_key) or ()
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


GAP_TOLERANCE_INTERVALS = 2.5
"""A window's first successful scrape may come this many scrape intervals after its start (one failed or late
scrape, as Prometheus' own ``rate()`` extrapolation allows 1.1 intervals at each edge) before the window counts as
partial (:func:`_window_holes`)."""


def _window_holes(answers: _Answers, windows: Mapping[str, float]) -> dict[str, tuple[int, float]]:
    """The windows (``{name: length s}``) whose start lies in a gap of Prometheus' data (pure).

    A gap is time in which Prometheus has no successful scrape (``up == 1``) of a target that it scraped before:
    Prometheus was down or not scraping, or the target did not answer. ``rate()`` and ``increase()`` over a window
    whose start lies in such a gap see only the samples after it and read low (they extrapolate at most 1.1 sample
    intervals towards the window's start), so every rate of that window is partial. A target first scraped inside
    the window (a new pod, a new service: ``window_before`` has no success for it) has no gap: its counters start
    there. Only targets up now are checked (a target down now makes the reading partial already).

    Reads ``window_up`` (``up`` over the stable window, raw samples: a range vector) and ``window_before`` (whether
    each target had a successful scrape in the ten minutes before it); without ``window_up`` (not asked) nothing is
    checked. Returns ``{name: (targets whose data start late, seconds of the window before their first success)}``
    for the partial windows only.
    """
    rows = answers.get("window_up")
    if rows is None:
        return {}
    end = next((float(s["value"][0]) for s in answers.get("up") or () if s.get("value")), None)
    series: list[tuple[tuple[str, str], list[tuple[float, float]]]] = []
    for row in rows:
        labels = row.get("metric") or {}
        points = []
        for stamp, value in row.get("values") or ():
            try:
                points.append((float(stamp), float(value)))
            except (TypeError, ValueError):
                continue
        points.sort()
        if points:
            series.append(((str(labels.get("instance", "")), str(labels.get("job", ""))), points))
    if not series:
        return {}
    end = end if end is not None else max(p[-1][0] for _, p in series)
    before = {(str((s.get("metric") or {}).get("instance", "")), str((s.get("metric") or {}).get("job", "")))
              for s in answers.get("window_before") or () if _value(s) == 1.0}
    steps = sorted(b[0] - a[0] for _, p in series for a, b in zip(p, p[1:]) if b[0] > a[0])
    interval = steps[len(steps) // 2] if steps else None
    out: dict[str, tuple[int, float]] = {}
    for name, length in windows.items():
        start = end - length
        late, worst = 0, 0.0
        for key, points in series:
            if points[-1][1] != 1.0:
                continue  # down now: the reading is partial by its targets
            ok = [t for t, v in points if v == 1.0]
            had = key in before or any(t < start for t in ok)
            if not had:
                continue  # first scraped inside the window: its counters start there
            first = next((t for t in ok if t >= start), end)
            allowed = GAP_TOLERANCE_INTERVALS * interval if interval is not None else 0.0
            if interval is None and name != "stable":
                continue  # too few samples to tell a gap from the scrape interval
            if first - start > allowed:
                late, worst = late + 1, max(worst, first - start)
        if late:
            out[name] = (late, worst)
    return out


def _contradiction(requests: Mapping[str, float] | None, counts: Mapping[str, float] | None,
                   execs: Mapping[str, float], compute_us: Mapping[str, float], request_us: Mapping[str, float],
                   pending: Mapping[str, float] | None, window_s: float,
                   outstanding: float = 0.0) -> tuple[str, str] | None:
    """Which demand signal reads idle while another says the service is serving (pure).

    The request counters are two: the runtime's own ``modalscale_requests_total`` (``requests``, req/s by
    modality; the gateway's series of that name when the gateway is on) and Triton's ``nv_inference_count``
    (``counts``, req/s by model). Triton's execution count and its compute and request durations (all counted on
    completion) are evidence of serving too; its pending requests are not (they have not completed either). A
    counter "says serving" when it counts at least :data:`CONTRADICTION_MIN_REQUESTS` requests over the window;
    "reads idle" when its rate is 0.

    ``modalscale_requests_total`` counts requests as they arrive and Triton's count as they complete, so the
    requests ``outstanding`` now (in flight, waiting in a queue, or refused by the gateway's admission inside the
    window: none of them can have completed in Triton) are taken off the first, read at the discount of
    :data:`RATE_EXTRAPOLATION_MAX`, before it may say serving: a burst of long requests none of which has
    finished yet is no contradiction.

    Returns:
        ``("triton", why)`` when Triton's request counters read 0 while the runtime's counter or Triton's other
        figures say serving (triton-inference-server/server#8125: ``nv_inference_count``, ``..._exec_count``,
        ``..._request_success`` and the pending gauge stuck at 0 in Triton 2.51 while requests are served), or one
        model's count reads 0 while its own executions or compute time say it serves (a router's count hides it);
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
        if runtime_rps * window_s / RATE_EXTRAPOLATION_MAX - outstanding >= least:
            evidence.append(f"modalscale_requests_total counts {runtime_rps * window_s:.0f} requests "
                            f"({runtime_rps:.2f} req/s; {outstanding:.0f} of them outstanding)")
        # Evidence of completed work only: requests pending in Triton's queue have not completed either (a
        # burst of long requests), so they are outstanding, not a contradiction.
        for what, figures in (("executions (nv_inference_exec_count)", execs),
                              ("compute time (nv_inference_compute_*_duration_us)", compute_us),
                              ("request time (nv_inference_request_duration_us)", request_us)):
            if sum(figures.values()) > 0:
                evidence.append(f"Triton reports {what} {sum(figures.values()):g}")
        if evidence:
            return ("triton", f"Triton's request counters (nv_inference_count) read 0 over the last {window_s:g} s "
                              f"while {'; '.join(evidence)}: the signals contradict each other (a Triton metrics "
                              f"fault such as triton-inference-server/server#8125), so Triton's utilization, batch "
                              f"size, service time and queue are unknown: holding what needs them")
        return None
    # the same fault on one model only (an executing model behind a router that counts): its count reads 0 while its
    # own executions or compute time say it serves; Triton's per-model figures cannot be told apart then either
    stuck = sorted(n for n in {*execs, *compute_us} if counts.get(n, 0.0) <= 0
                   and (execs.get(n, 0.0) > 0 or compute_us.get(n, 0.0) > 0))
    if stuck:
        return ("triton", f"Triton's request counter (nv_inference_count) of model(s) {', '.join(stuck)} reads 0 over "
                          f"the last {window_s:g} s while their executions (nv_inference_exec_count) or compute time "
                          f"(nv_inference_compute_*_duration_us) say they serve: the signals contradict each other "
                          f"(a Triton metrics fault such as triton-inference-server/server#8125), so Triton's "
                          f"utilization, batch size, service time and queue are unknown: holding what needs them")
    if requests is not None and runtime_rps <= 0 and triton_rps * window_s >= least:
        return ("runtime", f"modalscale_requests_total reads 0 over the last {window_s:g} s while Triton counts "
                           f"{triton_rps * window_s:.0f} requests ({triton_rps:.2f} req/s, nv_inference_count): the "
                           f"signals contradict each other, so the request rates are unknown: holding what needs "
                           f"them")
    return None


_Answers = Mapping[str, Sequence[Mapping[str, Any]]]
"""``{key: result list}`` as ``PrometheusConnect.custom_query`` returns it per key of ``build_queries``."""
_Problem = tuple[str, str]
"""``(reason, message)`` of a reading that cannot be used as it is."""


@dataclass(frozen=True)
class _TritonFigures:
    """Triton's figures by model name after the cross-check (:func:`_triton_figures`): rates per second of
    requests (``counts``), executions (``execs``), compute time (``compute_us``, µs/s), successes and request
    time (``request_us``, µs/s); ``pending`` requests (a gauge). None or empty: unknown."""

    counts: dict[str, float]
    execs: dict[str, float]
    compute_us: dict[str, float]
    success: dict[str, float] | None
    request_us: dict[str, float] | None
    pending: dict[str, float] | None
    bad: list[str]
    """Keys whose answer :func:`_by_label` refused (non-finite or negative): every Triton-derived figure is
    unknown."""
    contradicts: _Problem | None
    """:func:`_contradiction`'s ``(which, why)``."""


@dataclass(frozen=True)
class _ServiceFigures:
    """What Triton's figures say of the executing models (:func:`_service_figures`)."""

    executing: list[str]
    busy_erlangs: float | None
    batch: dict[Modality, float]
    service_ms: dict[Modality, float | None]


def _targets_problem(total: int, down: tuple[str, ...], live: Sequence[str]) -> _Problem | None:
    """Why no target can be read: none labelled with the InferenceService, or all down; None otherwise."""
    if total == 0:
        return (NO_SCRAPE_TARGETS, "Prometheus has no scrape target labelled with this InferenceService (labels "
                                   "namespace and inferenceservice; add a ServiceMonitor/PodMonitor)")
    if not live:
        return (SCRAPE_TARGETS_DOWN, f"all {total} scrape target(s) are down: {', '.join(down)}")
    return None


def _unknown_time(what: str, unstamped: Sequence[str], live: int) -> _Problem:
    """``(UnknownSampleTime, message)`` for the ``unstamped`` targets of ``live`` that answered without a readable
    scrape time (``what``: "" for the replicas, "the request gateway's " for the gateway)."""
    return (UNKNOWN_SAMPLE_TIME, f"{len(unstamped)} of {live} scrape target(s) of {what or 'this InferenceService'} "
                                 f"answered with no readable scrape time (timestamp(up) missing, not finite, or not "
                                 f"in seconds: {', '.join(unstamped)}): their data are of unknown age, never read as "
                                 f"fresh; holding")


def _outstanding(answers: _Answers, gw: "_GatewayFigures | None") -> float:
    """Requests counted as arrived that cannot have completed in Triton yet (:func:`_contradiction`): with the
    gateway (``gw``), its in-flight and queued requests now plus those its admission refused inside the window
    (``gateway_refused``); without it, the runtime's requests in flight (``inflight``). An answer that cannot be
    read counts 0 (the cross-check then says "contradiction" sooner, which holds)."""
    if gw is not None:
        refused = _by_label(answers.get("gateway_refused"), "", rate=True) or {}
        return (gw.queue or 0.0) + (gw.in_flight or 0.0) + sum(refused.values())
    inside = _by_label(answers.get("inflight"), "", rate=False) or {}
    pending = _by_label(answers.get("nv_pending"), "", rate=False) or {}
    return sum(max(0.0, v) for v in (*inside.values(), *pending.values()))


def _triton_figures(answers: _Answers, window_s: float, outstanding: float = 0.0) -> _TritonFigures:
    """Triton's figures by model, cross-checked against the runtime's request counter (:func:`_contradiction`,
    with the ``outstanding`` requests of :func:`_outstanding`).

    A non-finite count, exec count or compute time makes every Triton-derived figure unknown (``bad``); when
    Triton's request counters read 0 while the service is serving, Triton's figures are unknown, not zero."""
    triton = {k: _by_label(answers.get(k), "model") for k in ("nv_count", "nv_exec", "nv_compute_us")}
    bad = [k for k, v in triton.items() if v is None]
    counts = triton["nv_count"] or {}
    execs, compute = ({}, {}) if bad else (triton["nv_exec"] or {}, triton["nv_compute_us"] or {})
    success = _by_label(answers.get("nv_success"), "model")
    request_us = _by_label(answers.get("nv_request_us"), "model")
    pending = _by_label(answers.get("nv_pending"), "model", rate=False)
    requests = _by_label(answers.get("requests"), "modality") if answers.get("requests") else None
    contradicts = _contradiction(requests, None if bad else counts, execs, compute, request_us or {},
                                 pending, window_s, outstanding)
    if contradicts and contradicts[0] == "triton":  # Triton's figures are unknown, not zero
        return _TritonFigures({}, {}, {}, None, None, None, bad, contradicts)
    return _TritonFigures(counts, execs, compute, success, request_us, pending, bad, contradicts)


def _requests(t: _TritonFigures, n: str) -> float:
    """Requests/s model ``n`` executed: the smaller of its successes (``nv_inference_request_success``) and
    ``nv_inference_count`` (the count alone while Triton counts no success).

    Triton adds an execution's compute time to each request in it, so the busy time is the compute time over the
    requests (not the batch items) per execution. Each count bounds the executed requests from above: successes
    include response-cache hits (never executed; a model without router with ``response_cache``), and
    ``nv_inference_count`` counts batch items, of which a request may carry several: a staged service's image
    encoder pool (model ``image_encoder``, whose batch dimension is images) gets each front request's images in one
    request, and dividing by the images per execution would count a request of 3 images a third of its time. No
    model here has both (the pool has no response cache; the client-facing models' batch item is the request)."""
    ok = (t.success or {}).get(n, 0.0)
    count = t.counts.get(n, 0.0)
    return min(ok, count) if ok > 0 else count


def _service_figures(t: _TritonFigures, model_name: str) -> _ServiceFigures:
    """Busy servers (erlangs: compute s/s over the batch size in requests, :func:`_requests`), batch size and
    service time (ms) per class.

    Executing models: the per-modality models ``<model_name>_<modality>`` when present (router layout), each its
    class's figures; else every model reported, pooled over the classes."""
    per_class = {m: f"{model_name}_{m.value}" for m in MODALITIES}
    routed = any(n in t.counts for n in per_class.values())
    executing = [n for n in per_class.values() if n in t.counts] if routed else [n for n in t.counts if n]
    busy: dict[str, float] = {}
    batch_of: dict[str, float] = {}
    for n in executing:
        c, e, us = _requests(t, n), t.execs.get(n, 0.0), t.compute_us.get(n)
        if c <= 0 or e <= 0 or us is None:
            continue
        batch_of[n] = max(1.0, c / e)
        busy[n] = max(0.0, us) / 1e6 / batch_of[n]
    batch: dict[Modality, float] = {}
    service_ms: dict[Modality, float | None] = {}
    if routed:
        for m, n in per_class.items():
            if n in busy and _requests(t, n) > 0 and busy[n] > 0 and math.isfinite(1000.0 * busy[n] / _requests(t, n)):
                batch[m] = batch_of[n]
                service_ms[m] = 1000.0 * busy[n] / _requests(t, n)
    else:
        pooled_count = sum(_requests(t, n) for n in busy)
        pooled_exec = sum(t.execs.get(n, 0.0) for n in busy)
        if (pooled_count > 0 and pooled_exec > 0 and sum(busy.values()) > 0
                and math.isfinite(1000.0 * sum(busy.values()) / pooled_count)):
            for m in MODALITIES:
                batch[m] = max(1.0, pooled_count / pooled_exec)
                service_ms[m] = 1000.0 * sum(busy.values()) / pooled_count
    return _ServiceFigures(executing, sum(busy.values()) if t.compute_us else None, batch, service_ms)


def _latency_ms(answers: _Answers, model_name: str, t: _TritonFigures, executing: Sequence[str]
                ) -> tuple[float | None, float | None]:
    """``(mean, p95)`` latency of the client-facing model, ms: the router when present, else the executing
    models; None where unknown."""
    front = model_name if model_name in t.counts or not executing else None
    names = [front] if front else list(executing)
    mean_ms = None
    if t.success is not None and t.request_us is not None and not t.bad:
        n_ok = sum(t.success.get(n, 0.0) for n in names)
        if n_ok > 0 and any(n in t.request_us for n in names):
            mean_ms = sum(t.request_us.get(n, 0.0) for n in names) / n_ok / 1000.0
    p95s = _by_label(answers.get("nv_p95_us"), "model", per_series=True, rate=False) or {}
    p95_us = p95s.get(front) if front else (max((p95s[n] for n in executing if n in p95s), default=None))
    return mean_ms, (p95_us / 1000.0 if p95_us is not None and p95_us > 0 else None)


def _queue(answers: _Answers, model_name: str, pending: Mapping[str, float] | None
           ) -> tuple[float | None, float | None]:
    """``(queued requests, requests in flight)``. In flight as the client sees it: the client-facing model's
    requests inside execute (a router counts its requests until answered, so inner models are not added again)
    plus those waiting in its Triton queue."""
    queued = sum(max(0.0, v) for v in pending.values()) if pending else None
    inside = _by_label(answers.get("inflight"), "model", rate=False)
    in_flight = (max(0.0, inside[model_name]) + max(0.0, pending.get(model_name, 0.0))
                 if inside is not None and model_name in inside and pending is not None else None)
    return queued, in_flight


def _workloads(answers: _Answers, s: _ServiceFigures, contradicts: _Problem | None, gateway: bool = False
               ) -> tuple[tuple[WorkloadClass, ...] | None, tuple[WorkloadClass, ...] | None, _Problem | None]:
    """``(stable workload, recent workload, problem)``: both None when the runtime's counter contradicts
    Triton's (the request rates are unknown, not zero) or the recent window's answers are not finite or negative;
    a contradiction is the problem named first."""
    workload, problem = _workload(answers, "", s.batch, s.service_ms, gateway)
    recent, recent_problem = _workload(answers, "recent_", s.batch, {}, gateway)
    if problem is None and recent_problem is not None and recent_problem[0] in (NON_FINITE_METRICS, NEGATIVE_RATE):
        workload, problem = None, recent_problem  # a burst it cannot see: no decision on the stable window alone
    if contradicts and contradicts[0] == "runtime":  # the request rates are unknown, not zero
        workload, recent = None, None
    if contradicts:  # the more severe fault: it names why a mode holds
        problem = (METRICS_CONTRADICT, contradicts[1])
    return workload, recent, problem


def _extra(answers: _Answers, live: int, total: int, s: _ServiceFigures, mean_latency_ms: float | None,
           gw: _GatewayFigures) -> dict[str, float]:
    """``MetricsReading.extra``: targets, busy erlangs, duplicate series, batch size per class, mean latency, the
    gateway's targets, held queue and in-flight requests (with the gateway)."""
    extra: dict[str, float] = {"targets_up": float(live), "targets_total": float(total)}
    if gw.total:
        extra.update(gateway_targets_up=float(gw.up), gateway_targets_total=float(gw.total))
    if gw.queue is not None and gw.in_flight is not None:
        extra.update(gateway_queue_requests=gw.queue, gateway_in_flight_requests=gw.in_flight)
    if s.busy_erlangs is not None:
        extra["busy_erlangs"] = s.busy_erlangs
    duplicates = _duplicates(answers.get("requests")) + _duplicates(answers.get("up"))
    if duplicates:
        extra["duplicate_series"] = float(duplicates)
    for m in MODALITIES:
        if m in s.batch:
            extra[f"{m.value}_batch_size"] = s.batch[m]
    if mean_latency_ms is not None:
        extra["mean_latency_ms"] = mean_latency_ms
    int8 = _int8_fallback(answers.get("int8_fallback"))
    if int8 is not None:
        extra["image_int8_fallback_pods"], extra["image_int8_pods"] = int8
    return extra


def _int8_fallback(answer: Sequence[Mapping[str, Any]] | None) -> tuple[float, float] | None:
    """``(pods whose INT8 image encoder fell back to FP32, pods that export the gauge)`` from the runtime's
    ``modalscale_image_int8_fallback`` (1 = every image FP32 after the load-time fidelity guard, 0 = INT8 serves
    the large images); a pod's duplicate series count once (the largest value). None when no pod exports it (INT8
    images not asked for) or no value is finite: informational only, it never holds a decision."""
    per_pod: dict[str, float] = {}
    for (pod, _), v in (_largest_per_series(answer, per_series=True, rate=False) or {}).items():
        per_pod[pod] = max(v, per_pod.get(pod, v))  # a pod's models (router and per-modality) fold into one
    if not per_pod:
        return None
    return float(sum(1 for v in per_pod.values() if v >= 0.5)), float(len(per_pod))


@dataclass(frozen=True)
class _GatewayFigures:
    """What the request gateway's targets say (:func:`_gateway_figures`)."""

    up: int
    total: int
    down: tuple[str, ...]
    newest_s: float | None
    """Newest sample time of an up gateway target, s since the epoch; None = unknown."""
    queue: float | None
    """Requests held in the gateway's queues now, summed over its pods; None = unknown."""
    in_flight: float | None
    """Requests the gateway admitted and has not finished (at a replica), summed over its pods; None = unknown."""
    problem: _Problem | None
    """Why the gateway's demand cannot be read (then the workload is unknown: hold); None = readable."""
    oldest_s: float | None = None
    """The oldest of the up gateway targets' newest sample times, s since the epoch: how fresh the demand summed over
    them is (a gateway pod last scraped minutes ago has no rate in the window, and its requests are missing from
    the sum); None = unknown."""


def _gateway_figures(answers: _Answers) -> _GatewayFigures:
    """The gateway's targets, held queue and in-flight requests (``gateway_*`` keys of the answers).

    No gateway target, all down, or a queue or in-flight gauge missing or not finite is a ``problem``: with the
    gateway on, demand is read from its series only, so it is unknown (never read as zero)."""
    up, newest, _ = _targets(answers, "gateway_up", "gateway_scraped")
    live = sorted(i for i, v in up.items() if v)
    down = tuple(sorted(i for i, v in up.items() if not v))
    stamp = max((newest[i] for i in live if i in newest), default=None)
    unstamped = [i for i in live if i not in newest]
    if not up:
        return _GatewayFigures(0, 0, (), None, None, None, (
            NO_SCRAPE_TARGETS, "spec.gateway.enabled, but Prometheus has no scrape target of the request gateway "
                               "labelled with this InferenceService (labels namespace, inferenceservice and "
                               "component=\"gateway\": the chart's PodMonitor <release>-gateways sets them); demand "
                               "is read from the gateway only, so it is unknown: holding"))
    if not live:
        return _GatewayFigures(0, len(up), down, None, None, None, (
            SCRAPE_TARGETS_DOWN, f"all {len(up)} scrape target(s) of the request gateway are down "
                                 f"({', '.join(down)}); demand is read from the gateway only: holding"))
    if unstamped:  # the demand's only source is of unknown age
        return _GatewayFigures(len(live), len(up), down, None, None, None,
                               _unknown_time("the request gateway's ", unstamped, len(live)))
    gauges: dict[str, float] = {}
    names = {"gateway_queue": "modalscale_gateway_queue_depth",
             "gateway_inflight": "modalscale_gateway_inflight_requests"}
    for key, metric in names.items():
        read = _by_label(answers.get(key), "", rate=False)
        if read is None:
            return _GatewayFigures(len(live), len(up), down, stamp, None, None, _unreadable(key, answers.get(key)))
        if not read:
            return _GatewayFigures(len(live), len(up), down, stamp, None, None, (
                NO_REQUEST_METRICS, f"no {metric} series from the request gateway's targets; its queue is "
                                    f"unknown: holding"))
        gauges[key] = max(0.0, sum(read.values()))
    return _GatewayFigures(len(live), len(up), down, stamp, gauges["gateway_queue"], gauges["gateway_inflight"],
                           None, min(newest[i] for i in live))


def _sampled_at(value: float | None, newest_s: float | None) -> dt.datetime | None:
    """When ``value`` was scraped: its source's newest scrape (``newest_s``, Unix s); None when either is unknown."""
    return None if value is None or newest_s is None else dt.datetime.fromtimestamp(newest_s, dt.UTC)


@dataclass(frozen=True)
class _ReplicaTargets:
    """The replicas' scrape targets per pod identity (:func:`_replica_targets`)."""

    total: int
    live: list[str]
    down: tuple[str, ...]
    newest_s: float
    """Newest scrape time of a live target, s since the epoch."""
    per_pod: bool
    oldest_s: float = math.inf
    """The oldest of the live targets' newest scrape times, s since the epoch: how fresh the sums over them are (a
    target whose last scrape is minutes old has no rate in the window, and its traffic is missing from them)."""


def _replica_targets(answers: _Answers) -> _ReplicaTargets | MetricsReading:
    """The replicas' targets; when none can be read (none, all down, or one that answered with no readable scrape
    time: data of unknown age, never dated `now`), the reading with no data that says why."""
    up, newest, per_pod = _targets(answers)
    live = sorted(i for i, v in up.items() if v)
    down = tuple(sorted(i for i, v in up.items() if not v))
    unreadable = _targets_problem(len(up), down, live)
    unstamped = [i for i in live if i not in newest]
    if unreadable is None and unstamped:
        unreadable = _unknown_time("", unstamped, len(live))
    if unreadable is not None:
        return MetricsReading(None, None, targets_total=len(up), down_targets=down, problem=unreadable)
    return _ReplicaTargets(len(up), live, down, max(newest[i] for i in live), per_pod, min(newest[i] for i in live))


def _partial_window(late: int, missing_s: float, window_s: float) -> _Problem:
    """``(PartialMetricsWindow, message)``: ``late`` targets have no sample in the window's first ``missing_s``."""
    return (PARTIAL_WINDOW, f"{late} scrape target(s) scraped before have no sample in the first {missing_s:.0f} s "
                            f"of the {window_s:.0f} s metrics window (Prometheus was down or not scraping, or the "
                            f"target did not answer): every rate over the window would read low; holding until the "
                            f"window lies after the gap")


def parse_answers(answers: _Answers, model_name: str, window_s: float = STABLE_WINDOW_S, *,
                  gateway: bool = False, recent_window_s: float = RECENT_WINDOW_S) -> MetricsReading:
    """Turn the answers to :func:`build_queries` into a :class:`MetricsReading` (pure).

    Args:
        answers: ``{key: result list}`` as ``PrometheusConnect.custom_query`` returns it per key; a missing key
            is an empty answer.
        model_name: ``spec.model.name`` (Triton's client-facing model); ``<model_name>_<modality>`` are the
            per-class models of modality-aware batching.
        window_s: The stable window the answers cover, s (for the request counts of the cross-check).
        gateway: ``spec.gateway.enabled``: the demand keys hold the request gateway's series and the ``gateway_*``
            keys its targets, queue and in-flight gauges (``build_queries(gateway=True)``). Then requests in flight
            are the gateway's in-flight plus its held queue, queued requests Triton's pending plus the held queue,
            and the workload is unknown (``problem`` says why) when the gateway's targets are missing or all down
            or its gauges cannot be read; a gateway target that is down makes the reading partial.
        recent_window_s: The recent window, s.
    Returns:
        The reading. Every series is counted once per pod (a pod scraped by two jobs, or read twice through a
        querier without deduplication, is one pod: :func:`_by_label`). ``workload`` is None (with ``problem``)
        when no target is up, the request counter is missing, a feature the traffic needs is missing, or the
        runtime's request counter reads 0 while Triton's counts requests (``MetricsContradict``);
        ``busy_erlangs`` is None without Triton compute metrics or when Triton's request counters read 0 while
        the service is serving (``MetricsContradict``, :func:`_contradiction`). Targets that are down are left
        out of the sums (``partial``). A window that starts in a gap of Prometheus' data (:func:`_window_holes`)
        gives no rate: the stable window's workload, busy time and per-bin counts are None (``PartialMetricsWindow``),
        the recent window's workload is None. A target that answered with no readable scrape time
        (``UnknownSampleTime``: its data are of unknown age, and an hour-old sample would read fresh) gives a
        reading with no data at all; a non-finite or negative answer of the recent (burst) window leaves the
        workload unknown as the stable window's would (no decision blind to a burst).
    """
    targets = _replica_targets(answers)
    if isinstance(targets, MetricsReading):
        return targets
    total, live, down, per_pod = targets.total, targets.live, targets.down, targets.per_pod
    newest_s, newest_s_replicas = targets.oldest_s, targets.newest_s  # data as fresh as their stalest target's
    gw = _gateway_figures(answers) if gateway else _GatewayFigures(0, 0, (), None, None, None, None)
    triton = _triton_figures(answers, window_s, _outstanding(answers, gw if gateway else None))
    service = _service_figures(triton, model_name)
    workload, recent, problem = _workloads(answers, service, triton.contradicts, gateway)
    mean_latency_ms, p95_ms = _latency_ms(answers, model_name, triton, service.executing)
    queued, in_flight = _queue(answers, model_name, triton.pending)
    counts = _counts(answers.get("arrival_counts"))
    if gateway:
        if gw.problem is not None:  # the demand's only source cannot be read: unknown, never zero
            workload, recent, counts, queued, in_flight, problem = None, None, None, None, None, gw.problem
        else:
            assert gw.queue is not None and gw.in_flight is not None
            queued = gw.queue + (queued or 0.0)  # held in the gateway + waiting in Triton: never the same request
            in_flight = gw.in_flight + gw.queue  # what the clients of the gateway wait on
        gw_s = gw.oldest_s if gw.oldest_s is not None else gw.newest_s
        if gw_s is not None:
            newest_s = min(newest_s, gw_s)  # as fresh as the older of the two sources, each its stalest target
    observed_at = dt.datetime.fromtimestamp(newest_s, dt.UTC)
    busy = service.busy_erlangs
    holes = _window_holes(answers, {"stable": window_s, "recent": recent_window_s})
    if "recent" in holes:
        recent = None
    if "stable" in holes:  # every rate of the window reads low: unknown, never a lower bound to act on
        workload, recent, busy, counts = None, None, None, None
        problem = _partial_window(*holes["stable"], window_s)
    all_down = down + gw.down
    if problem is None and all_down:
        problem = (PARTIAL_TARGETS, f"{len(all_down)} of {total + gw.total} scrape target(s) down "
                                    f"({', '.join(all_down)}); deciding on the {len(live) + gw.up} that answered "
                                    f"(no scale-down on them)")
    if problem is None and triton.bad:
        problem = _unreadable(", ".join(triton.bad), [s for k in triton.bad for s in answers.get(k) or ()])
    return MetricsReading(observed_at=observed_at, workload=workload, recent_workload=recent,
                          busy_erlangs=busy, p95_latency_ms=p95_ms, queued_requests=queued,
                          targets_up=len(live), targets_total=total, down_targets=all_down,
                          per_pod_targets=per_pod, problem=problem,
                          extra=_extra(answers, len(live), total, service, mean_latency_ms, gw),
                          arrival_counts=counts, in_flight_requests=in_flight,
                          in_flight_at=_sampled_at(in_flight, gw.newest_s if gateway else newest_s_replicas),
                          gateway_targets_up=gw.up, gateway_targets_total=gw.total)


__all__ = ["CONTRADICTION_MIN_REQUESTS", "GAP_TOLERANCE_INTERVALS", "RATE_EXTRAPOLATION_MAX", "RECENT_WINDOW_S",
           "SERIES_IDENTITY_LABELS", "STABLE_WINDOW_S",
           "parse_answers"]
