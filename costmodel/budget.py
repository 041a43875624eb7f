"""Budget governance: from spend, services and the alert history to a plan of state, alerts and enforcement.

Why a module: "decide pure, act thin". :func:`plan_budget` is a pure function of the BudgetPolicy spec, the
spend of the current period (from :func:`~modalscale.costmodel.ledger.advance`), the selected services as
observed now and the de-duplication state read back from status; it returns a :class:`BudgetPlan` that the
operator applies (scale, alert, write status) without further decisions.

Rules:

* **State**: ``Exceeded`` when spent >= limit (spent being a lower bound when some service is not priced, see
  below), else ``Unknown`` when part of the spend is not priced, else ``Warning`` when a threshold is crossed or
  the forecast crosses ``forecast.alertAtPercent``, else ``Ok``.
* **Forecast** (method ``LinearAtCurrentBurnRate``): ``spent + burn_rate x hours left in the period``, where
  the burn rate is the sum over selected services of running replicas x price per replica-hour now.
* **Alerts** are de-duplicated per period with state persisted in ``status.thresholds`` (Alertmanager-style:
  alert on the crossing, once): each threshold with the ``Alert`` action alerts exactly once per period, on
  its crossing or, for an enforcing threshold enforced ahead, when its enforcement starts (the title says
  "would have crossed ... within N s"; ``status.thresholds[].crossed`` stays the actual crossing)
  (several thresholds crossed in one evaluation are reported in one message); the forecast alerts once per
  period (not when actual spend already crossed that percent); a ``Recovered`` notice is sent once when a new
  period starts after one that was ``Exceeded`` or enforced; a ``GovernanceBlind`` alert is sent when the
  policy starts to have a running service it cannot price. The plan marks alerts as decided when it decides them; delivery is at least
  once through the outbox of :mod:`modalscale.costmodel.outbox` (each alert is persisted in
  ``status.pendingAlerts`` together with ``status.thresholds``, before it is sent, and retried until its
  target accepts it or it expires).
* **Enforcement** is level-based: every *enforced* threshold contributes its actions; each service gets the
  strongest one (lowest effective maximum): ``CapReplicas`` -> ``min(maxReplicas, capReplicas)``,
  ``ScaleDown`` -> ``enforcement.floorReplicas``, ``ScaleToZero`` -> 0. Actions are listed in threshold
  order, services within a threshold in ``enforcement.order`` (``LowestPriorityFirst``: ascending
  ``spec.priority``, then higher cost first; ``HighestCostFirst``: current cost rate descending). With
  ``dryRun`` actions are reported but marked not applied. Enforcement lifts at the next period (spend resets).
* **SwitchToSpot** (:func:`plan_spot`) sets no replica cap: it moves the services whose ``spec.priority`` is at
  most the threshold's ``spotMaxPriority`` to Spot capacity, in force (ahead, held, lifted) like the other
  enforcing actions, and falls a service back to on-demand for the period when its Spot pods stay Pending for
  ``enforcement.spotPendingTimeoutSeconds``. Pods are priced at the tier their node ran them at
  (``ServiceState.tier_prices``, ``PodRun.tier``).
* **Enforcement starts one evaluation ahead** (:data:`ENFORCEMENT_METHOD`): the operator only acts at
  evaluations, so a threshold acted on once spend has passed it is overshot by up to one interval of spend
  (e.g. a 60 s interval at 84 USD/h is 1.40 USD, 1.4 % of a 100 USD limit). A threshold with an enforcing
  action (CapReplicas, ScaleDown, ScaleToZero) is therefore enforced when ``spent >= percent % x limit`` or
  when ``spent + burn_rate x horizon >= percent % x limit`` (the horizon is ``evaluationIntervalSeconds``: it
  would be crossed before the next evaluation). Once enforced it is held for the period while
  ``spent + max_rate x horizon`` still reaches it, where ``max_rate`` is every selected service at
  ``max(replicas, maxReplicas)``: enforcement lowers the burn rate, so re-testing the lowered rate would lift
  and re-apply the action every other evaluation; spend only grows, so the hold ends only with the period or
  a spec change (a raised limit lifts it, as before). Enforcement is downward closed (enforcing 100 %
  enforces every lower enforcing threshold). Thresholds with only ``Alert`` are not anticipated.
  ``horizon_s=0`` gives the reactive rule (act only after the crossing).
* **Unknown price or replicas: the known spend is a lower bound** (never "do nothing"). A service with no
  running pod costs 0 whether or not it has a price. A service that runs but whose price (or whose replica
  count) cannot be read adds an unknown, non-negative part: the ledger charges it nothing (it reports it as
  unpriced), so ``spent`` and the burn rate of the priced services are lower bounds of the true ones. A threshold
  the lower bound crosses is crossed, alerted and enforced, on every selected service (the unpriced ones too);
  an enforcing threshold the known burn rate alone reaches within the horizon is enforced ahead. Enforcement
  already in force this period is held while anything is unknown (lifting would act on data that could not be
  read). The state is ``Exceeded`` when the lower bound reaches the limit, else ``Unknown``; ``burnRatePerHour``
  and ``forecast`` are unknown (None); a ``GovernanceBlind`` alert names the services once, when the policy
  starts having any (the forecast alert is decided on the lower-bound forecast and says "at least").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from modalscale.api import conditions as C
from modalscale.api.errors import InvalidSpec
from modalscale.costmodel.catalog import Catalog, PricingTier, ReplicaResources, UnknownPrice
from modalscale.costmodel.ledger import (
    ClosedPeriod,
    Ledger,
    LedgerAdvance,
    LedgerFormatError,
    PodRun,
    ServiceObservation,
    format_time,
    parse_time,
)
from modalscale.costmodel.money import (
    MONEY_CONTEXT,
    SECONDS_PER_HOUR,
    format_usd,
    parse_usd,
    quantize_display_usd,
    quantize_ledger_usd,
)
from modalscale.costmodel.periods import InvalidTimeZone, Period, period_bounds, resolve_zone

FORECAST_METHOD = "LinearAtCurrentBurnRate"
"""How :attr:`BudgetPlan.forecast_usd` is computed: spent + current burn rate x hours left in the period."""
ENFORCEMENT_METHOD = "AheadOfCrossingByOneEvaluation"
"""When a threshold's enforcement starts: when spent + current burn rate x horizon (the evaluation interval)
reaches it, held while spent + the services' maximum rate x horizon still does (see the module docstring)."""


class BudgetState(str, enum.Enum):
    """``status.state``."""

    OK = "Ok"
    WARNING = "Warning"
    EXCEEDED = "Exceeded"
    UNKNOWN = "Unknown"


class ThresholdAction(str, enum.Enum):
    """``spec.thresholds[].actions[]``."""

    ALERT = "Alert"
    CAP_REPLICAS = "CapReplicas"
    SCALE_DOWN = "ScaleDown"
    SCALE_TO_ZERO = "ScaleToZero"
    SWITCH_TO_SPOT = "SwitchToSpot"


