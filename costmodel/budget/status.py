"""The ``status`` of a BudgetPolicy as one typed value, with its one read and its one write.

Why a module: the status was parsed and built by 18 part codecs in 7 modules (the ledger's, the threshold, enforced,
Spot and tenant-rejection records', the outbox's, the spend-anomaly state's, the plan's ``status_fields``), each
raising its own error on its own part. They are all here now, over the value types they fill (``Ledger``,
``ThresholdRecord``, ``EnforcedService``, ``SpotRecord``, ``TenantRejection``, ``PendingAlert``, ``AnomalyState``),
which no longer know the JSON. Every reader takes :class:`BudgetStatus` from :func:`read_budget_status`; the
planner's status goes out through :func:`write_budget_status`.

Reading never raises: a missing (old or partial) field reads as empty; a field that is present but does not parse
leaves its part empty and names itself in :attr:`BudgetStatus.problem` (the first one, in the order the parts are
read: ledger, thresholds/enforcement/Spot/state, outbox, spend anomalies, rejected tenants, ``tenantSpent``), and
the planner holds on it (``Ready=False/InvalidStatus``: spend is never reset from data that could not be read).
An outbox that reads is kept even then (:attr:`BudgetStatus.outbox` None only when it does not).

Shapes are the CRD's (``modalscale.api.status.BudgetPolicyStatus``): camelCase, RFC 3339 UTC times, money as
decimal strings (shown: ``money.display_usd``; ledger and ``tenantSpent`` exact to 1e-9 USD). The JSON is what
the part codecs wrote before (the month benchmark and the unit tests compare it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, cast

from modalscale.api import conditions as C
from modalscale.api.budgetpolicy import Period, ThresholdAction
from modalscale.api.status import (
    BudgetPolicyStatus,
    ConditionStatus,
    EnforcedServiceStatus,
    LedgerServiceStatus,
    LedgerStatus,
    PendingAlertStatus,
    RejectedTenantStatus,
    ResolvedAlertStatus,
    SpendAnomalyStatus,
    SpotServiceStatus,
    ThresholdStatus,
)
from modalscale.costmodel.anomaly import AnomalyState
from modalscale.costmodel.budget.alerts import OPEN_ENDED_KINDS, AlertKind, FiringAlert
from modalscale.costmodel.budget.plan import BudgetPlan
from modalscale.costmodel.budget.reject import TenantRejection
from modalscale.costmodel.budget.state import (
    AlertState,
    BudgetState,
    EnforcedService,
    InvalidBudgetStatus,
    PolicyRef,
    SpotRecord,
    SpotState,
    ThresholdRecord,
)
from modalscale.costmodel.ledger import Ledger, LedgerEntry, LedgerFormatError, floor_to_second, format_time, parse_time
from modalscale.costmodel.money import display_usd, format_usd, parse_usd, quantize_ledger_usd
from modalscale.costmodel.outbox import SEVERITIES, AlertMessage, PendingAlert


@dataclass(frozen=True)
class BudgetStatus:
    """The ``status`` of a BudgetPolicy, typed (None / empty: absent).

    Attributes:
        observed_generation: ``metadata.generation`` the last evaluation acted on.
        period_end, currency: As the last evaluation wrote them.
        spent_usd, remaining_usd: Display amounts (``money.display_usd``: cents, or the digits of an amount under
            a cent) of the period so far.
        burn_rate_usd_per_hour, forecast_usd: Display amounts; None when unknown (written as null: deleted).
        last_evaluation_time: When the last evaluation ran (UTC).
        ledger: ``status.ledger`` with ``status.periodStart`` (``ledger.period_start``); None when it does not parse.
        alert_state: ``thresholds``, ``periodStart``, ``state``, ``enforcedServices``, ``spotServices`` and whether
            the last evaluation was blind (state ``Unknown``, ``Ready``'s reason ``GovernanceBlind``, or a service
            of ``ledger`` whose rate is unknown: Exceeded while Ready says NamespaceNotAllowed shows neither).
        outbox: ``status.pendingAlerts``; None when it does not parse.
        anomaly_state: ``status.spendAnomalies``.
        rejections: ``status.rejectedTenants``.
        tenant_spent_usd: ``status.tenantSpent`` (exact USD) or None.
        conditions: metav1 conditions, whole.
        problem: The first field that is present but does not parse (message names it); None when all read.
        display_problems: The display fields above (``periodEnd``, ``currency``, ``spent``, ``remaining``,
            ``burnRatePerHour``, ``forecast``, ``lastEvaluationTime``) that are present but do not parse, each
            message naming its field; such a field reads as None. Apart from ``problem``: the planner rewrites
            them at every evaluation, so they never hold governance, but a reader (``cost export``, ``kubectl
            modalscale budget``) must say "unreadable", never "not evaluated yet".
    """

    observed_generation: int | None = None
    period_end: dt.datetime | None = None
    currency: str | None = None
    spent_usd: Decimal | None = None
    remaining_usd: Decimal | None = None
    burn_rate_usd_per_hour: Decimal | None = None
    forecast_usd: Decimal | None = None
    last_evaluation_time: dt.datetime | None = None
    ledger: Ledger | None = field(default_factory=Ledger)
    alert_state: AlertState = field(default_factory=AlertState)
    outbox: tuple[PendingAlert, ...] | None = ()
    anomaly_state: AnomalyState = field(default_factory=AnomalyState)
    rejections: tuple[TenantRejection, ...] = ()
    tenant_spent_usd: Decimal | None = None
    conditions: tuple[ConditionStatus, ...] = ()
    problem: str | None = None
    display_problems: tuple[str, ...] = ()
    held_namespaces: tuple[str, ...] = ()
    """Namespaces the items of ``enforcedServices``, ``spotServices`` and ``rejectedTenants`` name, read even from
    items that do not parse: where this policy's caps, Spot and reject annotations may be (to hold or lift them)."""


