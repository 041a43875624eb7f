"""Step 5 of a budget evaluation: the alerts to send now, once each per period, and what a chat room reads in them.

**Alerts** are de-duplicated per period with state persisted in ``status.thresholds`` (Alertmanager-style: alert on
the crossing, once): each threshold with the ``Alert`` action alerts exactly once per period, on its crossing or,
for an enforcing threshold enforced ahead, when its enforcement starts (the title says "would cross ... within
N s at the current burn rate: enforcing now, ahead of the crossing", never that it crossed; the webhook alert keeps
its ``BudgetThresholdCrossed`` name, the identity its resolve matches; ``status.thresholds[].crossed`` stays the
actual crossing, which alerts nothing more that period) (several thresholds crossed in one
evaluation are reported in one message); the forecast alerts once per period (not when actual spend already
crossed that percent; decided on the lower-bound forecast when some service is not priced, and it then says "at
least"); a ``Recovered`` notice is sent once when a new period starts after one that was ``Exceeded``, was
enforced, or alerted a threshold or its forecast (it resolves those alerts: an Alertmanager-style receiver's
incidents close at the period's end, a ``Warning`` period's too); a ``GovernanceBlind`` alert names the services
it cannot price once, when the policy starts to have any, and a ``Recovered`` resolves it once every service is
priced again (so does one for the ``SpendAnomaly`` alert once no service is in an anomaly:
:func:`spend_anomaly_over`). The plan marks alerts as decided when it decides them;
delivery is at least once through the outbox of :mod:`modalscale.costmodel.outbox` (each alert is persisted in
``status.pendingAlerts`` together with ``status.thresholds``, before it is sent, and retried until its target
accepts it or it expires).

What an alert says (:attr:`BudgetAlert.title`, :meth:`BudgetAlert.facts`) is platform-neutral text decided here
with the alert and stored with it in the outbox; each platform's shape is ``modalscale.notify.payloads``'. A
threshold, forecast or anomaly alert of an evaluation that read showback's figures names the top tenants and
modalities behind the spend (:attr:`BudgetAlert.drivers`, attached by ``modalscale.operator.budget.plan``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from modalscale.api import conditions as C
from modalscale.api.budgetpolicy import BudgetSpec, Period, Threshold, ThresholdAction
from modalscale.costmodel.budget.enforce import EnforcementAction
from modalscale.costmodel.budget.spend import FORECAST_METHOD, SpendToDate, reaches
from modalscale.costmodel.budget.state import AlertState, BudgetState, PolicyRef, SpotRecord, SpotState, ThresholdRecord
from modalscale.costmodel.ledger import format_time
from modalscale.costmodel.money import display_usd, format_usd
from modalscale.costmodel.periods import period_of_span
from modalscale.costmodel.showback import SpendDrivers

if TYPE_CHECKING:
    from modalscale.costmodel.budget.plan import BudgetPlan


LIFTED = "enforcement lifted"
"""A recovery's action line when the closed period had enforcement (a cap, a scale-down, Spot, a tenant
``Reject``) in force."""


class AlertKind(str, enum.Enum):
    """Why a notification is sent; also the Alertmanager ``alertname`` label (prefixed ``Budget``) and the reason
    of the Event the operator posts with it (values from :mod:`modalscale.api.conditions`)."""

    THRESHOLD_CROSSED = C.THRESHOLD_CROSSED
    FORECAST_EXCEEDED = C.FORECAST_EXCEEDED
    GOVERNANCE_BLIND = C.GOVERNANCE_BLIND
    RECOVERED = C.RECOVERED
    SPEND_ANOMALY = C.SPEND_ANOMALY


OPEN_ENDED_KINDS = frozenset({AlertKind.GOVERNANCE_BLIND, AlertKind.SPEND_ANOMALY})
"""Alerts not bound to a budget period: each is resolved when its cause ends (every service priced again; no
service in a spend anomaly), not at the period's end."""