class EnforcementOrder(str, enum.Enum):
    """``spec.enforcement.order``."""

    LOWEST_PRIORITY_FIRST = "LowestPriorityFirst"
    HIGHEST_COST_FIRST = "HighestCostFirst"


class NotifierType(str, enum.Enum):
    """``spec.notifications[].type``."""

    SLACK = "Slack"
    TEAMS = "Teams"
    WECOM = "WeCom"
    DINGTALK = "DingTalk"
    FEISHU = "Feishu"
    WEBHOOK = "Webhook"


class AlertKind(str, enum.Enum):
    """Why a notification is sent; also the Alertmanager ``alertname`` label (prefixed ``Budget``) and the reason
    of the Event the operator posts with it (values from :mod:`modalscale.api.conditions`)."""

    THRESHOLD_CROSSED = C.THRESHOLD_CROSSED
    FORECAST_EXCEEDED = C.FORECAST_EXCEEDED
    GOVERNANCE_BLIND = C.GOVERNANCE_BLIND
    RECOVERED = C.RECOVERED
    SPEND_ANOMALY = C.SPEND_ANOMALY


class InvalidBudgetSpec(InvalidSpec):
    """The BudgetPolicy spec does not validate; ``field`` is the first failing field (``spec.limit.amount``)."""


class InvalidBudgetStatus(ValueError):
    """The BudgetPolicy status could not be read back; the message names the field."""


# --------------------------------------------------------------------------------------------- spec (typed)
class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class LabelSelectorRequirement(_Spec):
    key: str = Field(max_length=316)
    operator: str = Field(pattern="^(In|NotIn|Exists|DoesNotExist)$")
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> "LabelSelectorRequirement":
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError("In and NotIn need values; Exists and DoesNotExist take none")
        return self


