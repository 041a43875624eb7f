"""The ``status`` of an InferenceService as one typed value, with its one read and its one write.

Why a module: the status was parsed and built in eight places (the reconcile's planner, its failure path, the
autoscaler's planner and activation, its state codec, the gateway demand check, ``kubectl modalscale``, the demo),
each with its own idea of a missing or malformed field. Every reader now takes :class:`IsvcStatus` from
:func:`read_isvc_status`, every writer hands one to :func:`write_isvc_status`, and a unit test
(``tests/unit/api/test_status_codecs.py``) fails when another module spells a status-only key.

The parts have different owners and stay separate fields: the reconcile writes the observations, ``conditions``,
``scalingHistory``, ``gateway``, ``stages`` and ``costUSDPerHour``; the autoscaler writes ``desiredReplicas``,
``autoscaler`` and its two conditions. A field left ``None`` (empty tuple for the lists) is not written, so each
loop writes its part only. The JSON is what it was before this module (``tests/unit/api/test_api_status.py`` holds the
TypedDicts of ``modalscale.api.status`` to the CRD; the round-trip test holds this codec to them).
"""

from __future__ import annotations

import datetime as dt
import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar, cast

from modalscale.api.status import (
    AutoscalerStateStatus,
    ConditionStatus,
    GatewayStatus,
    ScalingHistoryEntry,
    StageAutoscalerStatus,
    StageStatus,
)

_T = TypeVar("_T")


class Delete(enum.Enum):
    """A field the write removes (JSON null in the merge patch)."""

    DELETE = "delete"


DELETE = Delete.DELETE
"""``IsvcStatus.gateway = DELETE``: remove ``status.gateway`` (the gateway was turned off)."""


@dataclass(frozen=True, slots=True)
class ScalerState:
    """What the autoscaler's policy remembers between decisions (immutable; ``status.autoscaler.state``, read and
    written only here; ``modalscale.autoscaler.policy`` decides with it).

    Attributes:
        recommendations: ``(time, replicas)`` of recent post-tolerance recommendations, oldest first.
        service_scale: Multiplier on the model's service times, from observed vs predicted mean service time.
        latency_scale: Multiplier on the queueing model's p95, from observed vs predicted p95 latency.
        last_change_at: When a decision last changed the replica count (calibration waits for metrics to settle).
        in_flight_history: ``Observation.in_flight_requests`` of the last two distinct samples that decisions read,
            oldest first (the observed-queue rule's growth check).
        in_flight_times: When each of ``in_flight_history`` was scraped (``Observation.in_flight_at``, to the
            millisecond), as long as it; the growth of the requests in flight is a rate over the time between them.
        idle_since: The first decision of the current unbroken run that observed no request (scale to zero
            counts from it); None while requests arrive or the metrics are missing.
        scaled_to_zero_at: When a decision last took the count to 0 (an activation request must be newer).
    """

    recommendations: tuple[tuple[dt.datetime, int], ...] = ()
    service_scale: float = 1.0
    latency_scale: float = 1.0
    last_change_at: dt.datetime | None = None
    in_flight_history: tuple[float, ...] = ()
    in_flight_times: tuple[dt.datetime, ...] = ()
    idle_since: dt.datetime | None = None
    scaled_to_zero_at: dt.datetime | None = None


@dataclass(frozen=True)
class AutoscalerRecord:
    """``status.autoscaler``: the last decision of the autoscaler (None: not recorded).

    Attributes:
        mode: The mode actually used (``Predictive``, ``Utilization``, ``Fixed``).
        valid: False when the decision held (its count was not acted on).
        reason: A :class:`modalscale.api.conditions.ScalingReason` value.
        message: Why, in a sentence.
        last_decision_time: Timezone-aware UTC, whole seconds as stored.
        metrics_available: Whether the metrics of the mode used were read.
        features: At most 32 finite numbers behind the decision (name -> value).
        state: The scaler's memory (None: not stored; readers start from ``ScalerState()``).
        desired_replicas: A stage's block only (``status.stages[image-encoder].autoscaler.desiredReplicas``): the
            pool's count of its last valid decision; None = none yet. The service's own is
            ``status.desiredReplicas``, so the top-level block never carries it.
    """

    mode: str | None = None
    valid: bool | None = None
    reason: str | None = None
    message: str | None = None
    last_decision_time: dt.datetime | None = None
    metrics_available: bool | None = None
    features: Mapping[str, float] | None = None
    state: ScalerState | None = None
    desired_replicas: int | None = None