# ================================================================================================= parts
def _threshold_json(r: ThresholdRecord) -> ThresholdStatus:
    out: ThresholdStatus = {"percent": r.percent, "crossed": r.crossed}
    if r.forecast:
        out["forecast"] = True
    if r.last_alert_time is not None:
        out["lastAlertTime"] = format_time(r.last_alert_time)
    if r.alerted_period_start is not None:
        out["alertedPeriodStart"] = format_time(r.alerted_period_start)
    return out


def _enforced_json(e: EnforcedService) -> EnforcedServiceStatus:
    return {"namespace": e.namespace, "name": e.name, "action": e.action.value,
            "maxReplicas": e.max_replicas, "since": format_time(e.since), "dryRun": e.dry_run,
            "message": e.describe()}


def _replica_cap(value: object, field_path: str) -> int:
    """``status.enforcedServices[i].maxReplicas``: the cap in force, an integer 0 or more (never a default: a
    missing cap read as 0 planned on one it never decided, and rewrote the service's cap annotation).

    Raises:
        InvalidBudgetStatus: Missing, not an integer (a bool, a float, a string) or negative; the message names
            ``field_path``.
    """
    if value is None:
        raise InvalidBudgetStatus(f"{field_path}: missing (the replica cap in force; the operator writes it with "
                                  f"every enforced service)")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidBudgetStatus(f"{field_path}: expected an integer 0 or more, got {value!r}")
    return value


def _spot_json(r: SpotRecord) -> SpotServiceStatus:
    out: SpotServiceStatus = {"namespace": r.namespace, "name": r.name, "thresholdPercent": r.threshold_percent,
                              "state": r.state.value, "since": format_time(r.since), "dryRun": r.dry_run,
                              "message": r.message}
    if r.fallback_time is not None:
        out["fallbackTime"] = format_time(r.fallback_time)
    return out


def _spot_read(item: Mapping[str, Any], path: str) -> SpotRecord:
    try:
        fallback = item.get("fallbackTime")
        return SpotRecord(str(item["namespace"]), str(item["name"]), int(item["thresholdPercent"]),
                          SpotState(item["state"]), parse_time(item.get("since"), f"{path}.since"),
                          parse_time(fallback, f"{path}.fallbackTime") if fallback else None,
                          bool(item.get("dryRun", False)), str(item.get("message", "")))
    except LedgerFormatError as exc:
        raise InvalidBudgetStatus(str(exc)) from None
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise InvalidBudgetStatus(f"{path}: {exc}") from None


