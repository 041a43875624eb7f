"""Reports of ``kubectl modalscale`` from objects as the API returns them (pure: no client, no clock).

Each command has a ``*_report`` function (objects in, a JSON-ready dict out: what ``-o json|yaml`` prints) and a
``render_*`` function (that dict in, kubectl-style text out: aligned columns, ages like ``5m``). Status fields are
read as the operator writes them (``crds/*.yaml`` documents each one); a field that is missing or does not parse
is shown as ``<none>``/``unknown``, never guessed. A value this plugin does not know (an action, state or kind a
newer operator wrote; the typed read of its part then fails) is shown as read, followed by
:data:`UNKNOWN_TO_PLUGIN`, never hidden: the budget's state, period start, thresholds, enforced and Spot services and
pending alerts fall back to the stored items. Money stays a decimal string in USD, as in status.

Sources of the figures:

* ``why``: ``status.autoscaler`` (the latest decision: mode, reason, message, ``features`` with units in their
  names: ``_rps`` req/s, ``_ms`` ms, ``_erlangs`` erlangs; ``state.serviceScale``/``latencyScale`` the online
  calibration), for a staged service ``status.stages[image-encoder]`` (the image encoder pool's replicas and its
  own decision, ``autoscaler``: desired replicas, reason, message, utilization), ``status.scalingHistory`` (the
  last 20 replica changes) and ``status.conditions``.
* ``cost``: ``status.costUSDPerHour`` of the InferenceService (replica price x running pods, now) and, per
  BudgetPolicy whose ``status.ledger.services`` counts it, its spend in that policy's period up to
  ``status.ledger.observedTime`` (the ledger is the only meter of spend: a service no policy counts is not
  metered).
* ``budget``: the BudgetPolicy's status (spent, remaining, burn rate, forecast, state, thresholds, enforcement,
  outbox) against its spec; the *next action* is the first threshold spend has not reached, with the spend at
  which it is crossed, the hours to it at the current burn rate, and for enforcing actions the spend from which
  the operator acts (one evaluation ahead of the crossing: amount - burn rate x ``evaluationIntervalSeconds``,
  :data:`modalscale.costmodel.budget.ENFORCEMENT_METHOD`).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from modalscale.api.budgetpolicy import BudgetSpec, InvalidBudgetSpec, Threshold, ThresholdAction, parse_budget_spec
from modalscale.api.isvc_status import AutoscalerRecord, IsvcStatus, format_time, read_isvc_status
from modalscale.api.isvc_status import parse_time as read_time
from modalscale.costmodel.budget.alerts import AlertKind
from modalscale.costmodel.budget.state import BudgetState, SpotState
from modalscale.costmodel.budget.status import BudgetStatus, read_budget_status
from modalscale.costmodel.ledger import Ledger
from modalscale.costmodel.money import display_usd
from modalscale.operator.isvc.objects import STAGE_IMAGE_ENCODER, TERMINATION_GRACE_S

NONE = "<none>"
"""How kubectl shows an empty cell."""
UNKNOWN_TO_PLUGIN = "(unknown to this plugin)"
"""Follows a stored enum value this plugin does not know (written by a newer operator; upgrade the plugin)."""

FEATURE_ORDER = ("arrival_rps", "forecast_rps", "mean_service_ms", "observed_service_ms", "predicted_p95_ms",
                 "observed_p95_ms", "offered_load_erlangs", "needed_replicas", "utilization_ratio")
"""Features listed first (the arrival rate, service times, load and need behind a decision); the rest by name."""

_UNITS = (("_rps", "req/s"), ("_ms", "ms"), ("_erlangs", "erlangs"), ("_ratio", "0..1"), ("_s", "s"),
          ("_replicas", "replicas"), ("_pods", "pods"))


# ------------------------------------------------------------------------------------------------ helpers
def parse_decimal(value: object) -> Decimal | None:
    """A finite Decimal from a status money string or number; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def parse_time(value: object) -> dt.datetime | None:
    """A timezone-aware datetime from an RFC 3339 status string (surrounding blanks and a lower-case ``z`` taken);
    None when absent or unreadable (:func:`modalscale.api.isvc_status.parse_time`)."""
    return read_time(value.strip().replace("z", "Z")) if isinstance(value, str) else None


def age(value: object, now: dt.datetime) -> str:
    """The age of an RFC 3339 time at ``now`` as ``kubectl get`` prints AGE (``ShortHumanDuration`` of
    k8s.io/apimachinery/pkg/util/duration): ``45s``, ``12m``, ``3h``, ``2d``, ``1y``; ``<none>`` when unreadable."""
    when = parse_time(value)
    if when is None:
        return NONE
    s = int((now - when).total_seconds())
    if s < -1:
        return "<invalid>"
    if s < 60:
        return f"{max(s, 0)}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    if s < 86400 * 365:
        return f"{s // 86400}d"
    return f"{s // (86400 * 365)}y"