@dataclass(frozen=True)
class GatewayRecord:
    """``status.gateway``: the request gateway's Deployment (``spec.gateway.enabled``)."""

    replicas: int = 0
    ready_replicas: int = 0
    replicas_url: str | None = None
    """In-cluster HTTP URL of the Service ``<name>-replicas`` (bypassing the gateway)."""


@dataclass(frozen=True)
class StageRecord:
    """One item of ``status.stages`` (``spec.stages``): the pool of one stage, ``front`` or ``image-encoder``."""

    name: str
    replicas: int = 0
    ready_replicas: int = 0
    desired_replicas: int | None = None
    reason: str | None = None
    """CamelCase reason of the replica count."""
    message: str | None = None
    address: str | None = None
    """image-encoder: ``host:port`` the front pool calls (the encoder Service's ClusterIP); None for the front."""
    autoscaler: AutoscalerRecord | None = None
    """image-encoder in a Predictive or Utilization mode: the pool's own autoscaler's last decision, with its
    ``desired_replicas`` and scaler state (written by the autoscaler, carried over by the reconcile, which writes the
    list whole); None for the front, in Fixed mode and before the first decision."""


@dataclass(frozen=True)
class ScalingChange:
    """One item of ``status.scalingHistory``: the Deployment's replicas changed ``from_replicas`` -> ``to_replicas``."""

    time: dt.datetime
    from_replicas: int
    to_replicas: int
    reason: str
    message: str | None = None


@dataclass(frozen=True)
class IsvcStatus:
    """The ``status`` of an InferenceService (None / empty: absent, and not written).

    Attributes:
        observed_generation: ``metadata.generation`` the reconcile last acted on.
        replicas: The Deployment's replicas (``/scale``'s ``.status.replicas``).
        ready_replicas: Its ready replicas.
        desired_replicas: The autoscaler's last valid count (the record a restarted operator continues from).
        selector: Label selector of the pods (``/scale``'s ``.status.selector``).
        url: In-cluster HTTP URL of the Service.
        cost_usd_per_hour: Running replicas x the replica price + Ready gateway pods x the gateway pod price, USD
            per hour (written with 4 decimal places).
        last_scale_reason: Kept as stored (the CRD has it; nothing writes it today).
        scaling_history: Changes of the Deployment's replicas, oldest first (at most 20 stored).
        autoscaler: The last autoscaler decision.
        gateway: The gateway's Deployment; :data:`DELETE` removes a stored block.
        stages: Each stage's pool with ``spec.stages`` (front first); :data:`DELETE` removes a stored list.
        conditions: metav1 conditions, whole (``modalscale.operator.conditions.upsert`` builds them).
    """

    observed_generation: int | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    desired_replicas: int | None = None
    selector: str | None = None
    url: str | None = None
    cost_usd_per_hour: Decimal | None = None
    last_scale_reason: str | None = None
    scaling_history: tuple[ScalingChange, ...] | None = None
    autoscaler: AutoscalerRecord | None = None
    gateway: GatewayRecord | Delete | None = None
    stages: tuple[StageRecord, ...] | Delete | None = None
    conditions: tuple[ConditionStatus, ...] | None = None

    @property
    def ready_gateway_pods(self) -> int:
        """``gateway.readyReplicas`` (0 when absent)."""
        return self.gateway.ready_replicas if isinstance(self.gateway, GatewayRecord) else 0

    def stage(self, name: str) -> StageRecord | None:
        """The item of ``stages`` named ``name`` (``front`` or ``image-encoder``); None when absent or deleted."""
        if not isinstance(self.stages, tuple):
            return None
        return next((s for s in self.stages if s.name == name), None)

    @property
    def scaler_state(self) -> ScalerState:
        """The autoscaler's memory, a fresh ``ScalerState()`` when none is stored."""
        return (self.autoscaler.state if self.autoscaler is not None and self.autoscaler.state is not None
                else ScalerState())