@dataclass(frozen=True)
class FiringAlert:
    """The identity of one alert a recovery resolves (Alertmanager: one alert per threshold, the same labels,
    fingerprint and ``startsAt`` in its resolve; ``modalscale.notify.payloads`` renders them).

    Attributes:
        kind: ``ThresholdCrossed``, ``ForecastExceeded``, ``GovernanceBlind`` or ``SpendAnomaly``.
        threshold_percent: The threshold's percent (the forecast's ``alertAtPercent``); None for the two
            :data:`OPEN_ENDED_KINDS`, which fire one alert per policy.
        starts_at: When it was alerted (``status.thresholds[].lastAlertTime``; for ``SpendAnomaly`` the earliest
            ``status.spendAnomalies[].since``; for ``GovernanceBlind`` when ``Ready`` turned ``GovernanceBlind``),
            timezone-aware UTC.
        period: The ``spec.period`` it fired under (its ``period`` label) when that may differ from the resolving
            alert's: a threshold or forecast alert of a period that a ``spec.period`` change ended. None: the
            resolving alert's own. :data:`OPEN_ENDED_KINDS` have no ``period`` label (not bound to a period).
    """

    kind: AlertKind
    threshold_percent: int | None
    starts_at: datetime
    period: Period | None = None


def describe_resolved(resolves: Sequence[FiringAlert]) -> str:
    """``ThresholdCrossed at 50 %, 80 % (since <t1>), 100 % (since <t2>); ForecastExceeded at 100 % (since <t1>)``;
    an alert without a percent after those: ``GovernanceBlind (since <t>)``."""
    with_percent = [(f.kind, p, f.starts_at) for f in resolves if (p := f.threshold_percent) is not None]
    parts: list[str] = []
    for kind in dict.fromkeys(k for k, _, _ in with_percent):
        runs: list[tuple[list[int], datetime]] = []
        for _, percent, starts_at in sorted((f for f in with_percent if f[0] is kind), key=lambda f: f[1]):
            if runs and runs[-1][1] == starts_at:
                runs[-1][0].append(percent)
            else:
                runs.append(([percent], starts_at))
        parts.append(f"{kind.value} at " + ", ".join(f"{', '.join(f'{p} %' for p in ps)} (since {format_time(t)})"
                                                     for ps, t in runs))
    parts += [f"{f.kind.value} (since {format_time(f.starts_at)})" for f in resolves if f.threshold_percent is None]
    return "; ".join(parts)


