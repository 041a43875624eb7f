"""``modalscale cost showback``: last window's spend per tenant and modality, read from Prometheus.

Why a module: the allocation is pure (``modalscale.costmodel.showback``); this module reads its two inputs over
one window ``[at - window_s, at)`` from one Prometheus and writes the result as a table, JSON or CSV.

Where the figures come from:

* **Spend, per InferenceService** (the ledger): every BudgetPolicy evaluation exports the ledger's spend of each
  selected service in the policy's period as ``modalscale_budget_service_spend_usd_total``, stamped with the
  evaluation's own time (``modalscale.operator.budget.history.LedgerSpendCollector``; labelled ``policy_namespace``,
  ``policy``, ``namespace``, ``inferenceservice``; the chart's ServiceMonitor keeps those labels with
  ``honorLabels``). Prometheus is where the ledger's history lives (Kubecost's way; the BudgetPolicy status holds
  only the period-to-date total, which cannot answer "the last hour"). The raw samples of the window (and up to
  :data:`SPEND_LOOKBEHIND_S` before it) are read and :func:`spend_over_window` takes the difference of the
  running total at the window's two edges, linear between evaluations (the ledger charges pods by their own
  start and stop, so this is the ledger's own figure wherever no pod started or stopped between the two
  evaluations around an edge), each period its own series (label ``period_start``, where its total is 0) summed
  over the periods the window meets, and after the last sample the rate in force
  (``modalscale_budget_service_burn_usd_per_hour`` at the window's end). Several policies selecting one service:
  the largest. Where the series does not reach (a policy younger than the window, no rate in force
  after the last sample) nothing is counted and the service's ``ledger_coverage_ratio`` says how much of the
  window was covered; below 0.99 its rows carry the flag ``PartialLedgerCoverage``.
* **Replica-seconds available, per InferenceService**: ``modalscale_budget_service_replicas`` (the replicas in
  force at each evaluation, ``max by (namespace, inferenceservice)``) read with a range query at step ``step_s``
  and integrated (``available = sum(replicas) x step_s``; a gap inside the window, the operator down, carries the
  replicas before it: :func:`replica_seconds`). It splits the spend between requests and idle, never adds to it;
  its error is at most one evaluation interval per change of replicas in the window (or in a gap).
* **Replica-seconds used, requests, images, pixels, tokens, per (tenant, modality)** (the gateway): ``increase()``
  of the gateway's accounting counters (``modalscale.costmodel.showback.ACCOUNTING_METRICS``) over the window,
  summed by ``namespace, inferenceservice, tenant, modality`` (over gateway pods and, for requests, response
  codes, leaving out requests the gateway refused before any replica: 429, 503, RESOURCE_EXHAUSTED), and
  ``resets()`` of the same counters: a gateway restart inside the window is priced (``increase()`` adds the counts
  before and after it) but flagged ``CounterReset``. ``increase()`` extrapolates to the window's
  edges and does not see the first increment of a series born inside the window (Prometheus counts from its
  first sample).

A service with gateway usage but no ledger rate in Prometheus is not priced (a note says so); a service whose
figures are refused (NaN, negative), or that spent with no replicas sample in the window (its capacity unknown; 0
replicas is a figure: a service scaled to zero pays its gateway pods, all idle), is left out with the error on
stderr and the exit code 1: never a silent wrong number. The query building and answer parsing are pure
(:func:`showback_queries`, :func:`parse_showback`); only :class:`PrometheusShowback` does I/O (``requests``, as
``budget.history`` does).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import datetime as dt
import io
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from modalscale.costmodel.ledger import format_time
from modalscale.costmodel.money import display_usd, display_usd_parts, format_usd, quantize_ledger_usd
from modalscale.costmodel.showback import (
    ACCOUNTING_METRICS,
    GROUP_DIMENSIONS,
    IDLE,
    IMAGE_PIXELS_METRIC,
    IMAGES_METRIC,
    MODALITY_LABEL,
    PRICED_REQUESTS_MATCHER,
    REQUESTS_METRIC,
    SERVICE_SECONDS_METRIC,
    TENANT_LABEL,
    TEXT_TOKENS_METRIC,
    ServiceShowback,
    ServiceWindow,
    ShowbackInputError,
    ShowbackRow,
    TenantUsage,
    aggregate,
    allocate,
)
from modalscale.operator.budget.history import BURN_METRIC, PERIOD_LABEL, REPLICAS_METRIC, SPEND_METRIC
from modalscale.redaction import redact_for_url, redact_url

QUERY_TIMEOUT_S = 30.0
MAX_POINTS = 10_000
"""Most steps asked of Prometheus per range query (its limit is 11,000)."""
MIN_COVERAGE_RATIO = 0.99
"""A service whose ledger series cover less of the window than this is flagged ``PartialLedgerCoverage``."""
PARTIAL_LEDGER_COVERAGE = "PartialLedgerCoverage"
RESETS_PREFIX = "resets:"
SPEND_LOOKBEHIND_S = 3_900
"""How far before the window the spend samples are read, s: the longest evaluation interval a BudgetPolicy may
have (``spec.evaluationIntervalSeconds`` <= 3600) and a scrape, so the running total at the window's start lies
between two samples."""
FORMATS = ("table", "json", "csv")
SpendKey = tuple[str, str]
_BY = "namespace, inferenceservice, tenant, modality"
_SERVICE_BY = "namespace, inferenceservice"
_USAGE_FIELDS = {REQUESTS_METRIC: "requests", SERVICE_SECONDS_METRIC: "service_s", IMAGES_METRIC: "images",
                 IMAGE_PIXELS_METRIC: "image_pixels", TEXT_TOKENS_METRIC: "text_tokens"}


class ShowbackUnavailable(RuntimeError):
    """Prometheus did not answer, answered an error or a partial result, or an answer does not parse."""


@dataclass(frozen=True)
class LedgerWindow:
    """One service's ledger figures over the window as integrated from the rate series."""

    spend_usd: Decimal
    available_replica_s: Decimal
    coverage_ratio: float
    replicas_read: bool = True
    """False: no sample of the replicas series in the window; ``available_replica_s`` is then NaN (not known) when
    the ledger spent anything, so that an allocation refuses it (0 is a real figure: a service at zero replicas
    still pays for its gateway pods)."""