class BudgetSelector(_Spec):
    """``spec.selector``: empty namespaces = the policy's own namespace; labels narrow further."""

    namespaces: tuple[str, ...] = ()
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(default=(), alias="matchExpressions")

    def matches(self, policy_namespace: str, namespace: str, labels: Mapping[str, str]) -> bool:
        """True when an InferenceService in ``namespace`` with ``labels`` counts against this budget."""
        if namespace not in (self.namespaces or (policy_namespace,)):
            return False
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and not (present and labels[req.key] in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def describe(self, policy_namespace: str) -> str:
        """Human scope, e.g. ``namespaces default, ml-prod; labels team=search``."""
        parts = [f"namespace{'s' if len(self.namespaces) > 1 else ''} "
                 f"{', '.join(self.namespaces or (policy_namespace or '(policy namespace)',))}"]
        labels = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        labels += [f"{r.key} {r.operator} ({', '.join(r.values)})" if r.values else f"{r.key} {r.operator}"
                   for r in self.match_expressions]
        if labels:
            parts.append("labels " + ", ".join(labels))
        return "; ".join(parts)


class BudgetLimit(_Spec):
    amount: Decimal
    currency: str = "USD"

    @field_validator("amount", mode="before")
    @classmethod
    def _amount(cls, value: object) -> Decimal:
        amount = parse_usd(value, "amount")
        if amount <= 0:
            raise ValueError("must be greater than zero")
        return amount

    @field_validator("currency")
    @classmethod
    def _usd_only(cls, value: str) -> str:
        if value != "USD":
            raise ValueError(f"only USD is supported (the pricing catalog is in USD), got {value!r}")
        return value


class Threshold(_Spec):
    percent: int = Field(ge=1, le=200)
    actions: tuple[ThresholdAction, ...] = (ThresholdAction.ALERT,)
    cap_replicas: int | None = Field(default=None, alias="capReplicas", ge=0, le=1000)
    spot_max_priority: int | None = Field(default=None, alias="spotMaxPriority", ge=0, le=1000)
    """``SwitchToSpot`` moves the services whose ``spec.priority`` is at most this (lower = less important)."""

    @model_validator(mode="after")
    def _cap_needs_value(self) -> "Threshold":
        if ThresholdAction.CAP_REPLICAS in self.actions and self.cap_replicas is None:
            raise ValueError("capReplicas is required with the CapReplicas action")
        if ThresholdAction.SWITCH_TO_SPOT in self.actions and self.spot_max_priority is None:
            raise ValueError("spotMaxPriority is required with the SwitchToSpot action (services with "
                             "spec.priority <= spotMaxPriority move to Spot; e.g. 50)")
        return self


class Enforcement(_Spec):
    floor_replicas: int = Field(default=1, alias="floorReplicas", ge=0, le=1000)
    order: EnforcementOrder = EnforcementOrder.LOWEST_PRIORITY_FIRST
    dry_run: bool = Field(default=False, alias="dryRun")
    spot_pending_timeout_s: int = Field(default=300, alias="spotPendingTimeoutSeconds", ge=10, le=86400)
    """Seconds a service's Spot pod may stay Pending before the service falls back to on-demand."""


class ForecastSpec(_Spec):
    enabled: bool = True
    alert_at_percent: int = Field(default=100, alias="alertAtPercent", ge=1, le=200)


class SecretRef(_Spec):
    name: str = Field(max_length=253)
    url_key: str = Field(default="url", alias="urlKey")
    signing_secret_key: str | None = Field(default=None, alias="signingSecretKey")


class Notification(_Spec):
    name: str = Field(max_length=63)
    type: NotifierType
    secret_ref: SecretRef = Field(alias="secretRef")


class BudgetSpec(_Spec):
    """Typed ``BudgetPolicy.spec`` (field names snake_case; the CRD's camelCase are accepted as aliases)."""

    selector: BudgetSelector = Field(default_factory=BudgetSelector)
    period: Period
    time_zone: str = Field(default="UTC", alias="timeZone")
    limit: BudgetLimit
    thresholds: tuple[Threshold, ...] = Field(min_length=1, max_length=10)
    enforcement: Enforcement = Field(default_factory=Enforcement)
    forecast: ForecastSpec = Field(default_factory=ForecastSpec)
    evaluation_interval_s: int = Field(default=60, alias="evaluationIntervalSeconds", ge=1, le=3600)
    notifications: tuple[Notification, ...] = Field(default=(), max_length=10)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            resolve_zone(value)
        except InvalidTimeZone:
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
        return value

    @field_validator("thresholds")
    @classmethod
    def _ascending(cls, value: tuple[Threshold, ...]) -> tuple[Threshold, ...]:
        percents = [t.percent for t in value]
        if any(b <= a for a, b in zip(percents, percents[1:])):
            raise ValueError(f"percent must be strictly ascending, got {percents}")
        return value

    @field_validator("notifications")
    @classmethod
    def _unique_names(cls, value: tuple[Notification, ...]) -> tuple[Notification, ...]:
        names = [n.name for n in value]
        if len(set(names)) != len(names):
            raise ValueError("names must be unique")
        return value


def parse_budget_spec(spec: Mapping[str, Any]) -> BudgetSpec:
    """Parse ``BudgetPolicy.spec`` (camelCase dict, as kopf gives it) into a typed :class:`BudgetSpec`.

    CRD defaults are applied here too, so a spec that skipped API-server defaulting parses the same.

    Raises:
        InvalidBudgetSpec: The first field that does not validate, e.g. ``spec.thresholds[1].capReplicas: ...``.
    """
    if not isinstance(spec, Mapping):
        raise InvalidBudgetSpec("spec", f"expected an object, got {type(spec).__name__}")
    try:
        return BudgetSpec.model_validate(dict(spec))
    except ValidationError as exc:
        messages = []
        errors = exc.errors()
        for err in errors:
            # A list that is "too short" only because its items failed says nothing new.
            if err["type"] == "too_short" and any(len(o["loc"]) > len(err["loc"]) and
                                                  o["loc"][:len(err["loc"])] == err["loc"] for o in errors):
                continue
            path = "spec"
            for part in err["loc"]:
                path += f"[{part}]" if isinstance(part, int) else f".{part}"
            msg = err["msg"].removeprefix("Value error, ")
            messages.append((path, msg))
        first, rest = messages[0], [f"{p}: {m}" for p, m in messages[1:]]
        raise InvalidBudgetSpec(first[0], "; ".join([first[1], *rest])) from None


# ------------------------------------------------------------------------------------------ observed inputs
@dataclass(frozen=True)
class PolicyRef:
    """Which BudgetPolicy (for messages and alert labels)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class ServiceState:
    """A selected InferenceService as observed now.

    Attributes:
        priority: ``spec.priority`` (lower is enforced first under LowestPriorityFirst).
        replicas: Running replicas; None when they could not be read (metrics or API failure).
        max_replicas: ``spec.scaling.maxReplicas``.
        usd_per_replica_hour: Price of one replica; None when the catalog could not price it.
        unknown_reason: Why something is unknown (shown in the GovernanceBlind alert).
        pods: Its pods with their own start/stop times (the ledger charges each from start to stop); None
            when not listed.
    """

    namespace: str
    name: str
    replicas: int | None
    max_replicas: int
    usd_per_replica_hour: Decimal | None
    priority: int = 100
    unknown_reason: str = ""
    pods: tuple[PodRun, ...] | None = None
    tier: str = PricingTier.ON_DEMAND.value
    """``spec.pricing.tier``: the tier its pods are priced at unless their node says otherwise."""
    tier_prices: tuple[tuple[str, Decimal | None], ...] = ()
    """Price of one replica at each tier (``(tier, USD/h or None when the catalog has none)``): what a pod whose
    node is of that tier (``PodRun.tier``) costs."""
    spot_pending_since: datetime | None = None
    """Creation time of the oldest of its pods that waits, unscheduled, for a Spot node (None: none waits)."""

    def price_at(self, tier: str) -> Decimal | None:
        """Price of one replica at ``tier`` (None: not priced)."""
        if tier == self.tier:
            return self.usd_per_replica_hour
        return dict(self.tier_prices).get(tier)

    @property
    def known(self) -> bool:
        """True when the service's cost rate is known: priced with known replicas, or no running replica (0)."""
        return self.cost_usd_per_hour is not None

    @property
    def cost_usd_per_hour(self) -> Decimal | None:
        """Replicas x price now (0 with zero replicas); None when not known."""
        return self.observation().cost_usd_per_hour

    def observation(self) -> ServiceObservation:
        """The ledger's view of this service."""
        return ServiceObservation(self.namespace, self.name, self.replicas, self.usd_per_replica_hour, self.pods,
                                  self.tier_prices)


def service_state(namespace: str, name: str, *, replicas: int | None, max_replicas: int,
                  resources: ReplicaResources, tier: PricingTier | str, catalog: Catalog,
                  priority: int = 100, usage: ReplicaResources | None = None,
                  pods: tuple[PodRun, ...] | None = None,
                  spot_pending_since: datetime | None = None) -> ServiceState:
    """Price one service for the budget; an unknown price becomes ``usd_per_replica_hour=None``, not 0.

    Args:
        resources: Requested resources per replica; ``usage`` (observed, per replica) raises them when larger.
        tier: ``spec.pricing.tier``.
        pods: Its pods, each with the tier its node ran it at (``PodRun.tier``; None = ``tier``).
        spot_pending_since: See :attr:`ServiceState.spot_pending_since`.
    Returns:
        A :class:`ServiceState` whose ``unknown_reason`` says what could not be read; ``tier_prices`` holds the
        price at every tier (None where the catalog has none).
    """
    tier = PricingTier(tier)
    reason = "" if replicas is not None else "replica count could not be read"
    prices: dict[str, Decimal | None] = {}
    for t in PricingTier:
        try:
            prices[t.value] = catalog.price_replica(resources.at_least(usage), t)
        except UnknownPrice as exc:
            prices[t.value] = None
            if t is tier:
                reason = "; ".join(r for r in (reason, str(exc)) if r)
    price = prices[tier.value]
    on_other = [p.tier for p in pods or () if p.tier not in (None, tier.value) and p.stop is None]
    if on_other and any(prices.get(t) is None for t in on_other):
        reason = "; ".join(r for r in (reason, f"no {on_other[0]} price for the pods its node runs at that tier")
                           if r)
    return ServiceState(namespace, name, replicas, max_replicas, price, priority, reason, pods, tier.value,
                        tuple(sorted(prices.items())), spot_pending_since)


@dataclass(frozen=True)
class ThresholdRecord:
    """One item of ``status.thresholds``: de-duplication state of a threshold (or of the forecast)."""

    percent: int
    forecast: bool = False
    crossed: bool = False
    last_alert_time: datetime | None = None
    alerted_period_start: datetime | None = None

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"percent": self.percent, "crossed": self.crossed}
        if self.forecast:
            out["forecast"] = True
        if self.last_alert_time is not None:
            out["lastAlertTime"] = format_time(self.last_alert_time)
        if self.alerted_period_start is not None:
            out["alertedPeriodStart"] = format_time(self.alerted_period_start)
        return out


@dataclass(frozen=True)
class EnforcedService:
    """One item of ``status.enforcedServices``."""

    namespace: str
    name: str
    action: ThresholdAction
    max_replicas: int
    since: datetime
    dry_run: bool = False

    def to_status(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "action": self.action.value,
                "maxReplicas": self.max_replicas, "since": format_time(self.since), "dryRun": self.dry_run}


class SpotState(str, enum.Enum):
    """``status.spotServices[].state``."""

    SPOT = "Spot"
    """Switched: its pods are asked onto Spot nodes (the Spot annotation is on the InferenceService)."""
    ON_DEMAND_FALLBACK = "OnDemandFallback"
    """Its Spot pods stayed Pending past ``spotPendingTimeoutSeconds``: back on on-demand for the period."""


