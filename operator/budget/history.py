"""Spend-anomaly history that survives an operator restart: burn rates live in Prometheus, the alerted set in status.

Why a module: the anomaly detector (``modalscale.costmodel.anomaly``) needs each service's burn-rate history (up
to 7 seasons of it) and the set of services already alerted. Kept only in the operator's memory, a restart
forgot both: nothing was decided for about ``recent_s`` (30 min by default) and an anomaly in progress could
be alerted twice. Where each now lives, and why:

* **History: in Prometheus** (Kubecost's way: cost history lives in Prometheus). Every evaluation exports each
  priced service's sample as three gauges on the operator's ``/metrics`` (:class:`BurnGauges`):
  ``modalscale_budget_service_burn_usd_per_hour``, ``modalscale_budget_service_replicas`` and
  ``modalscale_budget_service_usd_per_replica_hour``, labelled ``policy_namespace``, ``policy``, ``namespace``,
  ``inferenceservice`` (and, beside them, the ledger's spend per service in the period, :data:`SPEND_METRIC`,
  which showback reads). At the first evaluation of a policy after start, the history is read back with
  ``query_range`` (:class:`PrometheusHistory`): the dense window (``max(recent_s, smooth_s)``) at the
  evaluation interval and the older seasons at ``keep_every_s`` (300 s), the resolution ``trim_history`` keeps
  anyway, so a week is about 2,000 points per series (Prometheus allows 11,000). Each point is
  ``last_over_time(gauge[step])``: a point exists only where a scrape happened within that step, so the time
  the operator was down is a gap, not the last value repeated for Prometheus' 5-minute lookback.
  Chosen over a bounded summary in the BudgetPolicy status because the baseline is per sample (medians and MAD
  of the same-phase samples of 7 seasons): a faithful summary is thousands of numbers per service, rewritten
  into an object that is written only when something material changes; Prometheus already keeps it, and
  operators already run one (the autoscaler reads it, ``MODALSCALE_PROMETHEUS_URL``).
* **Who is in an anomaly now: in the BudgetPolicy status** (``status.spendAnomalies``), written in the same
  patch as the ``SpendAnomaly`` outbox entry that alerts it, so the alert and the "alerted" mark land together
  or not at all; a restarted operator reads it from the status and never alerts the same anomaly twice.
* **Never decide on a history that could not be read.** When Prometheus does not answer, answers an error or
  ``warnings`` (a partial result), or a malformed body, :class:`HistoryUnavailable` is raised; the evaluation
  then decides no anomaly (the alerted set is held as stored), says so in the condition
  ``SpendAnomalyHistory=False`` / ``HistoryUnavailable`` (naming Prometheus and the error), and retries the
  read at the next evaluation. Without ``MODALSCALE_PROMETHEUS_URL`` the history stays in memory only (as
  before: a restart rebuilds it) and the condition is not written.

The query building and answer parsing are pure (:func:`history_queries`, :func:`parse_history`); only
:class:`PrometheusHistory` does I/O (``requests``, as ``prometheus-api-client`` does for the autoscaler).
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from modalscale.costmodel.anomaly import AnomalyConfig, BurnSample
from modalscale.operator.budget.spend_anomalies import SpendKey
from modalscale.redaction import redact_for_url, redact_url

BURN_METRIC = "modalscale_budget_service_burn_usd_per_hour"
REPLICAS_METRIC = "modalscale_budget_service_replicas"
PRICE_METRIC = "modalscale_budget_service_usd_per_replica_hour"
SPEND_METRIC = "modalscale_budget_service_spend_usd_total"
"""The ledger's spend of a service in the policy's current period, USD, stamped with the evaluation's time: the
figure showback takes the spend of a window from (``modalscale.operator.showback``)."""
LABELS = ("policy_namespace", "policy", "namespace", "inferenceservice")
PERIOD_LABEL = "period_start"
"""Label of :data:`SPEND_METRIC`: the start of the budget period the total is of (RFC 3339, ``...Z``). Each period is
its own series, whose total is 0 at that time: a reader knows where a period starts without a drop of the total (a
new period whose first figure is above the old one's final, a burst after midnight or a service selected minutes
before it, read as no reset lost the old period's final from the window's spend)."""
KEEP_EVERY_S = 300.0
"""Step of the older part of the history (``trim_history`` keeps one sample per 300 s there)."""
MAX_POINTS = 10_000
"""Most points asked of Prometheus per series and query (its limit is 11,000)."""
QUERY_TIMEOUT_S = 10.0

# The condition type (SpendAnomalyHistory) and its reasons live with the others in modalscale.api.conditions.

class HistoryUnavailable(RuntimeError):
    """The history could not be read completely (Prometheus down, an error, a partial answer, a malformed body)."""


class LedgerSpendCollector(Collector):
    """:data:`SPEND_METRIC`: each policy's ledger spend per service in its current period, with the time of the
    evaluation that computed it as the sample's own timestamp.

    Why a counter stamped with the evaluation's time rather than the burn-rate gauge: the ledger charges each pod
    by its own start and stop (a pod scaled away between evaluations, a terminating pod until it ends), which a
    rate sampled at evaluations cannot show (it is in force only from the evaluation that saw the change, and
    leaves terminating pods out). The running total is exact at each evaluation; stamped with that evaluation's
    time (Prometheus keeps exposition timestamps, ``honor_timestamps``), a reader interpolates between
    evaluations instead of lagging one scrape and one evaluation behind. The evaluation that closes a period sets
    the closed period's final spend stamped at its end (``operator.budget.plan.exported_spend``), so the tail from
    its last evaluation to its end is in a sample; the next one exports the new period's spend in a new series
    (label :data:`PERIOD_LABEL`, the period's start), which counts from 0 at that start: a reader sums the series of
    the periods its window meets (``modalscale.operator.showback.spend_over_window``). One series across periods
    read a period change only as a drop, so a new period's first figure above the old one's final was no reset
    and the old period's final was lost from the spend. Within a period the total is the ledger's, monotonic
    across operator restarts (it is in the status).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[SpendKey, tuple[str, dict[SpendKey, tuple[float, float]]]] = {}

    def set(self, policy_namespace: str, policy: str, spent_usd: Mapping[SpendKey, Decimal], at: dt.datetime,
            period_start: dt.datetime) -> None:
        """Replace a policy's series by ``spent_usd`` (service -> spend in the period from ``period_start`` up to
        ``at``)."""
        period = period_start.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            self._values[(policy_namespace, policy)] = (
                period, {k: (float(v), at.timestamp()) for k, v in spent_usd.items()})

    def forget(self, policy_namespace: str, policy: str) -> None:
        with self._lock:
            self._values.pop((policy_namespace, policy), None)

    def collect(self) -> Any:
        family = CounterMetricFamily(SPEND_METRIC, "Ledger spend of an InferenceService in the BudgetPolicy's "
                                     "current period, USD, at the evaluation's time", labels=[*LABELS, PERIOD_LABEL])
        with self._lock:
            values = {p: (period, dict(v)) for p, (period, v) in self._values.items()}
        for pkey, (period, services) in sorted(values.items()):
            for key, (usd, ts) in sorted(services.items()):
                family.add_metric([*pkey, *key, period], usd, timestamp=ts)
        yield family


class BurnGauges:
    """The per-service burn-rate gauges on the operator's registry and the ledger's spend per service (exported
    every evaluation)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.burn = Gauge(BURN_METRIC, "Burn rate of an InferenceService selected by a BudgetPolicy, USD/h",
                          LABELS, registry=registry)
        self.replicas = Gauge(REPLICAS_METRIC, "Replicas running, as the BudgetPolicy evaluation saw them",
                              LABELS, registry=registry)
        self.price = Gauge(PRICE_METRIC, "Effective price per replica-hour (burn rate / replicas), USD",
                           LABELS, registry=registry)
        self.spend = LedgerSpendCollector()
        registry.register(self.spend)
        self._exported: dict[SpendKey, set[SpendKey]] = {}

    def export(self, policy_namespace: str, policy: str, samples: Mapping[SpendKey, BurnSample],
               spent_usd: Mapping[SpendKey, Decimal] | None = None, at: dt.datetime | None = None,
               period_start: dt.datetime | None = None) -> None:
        """Set the gauges of this evaluation's samples; series of services no longer sampled are removed.

        Args:
            spent_usd: The ledger's spend per service in the period from ``period_start`` up to ``at`` (the
                evaluation's time), all of them replacing the policy's :data:`SPEND_METRIC` series; None leaves
                those as they are.
        """
        pkey = (policy_namespace, policy)
        for key, s in samples.items():
            labels = (policy_namespace, policy, *key)
            self.burn.labels(*labels).set(s.usd_per_hour)
            self.replicas.labels(*labels).set(s.replicas)
            self.price.labels(*labels).set(s.usd_per_replica_hour)
        gone = self._exported.get(pkey, set()) - set(samples)
        self._remove(pkey, gone)
        self._exported[pkey] = set(samples)
        if spent_usd is not None:
            if at is None or period_start is None:
                raise ValueError("at (the evaluation's time) and period_start are required with spent_usd")
            self.spend.set(policy_namespace, policy, spent_usd, at, period_start)

    def forget(self, policy_namespace: str, policy: str) -> None:
        """Remove every series of a policy whose daemon stopped (deleted, or another replica leads)."""
        pkey = (policy_namespace, policy)
        self._remove(pkey, self._exported.pop(pkey, set()))
        self.spend.forget(policy_namespace, policy)

    def _remove(self, pkey: SpendKey, keys: set[SpendKey]) -> None:
        for key in keys:
            for g in (self.burn, self.replicas, self.price):
                try:
                    g.remove(*pkey, *key)
                except KeyError:
                    pass


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def history_queries(policy_namespace: str, policy: str, now: dt.datetime, cfg: AnomalyConfig,
                    interval_s: float) -> list[tuple[str, str, dt.datetime, dt.datetime, float]]:
    """The ``query_range`` calls that read one policy's history back: (metric, PromQL, start, end, step_s).

    Two windows per metric: ``[now - dense, now]`` at ``max(1, interval_s)`` s (``dense = max(recent_s,
    smooth_s)``) and ``[now - horizon, now - dense)`` at ``max(300, horizon / 10000)`` s, where ``horizon =
    seasons x season_s + slot_s`` (the detector's, ``anomaly.trim_history``).
    """
    sel = f'policy_namespace="{_quote(policy_namespace)}",policy="{_quote(policy)}"'
    horizon = cfg.seasons * cfg.season_s + cfg.slot_s
    dense = min(max(cfg.recent_s, cfg.smooth_s), horizon)
    dense_step = max(1.0, float(interval_s), dense / MAX_POINTS)
    sparse_step = max(KEEP_EVERY_S, horizon / MAX_POINTS)
    out = []
    for metric in (BURN_METRIC, REPLICAS_METRIC, PRICE_METRIC):
        for start_s, end_s, step in ((dense, 0.0, dense_step), (horizon, dense, sparse_step)):
            if start_s <= end_s:
                continue
            q = f"last_over_time({metric}{{{sel}}}[{int(math.ceil(step))}s])"
            out.append((metric, q, now - dt.timedelta(seconds=start_s),
                        now - dt.timedelta(seconds=end_s + (step if end_s else 0.0)), step))
    return out


def parse_history(answers: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[SpendKey, list[BurnSample]]:
    """Join the answers of :func:`history_queries` into samples per service, oldest first.

    Args:
        answers: (metric, the JSON body of ``/api/v1/query_range``) per query.
    Returns:
        (namespace, name) -> samples; a point is kept only where all three gauges have a value at that time.
    Raises:
        HistoryUnavailable: An answer whose ``status`` is not ``success``, that carries ``warnings`` (a partial
            result), or whose shape or values do not parse.
    """
    points: dict[SpendKey, dict[float, dict[str, float]]] = {}
    for metric, body in answers:
        if not isinstance(body, Mapping) or body.get("status") != "success":
            err = body.get("error") if isinstance(body, Mapping) else None
            raise HistoryUnavailable(f"query of {metric} failed: {err or 'status is not success'}")
        if body.get("warnings"):
            raise HistoryUnavailable(f"query of {metric} answered a partial result: {body['warnings'][0]}")
        try:
            data = body["data"]
            if data["resultType"] != "matrix":
                raise ValueError(f"resultType {data['resultType']!r}, expected matrix")
            for series in data["result"]:
                labels = series["metric"]
                key = (str(labels["namespace"]), str(labels["inferenceservice"]))
                for ts, value in series["values"]:
                    v = float(value)
                    if not math.isfinite(v):
                        raise ValueError(f"value {value!r}")
                    points.setdefault(key, {}).setdefault(round(float(ts), 3), {})[metric] = v
        except (KeyError, TypeError, ValueError) as exc:
            raise HistoryUnavailable(f"answer of {metric} is malformed: {type(exc).__name__}: {exc}") from None
    out: dict[SpendKey, list[BurnSample]] = {}
    for key, by_time in points.items():
        samples = [BurnSample(dt.datetime.fromtimestamp(ts, dt.UTC), v[BURN_METRIC], int(round(v[REPLICAS_METRIC])),
                              v[PRICE_METRIC])
                   for ts, v in sorted(by_time.items()) if len(v) == 3]
        if samples:
            out[key] = samples
    return out


def merge_history(loaded: Mapping[SpendKey, Sequence[BurnSample]],
                  memory: Mapping[SpendKey, Sequence[BurnSample]]) -> dict[SpendKey, list[BurnSample]]:
    """Samples read from Prometheus older than the first one kept in memory, then the memory's (oldest first)."""
    out: dict[SpendKey, list[BurnSample]] = {}
    for key in {*loaded, *memory}:
        mem = list(memory.get(key, ()))
        first = mem[0].time if mem else None
        out[key] = [s for s in loaded.get(key, ()) if first is None or s.time < first] + mem
    return out


class PrometheusHistory:
    """Reads one policy's spend-anomaly history from Prometheus (thin I/O around :func:`parse_history`).

    Args:
        url: Prometheus base URL (``MODALSCALE_PROMETHEUS_URL``).
        timeout_s: Per-query HTTP timeout, seconds.
    """

    def __init__(self, url: str, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)
        """``url`` as messages show it: user info (``user:password@``) redacted."""
        self.timeout_s = timeout_s

    def read(self, policy_namespace: str, policy: str, now: dt.datetime, cfg: AnomalyConfig,
             interval_s: float) -> dict[SpendKey, list[BurnSample]]:
        """The history of every service this policy exported, oldest first.

        Raises:
            HistoryUnavailable: Prometheus did not answer, answered an HTTP error, or see :func:`parse_history`.
        """
        import requests

        answers = []
        for metric, q, start, end, step in history_queries(policy_namespace, policy, now, cfg, interval_s):
            try:
                r = requests.get(f"{self.url}/api/v1/query_range", timeout=self.timeout_s, params={
                    "query": q, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}",
                    "step": f"{step:g}"})
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
            except (requests.RequestException, ValueError) as exc:
                first = (redact_for_url(str(exc), self.url).splitlines() or [type(exc).__name__])[0][:300]
                raise HistoryUnavailable(f"Prometheus at {self.shown_url} did not answer: {first}") from None
            if r.status_code != 200 and not isinstance(body, Mapping):
                raise HistoryUnavailable(f"Prometheus at {self.shown_url} answered HTTP {r.status_code}")
            try:
                answers.append((metric, body if isinstance(body, Mapping) else {}))
                parse_history(answers[-1:])
            except HistoryUnavailable as exc:
                shown = redact_for_url(str(exc), self.url)
                raise HistoryUnavailable(f"Prometheus at {self.shown_url}: {shown}") from None
        return parse_history(answers)


__all__ = ["BURN_METRIC", "BurnGauges", "HistoryUnavailable", "LedgerSpendCollector", "PRICE_METRIC",
           "PERIOD_LABEL", "PrometheusHistory",
           "REPLICAS_METRIC", "SPEND_METRIC", "history_queries", "merge_history", "parse_history"]