# ================================================================================================= read
def _int(value: Any, minimum: int = 0) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= minimum else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 time as stored (``2026-12-02T16:43:20Z``), in UTC; None when absent, not a string, naive, or
    outside the years 1-9999 in UTC (an offset that moves it past them)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed.astimezone(dt.UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


def format_time(value: dt.datetime, *, milliseconds: bool = False) -> str:
    """``value`` (timezone-aware) as RFC 3339 UTC with second precision, as Kubernetes stores times; to the
    millisecond (``2026-12-02T16:43:20.125Z``) with ``milliseconds``: for sample times that rates are taken over,
    where whole seconds would be off by up to one."""
    if value.tzinfo is None:
        raise ValueError("time must be timezone-aware")
    utc = value.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if milliseconds else utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_state(block: Any) -> ScalerState | None:
    """``status.autoscaler.state``; None when absent, a fresh state for anything malformed."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        return ScalerState()
    recs = []
    for item in block.get("recommendations") or []:
        when = parse_time(item.get("time")) if isinstance(item, Mapping) else None
        replicas = item.get("replicas") if isinstance(item, Mapping) else None
        if when is None or not isinstance(replicas, int) or replicas < 0:
            return ScalerState()
        recs.append((when, replicas))

    def scale(key: str) -> float:
        v = block.get(key, 1.0)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else 1.0

    history = block.get("inFlightHistory") or []
    in_flight = tuple(float(v) for v in history[-2:] if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                      ) if isinstance(history, list) else ()
    in_flight = in_flight if len(in_flight) == len(history[-2:]) else ()
    stamps = block.get("inFlightTimes") or []
    parsed = tuple(parse_time(v) for v in stamps[-2:]) if isinstance(stamps, list) else (None,)
    times = tuple(t for t in parsed if t is not None) if len(parsed) == len(in_flight) and None not in parsed else ()
    return ScalerState(recommendations=tuple(recs), service_scale=scale("serviceScale"),
                       latency_scale=scale("latencyScale"), last_change_at=parse_time(block.get("lastChangeTime")),
                       in_flight_history=in_flight,
                       in_flight_times=times,
                       idle_since=parse_time(block.get("idleSince")),
                       scaled_to_zero_at=parse_time(block.get("scaledToZeroTime")))


def _read_autoscaler(block: Any) -> AutoscalerRecord | None:
    if not isinstance(block, Mapping):
        return None
    features = block.get("features")
    return AutoscalerRecord(
        mode=_str(block.get("mode")), valid=_bool(block.get("valid")), reason=_str(block.get("reason")),
        message=_str(block.get("message")), last_decision_time=parse_time(block.get("lastDecisionTime")),
        metrics_available=_bool(block.get("metricsAvailable")), desired_replicas=_int(block.get("desiredReplicas")),
        features=({str(k): f for k, v in features.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and (f := _float_or_nan(v)) == f}  # skips what no float holds
                  if isinstance(features, Mapping) else None),
        state=_guarded(lambda: _read_state(block.get("state")), _FRESH_STATE))


def _float_or_nan(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float
        return math.nan


def _read_history(items: Any) -> tuple[ScalingChange, ...] | None:
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        when, before, after = parse_time(item.get("time")), _int(item.get("from")), _int(item.get("to"))
        if when is None or before is None or after is None or not isinstance(item.get("reason"), str):
            continue  # an entry that does not parse is dropped, never guessed
        out.append(ScalingChange(when, before, after, item["reason"], _str(item.get("message"))))
    return tuple(out)


def _read_stages(items: Any) -> tuple[StageRecord, ...] | None:
    """``status.stages``; None when absent, items without a string ``name`` dropped."""
    if not isinstance(items, list):
        return None
    return tuple(StageRecord(item["name"], _int(item.get("replicas")) or 0, _int(item.get("readyReplicas")) or 0,
                             _int(item.get("desiredReplicas")), _str(item.get("reason")), _str(item.get("message")),
                             _str(item.get("address")),
                             _stage_autoscaler(item.get("autoscaler")))
                 for item in items if isinstance(item, Mapping) and isinstance(item.get("name"), str))


def _stage_autoscaler(block: Any) -> AutoscalerRecord | None:
    """``status.stages[].autoscaler``; None when absent or of the wrong shape."""
    return _guarded(lambda: _read_autoscaler(block), None)


def _write_stage(stage: StageRecord) -> StageStatus:
    out: StageStatus = {"name": stage.name, "replicas": stage.replicas, "readyReplicas": stage.ready_replicas}
    if stage.desired_replicas is not None:
        out["desiredReplicas"] = stage.desired_replicas
    if stage.reason is not None:
        out["reason"] = stage.reason
    if stage.message is not None:
        out["message"] = stage.message
    if stage.address is not None:
        out["address"] = stage.address
    if stage.autoscaler is not None:
        out["autoscaler"] = cast(StageAutoscalerStatus, _write_autoscaler(stage.autoscaler, None))
    return out


def read_conditions(items: Any) -> tuple[ConditionStatus, ...] | None:
    """``status.conditions`` as stored (items without a string ``type`` are dropped); None when absent."""
    if not isinstance(items, list):
        return None
    return tuple(cast(ConditionStatus, dict(c)) for c in items if isinstance(c, Mapping) and isinstance(
        c.get("type"), str))


def _decimal(value: Any) -> Decimal | None:
    if not isinstance(value, str):
        return None
    try:
        d = Decimal(value)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def read_isvc_status(obj: Mapping[str, Any] | None) -> IsvcStatus:
    """The typed ``status`` of a stored InferenceService (pure; never raises).

    Args:
        obj: The InferenceService as the API returns it (``metadata``, ``spec``, ``status``; camelCase), or None.
    Returns:
        :class:`IsvcStatus`; a missing, partial or old status reads as what it holds: an absent or malformed
        field is None (empty for lists), a malformed ``autoscaler.state`` is a fresh ``ScalerState()``, a
        ``scalingHistory`` entry that does not parse is dropped.
    """
    raw = (obj or {}).get("status")
    st: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    gateway = st.get("gateway")
    return IsvcStatus(
        observed_generation=_int(st.get("observedGeneration")), replicas=_int(st.get("replicas")),
        ready_replicas=_int(st.get("readyReplicas")), desired_replicas=_int(st.get("desiredReplicas")),
        selector=_str(st.get("selector")), url=_str(st.get("url")),
        cost_usd_per_hour=_guarded(lambda: _decimal(st.get("costUSDPerHour")), None),
        last_scale_reason=_str(st.get("lastScaleReason")),
        scaling_history=_guarded(lambda: _read_history(st.get("scalingHistory")), None),
        autoscaler=_guarded(lambda: _read_autoscaler(st.get("autoscaler")), None),
        gateway=_guarded(lambda: (GatewayRecord(_int(gateway.get("replicas")) or 0,
                                                _int(gateway.get("readyReplicas")) or 0,
                                                _str(gateway.get("replicasUrl")))
                                  if isinstance(gateway, Mapping) else None), None),
        stages=_guarded(lambda: _read_stages(st.get("stages")), None),
        conditions=_guarded(lambda: read_conditions(st.get("conditions")), None))


_FRESH_STATE: ScalerState | None = ScalerState()
"""What a malformed ``autoscaler.state`` reads as."""


def _guarded(read: Callable[[], _T], default: _T) -> _T:
    """``read()``, or ``default`` when a field of the wrong shape makes it raise (a number stored where a list
    belongs, an integer too large for a float, ...): the reader's "never raises" holds for every part."""
    try:
        return read()
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError):
        return default