def _blind_since(stored: object, blind_ready: Mapping[str, Any] | None) -> dt.datetime | None:
    """When the GovernanceBlind alert fired: ``status.blindSince`` whenever present (a blind policy whose priced part
    is ``Exceeded`` says blind only through its ledger's unpriced entries). ``blind_ready``, the Ready condition when
    its reason is ``GovernanceBlind``, says when Ready last turned False: the time a status written before
    ``blindSince`` existed has, and the later of the two when an older operator cleared the blind spell without
    deleting ``blindSince`` and fired again (a rollback)."""
    times = []
    if isinstance(stored, str) and stored:
        times.append(parse_time(stored, "status.blindSince"))
    ready_since = blind_ready.get("lastTransitionTime") if blind_ready is not None else None
    if isinstance(ready_since, str) and ready_since:
        times.append(parse_time(ready_since, "status.conditions[Ready].lastTransitionTime"))
    return max(times, default=None)


def _alert_state_read(status: Mapping[str, Any]) -> AlertState:
    if not status:
        return AlertState()
    try:
        records = []
        for i, item in enumerate(status.get("thresholds") or []):
            path = f"status.thresholds[{i}]"
            if not isinstance(item, Mapping) or not isinstance(item.get("percent"), int):
                raise InvalidBudgetStatus(f"{path}.percent: expected an integer")
            records.append(ThresholdRecord(
                percent=item["percent"], forecast=bool(item.get("forecast", False)),
                crossed=bool(item.get("crossed", False)),
                last_alert_time=parse_time(item["lastAlertTime"], f"{path}.lastAlertTime")
                if item.get("lastAlertTime") else None,
                alerted_period_start=parse_time(item["alertedPeriodStart"], f"{path}.alertedPeriodStart")
                if item.get("alertedPeriodStart") else None))
        enforced = []
        for i, item in enumerate(status.get("enforcedServices") or []):
            path = f"status.enforcedServices[{i}]"
            try:
                enforced.append(EnforcedService(
                    str(item["namespace"]), str(item["name"]), ThresholdAction(item["action"]),
                    _replica_cap(item.get("maxReplicas"), f"{path}.maxReplicas"),
                    parse_time(item.get("since"), f"{path}.since"),
                    bool(item.get("dryRun", False)), str(item.get("message", ""))))
            except (KeyError, ValueError, TypeError) as exc:
                if isinstance(exc, (LedgerFormatError, InvalidBudgetStatus)):  # already names the field
                    raise
                raise InvalidBudgetStatus(f"{path}: {exc}") from None
        spot = tuple(_spot_read(item, f"status.spotServices[{i}]")
                     for i, item in enumerate(status.get("spotServices") or []))
        start = status.get("periodStart")
        state = status.get("state")
        ready = next((c for c in status.get("conditions") or []
                      if isinstance(c, Mapping) and c.get("type") == C.READY), None)
        blind_ready = ready is not None and ready.get("reason") == C.GOVERNANCE_BLIND
        blind = state == BudgetState.UNKNOWN.value or blind_ready
        return AlertState(tuple(records), parse_time(start, "status.periodStart") if start else None,
                          BudgetState(state) if state else None, tuple(enforced), blind, spot,
                          blind_since=_blind_since(status.get("blindSince"), ready if blind_ready else None))
    except LedgerFormatError as exc:
        raise InvalidBudgetStatus(str(exc)) from None
    except ValueError as exc:
        if isinstance(exc, InvalidBudgetStatus):
            raise
        raise InvalidBudgetStatus(f"status.state: {exc}") from None


def _ledger_json(ledger: Ledger) -> LedgerStatus:
    services: list[LedgerServiceStatus] = []
    for e in ledger.entries:
        item: LedgerServiceStatus = {"namespace": e.namespace, "name": e.name}
        if e.replicas is not None:
            item["replicas"] = e.replicas
        if e.cost_usd_per_hour is not None:
            item["costUSDPerHour"] = format_usd(quantize_ledger_usd(e.cost_usd_per_hour))
        item["spent"] = format_usd(quantize_ledger_usd(e.spent_usd))
        if e.unheard:
            item["unheardPods"] = [{"name": n, "chargedUntil": format_time(t)} for n, t in e.unheard]
        if e.late:
            item["lateBoundPods"] = list(e.late)
        if e.uncounted:
            item["uncountedPods"] = list(e.uncounted)
        services.append(item)
    out: LedgerStatus = {"services": services}
    if ledger.observed_time is not None:
        out["observedTime"] = format_time(ledger.observed_time)
    return out