@dataclass(frozen=True)
class SpotRecord:
    """One item of ``status.spotServices``: a service a ``SwitchToSpot`` action holds this period.

    Attributes:
        threshold_percent: The threshold whose action it is.
        state: :class:`SpotState`.
        since: When it was switched to Spot (this period).
        fallback_time: When it fell back to on-demand (None while on Spot).
        dry_run: True when ``spec.enforcement.dryRun``: reported, not applied.
        message: Why it is in this state (a sentence for the status and the Event).
    """

    namespace: str
    name: str
    threshold_percent: int
    state: SpotState
    since: datetime
    fallback_time: datetime | None = None
    dry_run: bool = False
    message: str = ""

    @property
    def applied(self) -> bool:
        """True when the service should run on Spot now (the Spot annotation is wanted)."""
        return self.state is SpotState.SPOT and not self.dry_run

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"namespace": self.namespace, "name": self.name,
                               "thresholdPercent": self.threshold_percent, "state": self.state.value,
                               "since": format_time(self.since), "dryRun": self.dry_run, "message": self.message}
        if self.fallback_time is not None:
            out["fallbackTime"] = format_time(self.fallback_time)
        return out

    @classmethod
    def from_status(cls, item: Mapping[str, Any], path: str) -> "SpotRecord":
        """Read one ``status.spotServices`` item; raises :class:`InvalidBudgetStatus` naming ``path``."""
        try:
            fallback = item.get("fallbackTime")
            return cls(str(item["namespace"]), str(item["name"]), int(item["thresholdPercent"]),
                       SpotState(item["state"]), parse_time(item.get("since"), f"{path}.since"),
                       parse_time(fallback, f"{path}.fallbackTime") if fallback else None,
                       bool(item.get("dryRun", False)), str(item.get("message", "")))
        except LedgerFormatError as exc:
            raise InvalidBudgetStatus(str(exc)) from None
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise InvalidBudgetStatus(f"{path}: {exc}") from None


@dataclass(frozen=True)
class AlertState:
    """What earlier evaluations decided, read back from status: the de-duplication input (and output).

    Attributes:
        records: ``status.thresholds``.
        period_start: ``status.periodStart`` of the last evaluation (None = first evaluation).
        state: ``status.state`` of the last evaluation.
        enforced: ``status.enforcedServices``.
        blind: True when the last evaluation had a running service it could not price (state ``Unknown``, or
            the ``Ready`` condition's reason ``GovernanceBlind``): the ``GovernanceBlind`` alert was decided.
    """

    records: tuple[ThresholdRecord, ...] = ()
    period_start: datetime | None = None
    state: BudgetState | None = None
    enforced: tuple[EnforcedService, ...] = ()
    blind: bool = False
    spot: tuple[SpotRecord, ...] = ()
    """``status.spotServices``."""

    def record(self, percent: int, forecast: bool = False) -> ThresholdRecord | None:
        return next((r for r in self.records if r.percent == percent and r.forecast == forecast), None)

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> "AlertState":
        """Read ``thresholds``, ``periodStart``, ``state`` and ``enforcedServices`` from ``status``.

        Raises:
            InvalidBudgetStatus: A field does not parse (message names it).
        """
        if not status:
            return cls()
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
                        int(item.get("maxReplicas", 0)), parse_time(item.get("since"), f"{path}.since"),
                        bool(item.get("dryRun", False))))
                except (KeyError, ValueError, TypeError) as exc:
                    if isinstance(exc, LedgerFormatError):
                        raise
                    raise InvalidBudgetStatus(f"{path}: {exc}") from None
            spot = tuple(SpotRecord.from_status(item, f"status.spotServices[{i}]")
                         for i, item in enumerate(status.get("spotServices") or []))
            start = status.get("periodStart")
            state = status.get("state")
            ready = next((c for c in status.get("conditions") or []
                          if isinstance(c, Mapping) and c.get("type") == C.READY), None)
            blind = state == BudgetState.UNKNOWN.value or (ready is not None
                                                           and ready.get("reason") == C.GOVERNANCE_BLIND)
            return cls(tuple(records), parse_time(start, "status.periodStart") if start else None,
                       BudgetState(state) if state else None, tuple(enforced), blind, spot)
        except LedgerFormatError as exc:
            raise InvalidBudgetStatus(str(exc)) from None
        except ValueError as exc:
            if isinstance(exc, InvalidBudgetStatus):
                raise
            raise InvalidBudgetStatus(f"status.state: {exc}") from None


# ------------------------------------------------------------------------------------------------- outputs
@dataclass(frozen=True)
class EnforcementAction:
    """Scale one service down to at most ``max_replicas`` because a threshold was crossed.

    Attributes:
        threshold_percent: The threshold whose action this is.
        max_replicas: Effective maximum while enforced (``min`` with the service's own maxReplicas).
        current_replicas: Replicas now (None if unknown; never the case in a plan, see the blind rule).
        desired_replicas: ``min(current, max_replicas)``: what the service should run now.
        dry_run: True when ``spec.enforcement.dryRun``: report only.
        since: When this action first took effect in the period.
        ahead: True when spend has not reached the threshold yet: it is enforced because it would be crossed
            before the next evaluation (see :data:`ENFORCEMENT_METHOD`).
    """

    namespace: str
    name: str
    action: ThresholdAction
    threshold_percent: int
    max_replicas: int
    current_replicas: int | None
    desired_replicas: int
    dry_run: bool
    since: datetime
    ahead: bool = False

    @property
    def applied(self) -> bool:
        """False in dry run: the handler must not scale."""
        return not self.dry_run

    def describe(self) -> str:
        """Human text, e.g. ``ScaleDown search/ranker to 1 (was 4, at 100 %)``."""
        ahead = ", ahead of the crossing" if self.ahead else ""
        text = (f"{self.action.value} {self.namespace}/{self.name} to {self.max_replicas}"
                f" (running {self.current_replicas}, at {self.threshold_percent} %{ahead})")
        return text + (" [dry run, not applied]" if self.dry_run else "")

    def enforced(self) -> EnforcedService:
        return EnforcedService(self.namespace, self.name, self.action, self.max_replicas, self.since, self.dry_run)


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
            return (f"Budget {self.policy} {f'crossed {crossed} and ' if crossed else ''}would have crossed {ahead} "
                    f"of its {period} limit within {self.horizon_s} s: enforcing now")
        if self.kind is AlertKind.FORECAST_EXCEEDED:
            return (f"Budget {self.policy} is forecast to reach {self.thresholds_percent[0]} % of its "
                    f"{self.period.value.lower()} limit")
        if self.kind is AlertKind.SPEND_ANOMALY:
            return (f"Budget {self.policy}: spend anomaly in {', '.join(self.anomaly_services[:3])}"
                    + (f" and {len(self.anomaly_services) - 3} more" if len(self.anomaly_services) > 3 else ""))
        if self.kind is AlertKind.GOVERNANCE_BLIND:
            return f"Budget {self.policy} cannot price all of its spend: enforcing on the known part, a lower bound"
        return f"Budget {self.policy}: a new {self.period.value.lower()} period started, enforcement lifted"

    def facts(self, max_actions: int = 10) -> list[tuple[str, str]]:
        """Ordered (label, value) pairs every payload shows; at most ``max_actions`` actions are listed."""
        cur = self.currency
        least = "at least " if self.lower_bound else ""
        facts = [
            ("Policy", str(self.policy)),
            ("Scope", self.scope),
            ("Period", f"{self.period.value} ({self.time_zone}) {format_time(self.period_start)} to "
                       f"{format_time(self.period_end)}"),
            ("Spent", f"{least}{format_usd(quantize_display_usd(self.spent_usd))} {cur} of "
                      f"{format_usd(quantize_display_usd(self.limit_usd))} {cur} "
                      f"({format_usd(self.percent_used)} %)"),
            ("Forecast", f"{least}{format_usd(quantize_display_usd(self.forecast_usd))} {cur} at period end "
                         f"({self.forecast_method})" if self.forecast_usd is not None
             else "unknown (spend rate not readable)"),
        ]
        if self.ahead_percents:
            facts.append(("Enforced ahead", f"{', '.join(f'{p} %' for p in self.ahead_percents)} would be crossed "
                                            f"within {self.horizon_s} s at the current burn rate"))
        if self.closed_period_spent_usd is not None:
            facts.append(("Previous period", f"closed at {format_usd(quantize_display_usd(self.closed_period_spent_usd))} {cur}"))
        if self.blind_services:
            facts.append(("Not readable", "; ".join(self.blind_services)))
        if self.anomalies:
            facts.append(("Anomaly", "; ".join(self.anomalies)))
        shown = list(self.actions[:max_actions])
        if len(self.actions) > max_actions:
            shown.append(f"and {len(self.actions) - max_actions} more")
        facts.append(("Action", "; ".join(shown) if shown else "none"))
        return facts

    def text(self) -> str:
        """Plain-text rendering (fallback text, logs, the demo's "what a chat room sees")."""
        return self.title + "\n" + "\n".join(f"{k}: {v}" for k, v in self.facts())