# ================================================================================================ write
_OPTIONAL_STATE_KEYS = ("lastChangeTime", "inFlightHistory", "inFlightTimes", "idleSince", "scaledToZeroTime")
"""``status.autoscaler.state`` keys written only when set: a stored one the new state lacks is written as null."""


def _write_state(state: ScalerState, stored: ScalerState | None = None) -> AutoscalerStateStatus:
    """``state``'s JSON; with ``stored`` (the state in status now), each optional key ``stored`` has and ``state``
    lacks is null: status is merge-patched, so a key left out would keep its old value (a history the policy cleared,
    an idle run that ended) for the next operator to read after a restart."""
    out: AutoscalerStateStatus = {
        "recommendations": [{"time": format_time(t), "replicas": int(r)} for t, r in state.recommendations],
        "serviceScale": round(float(state.service_scale), 6),
        "latencyScale": round(float(state.latency_scale), 6),
    }
    if state.last_change_at is not None:
        out["lastChangeTime"] = format_time(state.last_change_at)
    if state.in_flight_history:
        out["inFlightHistory"] = [round(float(v), 3) for v in state.in_flight_history[-2:]]
    if state.in_flight_times:
        out["inFlightTimes"] = [format_time(t, milliseconds=True) for t in state.in_flight_times[-2:]]
    if state.idle_since is not None:
        out["idleSince"] = format_time(state.idle_since)
    if state.scaled_to_zero_at is not None:
        out["scaledToZeroTime"] = format_time(state.scaled_to_zero_at)
    if stored is not None:
        before = _write_state(stored)
        for key in _OPTIONAL_STATE_KEYS:
            if key in before and key not in out:
                out[key] = None  # type: ignore[literal-required]
    return out