def _ledger_read(ledger: Any, period_start: object = None) -> Ledger:
    if not ledger:
        return Ledger()
    if not isinstance(ledger, Mapping):
        raise LedgerFormatError(f"status.ledger: expected an object, got {type(ledger).__name__}")
    observed = ledger.get("observedTime")
    observed_time = parse_time(observed, "status.ledger.observedTime") if observed is not None else None
    start = parse_time(period_start, "status.periodStart") if period_start is not None else None
    raw_services = ledger.get("services") or []
    if not isinstance(raw_services, list):
        raise LedgerFormatError("status.ledger.services: expected a list")
    entries: list[LedgerEntry] = []
    for i, item in enumerate(raw_services):
        path = f"status.ledger.services[{i}]"
        if not isinstance(item, Mapping):
            raise LedgerFormatError(f"{path}: expected an object")
        try:
            namespace, name = str(item["namespace"]), str(item["name"])
        except KeyError as exc:
            raise LedgerFormatError(f"{path}.{exc.args[0]}: missing") from None
        replicas = item.get("replicas")
        if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
            raise LedgerFormatError(f"{path}.replicas: expected a non-negative integer, got {replicas!r}")
        try:
            cost = item.get("costUSDPerHour")
            cost_d = _not_negative(cost, f"{path}.costUSDPerHour") if cost is not None else None
            spent_d = _not_negative(item.get("spent", "0"), f"{path}.spent")
        except ValueError as exc:
            raise LedgerFormatError(str(exc)) from None
        entries.append(LedgerEntry(namespace, name, replicas, cost_d, spent_d, _unheard_read(item, path),
                                   _names_read(item, path, "lateBoundPods"), _names_read(item, path, "uncountedPods")))
    keys = [e.key for e in entries]
    if len(set(keys)) != len(keys):
        raise LedgerFormatError("status.ledger.services: a namespace/name appears twice")
    return Ledger(observed_time, start, tuple(sorted(entries, key=lambda e: e.key)))


def _not_negative(value: object, field_path: str) -> Decimal:
    """A spend or rate read back from status (:func:`parse_usd`), which is never negative.

    Raises:
        ValueError: It does not parse, or it is below 0 (a hand edit, another version): no lower bound of a spend,
            never added to one (the message names ``field_path``).
    """
    amount = parse_usd(value, field_path)
    if amount < 0:
        raise ValueError(f"{field_path}: {str(value)[:40]!r} is negative: a spend or a rate "
                         f"in USD is 0 or more")
    return amount


def _unheard_read(item: Mapping[str, Any], path: str) -> tuple[tuple[str, dt.datetime], ...]:
    """``status.ledger.services[i].unheardPods`` as ``LedgerEntry.unheard`` (sorted by pod name).

    Raises:
        LedgerFormatError: Not a list of ``{name, chargedUntil}`` (names the field path).
    """
    raw = item.get("unheardPods") or []
    if not isinstance(raw, list):
        raise LedgerFormatError(f"{path}.unheardPods: expected a list")
    out = []
    for j, pod in enumerate(raw):
        if not isinstance(pod, Mapping) or not isinstance(pod.get("name"), str):
            raise LedgerFormatError(f"{path}.unheardPods[{j}]: expected an object with a name")
        out.append((pod["name"], parse_time(pod.get("chargedUntil"), f"{path}.unheardPods[{j}].chargedUntil")))
    return tuple(sorted(out))


def _names_read(item: Mapping[str, Any], path: str, field: str) -> tuple[str, ...]:
    """``status.ledger.services[i].<field>`` (``lateBoundPods`` -> ``LedgerEntry.late``, ``uncountedPods`` ->
    ``LedgerEntry.uncounted``) as sorted pod names.

    Raises:
        LedgerFormatError: Not a list of pod names (names the field path).
    """
    raw = item.get(field) or []
    if not isinstance(raw, list):
        raise LedgerFormatError(f"{path}.{field}: expected a list of pod names")
    for j, pod in enumerate(raw):
        if not isinstance(pod, str) or not pod:
            raise LedgerFormatError(f"{path}.{field}[{j}]: expected a pod name, got {pod!r}")
    return tuple(sorted(set(raw)))


def _rejection_json(r: TenantRejection) -> RejectedTenantStatus:
    return {"namespace": r.namespace, "name": r.name, "tenant": r.tenant, "thresholdPercent": r.threshold_percent,
            "since": format_time(r.since), "until": format_time(r.until), "dryRun": r.dry_run}