@dataclass(frozen=True)
class BudgetPlan:
    """Everything the operator does for one BudgetPolicy evaluation.

    Attributes:
        state, reason, message: Budget state and a CamelCase reason / sentence for the conditions.
        spent_usd, limit_usd, remaining_usd: Current period; remaining may be negative.
        percent_used: spent / limit x 100, rounded to 0.01.
        burn_rate_usd_per_hour: Sum of replicas x price now; None when a running service is not priced.
        forecast_usd: Spend at period end (:data:`FORECAST_METHOD`); None when a running service is not priced,
            or when disabled.
        thresholds_crossed: Percents crossed this period (spent reached them), ascending.
        thresholds_enforced: Percents of the thresholds whose enforcing actions are in force (crossed, or
            enforced ahead, on the lower bound when some service is not priced), ascending.
        alerts: Notifications to send now (each to every receiver).
        actions: Enforcement in force, in threshold order then service order.
        enforced_services: What ``status.enforcedServices`` should say.
        alert_state: The de-duplication state to persist (``status.thresholds`` etc.).
        blind_services: ``namespace/name: reason`` for services whose price or replicas are unknown.
        horizon_s: Seconds ahead that enforcement looked (0 = reactive).
    """

    state: BudgetState
    reason: str
    message: str
    period_start: datetime
    period_end: datetime
    currency: str
    spent_usd: Decimal
    limit_usd: Decimal
    remaining_usd: Decimal
    percent_used: Decimal
    burn_rate_usd_per_hour: Decimal | None
    forecast_usd: Decimal | None
    forecast_method: str
    thresholds_crossed: tuple[int, ...]
    alerts: tuple[BudgetAlert, ...]
    actions: tuple[EnforcementAction, ...]
    enforced_services: tuple[EnforcedService, ...]
    alert_state: AlertState
    evaluated_at: datetime
    blind_services: tuple[str, ...] = ()
    thresholds_enforced: tuple[int, ...] = ()
    horizon_s: int = 0
    spot: tuple[SpotRecord, ...] = ()
    """``SwitchToSpot`` in force: what ``status.spotServices`` should say (see :func:`plan_spot`)."""
    spot_skipped: tuple[str, ...] = ()
    """Services a ``SwitchToSpot`` action selected but did not move, with why (e.g. no Spot price)."""

    @property
    def blind(self) -> bool:
        """True when some selected service runs but cannot be priced (spend is a lower bound)."""
        return bool(self.blind_services)

    def effective_max_replicas(self) -> dict[tuple[str, str], int]:
        """(namespace, name) -> enforced maximum replicas (not in dry run); what the autoscaler must cap to.

        Includes enforcement held while blind; empty after a new period starts.
        """
        return {(e.namespace, e.name): e.max_replicas for e in self.enforced_services if not e.dry_run}

    def status_fields(self, ledger: Ledger | None = None) -> dict[str, Any]:
        """The BudgetPolicy ``status`` keys this plan owns (camelCase; money as decimal strings).

        Args:
            ledger: When given, ``ledger`` is included (``ledger.to_status()``).
        Returns:
            ``periodStart, periodEnd, currency, spent, remaining`` (cents), ``state, lastEvaluationTime,
            thresholds, enforcedServices`` and ``burnRatePerHour``/``forecast`` (cents; None when unknown, which
            deletes the field under a JSON merge patch).
            Conditions are the operator's (see ``reason``/``message``).
        """
        out: dict[str, Any] = {
            "periodStart": format_time(self.period_start),
            "periodEnd": format_time(self.period_end),
            "currency": self.currency,
            "spent": format_usd(quantize_display_usd(self.spent_usd)),
            "remaining": format_usd(quantize_display_usd(self.remaining_usd)),
            "state": self.state.value,
            "lastEvaluationTime": format_time(self.evaluated_at),
            "thresholds": [r.to_status() for r in self.alert_state.records],
            "enforcedServices": [e.to_status() for e in self.enforced_services],
            "spotServices": [r.to_status() for r in self.spot],
        }
        # None (JSON null) deletes a stale value under a merge patch when it becomes unknown.
        out["burnRatePerHour"] = (format_usd(quantize_display_usd(self.burn_rate_usd_per_hour))
                                  if self.burn_rate_usd_per_hour is not None else None)
        out["forecast"] = format_usd(quantize_display_usd(self.forecast_usd)) if self.forecast_usd is not None else None
        if ledger is not None:
            out["ledger"] = ledger.to_status()
        return out