@dataclass(frozen=True)
class BudgetAlert:
    """One notification to send to every configured receiver (rendered per platform by ``modalscale.notify.payloads``).

    Carries only what a chat room may see: no URLs, no secrets.
    """

    kind: AlertKind
    policy: PolicyRef
    scope: str
    period: Period
    time_zone: str
    period_start: datetime
    period_end: datetime
    spent_usd: Decimal
    limit_usd: Decimal
    currency: str
    percent_used: Decimal
    forecast_usd: Decimal | None
    forecast_method: str
    thresholds_percent: tuple[int, ...]
    actions: tuple[str, ...]
    dry_run: bool
    blind_services: tuple[str, ...]
    created_at: datetime
    closed_period_spent_usd: Decimal | None = None
    ahead_percents: tuple[int, ...] = ()
    """Thresholds of this message not reached yet but enforced ahead (a subset of ``thresholds_percent``)."""
    horizon_s: int = 0
    """Seconds ahead that ``ahead_percents`` would be crossed at the current burn rate."""
    lower_bound: bool = False
    """True when part of the spend is not priced: ``spent_usd`` and ``forecast_usd`` are lower bounds."""
    anomalies: tuple[str, ...] = ()
    """For ``SpendAnomaly``: one line per service whose burn rate left its baseline, naming the driver."""
    anomaly_services: tuple[str, ...] = ()
    """For ``SpendAnomaly``: ``namespace/name`` of those services."""
    resolves: tuple[FiringAlert, ...] = ()
    """For ``Recovered``: the alerts it resolves (each threshold and the forecast alerted in the closed period, the
    ``GovernanceBlind`` alert once every service is priced again, the ``SpendAnomaly`` alert once no service is
    in an anomaly)."""
    new_period: bool = False
    """For ``Recovered``: sent because a period ended (else because an open-ended alert's cause ended)."""
    drivers: SpendDrivers | None = None
    """The top tenants and modalities behind the spend (showback's allocation over the period so far, of the
    selected services); None: no tenant data was read, and the alert says nothing about tenants."""

    @property
    def resolved(self) -> bool:
        """True for a recovery notice (Alertmanager ``status: resolved``)."""
        return self.kind is AlertKind.RECOVERED

    @property
    def severity(self) -> str:
        """``critical`` when at/over the limit (or enforcing a threshold >= 100 % ahead), ``info`` for
        recovery, else ``warning``."""
        if self.kind is AlertKind.RECOVERED:
            return "info"
        if self.kind is AlertKind.THRESHOLD_CROSSED and (
                self.percent_used >= 100 or max(self.thresholds_percent, default=0) >= 100):
            return "critical"
        return "warning"

    @property
    def title(self) -> str:
        """One-line headline."""
        if self.kind is AlertKind.THRESHOLD_CROSSED:
            period = self.period.value.lower()
            crossed = ", ".join(f"{p} %" for p in self.thresholds_percent if p not in self.ahead_percents)
            if not self.ahead_percents:
                return f"Budget {self.policy} crossed {crossed} of its {period} limit"
            ahead = ", ".join(f"{p} %" for p in self.ahead_percents)
            # Not crossed yet: "would have crossed" read as a crossing that had happened (new-user trial, 7 Dec 2026).
            return (f"Budget {self.policy} {f'crossed {crossed} and ' if crossed else ''}would cross {ahead} "
                    f"of its {period} limit within {self.horizon_s} s at the current burn rate: enforcing now, "
                    f"ahead of the crossing")
        if self.kind is AlertKind.FORECAST_EXCEEDED:
            return (f"Budget {self.policy} is forecast to reach {self.thresholds_percent[0]} % of its "
                    f"{self.period.value.lower()} limit")
        if self.kind is AlertKind.SPEND_ANOMALY:
            return (f"Budget {self.policy}: spend anomaly in {', '.join(self.anomaly_services[:3])}"
                    + (f" and {len(self.anomaly_services) - 3} more" if len(self.anomaly_services) > 3 else ""))
        if self.kind is AlertKind.GOVERNANCE_BLIND:
            return f"Budget {self.policy} cannot price all of its spend: enforcing on the known part, a lower bound"
        if not self.new_period:
            return f"Budget {self.policy}: " + "; ".join(self._ended())
        started = f"Budget {self.policy}: a new {self.period.value.lower()} period started"
        if LIFTED in self.actions:
            return f"{started}, enforcement lifted"
        return f"{started}, its alerts resolved" if self.resolves else started

    def _ended(self) -> list[str]:
        """What a recovery sent outside a period's end says ended, one phrase per open-ended kind it resolves."""
        kinds = {f.kind for f in self.resolves}
        out = []
        if AlertKind.GOVERNANCE_BLIND in kinds:
            out.append("every running service is priced again")
        if AlertKind.SPEND_ANOMALY in kinds:
            out.append("no spend anomaly left" + (f" ({', '.join(self.anomaly_services[:3])} back to baseline"
                                                  + (f" and {len(self.anomaly_services) - 3} more"
                                                     if len(self.anomaly_services) > 3 else "") + ")"
                                                  if self.anomaly_services else ""))
        return out or ["alerts resolved"]

    def facts(self, max_actions: int = 10) -> list[tuple[str, str]]:
        """Ordered (label, value) pairs every payload shows; at most ``max_actions`` actions are listed."""
        cur = self.currency
        least = "at least " if self.lower_bound else ""
        facts = [
            ("Policy", str(self.policy)),
            ("Scope", self.scope),
            ("Period", f"{self.period.value} ({self.time_zone}) {format_time(self.period_start)} to "
                       f"{format_time(self.period_end)}"),
            ("Spent", f"{least}{display_usd(self.spent_usd)} {cur} of "
                      f"{display_usd(self.limit_usd)} {cur} "
                      f"({format_usd(self.percent_used)} %)"),
            ("Forecast", f"{least}{display_usd(self.forecast_usd)} {cur} at period end "
                         f"({self.forecast_method})" if self.forecast_usd is not None
             else "unknown (spend rate not readable)"),
        ]
        if self.ahead_percents:
            facts.append(("Enforced ahead", f"{', '.join(f'{p} %' for p in self.ahead_percents)} not crossed yet: "
                                            f"at the current burn rate it would be within {self.horizon_s} s"))
        if self.closed_period_spent_usd is not None:
            closed = display_usd(self.closed_period_spent_usd)
            facts.append(("Previous period", f"closed at {closed} {cur}"))
        if self.blind_services:
            facts.append(("Not readable", "; ".join(self.blind_services)))
        if self.anomalies:
            facts.append(("Anomaly", "; ".join(self.anomalies)))
        if self.resolves:
            facts.append(("Resolved", describe_resolved(self.resolves)))
        if self.drivers is not None:
            facts.extend(self.drivers.facts())
        shown = list(self.actions[:max_actions])
        if len(self.actions) > max_actions:
            shown.append(f"and {len(self.actions) - max_actions} more")
        facts.append(("Action", "; ".join(shown) if shown else "none"))
        return facts

    def text(self) -> str:
        """Plain-text rendering (fallback text, logs, the demo's "what a chat room sees")."""
        return self.title + "\n" + "\n".join(f"{k}: {v}" for k, v in self.facts())