def _rejections_read(status: Mapping[str, Any]) -> tuple[TenantRejection, ...]:
    items = status.get("rejectedTenants") or []
    if not isinstance(items, list):
        raise InvalidBudgetStatus("status.rejectedTenants: expected a list")
    out = []
    for i, item in enumerate(items):
        path = f"status.rejectedTenants[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidBudgetStatus(f"{path}: expected an object")
        try:
            percent = item["thresholdPercent"]
            if not isinstance(percent, int) or isinstance(percent, bool):
                raise ValueError(f"thresholdPercent must be an integer, got {percent!r}")
            out.append(TenantRejection(str(item["namespace"]), str(item["name"]), str(item["tenant"]), percent,
                                       parse_time(item["since"], f"{path}.since"),
                                       parse_time(item["until"], f"{path}.until"), bool(item.get("dryRun", False))))
        except (KeyError, ValueError, LedgerFormatError) as exc:
            raise InvalidBudgetStatus(f"{path}: {exc}") from None
    return tuple(out)


def _resolved_json(f: FiringAlert) -> ResolvedAlertStatus:
    out: ResolvedAlertStatus = {"kind": f.kind.value, "startsAt": format_time(f.starts_at)}
    if f.threshold_percent is not None:
        out["thresholdPercent"] = f.threshold_percent
    if f.period is not None:
        out["period"] = f.period.value
    return out


def _resolved_read(f: Mapping[str, Any], path: str) -> FiringAlert:
    """One ``status.pendingAlerts[].resolves`` item; a threshold's or the forecast's without its percent is refused
    (:class:`InvalidBudgetStatus` naming the field), an open-ended alert's has none."""
    kind = AlertKind(f["kind"])
    percent = f.get("thresholdPercent")
    if percent is None and kind not in OPEN_ENDED_KINDS:
        raise InvalidBudgetStatus(f"{path}.thresholdPercent: required for {kind.value}")
    period = f.get("period")
    return FiringAlert(kind, None if percent is None else int(percent), parse_time(f["startsAt"], f"{path}.startsAt"),
                       None if period is None else Period(period))


def _pending_json(entry: PendingAlert) -> PendingAlertStatus:
    m = entry.message
    out: PendingAlertStatus = {
        "notification": entry.notification, "kind": m.kind.value,
        "thresholdsPercent": list(m.thresholds_percent), "period": m.period.value,
        "periodStart": format_time(m.period_start), "periodEnd": format_time(m.period_end),
        "createdAt": format_time(m.created_at), "severity": m.severity, "title": m.title,
        "facts": [{"label": k, "value": v} for k, v in m.fact_pairs],
        "attempts": entry.attempts, "nextAttemptTime": format_time(entry.next_attempt_time),
    }
    if m.resolves:
        out["resolves"] = [_resolved_json(f) for f in m.resolves]
    if entry.first_attempt_time is not None:
        out["firstAttemptTime"] = format_time(entry.first_attempt_time)
    if entry.last_reason:
        out["lastReason"] = entry.last_reason
    if entry.last_error:
        out["lastError"] = entry.last_error
    if entry.sending_since is not None:
        out["sendingSince"] = format_time(entry.sending_since)
    if entry.sending_by:
        out["sendingBy"] = entry.sending_by
    if entry.target:
        out["target"] = entry.target
    return out


def _pending_read(item: Mapping[str, Any], policy: PolicyRef, path: str) -> PendingAlert:
    if item.get("severity") not in SEVERITIES:  # every payload builder maps each of them, and nothing else
        raise InvalidBudgetStatus(f"{path}.severity: {item.get('severity')!r} is not one of {', '.join(SEVERITIES)}")
    try:
        message = AlertMessage(
            AlertKind(item["kind"]), policy, Period(item["period"]), str(item["title"]),
            tuple((str(f["label"]), str(f["value"])) for f in item.get("facts") or []),
            str(item["severity"]), parse_time(item["createdAt"], f"{path}.createdAt"),
            tuple(int(p) for p in item.get("thresholdsPercent") or []),
            parse_time(item["periodStart"], f"{path}.periodStart"),
            parse_time(item["periodEnd"], f"{path}.periodEnd"),
            tuple(_resolved_read(f, f"{path}.resolves[{i}]") for i, f in enumerate(item.get("resolves") or [])))
        first, sending = item.get("firstAttemptTime"), item.get("sendingSince")
        return PendingAlert(str(item["notification"]), message,
                            parse_time(item["nextAttemptTime"], f"{path}.nextAttemptTime"),
                            int(item.get("attempts", 0)),
                            parse_time(first, f"{path}.firstAttemptTime") if first else None,
                            item.get("lastReason") or None, item.get("lastError") or None,
                            parse_time(sending, f"{path}.sendingSince") if sending else None,
                            str(item["sendingBy"]) if item.get("sendingBy") else None,
                            str(item["target"]) if item.get("target") else None)
    except InvalidBudgetStatus:  # already names the field
        raise
    except LedgerFormatError as exc:
        raise InvalidBudgetStatus(str(exc)) from None
    except (KeyError, ValueError, TypeError) as exc:
        raise InvalidBudgetStatus(f"{path}: {type(exc).__name__}: {exc}") from None