def rates_after_enforcement(services: Sequence[ServiceState], plan: BudgetPlan, before: AlertState
                            ) -> list[ServiceObservation]:
    """The services that ``plan``'s enforcement holds below what was observed, as they run once it took effect.

    A service whose pods are listed (``pods`` not None) runs at most its applied cap from now on whenever a cap
    is in force, new or not: a pod still seen mid scale-down is charged by its own timestamps at the next
    evaluation if it is still there (the cap did not take effect), and stops costing when it is gone (ledger
    module docstring). Without a pod list only a cap that is new or lower than the one in force before
    (``before.enforced``, same period, not dry run) counts: a cap that was already in force and still sees more
    replicas did not take effect, and the observed replicas are what is charged.

    Args:
        services: The selected services as observed at this evaluation (the input of :func:`plan_budget`).
        plan: Its plan.
        before: The ``alert_state`` that :func:`plan_budget` was given.
    Returns:
        One observation per service lowered (known replicas above its enforced maximum): replicas = that
        maximum, same price. Pass to ``ledger.with_rates_in_force``.
    """
    caps = plan.effective_max_replicas()
    old = ({(e.namespace, e.name): e.max_replicas for e in before.enforced if not e.dry_run}
           if before.period_start == plan.period_start else {})
    out = []
    for s in services:
        key = (s.namespace, s.name)
        cap = caps.get(key)
        if cap is None or s.replicas is None or s.replicas <= cap:
            continue
        if s.pods is None and key in old and old[key] <= cap:
            continue  # in force since an earlier evaluation and still exceeded: charge what runs
        out.append(ServiceObservation(s.namespace, s.name, cap, s.usd_per_replica_hour))
    return out


# ------------------------------------------------------------------------------------------------- planner
_STRENGTH = {ThresholdAction.CAP_REPLICAS: 1, ThresholdAction.SCALE_DOWN: 2, ThresholdAction.SCALE_TO_ZERO: 3}


def _order_services(services: Sequence[ServiceState], order: EnforcementOrder) -> list[ServiceState]:
    def cost(s: ServiceState) -> Decimal:
        return s.cost_usd_per_hour or Decimal(0)

    if order is EnforcementOrder.LOWEST_PRIORITY_FIRST:
        return sorted(services, key=lambda s: (s.priority, -cost(s), s.namespace, s.name))
    return sorted(services, key=lambda s: (-cost(s), s.priority, s.namespace, s.name))


def _target(action: ThresholdAction, threshold: Threshold, svc: ServiceState, floor: int) -> int:
    if action is ThresholdAction.CAP_REPLICAS:
        return min(svc.max_replicas, threshold.cap_replicas if threshold.cap_replicas is not None else svc.max_replicas)
    if action is ThresholdAction.SCALE_DOWN:
        return min(svc.max_replicas, floor)
    if action is ThresholdAction.SWITCH_TO_SPOT:
        raise ValueError("SwitchToSpot sets no replica target (see plan_spot)")
    return 0


def _held(t: Threshold, previous: Mapping[tuple[str, str, ThresholdAction], EnforcedService],
          services: Sequence[ServiceState], floor: int, spot_held: frozenset[int] = frozenset()) -> bool:
    """True when ``t``'s enforcement was in force at the previous evaluation of this period.

    A service's entry in ``status.enforcedServices`` names only its strongest action, so ``t`` counts as in
    force when some still-selected service carries one of ``t``'s actions at or below ``t``'s target; a
    ``SwitchToSpot`` action is in force when ``status.spotServices`` names ``t`` (``spot_held``).
    """
    if ThresholdAction.SWITCH_TO_SPOT in t.actions and t.percent in spot_held:
        return True
    for svc in services:
        for action in t.actions:
            if action in (ThresholdAction.ALERT, ThresholdAction.SWITCH_TO_SPOT):
                continue
            e = previous.get((svc.namespace, svc.name, action))
            if e is not None and e.max_replicas <= _target(action, t, svc, floor):
                return True
    return False


def _enforced_thresholds(spec: BudgetSpec, spent: Decimal, burn_usd_per_hour: Decimal,
                         max_usd_per_hour: Decimal, horizon_s: int,
                         previous: Mapping[tuple[str, str, ThresholdAction], EnforcedService],
                         services: Sequence[ServiceState], hold_unconditionally: bool = False,
                         spot_held: frozenset[int] = frozenset()) -> list[Threshold]:
    """The thresholds whose enforcing actions are in force now (:data:`ENFORCEMENT_METHOD`), ascending.

    Args:
        spent: Spend of the period so far, USD.
        burn_usd_per_hour: Selected services' replicas x price now.
        max_usd_per_hour: Selected services at ``max(replicas, maxReplicas)`` x price (bounds the burn rate over
            the horizon; enforcement never lowers it, so a threshold once enforced stays enforced).
        horizon_s: Seconds to the next evaluation (0 = act only after the crossing).
        previous: ``status.enforcedServices`` of this period by (namespace, name, action).
        hold_unconditionally: Hold every threshold in force at the previous evaluation whatever the bound
            says (part of the spend is unknown: the bound is a lower bound and lifting would act on it).
    """
    ctx = MONEY_CONTEXT
    limit = spec.limit.amount
    hours = ctx.divide(Decimal(horizon_s), SECONDS_PER_HOUR)
    projected = ctx.add(spent, ctx.multiply(burn_usd_per_hour, hours))
    bounded = ctx.add(spent, ctx.multiply(max_usd_per_hour, hours))
    floor = spec.enforcement.floor_replicas

    def reached(percent: int, amount: Decimal) -> bool:
        return ctx.multiply(amount, Decimal(100)) >= ctx.multiply(Decimal(percent), limit)

    enforcing = [t for t in spec.thresholds if any(a is not ThresholdAction.ALERT for a in t.actions)]
    top = max((t.percent for t in enforcing
               if reached(t.percent, projected)  # also covers spent itself: the burn rate is >= 0
               or ((hold_unconditionally or reached(t.percent, bounded))
                   and _held(t, previous, services, floor, spot_held))),
              default=0)
    return [t for t in enforcing if t.percent <= top]