def action_lines(actions: Sequence[EnforcementAction], spot: Sequence[SpotRecord]) -> tuple[str, ...]:
    """The ``Action`` lines of an alert: each enforcement in force, then each service switched to Spot."""
    return tuple(a.describe() for a in actions) + tuple(
        f"SwitchToSpot {r.namespace}/{r.name} (at {r.threshold_percent} %)"
        + (" [dry run, not applied]" if r.dry_run else "") for r in spot if r.state is SpotState.SPOT)


MAX_THRESHOLD_RECORDS = 11
"""Most items of ``status.thresholds`` (the CRD's ``maxItems``: 10 thresholds and the forecast)."""


def _alerted_in(record: ThresholdRecord | None, period_start: datetime) -> bool:
    return record is not None and record.alerted_period_start == period_start


def _threshold_records(spec: BudgetSpec, crossed: Sequence[Threshold], ahead: Sequence[Threshold],
                       alert_state: AlertState, period_start: datetime, now: datetime
                       ) -> tuple[list[ThresholdRecord], list[int]]:
    """Each threshold's ``status.thresholds`` record after this evaluation, and the percents to alert now."""
    records: list[ThresholdRecord] = []
    newly_alerted: list[int] = []
    for t in spec.thresholds:
        old = alert_state.record(t.percent)
        is_crossed = t in crossed
        if (is_crossed or t in ahead) and not _alerted_in(old, period_start):
            if ThresholdAction.ALERT in t.actions:
                newly_alerted.append(t.percent)
                records.append(ThresholdRecord(t.percent, False, is_crossed, now, period_start))
            else:  # decided without an alert: when and in which period it last alerted stay as they were
                records.append(ThresholdRecord(t.percent, False, is_crossed, old.last_alert_time if old else None,
                                               old.alerted_period_start if old else None))
        elif is_crossed and old is not None:  # decided earlier this period (so ``old`` is there): mark the crossing
            records.append(replace(old, crossed=True))
        else:
            records.append(ThresholdRecord(t.percent, False, False, old.last_alert_time if old else None,
                                           old.alerted_period_start if old else None))
    return records, newly_alerted


def _forecast_record(spec: BudgetSpec, spend: SpendToDate, forecast_usd: Decimal | None, alert_state: AlertState,
                     now: datetime) -> tuple[ThresholdRecord | None, bool]:
    """The forecast's ``status.thresholds`` record (None when the forecast is disabled), and whether to alert now."""
    if not spec.forecast.enabled:
        return None, False
    at = spec.forecast.alert_at_percent
    old = alert_state.record(at, forecast=True)
    forecast_over = forecast_usd is not None and reaches(forecast_usd, at, spend.limit_usd)  # a lower bound if blind
    if (forecast_over and not reaches(spend.spent_usd, at, spend.limit_usd)
            and not _alerted_in(old, spend.period_start)):
        return ThresholdRecord(at, True, True, now, spend.period_start), True
    if old is not None:
        return replace(old, crossed=bool(forecast_over)), False
    return ThresholdRecord(at, True, bool(forecast_over)), False


def _left_the_spec(records: Sequence[ThresholdRecord], alert_state: AlertState, period_start: datetime
                   ) -> list[ThresholdRecord]:
    """The records of thresholds (or of a forecast percent) no longer in the spec that alerted in this period, kept
    until it ends: the recovery resolves their alerts, and one put back is not alerted again this period; after
    ``records`` (the spec's), at most :data:`MAX_THRESHOLD_RECORDS` in all. Dropped with the spec, the incident
    their alert opened in an Alertmanager-style receiver was never resolved."""
    present = {(r.percent, r.forecast) for r in records}
    left = [replace(r, crossed=False) for r in alert_state.records
            if (r.percent, r.forecast) not in present and _alerted_in(r, period_start) and r.last_alert_time]
    return left[:max(0, MAX_THRESHOLD_RECORDS - len(records))]