def _outbox_read(status: Mapping[str, Any], policy: PolicyRef) -> tuple[PendingAlert, ...]:
    items = status.get("pendingAlerts") or []
    if not isinstance(items, list):
        raise InvalidBudgetStatus("status.pendingAlerts: expected a list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidBudgetStatus(f"status.pendingAlerts[{i}]: expected an object")
        out.append(_pending_read(item, policy, f"status.pendingAlerts[{i}]"))
    return tuple(out)


def _anomalies_read(status: Mapping[str, Any]) -> AnomalyState:
    items = status.get("spendAnomalies") or []
    if not isinstance(items, list):
        raise LedgerFormatError(f"status.spendAnomalies: expected a list, got {type(items).__name__}")
    active: dict[tuple[str, str], dt.datetime] = {}
    calm: dict[tuple[str, str], dt.datetime] = {}
    for i, item in enumerate(items):
        path = f"status.spendAnomalies[{i}]"
        if not isinstance(item, Mapping) or not item.get("namespace") or not item.get("name"):
            raise LedgerFormatError(f"{path}: expected an object with namespace, name and since")
        key = (str(item["namespace"]), str(item["name"]))
        active[key] = parse_time(item.get("since"), f"{path}.since")
        if item.get("calmSince"):
            calm[key] = parse_time(item["calmSince"], f"{path}.calmSince")
    return AnomalyState(active, calm)


def _anomalies_json(state: AnomalyState) -> list[SpendAnomalyStatus]:
    out: list[SpendAnomalyStatus] = []
    for key in sorted(state.active):
        item: SpendAnomalyStatus = {"namespace": key[0], "name": key[1],
                                    "since": format_time(floor_to_second(state.active[key]))}
        if key in state.calm_since:
            item["calmSince"] = format_time(floor_to_second(state.calm_since[key]))
        out.append(item)
    return out


def _money(value: Any, field_path: str = "status", problems: list[str] | None = None) -> Decimal | None:
    """An amount, or None when absent; a present one that does not parse is None with its message appended to
    ``problems``."""
    try:
        return parse_usd(value, field_path) if value is not None else None
    except ValueError as exc:
        if problems is not None:
            problems.append(str(exc))
        return None


def _time(value: Any, field_path: str = "status", problems: list[str] | None = None) -> dt.datetime | None:
    """A time, or None when absent or empty; a present one that does not parse is None with its message appended
    to ``problems``."""
    try:
        return parse_time(value, field_path) if value else None
    except LedgerFormatError as exc:
        if problems is not None:
            problems.append(str(exc))
        return None


# ================================================================================================== read
def read_budget_status(obj: Mapping[str, Any] | None, policy: PolicyRef | None = None) -> BudgetStatus:
    """The typed ``status`` of a stored BudgetPolicy (pure; never raises).

    Args:
        obj: The BudgetPolicy as the API returns it (``metadata``, ``spec``, ``status``), or None.
        policy: Which policy (the outbox's alerts carry it); default from ``obj``'s metadata.
    Returns:
        :class:`BudgetStatus`. Missing fields (an old or partial status) read as empty; a present field that does
        not parse leaves its part empty and is named in ``problem`` (the first one).
    """
    raw = (obj or {}).get("status")
    status: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    meta = (obj or {}).get("metadata") or {}
    ref = policy or PolicyRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    problems: list[str] = []

    def part(read: Any, default: Any, fields: str) -> Any:
        try:
            return read()
        except (LedgerFormatError, InvalidBudgetStatus) as exc:
            problems.append(str(exc))
            return default
        except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
            # a field of the wrong shape (a number where a list is stored, ...): named, never raised
            problems.append(f"{fields}: not readable ({type(exc).__name__}: {exc})")
            return default

    def tenant_spent() -> Decimal | None:
        spent = status.get("tenantSpent")
        try:
            return None if spent is None else _not_negative(spent, "status.tenantSpent")
        except ValueError as exc:
            raise InvalidBudgetStatus(str(exc)) from None

    # Each part reads on its own; the first problem, in the order the planner checks them, is reported.
    ledger = part(lambda: _ledger_read(status.get("ledger"), status.get("periodStart")), None,
                  "status.ledger/periodStart")
    alert_state = part(lambda: _alert_state_read(status), AlertState(),
                       "status.thresholds/enforcedServices/spotServices/periodStart/state/conditions")
    outbox = part(lambda: _outbox_read(status, ref), None, "status.pendingAlerts")
    anomalies = part(lambda: _anomalies_read(status), AnomalyState(), "status.spendAnomalies")
    rejections = part(lambda: _rejections_read(status), (), "status.rejectedTenants")
    tenant = part(tenant_spent, None, "status.tenantSpent")
    conditions = status.get("conditions")
    generation = status.get("observedGeneration")
    shown: list[str] = []  # display fields present but unreadable (display_problems)
    currency = status.get("currency")
    if currency is not None and not isinstance(currency, str):
        shown.append(f"status.currency: {currency!r} is not a string")
    period_end = _time(status.get("periodEnd"), "status.periodEnd", shown)
    # Where the stored period ends: it goes on after a spec.timeZone change while in progress (None: it does not).
    ledger = None if ledger is None else replace(ledger, period_end=period_end)
    # A service whose rate is unknown is a blind evaluation whatever state and Ready say (an Exceeded policy whose
    # Ready is NamespaceNotAllowed says neither: its GovernanceBlind alert went out at every evaluation).
    unpriced = ledger is not None and any(e.cost_usd_per_hour is None for e in ledger.entries)
    alert_state = replace(alert_state, period_end=period_end, blind=alert_state.blind or unpriced)
    return BudgetStatus(
        observed_generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
        period_end=period_end,
        currency=currency if isinstance(currency, str) else None,
        spent_usd=_money(status.get("spent"), "status.spent", shown),
        remaining_usd=_money(status.get("remaining"), "status.remaining", shown),
        burn_rate_usd_per_hour=_money(status.get("burnRatePerHour"), "status.burnRatePerHour", shown),
        forecast_usd=_money(status.get("forecast"), "status.forecast", shown),
        last_evaluation_time=_time(status.get("lastEvaluationTime"), "status.lastEvaluationTime", shown),
        ledger=ledger, alert_state=alert_state, outbox=outbox, anomaly_state=anomalies, rejections=rejections,
        tenant_spent_usd=tenant,
        conditions=tuple(cast(ConditionStatus, dict(c)) for c in conditions
                         if isinstance(c, Mapping) and isinstance(c.get("type"), str))
        if isinstance(conditions, list) else (),
        problem=problems[0] if problems else None,
        display_problems=tuple(shown),
        held_namespaces=tuple(item["namespace"] for key in ("enforcedServices", "spotServices", "rejectedTenants")
                              for item in _list(status.get(key))
                              if isinstance(item, Mapping) and isinstance(item.get("namespace"), str)))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# ================================================================================================= write
def budget_status_json(status: BudgetStatus) -> BudgetPolicyStatus:
    """``status`` as the CRD stores it (the whole object; camelCase; null for an unknown forecast or burn rate)."""
    a = status.alert_state
    out: BudgetPolicyStatus = {}
    if status.observed_generation is not None:
        out["observedGeneration"] = status.observed_generation
    if a.period_start is not None:
        out["periodStart"] = format_time(a.period_start)
    if status.period_end is not None:
        out["periodEnd"] = format_time(status.period_end)
    if status.currency is not None:
        out["currency"] = status.currency
    if status.spent_usd is not None:
        out["spent"] = display_usd(status.spent_usd)
    if status.remaining_usd is not None:
        out["remaining"] = display_usd(status.remaining_usd)
    if a.state is not None:
        out["state"] = a.state.value
    if status.last_evaluation_time is not None:
        out["lastEvaluationTime"] = format_time(status.last_evaluation_time)
    out["thresholds"] = [_threshold_json(r) for r in a.records]
    out["enforcedServices"] = [_enforced_json(e) for e in a.enforced]
    out["spotServices"] = [_spot_json(r) for r in a.spot]
    out["rejectedTenants"] = [_rejection_json(r) for r in status.rejections]
    if status.tenant_spent_usd is not None:
        out["tenantSpent"] = format_usd(quantize_ledger_usd(status.tenant_spent_usd))
    # None (JSON null) deletes a stale value under a merge patch when it becomes unknown.
    out["burnRatePerHour"] = (None if status.burn_rate_usd_per_hour is None
                              else display_usd(status.burn_rate_usd_per_hour))
    out["forecast"] = None if status.forecast_usd is None else display_usd(status.forecast_usd)
    if a.blind_since is not None:
        out["blindSince"] = format_time(a.blind_since)
    out["ledger"] = _ledger_json(status.ledger or Ledger())
    out["pendingAlerts"] = [_pending_json(e) for e in status.outbox or ()]
    out["spendAnomalies"] = _anomalies_json(status.anomaly_state)
    out["conditions"] = list(status.conditions)
    return out


def status_of_plan(plan: BudgetPlan, ledger: Ledger | None, *, generation: int,
                   outbox: tuple[PendingAlert, ...], anomaly_state: AnomalyState,
                   conditions: list[ConditionStatus]) -> BudgetStatus:
    """The status one evaluation decided: the cost model's plan, its ledger, the outbox, anomalies, conditions."""
    return BudgetStatus(
        observed_generation=generation, period_end=plan.period_end, currency=plan.currency,
        spent_usd=plan.spent_usd, remaining_usd=plan.remaining_usd,
        burn_rate_usd_per_hour=plan.burn_rate_usd_per_hour, forecast_usd=plan.forecast_usd,
        last_evaluation_time=plan.evaluated_at,
        ledger=Ledger() if ledger is None else ledger,
        alert_state=AlertState(plan.alert_state.records, plan.period_start, plan.state, plan.enforced_services,
                               plan.blind, plan.spot, blind_since=plan.alert_state.blind_since),
        outbox=outbox, anomaly_state=anomaly_state, rejections=plan.rejections,
        tenant_spent_usd=plan.tenant_spent_usd, conditions=tuple(conditions))


def _material(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` without what only the clock moves: ``lastEvaluationTime``, ``tenantSpent``, nulls and the
    ledger's per-service ``spent`` and ``observedTime`` (spend grows every evaluation while anything runs)."""
    out = {k: v for k, v in status.items() if k not in ("lastEvaluationTime", "tenantSpent") and v is not None}
    ledger = out.get("ledger")
    if isinstance(ledger, Mapping):
        out["ledger"] = {"services": [{k: v for k, v in s.items() if k != "spent"} if isinstance(s, Mapping) else s
                                      for s in ledger.get("services") or []]}
    return out


def write_budget_status(status: BudgetStatus, stored: Mapping[str, Any] | None, *,
                        only: tuple[str, ...] | None = None, heartbeat_s: float | None = None,
                        now: dt.datetime | None = None) -> dict[str, Any]:
    """The merge patch from the stored object's status to ``status`` (pure; ``{}``: write nothing).

    Args:
        status: What the planner decided.
        stored: The BudgetPolicy as read (its ``status`` is the base of the patch), or None.
        only: Write only these status keys (a hold writes ``observedGeneration``, ``conditions`` and, when the
            outbox reads, ``pendingAlerts``); None: the whole status.
        heartbeat_s: When given, write only if something material changed (:func:`_material`) or the stored
            ``lastEvaluationTime`` is at least this many seconds before ``now`` (or absent or unreadable).
        now: Timezone-aware UTC (with ``heartbeat_s``).
    Returns:
        The keys whose JSON differs from the stored one (lists written whole; null deletes an unknown forecast or
        burn rate). Lists the stored status lacks count as empty.
    """
    # null deletes a stored blindSince once every service is priced again (the JSON form omits it then).
    desired: dict[str, Any] = {"blindSince": None, **budget_status_json(status)}
    if only is not None:
        desired = {k: v for k, v in desired.items() if k in only}
    raw = (stored or {}).get("status")
    current: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    base = {"pendingAlerts": [], "spotServices": [], "spendAnomalies": [], "rejectedTenants": [], **current}
    if heartbeat_s is not None:
        if now is None:
            raise ValueError("now is required with heartbeat_s")
        last = _time(current.get("lastEvaluationTime"))
        due = last is None or (now - last).total_seconds() >= heartbeat_s
        if not due and _material({**base, **desired}) == _material(base):
            return {}
    if only is None:
        base = {"pendingAlerts": [], "spotServices": [], "spendAnomalies": [], "rejectedTenants": [], **current}
    else:
        base = {"pendingAlerts": [], **current}
    return {k: v for k, v in desired.items() if base.get(k) != v}