@dataclass(frozen=True)
class Showback:
    """The result of one window: per-service allocations, services refused or not priced, and notes."""

    start: dt.datetime
    end: dt.datetime
    services: list[tuple[ServiceShowback, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[ShowbackRow]:
        """Every service's rows, flagged ``PartialLedgerCoverage`` where the ledger series did not cover the window."""
        out: list[ShowbackRow] = []
        for s, coverage in self.services:
            if coverage < MIN_COVERAGE_RATIO:
                out += [replace(r, flags=(*r.flags, PARTIAL_LEDGER_COVERAGE)) for r in s.rows]
            else:
                out += list(s.rows)
        return out

    @property
    def spend_usd(self) -> Decimal:
        """Spend of the priced services over the window (= the sum of all rows)."""
        return sum((s.window.spend_usd for s, _ in self.services), Decimal(0))


def parse_since(text: str) -> int:
    """``--since``: ``90s``, ``30m``, ``1h``, ``2d`` (or combinations such as ``1h30m``) -> seconds.

    Raises:
        ValueError: Anything else, or zero (the message says the accepted form).
    """
    m = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip())
    if not text.strip() or m is None:
        raise ValueError(f"{text!r} is not a duration such as 1h, 30m, 90s or 1h30m")
    d, h, mi, s = (int(g or 0) for g in m.groups())
    seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    if seconds <= 0:
        raise ValueError(f"{text!r} is an empty window; give a positive duration such as 1h")
    return seconds


def step_for(window_s: int) -> int:
    """Step of the ledger range queries, s: 1 s, or coarser so that a window has at most :data:`MAX_POINTS`."""
    return max(1, math.ceil(window_s / MAX_POINTS))


def _selector(metric: str) -> str:
    """The series of ``metric`` showback counts: requests without those the gateway refused (they cost no replica
    time, :data:`~modalscale.costmodel.showback.REFUSED_CODES`); the other counters count only requests sent to a
    replica already."""
    return f"{metric}{{{PRICED_REQUESTS_MATCHER}}}" if metric == REQUESTS_METRIC else metric


def showback_queries(window_s: int) -> dict[str, str]:
    """The instant queries (evaluated at the window's end): each accounting counter's increase and its resets
    (keys: the metric name, and :data:`RESETS_PREFIX` + the metric name). Requests refused by the gateway (codes
    :data:`~modalscale.costmodel.showback.REFUSED_CODES`) are not counted."""
    queries = {metric: f"sum by ({_BY}) (increase({_selector(metric)}[{window_s}s]))"
               for metric in ACCOUNTING_METRICS}
    # One resets() query per counter: resets() drops the metric name, so one query over several names would
    # produce series with the same labels (Prometheus refuses: "vector cannot contain metrics with the same labelset").
    queries.update({f"{RESETS_PREFIX}{metric}": f"sum by ({_BY}) (resets({_selector(metric)}[{window_s}s]))"
                    for metric in ACCOUNTING_METRICS})
    return queries


def ledger_queries() -> dict[str, str]:
    """The range queries of the ledger's rate series (evaluated from ``start + step`` to ``end``)."""
    return {metric: f"max by ({_SERVICE_BY}) ({metric})" for metric in (BURN_METRIC, REPLICAS_METRIC)}


def spend_query(window_s: int) -> str:
    """The instant query (at the window's end) of the ledger's spend samples: raw, with their own timestamps."""
    return f"{SPEND_METRIC}[{window_s + SPEND_LOOKBEHIND_S}s]"


def _policy_spend(periods: Mapping[float | None, Sequence[tuple[float, float]]], start_s: float, end_s: float,
                  usd_per_hour_after: float | None) -> tuple[float, float]:
    """One policy's spend and covered seconds over the window: the sum over its periods' series (label
    ``period_start``; None: a series without it, an older operator's), the rate after the last sample applied to
    the newest period's only (a closed period spends nothing after its final)."""
    order = sorted(periods, key=lambda p: -math.inf if p is None else p)
    usd, covered = 0.0, 0.0
    for i, period in enumerate(order):
        after = usd_per_hour_after if i == len(order) - 1 else None
        u, c = spend_over_window(periods[period], start_s, end_s, after, period_start_s=period)
        usd, covered = usd + u, covered + c
    return usd, min(covered, end_s - start_s)


def spend_over_window(samples: Sequence[tuple[float, float]], start_s: float, end_s: float,
                      usd_per_hour_after: float | None, period_start_s: float | None = None) -> tuple[float, float]:
    """The ledger's spend over ``[start_s, end_s]`` from samples of its running total (pure).

    The running total is taken linear between two samples (exact where no pod started or stopped between the two
    evaluations; the ledger charges each pod by its own times), a drop is a new period (the value after it is the
    increase, as Prometheus' ``increase()`` reads a counter reset), and after the last sample it grows at
    ``usd_per_hour_after``. Before the first sample nothing is known and nothing is counted.

    Args:
        samples: ``(Unix time s, running total USD)`` of one policy's series of one service, in any order; the
            same time twice (two operator replicas' series) keeps the larger value.
        start_s, end_s: The window, Unix s.
        usd_per_hour_after: The rate in force after the last sample (the burn-rate gauge at ``end_s``), USD/h;
            None: nothing is counted after the last sample.
        period_start_s: Start of the period the series is of (its ``period_start`` label), Unix s: the total is 0
            there, so the spend from it to the first sample is counted (a new period's series starts with what it
            spent since its start, not 0) when the first sample is at most :data:`SPEND_LOOKBEHIND_S` after it
            (an evaluation interval: the period's first evaluation).
    Returns:
        ``(spend USD, seconds of the window covered)``; the spend is NaN when a sample is NaN, infinite or
        negative (for the allocation to refuse, naming the field), 0 without samples.
    """
    points: dict[float, float] = {}
    for t, v in samples:
        if not math.isfinite(v) or v < 0:
            return math.nan, 0.0
        points[t] = max(v, points.get(t, v))
    if not points:
        return 0.0, 0.0
    if period_start_s is not None and 0 < min(points) - period_start_s <= SPEND_LOOKBEHIND_S:
        points[period_start_s] = 0.0  # a period's first evaluation; further from its start (a policy created
        # mid-period, the operator down), what came before the first sample is not known: nothing counted
    times = sorted(points)
    running: list[float] = []
    previous = None
    for t in times:
        v = points[t]
        running.append(v if previous is None else running[-1] + (v - previous if v >= previous else v))
        previous = v

    def total_at(t: float) -> float:
        if t <= times[0]:
            return running[0]
        if t >= times[-1]:
            after = (usd_per_hour_after or 0.0) * (t - times[-1]) / 3600
            return running[-1] + after
        i = bisect.bisect_right(times, t)
        t0, t1 = times[i - 1], times[i]
        return running[i - 1] + (running[i] - running[i - 1]) * (t - t0) / (t1 - t0)

    covered_until = end_s if usd_per_hour_after is not None else min(end_s, times[-1])
    return total_at(end_s) - total_at(start_s), max(0.0, covered_until - max(start_s, times[0]))


def replica_seconds(points: Sequence[tuple[float, float]], step_s: int) -> float:
    """Replica-seconds of one service from its replicas series read at ``step_s`` (pure).

    Each point's replicas count until the next point, the last one's for one step: where points are a step apart
    that is ``sum(replicas) x step_s``. A gap inside the window (the operator down, so no sample: Prometheus marks
    the series stale) carries the replicas before it, as the ledger's spend is taken linear across it; the ledger
    charges the pods by their own start and stop, so counting the gap as 0 replicas split the whole spend over the
    replica-seconds outside it.

    Args:
        points: ``(Unix time s, replicas)`` in any order.
        step_s: The range query's step, s.
    Returns:
        Replica-seconds; NaN when a value is NaN or infinite (for the allocation to refuse).
    """
    ordered = sorted(points)
    total = 0.0
    for (t, v), (t_next, _) in zip(ordered, [*ordered[1:], (ordered[-1][0] + step_s, 0.0)]):
        total += v * (t_next - t)
    return total


def _result(body: Mapping[str, Any], name: str, result_type: str) -> list[Mapping[str, Any]]:
    if not isinstance(body, Mapping) or body.get("status") != "success":
        err = body.get("error") if isinstance(body, Mapping) else None
        raise ShowbackUnavailable(f"query of {name} failed: {err or 'status is not success'}")
    if body.get("warnings"):
        raise ShowbackUnavailable(f"query of {name} answered a partial result: {body['warnings'][0]}")
    try:
        data = body["data"]
        if data["resultType"] != result_type:
            raise ValueError(f"resultType {data['resultType']!r}, expected {result_type}")
        result = data["result"]
        if not isinstance(result, list):
            raise TypeError("result is not a list")
        return result
    except (KeyError, TypeError, ValueError) as exc:
        raise ShowbackUnavailable(f"answer of {name} is malformed: {type(exc).__name__}: {exc}") from None


def parse_showback(instant: Mapping[str, Mapping[str, Any]], ranged: Mapping[str, Mapping[str, Any]],
                   spend: Mapping[str, Any], window_s: int, step_s: int, end_s: float
                   ) -> tuple[dict[SpendKey, LedgerWindow], dict[SpendKey, list[TenantUsage]]]:
    """Join the answers of :func:`showback_queries` (``instant``), :func:`ledger_queries` (``ranged``) and
    :func:`spend_query` (``spend``).

    Args:
        instant: Query key -> the JSON body of ``/api/v1/query``.
        ranged: Metric -> the JSON body of ``/api/v1/query_range`` at ``step_s``.
        spend: The JSON body of ``/api/v1/query`` of :func:`spend_query` (a matrix of raw samples).
        window_s: The window's length, s; ``step_s``: the range queries' step, s; ``end_s``: its end, Unix s.
    Returns:
        ``(ledger figures per service, usage rows per service)``; values are passed on as read (a NaN sample
        stays NaN, for the allocation to refuse naming the field; so does the replica-seconds of a service that
        spent with no replicas sample in the window, while all-zero samples are 0 replica-seconds). A service has
        ledger figures when its spend series has a sample in the window or before it.
    Raises:
        ShowbackUnavailable: An answer that failed, carries warnings (partial) or does not parse.
    """
    usage: dict[SpendKey, dict[tuple[str, str], dict[str, float]]] = {}
    for key, body in instant.items():
        for series in _result(body, key, "vector"):
            try:
                labels = series["metric"]
                svc = (str(labels.get("namespace", "")), str(labels.get("inferenceservice", "")))
                pair = (str(labels.get(TENANT_LABEL, "")), str(labels.get(MODALITY_LABEL, "")))
                value = float(series["value"][1])
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise ShowbackUnavailable(f"answer of {key} is malformed: {type(exc).__name__}: {exc}") from None
            figures = usage.setdefault(svc, {}).setdefault(pair, {})
            if key.startswith(RESETS_PREFIX):
                figures["resets"] = figures.get("resets", 0.0) + value
            else:
                figures[key] = value
    usage_rows: dict[SpendKey, list[TenantUsage]] = {}
    for svc, pairs in usage.items():
        rows = []
        for (tenant, modality), v in sorted(pairs.items()):
            resets = v.get("resets", 0.0)
            rows.append(TenantUsage(
                tenant, modality, **{name: v.get(metric, 0.0) for metric, name in _USAGE_FIELDS.items()},
                counter_resets=int(resets) if math.isfinite(resets) and resets >= 0 else -1))
        usage_rows[svc] = rows
    replicas_at: dict[SpendKey, list[tuple[float, float]]] = {}
    burn_at_end: dict[SpendKey, float] = {}
    for metric, body in ranged.items():
        for series in _result(body, metric, "matrix"):
            try:
                labels = series["metric"]
                svc = (str(labels["namespace"]), str(labels["inferenceservice"]))
                for ts, value in series["values"]:
                    if metric == REPLICAS_METRIC:
                        replicas_at.setdefault(svc, []).append((float(ts), float(value)))
                    elif metric == BURN_METRIC and float(ts) > end_s - step_s:
                        burn_at_end[svc] = float(value)  # the range's last step: at most a step before the end
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise ShowbackUnavailable(f"answer of {metric} is malformed: {type(exc).__name__}: {exc}") from None
    sums = {svc: replica_seconds(points, step_s) for svc, points in replicas_at.items()}
    per_policy: dict[SpendKey, dict[tuple[str, str], dict[float | None, list[tuple[float, float]]]]] = {}
    for series in _result(spend, SPEND_METRIC, "matrix"):
        try:
            labels = series["metric"]
            svc = (str(labels["namespace"]), str(labels["inferenceservice"]))
            policy = (str(labels.get("policy_namespace", "")), str(labels.get("policy", "")))
            period = labels.get(PERIOD_LABEL) or None
            start_s = None if period is None else dt.datetime.fromisoformat(str(period)).timestamp()
            per_policy.setdefault(svc, {}).setdefault(policy, {}).setdefault(start_s, []).extend(
                (float(ts), float(value)) for ts, value in series["values"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ShowbackUnavailable(f"answer of {SPEND_METRIC} is malformed: {type(exc).__name__}: {exc}") from None
    ledger: dict[SpendKey, LedgerWindow] = {}
    for svc, policies in per_policy.items():
        rate = burn_at_end.get(svc)
        rate = rate if rate is not None and math.isfinite(rate) and rate >= 0 else None
        windows = [_policy_spend(periods, end_s - window_s, end_s, rate) for periods in policies.values()]
        usd, covered_s = max(windows, key=lambda f: (not math.isfinite(f[0]), f[0]))
        spend_usd = quantize_ledger_usd(Decimal(repr(usd))) if math.isfinite(usd) else Decimal("NaN")
        replica_s = sums.get(svc, 0.0)
        # No replicas sample is not 0 replicas once something was spent: NaN, for every allocation to refuse.
        known = math.isfinite(replica_s) and (svc in sums or spend_usd == 0)
        available = Decimal(repr(replica_s)) if known else Decimal("NaN")
        ledger[svc] = LedgerWindow(spend_usd, available, covered_s / window_s, svc in sums)
    return ledger, usage_rows


def build_showback(ledger: Mapping[SpendKey, LedgerWindow], usage: Mapping[SpendKey, Sequence[TenantUsage]],
                   start: dt.datetime, end: dt.datetime, namespace: str | None = None) -> Showback:
    """Allocate every service that has a ledger rate (pure).

    Returns:
        :class:`Showback`; a service refused by the allocation is in ``errors`` (its rows left out), one with
        usage but no ledger rate in ``notes``.
    """
    out = Showback(start, end)
    for svc in sorted(set(ledger) | set(usage)):
        if namespace is not None and svc[0] != namespace:
            continue
        ref = f"{svc[0]}/{svc[1]}"
        if svc not in ledger:
            out.notes.append(f"{ref}: gateway usage but no ledger spend ({SPEND_METRIC}) in the window: not priced "
                             "(no BudgetPolicy selects it, or the operator's /metrics is not scraped)")
            continue
        lw = ledger[svc]
        if not lw.replicas_read and lw.spend_usd.is_finite() and not lw.available_replica_s.is_finite():
            # 0 replica-seconds is a real figure (a service scaled to zero pays for its gateway pods); no sample
            # at all is not one: how much capacity ran is not known, so the spend is not split.
            out.errors.append(f"{ref}: not priced: {ref}.available_replica_s: no {REPLICAS_METRIC} sample in the "
                              f"window though the ledger spent {lw.spend_usd} USD (is the operator's /metrics "
                              "scraped for the whole window?)")
            continue
        try:
            result = allocate(ServiceWindow(svc[0], svc[1], lw.spend_usd, lw.available_replica_s),
                              usage.get(svc, ()), accept_counter_resets=True)
        except ShowbackInputError as exc:
            out.errors.append(f"{ref}: not priced: {exc}")
            continue
        out.services.append((result, lw.coverage_ratio))
        out.notes.extend(result.notes)
        if lw.coverage_ratio < MIN_COVERAGE_RATIO:
            out.notes.append(f"{ref}: the ledger's spend series cover {lw.coverage_ratio:.0%} of the window; the "
                             f"spend is that part's, rows flagged {PARTIAL_LEDGER_COVERAGE}")
    return out


def _why_no_answer(exc: BaseException) -> str:
    """Why a request got no answer, without the request's URL (its query string is the whole URL-encoded PromQL):
    urllib3's reason under requests' exception (``[Errno 111] Connection refused``, a timeout), else the exception's
    text with any ``url: PATH?QUERY`` cut."""
    reason = getattr(exc.args[0], "reason", None) if exc.args else None  # requests wraps urllib3's MaxRetryError
    text = str(reason if reason is not None else exc)
    text = re.sub(r"^<[^>]*object at 0x[0-9a-f]+>: ", "", text)  # urllib3's NewConnectionError names its object
    text = re.sub(r"\s*\(Caused by [^)]*\)+", "", text) if reason is None else text
    return re.sub(r"(with )?url: \S+", "", text).strip() or type(exc).__name__


class PrometheusShowback:
    """Reads the showback inputs of one window from Prometheus (thin I/O around :func:`parse_showback`).

    Args:
        url: Prometheus base URL (``--prometheus-url`` or ``MODALSCALE_PROMETHEUS_URL``).
        timeout_s: Per-query HTTP timeout, s.
    """

    def __init__(self, url: str, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)
        self.timeout_s = timeout_s

    def _get(self, path: str, params: Mapping[str, str], name: str) -> Mapping[str, Any]:
        import requests

        try:
            r = requests.get(f"{self.url}{path}", params=dict(params), timeout=self.timeout_s)
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
        except (requests.RequestException, ValueError) as exc:
            first = (redact_for_url(_why_no_answer(exc), self.url).splitlines() or [type(exc).__name__])[0][:300]
            raise ShowbackUnavailable(f"Prometheus at {self.shown_url} did not answer: {first}") from None
        if not isinstance(body, Mapping):
            raise ShowbackUnavailable(f"Prometheus at {self.shown_url} answered HTTP {r.status_code} to {name}")
        return body

    def read(self, window_s: int, at: dt.datetime
             ) -> tuple[dict[SpendKey, LedgerWindow], dict[SpendKey, list[TenantUsage]]]:
        """The ledger figures and usage of ``[at - window_s, at)``.

        Raises:
            ShowbackUnavailable: Prometheus did not answer, or see :func:`parse_showback`.
        """
        step = step_for(window_s)
        end = at.timestamp()
        instant = {key: self._get("/api/v1/query", {"query": q, "time": f"{end:.3f}"}, key)
                   for key, q in showback_queries(window_s).items()}
        ranged = {metric: self._get("/api/v1/query_range", {
            "query": q, "start": f"{end - window_s + step:.3f}", "end": f"{end:.3f}", "step": str(step)}, metric)
            for metric, q in ledger_queries().items()}
        spend = self._get("/api/v1/query", {"query": spend_query(window_s), "time": f"{end:.3f}"}, SPEND_METRIC)
        try:
            return parse_showback(instant, ranged, spend, window_s, step, end)
        except ShowbackUnavailable as exc:
            raise ShowbackUnavailable(f"Prometheus at {self.shown_url}: {redact_for_url(str(exc), self.url)}") from None


# --- Output ---------------------------------------------------------------------------------------------------------

COLUMNS = ("kind", "usd", "usd_per_request", "replica_s", "requests", "images", "image_pixels", "text_tokens",
           "flags")


def _num(d: Decimal) -> str:
    """A count or seconds figure as a plain decimal with at most 3 decimals."""
    return format_usd(d.quantize(Decimal("0.001")).normalize()) if d != d.to_integral() else format_usd(d.normalize())


def _record(r: ShowbackRow, by: Sequence[str]) -> dict[str, str]:
    rec = {d: ("" if getattr(r, d) is None else str(getattr(r, d))) for d in by}
    per = r.usd_per_request
    rec.update({"kind": r.kind, "usd": format_usd(r.usd), "usd_per_request": "" if per is None else format_usd(per),
                "replica_s": _num(r.replica_s), "requests": _num(r.requests), "images": _num(r.images),
                "image_pixels": _num(r.image_pixels), "text_tokens": _num(r.text_tokens),
                "flags": ";".join(r.flags)})
    return rec


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters with which a spreadsheet reads a CSV cell as a formula (OWASP, CSV injection)."""


def spreadsheet_text(cell: str) -> str:
    """A CSV cell a spreadsheet shows as text: one that starts with one of :data:`FORMULA_STARTS` gets a leading
    ``'`` (OWASP's CSV-injection defence). A tenant is any client's header value (``=HYPERLINK(...)`` would be a live
    link in the sheet); the amounts and counts are never negative, so they are never changed."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def render(result: Showback, by: Sequence[str], fmt: str) -> str:
    """The rows grouped ``by`` as ``table`` (people: cents, or the total's sub-cent digits, the rows rounded by
    largest remainder to add up to the total shown, ``money.display_usd_parts``; idle rows named ``(idle)``),
    ``json`` or ``csv``
    (exact: 1e-9 USD, one row per group, the idle rows with empty tenant and modality and kind ``idle``; a cell a
    spreadsheet would read as a formula starts with ``'``, :func:`spreadsheet_text`).

    Raises:
        ValueError: An unknown format, or ``by`` (via :func:`aggregate`).
    """
    rows = aggregate(result.rows, by)
    records = [_record(r, by) for r in rows]
    if fmt == "json":
        return json.dumps({
            "window": {"start": format_time(result.start), "end": format_time(result.end),
                       "seconds": int((result.end - result.start).total_seconds())},
            "by": list(by), "spend_usd": format_usd(result.spend_usd),
            "total_usd": format_usd(sum((r.usd for r in rows), Decimal(0))),
            "services": [{"namespace": s.window.namespace, "inferenceservice": s.window.name,
                          "spend_usd": format_usd(s.window.spend_usd),
                          "available_replica_s": _num(Decimal(s.window.available_replica_s)),
                          "used_replica_s": _num(s.used_replica_s), "oversubscribed": s.oversubscribed,
                          "partial": s.partial, "ledger_coverage_ratio": round(cov, 4)}
                         for s, cov in result.services],
            "rows": records, "notes": result.notes, "errors": result.errors}, indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=[*by, *COLUMNS], lineterminator="\r\n")
        writer.writeheader()
        writer.writerows({k: spreadsheet_text(v) for k, v in rec.items()} for rec in records)
        return buf.getvalue()
    if fmt != "table":
        raise ValueError(f"--format: {fmt!r}; give one of {', '.join(FORMATS)}")
    header = [*by, "kind", "USD", "USD/request", "replica-s", "requests", "flags"]
    lines = [header]
    shown, shown_total = display_usd_parts([r.usd for r in rows])
    for r, rec, usd in zip(rows, records, shown):
        names = [("(idle)" if r.kind == IDLE and d in ("tenant", "modality") else rec[d] or "-") for d in by]
        per = r.usd_per_request
        lines.append([*names, r.kind, usd,
                      "-" if per is None else format_usd(per.normalize()), rec["replica_s"], rec["requests"],
                      rec["flags"] or "-"])
    lines.append(["total", *[""] * (len(by) - 1), "", shown_total, "", "", "", ""])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [f"Showback {format_time(result.start)} .. {format_time(result.end)}: "
            f"{display_usd(result.spend_usd)} USD spent by {len(result.services)} service(s)"]
    text += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    return "\n".join(text) + "\n"


def add_parser(csub: Any) -> None:
    """Register ``showback`` on the ``cost`` subcommands."""
    s = csub.add_parser("showback", help="last window's spend per tenant and modality (ledger x gateway counters)",
                        description="Split each InferenceService's spend over the window (the ledger's rate, as "
                                    "the operator exports it to Prometheus) over tenants and modalities by the "
                                    "replica-seconds their requests used (the gateway's counters); capacity no "
                                    "request used is its own idle row. Exit 1 when a service's figures were refused.")
    s.add_argument("--since", default="1h", help="window length ending now (or at --at): 1h, 30m, 1h30m, 2d")
    s.add_argument("--by", default="tenant,modality",
                   help=f"comma-separated grouping, from {','.join(GROUP_DIMENSIONS)} (default tenant,modality)")
    s.add_argument("--format", choices=FORMATS, default="table", help="output format")
    s.add_argument("--prometheus-url", default=None,
                   help="Prometheus base URL (default: $MODALSCALE_PROMETHEUS_URL)")
    s.add_argument("--namespace", "-n", default=None, help="only InferenceServices in this namespace")
    s.add_argument("--at", default=None, help="end of the window, RFC 3339 (default: now)")
    s.set_defaults(func=run_showback, prog=s.prog)


def run_showback(args: argparse.Namespace) -> int:
    """Read, allocate, print; 0, 1 (a service's figures refused, or Prometheus unavailable) or 2 (bad flags)."""
    import os

    from modalscale.cli import UsageError
    from modalscale.costmodel.ledger import LedgerFormatError, parse_time

    try:
        window_s = parse_since(args.since)
    except ValueError as exc:
        raise UsageError("--since", str(exc)) from None
    by = [d.strip() for d in args.by.split(",") if d.strip()]
    if not by or any(d not in GROUP_DIMENSIONS for d in by) or len(set(by)) != len(by):
        raise UsageError("--by", f"{args.by!r}: give distinct names from {','.join(GROUP_DIMENSIONS)}")
    url = args.prometheus_url or os.environ.get("MODALSCALE_PROMETHEUS_URL", "")
    if not url:
        raise UsageError("--prometheus-url", "no Prometheus to read; give --prometheus-url URL or set "
                                             "MODALSCALE_PROMETHEUS_URL")
    if not url.startswith(("http://", "https://")):  # as the operator's MODALSCALE_PROMETHEUS_URL is checked
        raise UsageError("--prometheus-url", f"{redact_url(url)!r} is not an http:// or https:// URL "
                                             f"(e.g. http://localhost:9090)")
    try:
        at = parse_time(args.at, "--at") if args.at else dt.datetime.now(dt.UTC)
    except LedgerFormatError as exc:
        raise UsageError("--at", str(exc).removeprefix("--at: ")) from None
    at = at.replace(microsecond=0)
    try:
        ledger, usage = PrometheusShowback(url).read(window_s, at)
    except ShowbackUnavailable as exc:
        print(f"modalscale cost showback: {exc}", file=sys.stderr)
        return 1
    result = build_showback(ledger, usage, at - dt.timedelta(seconds=window_s), at, args.namespace)
    sys.stdout.write(render(result, by, args.format))
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    return 1 if result.errors else 0


__all__ = ["FORMATS", "LedgerWindow", "PARTIAL_LEDGER_COVERAGE", "PrometheusShowback",
           "RESETS_PREFIX", "Showback", "ShowbackUnavailable", "add_parser", "build_showback", "ledger_queries",
           "parse_showback", "parse_since", "render", "replica_seconds", "run_showback", "showback_queries",
           "spend_over_window", "spend_query", "step_for"]