def feature_unit(name: str) -> str:
    """The unit a feature's name carries (house rule: units live in names); ``""`` when none."""
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "") -> str:
    """Columns aligned as ``kubectl get`` prints them (three spaces apart, upper-case headers)."""
    cells = [[str(h) for h in headers]] + [[NONE if c is None or c == "" else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(indent + "   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def shown_value(value: object, known: type[enum.Enum]) -> str | None:
    """A stored enum value as text: as read, followed by :data:`UNKNOWN_TO_PLUGIN` when ``known`` has no such value
    (a newer operator wrote it); None when absent or empty."""
    if value is None or value == "":
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    return text if text in {m.value for m in known} else f"{text} {UNKNOWN_TO_PLUGIN}"


def _stored(policy: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The items of the list ``status.<key>`` as stored (objects only)."""
    status = policy.get("status")
    items = status.get(key) if isinstance(status, Mapping) else None
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _stored_text(policy: Mapping[str, Any], key: str) -> object:
    status = policy.get("status")
    return status.get(key) if isinstance(status, Mapping) else None


def _usd(value: object) -> str:
    """An amount in a table as the operator shows money everywhere (``costmodel.money.display_usd``: cents, or the
    first two significant digits of an amount under a cent); the JSON output keeps the exact figure."""
    d = parse_decimal(value)
    if d is None:
        return NONE
    try:
        return f"{display_usd(d)} USD"
    except ArithmeticError:  # beyond what money holds (a refused spec's 1e999): shown as read
        return f"{d:f} USD"


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def conditions_rows(status: Mapping[str, Any], now: dt.datetime) -> list[dict[str, Any]]:
    """``status.conditions`` as report items (type, status, reason, message, lastTransitionTime, age)."""
    out = []
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping):
            out.append({"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason"),
                        "message": c.get("message"), "lastTransitionTime": c.get("lastTransitionTime"),
                        "age": age(c.get("lastTransitionTime"), now)})
    return out


def _conditions_text(conditions: Sequence[Mapping[str, Any]]) -> str:
    if not conditions:
        return "Conditions: <none> (no operator has written this status yet)"
    return "Conditions:\n" + table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], [
        [c["type"], c["status"], c["reason"], c["age"], c["message"]] for c in conditions], indent="  ")


# ------------------------------------------------------------------------------------------------ why
def ordered_features(features: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.autoscaler.features`` as ``{name, value, unit}`` items: :data:`FEATURE_ORDER` first, then by name;
    values that are not finite numbers are left out."""
    names = [n for n in FEATURE_ORDER if n in features] + sorted(n for n in features if n not in FEATURE_ORDER)
    out = []
    for n in names:
        v = features[n]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append({"name": n, "value": v, "unit": feature_unit(n)})
    return out


def why_report(isvc: Mapping[str, Any], now: dt.datetime, last: int = 10) -> dict[str, Any]:
    """Why an InferenceService runs the replicas it does.

    Args:
        isvc: The InferenceService (camelCase dict with ``spec`` and ``status``).
        now: Timezone-aware UTC (ages are relative to it).
        last: How many ``status.scalingHistory`` entries to show, newest first (>= 0).
    Returns:
        ``{"inferenceService", "mode", "replicas": {desired, current, ready}, "lastDecision"`` (None when no
        autoscaler decision is recorded) ``, "imageEncoderPool"`` (:func:`pool_report`; None without a
        ``status.stages`` item for the pool) ``, "scalingHistory"`` (newest first) ``, "conditions"}``.
    """
    status = read_isvc_status(isvc)
    auto = status.autoscaler
    decision = None
    if auto is not None and auto != AutoscalerRecord():
        state = auto.state
        when = _time(auto.last_decision_time)
        decision = {"time": when, "age": age(when, now),
                    "mode": auto.mode, "valid": auto.valid, "reason": auto.reason,
                    "message": auto.message, "metricsAvailable": auto.metrics_available,
                    "features": ordered_features(auto.features or {}),
                    "serviceScale": None if state is None else state.service_scale,
                    "latencyScale": None if state is None else state.latency_scale}
    changes = [{"time": _time(h.time), "age": age(_time(h.time), now), "from": h.from_replicas,
                "to": h.to_replicas, "reason": h.reason, "message": h.message}
               for h in reversed(status.scaling_history or ())][:max(last, 0)]
    return {"inferenceService": _ref(isvc),
            "mode": ((isvc.get("spec") or {}).get("scaling") or {}).get("mode"),
            "replicas": {"desired": status.desired_replicas, "current": status.replicas,
                         "ready": status.ready_replicas},
            "lastDecision": decision, "imageEncoderPool": pool_report(status, now), "scalingHistory": changes,
            "conditions": conditions_rows({"conditions": list(status.conditions or ())}, now)}


def pool_report(status: IsvcStatus, now: dt.datetime) -> dict[str, Any] | None:
    """The image encoder pool's part of :func:`why_report` (``status.stages[image-encoder]``; None: no such item).

    Returns:
        ``{"replicas": {desired, current, ready}`` (the count the reconcile applies and the pool's Deployment)
        ``, "reason", "message"`` (why the reconcile applies that count) ``, "lastDecision"}``: the pool
        autoscaler's block (None before its first decision and in Fixed mode) as ``{time, age, mode, valid,
        desiredReplicas`` (its last valid count; None: none yet) ``, reason, message, metricsAvailable,
        utilizationRatio`` (busy fraction of the pool's ready slots, 0..1; None: not read) ``}``.
    """
    item = status.stage(STAGE_IMAGE_ENCODER)
    if item is None:
        return None
    auto = item.autoscaler
    decision = None
    if auto is not None and auto != AutoscalerRecord():
        when = _time(auto.last_decision_time)
        utilization = (auto.features or {}).get("utilization_ratio")
        decision = {"time": when, "age": age(when, now), "mode": auto.mode, "valid": auto.valid,
                    "desiredReplicas": auto.desired_replicas, "reason": auto.reason, "message": auto.message,
                    "metricsAvailable": auto.metrics_available,
                    "utilizationRatio": utilization if isinstance(utilization, (int, float))
                    and math.isfinite(utilization) else None}
    return {"replicas": {"desired": item.desired_replicas, "current": item.replicas, "ready": item.ready_replicas},
            "reason": item.reason, "message": item.message, "lastDecision": decision}


def _time(value: dt.datetime | None) -> str | None:
    return None if value is None else format_time(value)


def render_why(report: Mapping[str, Any]) -> str:
    """Text of :func:`why_report`."""
    r = report["replicas"]
    lines = [f"InferenceService {report['inferenceService']}   mode {report['mode'] or NONE}   replicas: "
             f"{_n(r['desired'])} desired, {_n(r['current'])} current, {_n(r['ready'])} ready", ""]
    d = report["lastDecision"]
    if d is None:
        lines.append("Last decision: <none> (status.autoscaler is empty: Fixed mode, or no autoscaler decision yet)")
    else:
        valid = "valid" if d["valid"] else "held: metrics missing or stale, replicas unchanged"
        lines += [f"Last decision ({d['age']} ago, {d['time']}): {d['mode']} {d['reason']} ({valid})",
                  f"  {d['message'] or ''}".rstrip()]
        if d["serviceScale"] is not None or d["latencyScale"] is not None:
            lines.append(f"  calibration: serviceScale {_n(d['serviceScale'])}, latencyScale {_n(d['latencyScale'])}")
        if d["features"]:
            lines.append("  Features:")
            lines.append(table(["NAME", "VALUE", "UNIT"], [[f["name"], f"{f['value']:g}", f["unit"] or "-"]
                                                          for f in d["features"]], indent="    "))
        int8 = _int8_line({f["name"]: f["value"] for f in d["features"]})
        if int8:
            lines.append(int8)
    if report.get("imageEncoderPool") is not None:
        lines += ["", *_pool_lines(report["imageEncoderPool"])]
    lines.append("")
    if report["scalingHistory"]:
        lines.append("Scaling history (newest first):")
        lines.append(table(["AGE", "TIME", "REPLICAS", "REASON", "MESSAGE"], [
            [h["age"], h["time"], f"{_n(h['from'])} -> {_n(h['to'])}", h["reason"], h["message"]]
            for h in report["scalingHistory"]], indent="  "))
    else:
        lines.append("Scaling history: <none> (no replica change recorded)")
    lines += ["", _conditions_text(report["conditions"])]
    return "\n".join(lines)


def _int8_line(features: Mapping[str, float]) -> str:
    """One line on the INT8 image encoder from the features ``image_int8_fallback_pods`` / ``image_int8_pods``
    (the runtime's ``modalscale_image_int8_fallback`` read from Prometheus); ``""`` when the pods export none."""
    fell, pods = features.get("image_int8_fallback_pods"), features.get("image_int8_pods")
    if fell is None or pods is None:
        return ""
    if fell > 0:
        return (f"  INT8 images: FP32 on {fell:g} of {pods:g} pod(s): their INT8 image encoder missed its fidelity "
                f"bound at load (the runtime's log names the cosine), so their image capacity is FP32's")
    return f"  INT8 images: served in INT8 on all {pods:g} pod(s) that asked for them"


def _pool_lines(pool: Mapping[str, Any]) -> list[str]:
    """Text of :func:`pool_report` (after the front's decision)."""
    r = pool["replicas"]
    lines = [f"Image encoder pool   replicas: {_n(r['desired'])} desired, {_n(r['current'])} current, "
             f"{_n(r['ready'])} ready   ({_n(pool['reason'])}{': ' + pool['message'] if pool['message'] else ''})"]
    d = pool["lastDecision"]
    if d is None:
        lines.append("  Last decision: <none> (no pool autoscaler decision: Fixed mode, or none yet)")
        return lines
    valid = "valid" if d["valid"] else "held: replicas unchanged"
    utilization = NONE if d["utilizationRatio"] is None else f"{d['utilizationRatio']:g}"
    lines += [f"  Last decision ({d['age']} ago, {d['time']}): {d['mode']} {d['reason']} ({valid}), "
              f"desired {_n(d['desiredReplicas'])}, utilization {utilization} (0..1)",
              f"    {d['message'] or ''}".rstrip()]
    return lines


def _n(value: object) -> str:
    return NONE if value is None else str(value)


# ------------------------------------------------------------------------------------------------ cost
def _selects(policy: Mapping[str, Any], isvc: Mapping[str, Any]) -> bool:
    """True when the policy's spec selector picks the service (False for a spec the operator would refuse)."""
    meta = isvc.get("metadata") or {}
    try:
        spec = parse_budget_spec(policy.get("spec") or {})
    except InvalidBudgetSpec:
        return False
    return spec.selector.matches(str((policy.get("metadata") or {}).get("namespace", "")),
                                 str(meta.get("namespace", "")), meta.get("labels") or {})


def cost_report(isvc: Mapping[str, Any], policies: Sequence[Mapping[str, Any]], now: dt.datetime,
                policies_scope: str = "all namespaces") -> dict[str, Any]:
    """An InferenceService's cost now and its spend in the period of each BudgetPolicy that counts it.

    Args:
        isvc: The InferenceService.
        policies: BudgetPolicies as listed (any namespace; those that neither count nor select it are ignored).
        now: Timezone-aware UTC.
        policies_scope: Where ``policies`` were listed (``all namespaces`` or ``namespace X``), reported as is.
    Returns:
        ``{"inferenceService", "costUSDPerHour"`` (status, None when not priced) ``, "readyReplicas",
        "budgets": [...], "policiesScope"}``; a budget item has the policy, its period and bounds, ``spent`` (this
        service, USD, up to ``asOf``), ``costUSDPerHour`` (the ledger's rate in force), the policy's ``state``,
        ``enforcement`` (the action on this service now, or None) and ``counted`` (False: the selector picks the
        service but the ledger has no entry for it yet).
    """
    meta = isvc.get("metadata") or {}
    key = (meta.get("namespace"), meta.get("name"))
    status = read_isvc_status(isvc)
    budgets = []
    for p in sorted(policies, key=_ref):
        ps = read_budget_status(p)
        ledger = ps.ledger or Ledger()
        entry = next((e for e in ledger.entries if e.key == key), None)
        if entry is None and not _selects(p, isvc):
            continue
        enforced = next((e for e in _enforced_items(p, ps) if (e["namespace"], e["name"]) == key), None)
        as_of = _time(ledger.observed_time)
        budgets.append({
            "budgetPolicy": _ref(p), "period": (p.get("spec") or {}).get("period"),
            "periodStart": _time(ps.alert_state.period_start), "periodEnd": _time(ps.period_end),
            "spent": None if entry is None else _exact(entry.spent_usd),
            "costUSDPerHour": None if entry is None or entry.cost_usd_per_hour is None
            else _exact(entry.cost_usd_per_hour),
            "asOf": as_of, "asOfAge": age(as_of, now), "state": _state(p, ps), "counted": entry is not None,
            "enforcement": None if enforced is None else {
                "action": enforced["action"], "maxReplicas": enforced["maxReplicas"], "dryRun": enforced["dryRun"],
                "message": enforced["message"]}})
    cost = None if status.cost_usd_per_hour is None else format(status.cost_usd_per_hour, "f")
    return {"inferenceService": _ref(isvc), "costUSDPerHour": cost,
            "readyReplicas": status.ready_replicas, "budgets": budgets, "policiesScope": policies_scope}


def render_cost(report: Mapping[str, Any]) -> str:
    """Text of :func:`cost_report`."""
    rate = report["costUSDPerHour"]
    lines = [f"InferenceService {report['inferenceService']}",
             f"  Burn rate now: {_usd(rate)}/h" if parse_decimal(rate) is not None else
             "  Burn rate now: unknown (status.costUSDPerHour absent: the service is not priced or not reconciled)",
             f"  Ready replicas: {_n(report['readyReplicas'])}", ""]
    if not report["budgets"]:
        lines.append(f"Spend: not metered (no BudgetPolicy in {report['policiesScope']} counts this service; a "
                     f"BudgetPolicy's ledger is where spend is recorded: create one that selects it)")
        return "\n".join(lines)
    lines.append(f"Spend by BudgetPolicy (ledgers in {report['policiesScope']}):")
    rows = []
    for b in report["budgets"]:
        enf = b["enforcement"]
        rows.append([b["budgetPolicy"], b["period"], f"{_day(b['periodStart'])}..{_day(b['periodEnd'])}",
                     _usd(b["spent"]) if b["counted"] else "not counted yet",
                     f"{_usd(b['costUSDPerHour'])}/h" if parse_decimal(b["costUSDPerHour"]) is not None else NONE,
                     b["asOfAge"], b["state"],
                     NONE if enf is None else f"{enf['action']}: {enf['message']}"
                     + (" (dry run)" if enf["dryRun"] else "")])
    lines.append(table(["BUDGETPOLICY", "PERIOD", "WINDOW", "SPENT", "RATE", "AS OF", "STATE", "ENFORCED"], rows,
                       indent="  "))
    return "\n".join(lines)


def _day(value: object) -> str:
    when = parse_time(value)
    return "?" if when is None else when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%MZ")


# ------------------------------------------------------------------------------------------------ budget
def describe_actions(t: Threshold, spec: BudgetSpec) -> list[str]:
    """What a threshold's actions do, one line each (the CRD's wording of ``thresholds[].actions``)."""
    out = []
    targets = ", ".join(n.name for n in spec.notifications)
    for a in t.actions:
        if a is ThresholdAction.ALERT:
            out.append(f"Alert ({targets})" if targets else "Alert (no spec.notifications: an Event only)")
        elif a is ThresholdAction.CAP_REPLICAS:
            out.append(f"CapReplicas: every selected service at most {t.cap_replicas} replica(s)")
        elif a is ThresholdAction.SCALE_DOWN:
            out.append(f"ScaleDown: every selected service to {spec.enforcement.floor_replicas} replica(s)")
        elif a is ThresholdAction.SCALE_TO_ZERO:
            out.append("ScaleToZero: every selected service to 0 replicas")
        elif a is ThresholdAction.REJECT:
            out.append(f"Reject: the gateway answers 429 to tenant(s) {', '.join(spec.selector.tenants)} until the "
                       f"period ends")
        else:
            out.append(f"SwitchToSpot: services with spec.priority <= {t.spot_max_priority} to Spot capacity")
    if spec.enforcement.dry_run and any(a is not ThresholdAction.ALERT for a in t.actions):
        out.append("(enforcement.dryRun: reported, not applied)")
    return out


def next_action(spec: BudgetSpec, spent: Decimal | None, burn_usd_per_hour: Decimal | None,
                enforced_actions: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The first threshold spend has not reached, and when it would be.

    Args:
        spec: The parsed spec.
        spent: ``status.spent`` in USD (None: unknown, then nothing is predicted).
        burn_usd_per_hour: ``status.burnRatePerHour`` (None: unknown).
        enforced_actions: The actions of ``status.enforcedServices`` now (each service's strongest).
    Returns:
        None when every threshold is reached (or ``spent`` is unknown); else ``{"percent", "atSpend"`` (USD at
        which it is crossed) ``, "toGo"`` (USD) ``, "hoursAtBurnRate"`` (None when the burn rate is unknown or 0)
        ``, "actions"`` (lines of :func:`describe_actions`) ``, "enforcesFromSpend"`` (USD spend from which the
        operator enforces, :func:`enforcement_ahead_s` ahead; None for an Alert-only threshold)
        ``, "enforcedAhead"`` (True when one of its enforcing actions is in force already: spend will cross it
        before the next evaluation)``}``.
    """
    if spent is None:
        return None
    limit = spec.limit.amount
    for t in spec.thresholds:
        at = limit * t.percent / 100
        if spent >= at:
            continue
        hours = None if not burn_usd_per_hour else float((at - spent) / burn_usd_per_hour)
        enforcing = any(a is not ThresholdAction.ALERT for a in t.actions)
        ahead = (burn_usd_per_hour or Decimal(0)) * enforcement_ahead_s(spec) / 3600
        return {"percent": t.percent, "atSpend": _money(at), "toGo": _money(at - spent),
                "hoursAtBurnRate": None if hours is None else round(hours, 2),
                "actions": describe_actions(t, spec),
                "enforcesFromSpend": _money(max(at - ahead, Decimal(0))) if enforcing else None,
                "enforcedAhead": any(a.value in enforced_actions for a in t.actions
                                     if a is not ThresholdAction.ALERT)}
    return None


def enforcement_ahead_s(spec: BudgetSpec) -> int:
    """Seconds ahead of a crossing that the operator enforces: one evaluation interval plus the grace period the
    operator gives every replica (``TERMINATION_GRACE_S``), during which a replica scaled away still runs and is
    charged (``modalscale.costmodel.budget.enforce.enforcement_horizon_s``; a service whose pods were given a longer
    grace period by hand makes the operator look further ahead than this)."""
    return spec.evaluation_interval_s + TERMINATION_GRACE_S


def _money(d: Decimal) -> str:
    """A computed amount as the operator shows money (``costmodel.money.display_usd``: cents, or the digits of an
    amount under a cent)."""
    return display_usd(d)


def _threshold_records(policy: Mapping[str, Any], status: BudgetStatus) -> dict[tuple[int, bool], dict[str, Any]]:
    """``status.thresholds`` by (percent, forecast): ``crossed``, ``alertedThisPeriod`` and ``lastAlertTime``; as
    stored when the typed read failed (a value a newer operator wrote elsewhere in the part)."""
    a = status.alert_state
    if a.records or not _stored(policy, "thresholds"):
        return {(r.percent, r.forecast): {
            "crossed": r.crossed, "lastAlertTime": _time(r.last_alert_time),
            "alertedThisPeriod": r.alerted_period_start is not None and r.alerted_period_start == a.period_start}
            for r in a.records}
    start = parse_time(_stored_text(policy, "periodStart"))
    out = {}
    for item in _stored(policy, "thresholds"):
        percent = item.get("percent")
        if isinstance(percent, int) and not isinstance(percent, bool):
            alerted = parse_time(item.get("alertedPeriodStart"))
            last = item.get("lastAlertTime")
            out[(percent, item.get("forecast") is True)] = {
                "crossed": item.get("crossed") is True, "lastAlertTime": last if isinstance(last, str) else None,
                "alertedThisPeriod": alerted is not None and alerted == start}
    return out


def _enforced_items(policy: Mapping[str, Any], status: BudgetStatus) -> list[dict[str, Any]]:
    """``status.enforcedServices`` as report items; as stored (an unknown action named so) when the typed read
    failed."""
    if status.alert_state.enforced or not _stored(policy, "enforcedServices"):
        return [{"namespace": e.namespace, "name": e.name, "action": e.action.value, "maxReplicas": e.max_replicas,
                 "since": _time(e.since), "dryRun": e.dry_run, "message": e.describe()}
                for e in status.alert_state.enforced]
    return [{"namespace": i.get("namespace"), "name": i.get("name"),
             "action": shown_value(i.get("action"), ThresholdAction), "maxReplicas": i.get("maxReplicas"),
             "since": i.get("since"), "dryRun": i.get("dryRun") is True,
             "message": i.get("message") if isinstance(i.get("message"), str) else ""}
            for i in _stored(policy, "enforcedServices")]


def _spot_items(policy: Mapping[str, Any], status: BudgetStatus) -> list[dict[str, Any]]:
    """``status.spotServices`` as report items; as stored (an unknown state named so) when the typed read failed."""
    if status.alert_state.spot or not _stored(policy, "spotServices"):
        return [{"namespace": r.namespace, "name": r.name, "thresholdPercent": r.threshold_percent,
                 "state": r.state.value, "since": _time(r.since), "dryRun": r.dry_run, "message": r.message,
                 **({} if r.fallback_time is None else {"fallbackTime": _time(r.fallback_time)})}
                for r in status.alert_state.spot]
    return [{"namespace": i.get("namespace"), "name": i.get("name"), "thresholdPercent": i.get("thresholdPercent"),
             "state": shown_value(i.get("state"), SpotState), "since": i.get("since"),
             "dryRun": i.get("dryRun") is True, "message": _text(i.get("message"))}
            for i in _stored(policy, "spotServices")]


def _pending_items(policy: Mapping[str, Any], status: BudgetStatus) -> list[dict[str, Any]]:
    """``status.pendingAlerts`` as report items; as stored (an unknown kind named so) when the typed read failed."""
    if status.outbox or not _stored(policy, "pendingAlerts"):
        return [{"notification": e.notification, "kind": e.message.kind.value,
                 "thresholdsPercent": list(e.message.thresholds_percent), "severity": e.message.severity,
                 "title": e.message.title, "attempts": e.attempts, "nextAttemptTime": _time(e.next_attempt_time),
                 "lastReason": e.last_reason, "lastError": e.last_error} for e in status.outbox or ()]
    return [{"notification": _text(i.get("notification")), "kind": shown_value(i.get("kind"), AlertKind),
             "thresholdsPercent": i.get("thresholdsPercent") if isinstance(i.get("thresholdsPercent"), list) else [],
             "severity": _text(i.get("severity")), "title": _text(i.get("title")), "attempts": i.get("attempts"),
             "nextAttemptTime": _text(i.get("nextAttemptTime")), "lastReason": _text(i.get("lastReason")),
             "lastError": _text(i.get("lastError"))} for i in _stored(policy, "pendingAlerts")]


def _written_thresholds(raw_spec: object) -> list[tuple[int, bool, list[str]]]:
    """The thresholds (and the forecast alert) of a spec that does not parse, as written: each item whose
    ``percent`` is an integer, its ``actions`` the strings listed (``Alert``, the CRD's default, when absent)."""
    spec = raw_spec if isinstance(raw_spec, Mapping) else {}
    items = spec.get("thresholds")
    items = items if isinstance(items, list) else []
    out: list[tuple[int, bool, list[str]]] = []
    for t in items:
        percent = t.get("percent") if isinstance(t, Mapping) else None
        if isinstance(percent, int) and not isinstance(percent, bool):
            actions = t.get("actions", ["Alert"])
            out.append((percent, False, [a for a in actions if isinstance(a, str)] if isinstance(actions, list)
                        else []))
    forecast = spec.get("forecast", {})  # the CRD's default: enabled, at 100 %
    at = forecast.get("alertAtPercent", 100) if isinstance(forecast, Mapping) else None
    if isinstance(forecast, Mapping) and forecast.get("enabled", True) is True and isinstance(at, int):
        out.append((at, True, ["Alert"]))
    return out


def _threshold_items(policy: Mapping[str, Any], spec: BudgetSpec | None, status: BudgetStatus
                     ) -> list[dict[str, Any]]:
    """Spec thresholds (and the forecast alert) joined with their ``status.thresholds`` records."""
    records = _threshold_records(policy, status)
    wanted: list[tuple[int, bool, list[str] | None]] = []  # actions None: in status only, not in the spec
    if spec is not None:
        wanted = [(t.percent, False, [a.value for a in t.actions]) for t in spec.thresholds]
        if spec.forecast.enabled:
            wanted.append((spec.forecast.alert_at_percent, True, ["Alert"]))
    else:  # spec unreadable: its items as written, then what status holds besides
        wanted = [*_written_thresholds(policy.get("spec"))]
        written = {(p, f) for p, f, _ in wanted}
        wanted += [(p, f, None) for (p, f) in sorted(records, key=lambda k: (k[1], k[0])) if (p, f) not in written]
    limit = spec.limit.amount if spec is not None else None
    out = []
    for percent, forecast, actions in wanted:
        r = records.get((percent, forecast), {})
        out.append({"percent": percent, "forecast": forecast,
                    "atSpend": None if limit is None else _money(limit * percent / 100), "actions": actions,
                    "crossed": r.get("crossed", False), "alertedThisPeriod": r.get("alertedThisPeriod", False),
                    "lastAlertTime": r.get("lastAlertTime")})
    return out


def budget_report(policy: Mapping[str, Any], now: dt.datetime) -> dict[str, Any]:
    """Where a BudgetPolicy stands: spend against the limit, thresholds, enforcement, next action, outbox.

    Args:
        policy: The BudgetPolicy (camelCase dict with ``spec`` and ``status``).
        now: Timezone-aware UTC.
    Returns:
        A dict of the status figures (money as decimal strings in USD), ``percentUsed``, ``thresholds``,
        ``enforcedServices``, ``spotServices``, ``rejectedTenants`` and ``tenants`` (per-tenant budgets),
        ``nextAction`` (:func:`next_action`), ``pendingAlerts``,
        ``services`` (the ledger, most spent first), ``conditions`` and ``specError`` (the operator's message when
        the spec does not parse; the figures are then status only), ``statusProblem`` (the first status field that
        does not read) and ``statusShownAsStored`` (True when a part's typed read failed: its items are the stored
        ones, an unknown value followed by :data:`UNKNOWN_TO_PLUGIN`).
    """
    status = read_budget_status(policy)
    raw_spec = policy.get("spec") or {}
    try:
        spec: BudgetSpec | None = parse_budget_spec(raw_spec)
        spec_error = None
    except InvalidBudgetSpec as exc:
        spec, spec_error = None, str(exc)
    spent, burn = status.spent_usd, status.burn_rate_usd_per_hour
    exact = _exact_spent(spec, status)
    limit = spec.limit.amount if spec is not None else parse_decimal((raw_spec.get("limit") or {}).get("amount"))
    services = sorted((status.ledger or Ledger()).entries, key=lambda e: (-e.spent_usd, e.namespace, e.name))
    a = status.alert_state
    last = _time(status.last_evaluation_time)
    enforced = _enforced_items(policy, status)
    return {
        "budgetPolicy": _ref(policy), "period": raw_spec.get("period"), "timeZone": raw_spec.get("timeZone", "UTC"),
        "periodStart": _time(a.period_start) or _text(_stored_text(policy, "periodStart")),
        "periodEnd": _time(status.period_end),
        "state": _state(policy, status), "limit": None if limit is None else f"{limit:f}",
        "spent": _exact(spent), "remaining": _exact(status.remaining_usd),
        "percentUsed": None if exact is None or not limit else f"{(exact * 100 / limit).quantize(Decimal('0.1')):f}",
        "burnRatePerHour": _exact(burn), "forecast": _exact(status.forecast_usd),
        "lastEvaluationTime": last, "lastEvaluationAge": age(last, now),
        "thresholds": _threshold_items(policy, spec, status),
        "enforcedServices": enforced,
        "spotServices": _spot_items(policy, status),
        "rejectedTenants": [{"namespace": r.namespace, "name": r.name, "tenant": r.tenant,
                             "thresholdPercent": r.threshold_percent, "since": _time(r.since),
                             "until": _time(r.until), "dryRun": r.dry_run} for r in status.rejections],
        "tenants": list(spec.selector.tenants) if spec is not None else [],
        "nextAction": None if spec is None else next_action(spec, exact, burn, frozenset(
            e["action"] for e in enforced)),
        "pendingAlerts": _pending_items(policy, status),
        "services": [{"namespace": e.namespace, "name": e.name, "replicas": e.replicas,
                      "costUSDPerHour": None if e.cost_usd_per_hour is None else _exact(e.cost_usd_per_hour),
                      "spent": _exact(e.spent_usd)} for e in services],
        "conditions": conditions_rows({"conditions": list(status.conditions)}, now), "specError": spec_error,
        "statusProblem": status.problem or next(iter(status.display_problems), None),
        "statusShownAsStored": status.problem is not None}


def _exact_spent(spec: BudgetSpec | None, status: BudgetStatus) -> Decimal | None:
    """The spend the operator compares with the thresholds (``modalscale.costmodel.budget.spend.reaches``): exact,
    to the ledger's 1e-9 USD, where status holds it (``status.tenantSpent`` of a tenant policy, else the sum of
    ``status.ledger.services[].spent``) and it is the figure ``status.spent`` shows (``display_usd``); else
    ``status.spent`` (None: unknown). ``status.spent`` alone put a spend within half a cent below a threshold past
    it (1.996 USD shows as 2.00: "every threshold is reached" while the operator had not crossed 100 %)."""
    shown = status.spent_usd
    if shown is None:
        return None
    if spec is not None and spec.selector.tenants:
        exact = status.tenant_spent_usd
    else:
        exact = None if status.ledger is None or status.ledger.observed_time is None else status.ledger.spent_usd
    if exact is None or Decimal(display_usd(exact)) != shown:
        return shown
    return exact


def _exact(value: Decimal | None) -> str | None:
    """A stored amount as its decimal string (as stored: the codec keeps its digits)."""
    return None if value is None else f"{value:f}"


def _state(policy: Mapping[str, Any], status: BudgetStatus) -> str | None:
    """``status.state``: as read (an unknown one named so) when the typed read failed."""
    if status.alert_state.state is not None:
        return status.alert_state.state.value
    return shown_value(_stored_text(policy, "state"), BudgetState)


def _text(value: object) -> str | None:
    """A stored string as is; None for anything else."""
    return value if isinstance(value, str) else None


def render_budget(report: Mapping[str, Any]) -> str:
    """Text of :func:`budget_report`."""
    r = report
    lines = [f"BudgetPolicy {r['budgetPolicy']}   {r['period'] or NONE} in {r['timeZone']}   state "
             f"{r['state'] or 'not evaluated yet'}"]
    if r["specError"]:
        lines.append(f"  spec does not parse (the operator refuses it too): {r['specError']}")
    if r["statusProblem"] and r.get("statusShownAsStored"):
        lines.append(f"  status does not read here (its items are shown below as stored, a value this plugin does "
                     f"not know named so: a newer operator wrote it; upgrade the plugin): {r['statusProblem']}")
    elif r["statusProblem"]:
        lines.append(f"  status does not read (shown as absent below): {r['statusProblem']}")
    lines += [f"  Period:     {r['periodStart'] or NONE} .. {r['periodEnd'] or NONE}",
              f"  Spent:      {_usd(r['spent'])} of {_usd(r['limit'])}"
              + (f" ({r['percentUsed']} %)" if r["percentUsed"] is not None else "")
              + f", remaining {_usd(r['remaining'])}",
              f"  Burn rate:  {_usd(r['burnRatePerHour'])}/h" if r["burnRatePerHour"] is not None else
              "  Burn rate:  unknown (a selected service's price or replicas could not be read)",
              f"  Forecast:   {_usd(r['forecast'])} at period end" if r["forecast"] is not None else
              "  Forecast:   <none> (disabled or unknown)",
              f"  Evaluated:  {r['lastEvaluationAge']} ago", ""]
    if r["thresholds"]:
        lines.append("Thresholds:" if r["specError"] is None else
                     "Thresholds (as written; the spec is refused, so none acts from it; enforcement already in force "
                     "is held):")
        lines.append(table(["PERCENT", "AT", "ACTIONS", "CROSSED", "ALERTED", "LAST ALERT"], [
            [f"{t['percent']} %" + (" (forecast)" if t["forecast"] else ""),
             f"{t['atSpend']} USD" if t["atSpend"] is not None else NONE,
             "(not in the spec)" if t["actions"] is None else ",".join(t["actions"]) or NONE,
             "yes" if t["crossed"] else "no", "yes" if t["alertedThisPeriod"] else "no", t["lastAlertTime"]]
            for t in r["thresholds"]], indent="  "))
    n = r["nextAction"]
    if n is not None:
        eta = (f", in {n['hoursAtBurnRate']} h at the current burn rate" if n["hoursAtBurnRate"] is not None
               else ", no ETA (burn rate unknown or zero)")
        lines += ["", f"Next action: at {n['percent']} % (spend {n['atSpend']} USD, {n['toGo']} USD to go{eta})"]
        lines += [f"  {a}" for a in n["actions"]]
        if n["enforcedAhead"]:
            lines.append("  enforced already (ahead of the crossing: spend reaches it before the next evaluation)")
        elif n["enforcesFromSpend"] is not None:
            lines.append(f"  enforced from spend {n['enforcesFromSpend']} USD (one evaluation and a replica's "
                         f"{TERMINATION_GRACE_S} s grace period ahead of the crossing)")
    elif r["specError"] is None and r["spent"] is not None:
        lines += ["", "Next action: <none> (every threshold is reached; enforcement holds until the period ends)"]
    lines.append("")
    if r["enforcedServices"]:
        lines.append("Enforced now:")
        lines.append(table(["SERVICE", "ACTION", "MAX REPLICAS", "SINCE", "DRY RUN", "RUNS"], [
            [f"{e.get('namespace')}/{e.get('name')}", e.get("action"), e.get("maxReplicas"), e.get("since"),
             "yes" if e.get("dryRun") else "no", e.get("message")] for e in r["enforcedServices"]], indent="  "))
    else:
        lines.append("Enforced now: <none>")
    lines.append("")
    if r["spotServices"]:
        lines.append("On Spot (SwitchToSpot):")
        lines.append(table(["SERVICE", "STATE", "SINCE", "MESSAGE"], [
            [f"{e.get('namespace')}/{e.get('name')}", e.get("state"), e.get("since"), e.get("message")]
            for e in r["spotServices"]], indent="  "))
        lines.append("")
    if r.get("tenants"):
        lines.append(f"Tenants: {', '.join(r['tenants'])} (Spent is their share of the services' spend)")
        if r.get("rejectedTenants"):
            lines.append(table(["SERVICE", "TENANT", "REFUSED SINCE", "UNTIL", "DRY RUN"], [
                [f"{e.get('namespace')}/{e.get('name')}", e.get("tenant"), e.get("since"), e.get("until"),
                 "yes" if e.get("dryRun") else "no"] for e in r["rejectedTenants"]], indent="  "))
        else:
            lines.append("  Refused at the gateway: <none>")
        lines.append("")
    if r["services"]:
        lines.append("Spend by service (ledger):")
        lines.append(table(["SERVICE", "REPLICAS", "RATE", "SPENT"], [
            [f"{s['namespace']}/{s['name']}", s["replicas"],
             f"{_usd(s['costUSDPerHour'])}/h" if s["costUSDPerHour"] is not None else NONE, _usd(s["spent"])]
            for s in r["services"]], indent="  "))
        lines.append("")
    if r["pendingAlerts"]:
        lines.append("Pending alerts (not yet accepted by their target):")
        lines.append(table(["TARGET", "KIND", "ATTEMPTS", "NEXT ATTEMPT", "LAST ERROR"], [
            [a["notification"], a["kind"], a["attempts"], a["nextAttemptTime"],
             f"{a['lastReason']}: {a['lastError']}" if a["lastReason"] else a["lastError"]]
            for a in r["pendingAlerts"]], indent="  "))
    else:
        lines.append("Pending alerts: <none>")
    lines += ["", _conditions_text(r["conditions"])]
    return "\n".join(lines)