def plan_budget(spec: BudgetSpec, spend: Decimal | LedgerAdvance, services: Sequence[ServiceState] | Iterable[ServiceState],
                alert_state: AlertState, now: datetime, *, policy: PolicyRef = PolicyRef("", ""),
                horizon_s: int | None = None) -> BudgetPlan:
    """Decide the budget state, the alerts to send now and the enforcement in force.

    Args:
        spec: Parsed spec (:func:`parse_budget_spec`).
        spend: Spend of the period containing ``now`` in USD, or the :class:`LedgerAdvance` that computed it
            (then the closed period's final spend is quoted in a recovery notice).
        services: Every selected InferenceService as observed now.
        alert_state: De-duplication state read back from status (``AlertState()`` the first time).
        now: Timezone-aware UTC instant of this evaluation; never read from the clock here.
        policy: Namespace/name of the BudgetPolicy, for messages and alert labels.
        horizon_s: How many seconds ahead enforcement looks (:data:`ENFORCEMENT_METHOD`); None =
            ``spec.evaluation_interval_s``, 0 = reactive (act only once spend has reached a threshold).
    Returns:
        :class:`BudgetPlan`; persist ``plan.status_fields()`` and apply ``plan.actions`` whose ``applied``.
    Raises:
        ValueError: Naive ``now``, negative spend or a negative ``horizon_s``.
    """
    horizon_s = spec.evaluation_interval_s if horizon_s is None else horizon_s
    if horizon_s < 0:
        raise ValueError(f"horizon_s must be >= 0, got {horizon_s}")
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware (UTC), got naive {now.isoformat()}")
    now = now.astimezone(timezone.utc)
    closed: ClosedPeriod | None = None
    if isinstance(spend, LedgerAdvance):
        closed, spent = spend.closed_period, spend.spent_usd
    else:
        spent = spend
    if spent < 0:
        raise ValueError(f"spend must be >= 0, got {spent}")
    services = list(services)
    ctx = MONEY_CONTEXT
    p_start, p_end = period_bounds(spec.period, spec.time_zone, now)
    limit = spec.limit.amount
    currency = spec.limit.currency
    percent_used = quantize_display_usd(ctx.divide(ctx.multiply(spent, Decimal(100)), limit))

    def reached(percent: int, amount: Decimal) -> bool:  # amount >= percent % of limit, exactly
        return ctx.multiply(amount, Decimal(100)) >= ctx.multiply(Decimal(percent), limit)

    # Services that run but cannot be priced add an unknown, non-negative part: what is known is a lower bound.
    blind = [s for s in services if not s.known]
    blind_text = tuple(f"{s.namespace}/{s.name}: {s.unknown_reason or 'price or replicas unknown'}" for s in blind)
    known_burn = quantize_ledger_usd(sum((s.cost_usd_per_hour or Decimal(0) for s in services), Decimal(0)))
    max_burn = sum((ctx.multiply(Decimal(max(s.replicas or 0, s.max_replicas)), s.usd_per_replica_hour or Decimal(0))
                    for s in services), Decimal(0))
    hours_left = ctx.divide(Decimal(int((p_end - now).total_seconds())), SECONDS_PER_HOUR)
    forecast_bound: Decimal | None = (quantize_ledger_usd(ctx.add(spent, ctx.multiply(known_burn, hours_left)))
                                      if spec.forecast.enabled else None)
    burn: Decimal | None = None if blind else known_burn
    forecast: Decimal | None = None if blind else forecast_bound

    crossed = [t for t in spec.thresholds if reached(t.percent, spent)]
    new_period = alert_state.period_start is not None and alert_state.period_start != p_start
    ordered = _order_services(services, spec.enforcement.order)

    # ---- enforcement (level-based), strongest action per service, listed in threshold then service order
    previous = {(e.namespace, e.name, e.action): e for e in alert_state.enforced} if not new_period else {}
    actions: list[EnforcementAction] = []
    # Enforced on the known spend: a lower bound when some service is not priced (see the module docstring).
    previous_spot = alert_state.spot if not new_period else ()
    in_force = _enforced_thresholds(spec, spent, known_burn, max_burn, horizon_s, previous, services,
                                    hold_unconditionally=bool(blind),
                                    spot_held=frozenset(r.threshold_percent for r in previous_spot))
    best: dict[tuple[str, str], tuple[int, int, Threshold, ThresholdAction]] = {}
    for t in in_force:
        for action in t.actions:
            if action in (ThresholdAction.ALERT, ThresholdAction.SWITCH_TO_SPOT):
                continue
            for svc in ordered:
                target = _target(action, t, svc, spec.enforcement.floor_replicas)
                key = (svc.namespace, svc.name)
                candidate = (target, -_STRENGTH[action], t, action)
                if key not in best or (candidate[0], candidate[1]) < (best[key][0], best[key][1]):
                    best[key] = candidate
    rank = {(s.namespace, s.name): i for i, s in enumerate(ordered)}
    for key, (target, _, t, action) in sorted(best.items(), key=lambda kv: (kv[1][2].percent, rank[kv[0]])):
        svc = ordered[rank[key]]
        prior = previous.get((svc.namespace, svc.name, action))
        actions.append(EnforcementAction(
            svc.namespace, svc.name, action, t.percent, target, svc.replicas,
            min(svc.replicas if svc.replicas is not None else target, target),
            spec.enforcement.dry_run, prior.since if prior else now, ahead=t not in crossed))
    enforced = tuple(a.enforced() for a in actions)
    ahead = [t for t in in_force if t not in crossed]
    spot, spot_skipped = plan_spot(spec, in_force, ordered, previous_spot, now)

    # ---- alerts, each once per period
    def alerted_now(record: ThresholdRecord | None) -> bool:
        return record is not None and record.alerted_period_start == p_start

    scope = spec.selector.describe(policy.namespace)
    action_text = tuple(a.describe() for a in actions) + tuple(
        f"SwitchToSpot {r.namespace}/{r.name} (at {r.threshold_percent} %)"
        + (" [dry run, not applied]" if r.dry_run else "") for r in spot if r.state is SpotState.SPOT)

    def make(kind: AlertKind, marks: tuple[int, ...], **extra: Any) -> BudgetAlert:
        return BudgetAlert(kind, policy, scope, spec.period, spec.time_zone, p_start, p_end, spent, limit, currency,
                           percent_used, forecast_bound, FORECAST_METHOD, marks, extra.get("actions", action_text),
                           spec.enforcement.dry_run, blind_text, now, extra.get("closed"),
                           extra.get("ahead", ()), horizon_s, lower_bound=bool(blind))

    alerts: list[BudgetAlert] = []
    if new_period and (alert_state.state is BudgetState.EXCEEDED or alert_state.enforced or alert_state.spot):
        alerts.append(make(AlertKind.RECOVERED, (), actions=("enforcement lifted",)
                           if alert_state.enforced or alert_state.spot else (),
                           closed=closed.spent_usd if closed is not None else None))
    if blind and not alert_state.blind:
        alerts.append(make(AlertKind.GOVERNANCE_BLIND, ()))

    records: list[ThresholdRecord] = []
    newly_alerted: list[int] = []
    for t in spec.thresholds:
        old = alert_state.record(t.percent)
        is_crossed = t in crossed
        if (is_crossed or t in ahead) and not alerted_now(old):
            send = ThresholdAction.ALERT in t.actions
            if send:
                newly_alerted.append(t.percent)
            records.append(ThresholdRecord(t.percent, False, is_crossed,
                                           now if send else (old.last_alert_time if old else None), p_start))
        elif is_crossed:
            records.append(replace(old, crossed=True))  # type: ignore[arg-type]
        else:
            records.append(ThresholdRecord(t.percent, False, False, old.last_alert_time if old else None,
                                           old.alerted_period_start if old else None))
    if newly_alerted:
        alerts.append(make(AlertKind.THRESHOLD_CROSSED, tuple(newly_alerted),
                           ahead=tuple(t.percent for t in ahead if t.percent in newly_alerted)))

    if spec.forecast.enabled:
        at = spec.forecast.alert_at_percent
        old = alert_state.record(at, forecast=True)
        forecast_over = forecast_bound is not None and reached(at, forecast_bound)  # a lower bound if blind
        if forecast_over and not reached(at, spent) and not alerted_now(old):
            alerts.append(make(AlertKind.FORECAST_EXCEEDED, (at,)))
            records.append(ThresholdRecord(at, True, True, now, p_start))
        elif old is not None:
            records.append(replace(old, crossed=bool(forecast_over)))
        else:
            records.append(ThresholdRecord(at, True, bool(forecast_over)))

    # ---- state
    forecast_warning = (spec.forecast.enabled and forecast is not None
                        and reached(spec.forecast.alert_at_percent, forecast))
    if spent >= limit:
        state, reason = BudgetState.EXCEEDED, C.BUDGET_EXCEEDED
        message = f"Spent {format_usd(quantize_display_usd(spent))} of {format_usd(limit)} {currency}"
    elif crossed or ahead or forecast_warning:
        state = BudgetState.WARNING
        reason = C.THRESHOLD_CROSSED if crossed else C.THRESHOLD_AHEAD if ahead else C.FORECAST_OVER_LIMIT
        message = (f"Spent {format_usd(quantize_display_usd(spent))} of {format_usd(limit)} {currency}"
                   + (f", forecast {format_usd(quantize_display_usd(forecast))}" if forecast is not None else ""))
    else:
        state, reason = BudgetState.OK, C.WITHIN_BUDGET
        message = f"Spent {format_usd(quantize_display_usd(spent))} of {format_usd(limit)} {currency}"
    if blind:
        if state is not BudgetState.EXCEEDED:
            state, reason = BudgetState.UNKNOWN, C.GOVERNANCE_BLIND
        message = (f"Spent at least {format_usd(quantize_display_usd(spent))} of {format_usd(limit)} {currency} "
                   f"(the known part; not priced: {'; '.join(blind_text)})")
    if ahead:
        message += (f"; enforcing {', '.join(f'{t.percent} %' for t in ahead)} ahead: crossed within "
                    f"{horizon_s} s at the {'known ' if blind else ''}current burn rate")

    new_state = AlertState(tuple(sorted(records, key=lambda r: (r.forecast, r.percent))), p_start, state, enforced,
                           bool(blind), spot)
    return BudgetPlan(
        state=state, reason=reason, message=message, period_start=p_start, period_end=p_end, currency=currency,
        spent_usd=spent, limit_usd=limit, remaining_usd=ctx.subtract(limit, spent), percent_used=percent_used,
        burn_rate_usd_per_hour=burn, forecast_usd=forecast, forecast_method=FORECAST_METHOD,
        thresholds_crossed=tuple(t.percent for t in crossed), alerts=tuple(alerts), actions=tuple(actions),
        enforced_services=enforced, alert_state=new_state, blind_services=blind_text, evaluated_at=now,
        thresholds_enforced=tuple(t.percent for t in in_force), horizon_s=horizon_s, spot=spot,
        spot_skipped=spot_skipped)