def _alerted_in_closed_period(alert_state: AlertState, period_now: Period) -> tuple[FiringAlert, ...]:
    """The threshold and forecast alerts sent in the period ``alert_state`` describes (read back from
    ``status.thresholds``, so a recovery decided after a restart resolves them too), thresholds first.

    A record's ``alerted_period_start`` is the period it last alerted in (a threshold crossed without the
    ``Alert`` action keeps the one it had), so that alone says which alerted in this period. Its alert time is not
    compared with the period's start: after a ``spec.timeZone`` change the period in progress is relabelled with
    the new zone's start (``state.carried_over``), which can be later than alerts sent before the change (UTC to
    America/New_York at noon: the 01:00Z alert is before the 05:00Z start) or earlier than an alert of the day
    before (UTC to Asia/Tokyo: 15:00Z the day before).
    """
    start = alert_state.period_start
    # Their ``period`` label where it differs from the recovery's (``period_now``, the spec's): the closed period's
    # kind after a ``spec.period`` change (None, the recovery's own, also where the stored bounds do not say).
    period = period_of_span(start, alert_state.period_end)
    period = None if period is period_now else period
    return tuple(
        FiringAlert(AlertKind.FORECAST_EXCEEDED if r.forecast else AlertKind.THRESHOLD_CROSSED, r.percent,
                    r.last_alert_time, period)
        for r in sorted(alert_state.records, key=lambda r: (r.forecast, r.percent))
        if start is not None and r.alerted_period_start == start and r.last_alert_time is not None)


def plan_alerts(spec: BudgetSpec, policy: PolicyRef, spend: SpendToDate, forecast_usd: Decimal | None,
                crossed: Sequence[Threshold], ahead: Sequence[Threshold], actions: tuple[str, ...],
                alert_state: AlertState, new_period: bool, closed_period_spent_usd: Decimal | None, horizon_s: int,
                now: datetime, rejected_before: bool = False
                ) -> tuple[tuple[BudgetAlert, ...], tuple[ThresholdRecord, ...]]:
    """Step 5: the alerts to send now (see the module docstring) and the de-duplication records to persist.

    Args:
        spend: Step 1; ``forecast_usd``: step 2 (the lower-bound forecast when some service is not priced).
        crossed: Thresholds the spend has reached; ``ahead``: enforced ahead of their crossing (step 3).
        actions: :func:`action_lines` of the enforcement in force (quoted in every alert but a recovery).
        alert_state: What earlier evaluations decided; ``new_period``: its period is over.
        closed_period_spent_usd: Final spend of the period that just closed (quoted in a recovery notice).
        horizon_s: Seconds ahead that enforcement looked (quoted when a threshold is enforced ahead).
        rejected_before: A tenant ``Reject`` was in force when the period closed (``status.rejectedTenants``, which
            ``alert_state`` does not hold): the recovery says enforcement is lifted.
    Returns:
        (alerts in the order rooms should see them: Recovered (naming in ``resolves`` each threshold and forecast
        alert of the closed period, which it resolves, and the ``GovernanceBlind`` alert when every service is
        priced again: a recovery of its own when no period ended), GovernanceBlind, ThresholdCrossed,
        ForecastExceeded; the records of ``status.thresholds``, thresholds then the forecast).
    """
    scope = spec.selector.describe(policy.namespace)

    def make(kind: AlertKind, marks: tuple[int, ...], lines: tuple[str, ...] = actions,
             closed: Decimal | None = None, ahead_percents: tuple[int, ...] = ()) -> BudgetAlert:
        return BudgetAlert(kind, policy, scope, spec.period, spec.time_zone, spend.period_start, spend.period_end,
                           spend.spent_usd, spend.limit_usd, spend.currency, spend.percent_used, forecast_usd,
                           FORECAST_METHOD, marks, lines, spec.enforcement.dry_run, spend.blind_services, now,
                           closed, ahead_percents, horizon_s, lower_bound=spend.blind)

    alerts: list[BudgetAlert] = []
    resolves = _alerted_in_closed_period(alert_state, spec.period) if new_period else ()
    lifted = bool(alert_state.enforced or alert_state.spot or rejected_before)
    # Every service is priced again: the GovernanceBlind alert is resolved (in the period's recovery when one is
    # sent now: one Recovered per evaluation, the outbox's key).
    priced_again = ((FiringAlert(AlertKind.GOVERNANCE_BLIND, None, alert_state.blind_since or now),)
                    if alert_state.blind and not spend.blind else ())
    if new_period and (alert_state.state is BudgetState.EXCEEDED or lifted or resolves):
        recovered = make(AlertKind.RECOVERED, (), (LIFTED,) if lifted else (),
                         closed=closed_period_spent_usd)
        alerts.append(replace(recovered, resolves=resolves + priced_again, new_period=True))
    elif priced_again:
        alerts.append(replace(make(AlertKind.RECOVERED, (), ()), resolves=priced_again))
    if resolves and alert_state.period_start == spend.period_start:
        # spec.period changed at a shared start (Daily -> Weekly on a Monday): what the recovery resolved is not
        # this new period's, else it is never alerted again here and the next recovery resolves it twice.
        alert_state = replace(alert_state, records=tuple(
            replace(r, alerted_period_start=None) if r.alerted_period_start == alert_state.period_start else r
            for r in alert_state.records))
    if spend.blind and not alert_state.blind:
        alerts.append(make(AlertKind.GOVERNANCE_BLIND, ()))
    records, newly_alerted = _threshold_records(spec, crossed, ahead, alert_state, spend.period_start, now)
    if newly_alerted:
        alerts.append(make(AlertKind.THRESHOLD_CROSSED, tuple(newly_alerted),
                           ahead_percents=tuple(t.percent for t in ahead if t.percent in newly_alerted)))
    forecast_record, send = _forecast_record(spec, spend, forecast_usd, alert_state, now)
    if forecast_record is not None:
        if send:
            alerts.append(make(AlertKind.FORECAST_EXCEEDED, (forecast_record.percent,)))
        records.append(forecast_record)
    return tuple(alerts), (*records, *_left_the_spec(records, alert_state, spend.period_start))