def _write_autoscaler(rec: AutoscalerRecord, stored: AutoscalerRecord | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (("mode", rec.mode), ("valid", rec.valid), ("reason", rec.reason), ("message", rec.message),
                       ("lastDecisionTime", None if rec.last_decision_time is None
                        else format_time(rec.last_decision_time)),
                       ("metricsAvailable", rec.metrics_available), ("desiredReplicas", rec.desired_replicas)):
        if value is not None:
            out[key] = value
    if rec.features is not None:
        features: dict[str, float | None] = dict(rec.features)
        # status is merge-patched: a stored feature this decision lacks is removed explicitly (else the keys of
        # successive decisions pile up past the CRD's 32 and every status write is refused).
        for k in (stored.features if stored is not None and stored.features is not None else {}):
            if k not in features:
                features[k] = None
        out["features"] = features
    if rec.state is not None:
        out["state"] = _write_state(rec.state, None if stored is None else stored.state)
    return out


def write_isvc_status(status: IsvcStatus, stored: IsvcStatus | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The merge patch of ``status``: its fields that are set, as the CRD stores them (pure).

    Args:
        status: What a planner decided (its own part; fields left None are not written).
        stored: The status as read now (typed, or the stored ``status`` JSON, read with :func:`read_isvc_status`);
            when given, only the fields whose JSON differs from the stored one are written (``{}`` when nothing
            changed), and a stored ``autoscaler.features`` key the new block lacks is written as null (removed).
    Returns:
        ``status``'s JSON, camelCase (an :class:`modalscale.api.status.InferenceServiceStatus`, nulls for deletes).
    """
    old = stored if isinstance(stored, IsvcStatus) or stored is None else read_isvc_status({"status": stored})
    out: dict[str, Any] = {}
    scalars = (("observedGeneration", status.observed_generation), ("replicas", status.replicas),
               ("readyReplicas", status.ready_replicas), ("desiredReplicas", status.desired_replicas),
               ("selector", status.selector), ("url", status.url),
               ("costUSDPerHour", None if status.cost_usd_per_hour is None
                else format(status.cost_usd_per_hour.quantize(Decimal("0.0001")), "f")),
               ("lastScaleReason", status.last_scale_reason))
    for key, value in scalars:
        if value is not None:
            out[key] = value
    if status.scaling_history is not None:
        history: list[ScalingHistoryEntry] = []
        for h in status.scaling_history:
            entry: ScalingHistoryEntry = {"time": format_time(h.time), "from": h.from_replicas, "to": h.to_replicas,
                                          "reason": h.reason}
            if h.message is not None:
                entry["message"] = h.message
            history.append(entry)
        out["scalingHistory"] = history
    if status.autoscaler is not None:
        out["autoscaler"] = _write_autoscaler(status.autoscaler, None if old is None else old.autoscaler)
    if status.gateway is DELETE:
        out["gateway"] = None
    elif isinstance(status.gateway, GatewayRecord):
        block: GatewayStatus = {"replicas": status.gateway.replicas, "readyReplicas": status.gateway.ready_replicas}
        if status.gateway.replicas_url is not None:
            block["replicasUrl"] = status.gateway.replicas_url
        out["gateway"] = block
    if status.stages is DELETE:
        out["stages"] = None
    elif status.stages is not None:
        out["stages"] = [_write_stage(s) for s in status.stages]
    if status.conditions is not None:
        out["conditions"] = [dict(c) for c in status.conditions]
    if old is None:
        return out
    before = write_isvc_status(old)
    if old.gateway is None:
        before["gateway"] = None  # absent: a null write is no change
    if old.stages is None:
        before["stages"] = None
    return {k: v for k, v in out.items() if before.get(k) != v}


def merge_isvc_status(base: IsvcStatus, *parts: IsvcStatus) -> IsvcStatus:
    """``base`` with every field a later part sets (not None) replaced by that part's: two loops' parts as one."""
    fields_ = {name: getattr(base, name) for name in IsvcStatus.__dataclass_fields__}
    for part in parts:
        for name in fields_:
            value = getattr(part, name)
            if value is not None:
                fields_[name] = value
    return IsvcStatus(**fields_)