def plan_spot(spec: BudgetSpec, in_force: Sequence[Threshold], ordered: Sequence[ServiceState],
              previous: Sequence[SpotRecord], now: datetime) -> tuple[tuple[SpotRecord, ...], tuple[str, ...]]:
    """Decide which services run on Spot capacity now (the ``SwitchToSpot`` action), and which fell back.

    Rules:

    * A threshold in force (``in_force``, as for the replica actions: crossed, enforced ahead, or held) with
      ``SwitchToSpot`` selects the services whose ``spec.priority <= spotMaxPriority`` (Kubernetes
      PriorityClass sense: lower = less important), in enforcement order. When several thresholds select a
      service, the lowest one owns it.
    * Not moved (listed in the second result): a service already priced at Spot (``spec.pricing.tier: Spot``)
      and one whose Spot price the catalog lacks (moving it would make its spend unknown).
    * **Fallback**: a switched service whose oldest Spot pod has waited unscheduled for
      ``spec.enforcement.spotPendingTimeoutSeconds`` or more (``ServiceState.spot_pending_since``) goes back to
      on-demand, state ``OnDemandFallback``, and stays there for the rest of the period (no flapping between
      a Spot shortage and on-demand). The Deployment's rollout keeps the on-demand pods until Spot pods are
      Ready (maxUnavailable 0), so a shortage never takes serving capacity away.
    * A switch, and a fallback, lasts for the period (its ``since`` carried over); a new period starts on
      on-demand again (``previous`` is then empty).

    Args:
        in_force: Thresholds whose enforcing actions are in force now, ascending.
        ordered: Selected services in enforcement order.
        previous: ``status.spotServices`` of this period (empty after a new period).
        now: This evaluation (UTC).
    Returns:
        (records for ``status.spotServices``, sorted by namespace/name; "ns/name: why" for services not moved).
    """
    timeout_s = spec.enforcement.spot_pending_timeout_s
    prior = {(r.namespace, r.name): r for r in previous}
    owned: dict[tuple[str, str], tuple[Threshold, ServiceState]] = {}
    for t in in_force:
        if ThresholdAction.SWITCH_TO_SPOT not in t.actions or t.spot_max_priority is None:
            continue
        for svc in ordered:
            if svc.priority <= t.spot_max_priority:
                owned.setdefault((svc.namespace, svc.name), (t, svc))
    out: list[SpotRecord] = []
    skipped: list[str] = []
    for key, (t, svc) in owned.items():
        old = prior.get(key)
        if svc.tier == PricingTier.SPOT.value:
            skipped.append(f"{key[0]}/{key[1]}: already priced at Spot (spec.pricing.tier)")
            continue
        if svc.price_at(PricingTier.SPOT.value) is None:
            skipped.append(f"{key[0]}/{key[1]}: the pricing catalog has no Spot price for it")
            continue
        since = old.since if old is not None else now
        if old is not None and old.state is SpotState.ON_DEMAND_FALLBACK:
            out.append(replace(old, threshold_percent=t.percent, dry_run=spec.enforcement.dry_run))
            continue
        waited = (now - svc.spot_pending_since).total_seconds() if svc.spot_pending_since is not None else None
        if waited is not None and waited >= timeout_s:
            message = (f"Spot pods of {key[0]}/{key[1]} stayed Pending for {int(waited)} s (timeout "
                       f"{timeout_s} s): back on on-demand for the rest of the period")
            out.append(SpotRecord(key[0], key[1], t.percent, SpotState.ON_DEMAND_FALLBACK, since, now,
                                  spec.enforcement.dry_run, message))
            continue
        message = (f"On Spot capacity since {format_time(since)} (priority {svc.priority} <= spotMaxPriority "
                   f"{t.spot_max_priority}, threshold {t.percent} %)")
        if waited is not None:
            message += f"; a Spot pod has waited {int(waited)} s of {timeout_s} s"
        out.append(SpotRecord(key[0], key[1], t.percent, SpotState.SPOT, since, None, spec.enforcement.dry_run,
                              message))
    return tuple(sorted(out, key=lambda r: (r.namespace, r.name))), tuple(skipped)


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