def spend_anomaly_alert(plan: BudgetPlan, spec: BudgetSpec, policy: PolicyRef, anomalies: Sequence[str],
                        services: Sequence[str]) -> BudgetAlert:
    """The ``SpendAnomaly`` alert for services whose burn rate left their own baseline at this evaluation.

    Args:
        plan: This evaluation's plan (period, spend and forecast are quoted).
        anomalies: One line per service (``modalscale.costmodel.anomaly.Anomaly.describe``), naming the driver.
        services: ``namespace/name`` of each, same order.
    Returns:
        One alert for all anomalies that started at this evaluation (sent like every budget alert).
    """
    return BudgetAlert(AlertKind.SPEND_ANOMALY, policy, spec.selector.describe(policy.namespace), spec.period,
                       spec.time_zone, plan.period_start, plan.period_end, plan.spent_usd, plan.limit_usd,
                       plan.currency, plan.percent_used, plan.forecast_usd, plan.forecast_method, (), (),
                       spec.enforcement.dry_run, plan.blind_services, plan.evaluated_at, lower_bound=plan.blind,
                       anomalies=tuple(anomalies), anomaly_services=tuple(services))


def spend_anomaly_over(alerts: Sequence[BudgetAlert], plan: BudgetPlan, spec: BudgetSpec, policy: PolicyRef,
                       since: datetime, services: Sequence[str]) -> tuple[BudgetAlert, ...]:
    """``alerts`` with the resolve of the policy's ``SpendAnomaly`` alert, once no service is in an anomaly.

    The anomaly alert is one per policy (its labels name no service, as a threshold's name its percent), so it is
    resolved when the last anomaly ends, not when each does.

    Args:
        alerts: This evaluation's alerts; a ``Recovered`` among them (a period's end) takes the resolve, else a
            ``Recovered`` of its own is appended (one per evaluation: the outbox's key is the kind and time).
        plan: This evaluation's plan (period, spend and forecast are quoted).
        since: When the anomaly alert first fired (the earliest ``status.spendAnomalies[].since`` before).
        services: ``namespace/name`` of the services whose anomaly ended now (named in the title).
    Returns:
        The alerts, in their order.
    """
    firing = FiringAlert(AlertKind.SPEND_ANOMALY, None, since)
    out = list(alerts)
    for i, a in enumerate(out):
        if a.kind is AlertKind.RECOVERED:
            out[i] = replace(a, resolves=(*a.resolves, firing), anomaly_services=tuple(services))
            return tuple(out)
    # The anomaly alert's figures (period, spend, forecast at this evaluation), as a recovery of it.
    return (*out, replace(spend_anomaly_alert(plan, spec, policy, (), services), kind=AlertKind.RECOVERED,
                          resolves=(firing,)))


__all__ = ["AlertKind", "BudgetAlert", "FiringAlert", "OPEN_ENDED_KINDS", "action_lines", "describe_resolved",
           "plan_alerts", "spend_anomaly_alert", "spend_anomaly_over"]
