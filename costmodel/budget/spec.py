"""The typed ``BudgetPolicy.spec``: what a budget is (scope, period, limit, thresholds and their actions,
enforcement, forecast, notifications), parsed and validated once.

Why a module: every later step reads typed fields; the CRD's camelCase names and defaults are applied here, so a
spec that skipped API-server defaulting parses the same, and a bad field is reported by its path.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from modalscale.api.errors import InvalidSpec
from modalscale.costmodel.periods import InvalidTimeZone, Period, resolve_zone


class ThresholdAction(str, enum.Enum):
    """``spec.thresholds[].actions[]``."""

    ALERT = "Alert"
    CAP_REPLICAS = "CapReplicas"
    SCALE_DOWN = "ScaleDown"
    SCALE_TO_ZERO = "ScaleToZero"
    SWITCH_TO_SPOT = "SwitchToSpot"
    REJECT = "Reject"
    """Refuse the new requests of ``spec.selector.tenants`` at the gateway (HTTP 429) until the period ends."""


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


class InvalidBudgetSpec(InvalidSpec):
    """The BudgetPolicy spec does not validate; ``field`` is the first failing field (``spec.limit.amount``)."""



class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class LabelSelectorRequirement(_Spec):
    key: str = Field(min_length=1, max_length=316)
    operator: str = Field(pattern="^(In|NotIn|Exists|DoesNotExist)$")
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> "LabelSelectorRequirement":
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError("In and NotIn need values; Exists and DoesNotExist take none")
        return self


TENANT_NAME_PATTERN = r"^[!-~]([ -~]{0,62}[!-~])?$"
"""``spec.selector.tenants[]``'s ``pattern`` in the CRD: a tenant as the gateway names it
(``modalscale.gateway.tenants.clean``): 1-64 printable ASCII characters, no surrounding spaces."""
MAX_BUDGET_TENANTS = 50
"""``spec.selector.tenants``' ``maxItems`` in the CRD."""
TENANT_ACTIONS = frozenset({"Alert", "Reject"})
"""The only actions a tenant-scoped policy may take (a replica action would cut every tenant of the service)."""


class BudgetSelector(_Spec):
    """``spec.selector``: empty namespaces = the policy's own namespace; labels narrow further; ``tenants`` scopes the
    spend to those tenants' requests (their share of the selected services' spend, see ``budget.tenants``)."""

    namespaces: tuple[str, ...] = ()
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(default=(), alias="matchExpressions")
    tenants: tuple[str, ...] = Field(default=(), max_length=MAX_BUDGET_TENANTS)

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [t for t in value if re.fullmatch(TENANT_NAME_PATTERN, t) is None]
        if bad:
            raise ValueError(f"{bad[0][:70]!r} is not a tenant name: 1-64 printable ASCII characters without "
                             f"surrounding spaces, as the gateway's tenant header carries it (e.g. \"acme\")")
        if len(set(value)) != len(value):
            raise ValueError("tenant names must be unique")
        return value

    @field_validator("match_labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not 0 < len(k) <= 316]
        if bad:
            raise ValueError(f"label keys must be 1-316 characters, got {bad!r}")
        return value

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
        if self.tenants:
            parts.append("tenants " + ", ".join(self.tenants))
        return "; ".join(parts)


LIMIT_AMOUNT_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,6})?$"
"""``spec.limit.amount``'s ``pattern`` in the CRD, character for character (a unit test compares it with
``crds/`` and the chart's copy): 1-12 ASCII digits, optionally a point and 1-6 digits; no sign, exponent,
spaces, separators, NaN or Infinity. Read with ``re.fullmatch``, which agrees with the apiserver's RE2 here (ASCII
classes; a trailing newline is refused)."""
LIMIT_AMOUNT_MAX_CHARS = 20
"""``spec.limit.amount``'s ``maxLength`` in the CRD."""
LIMIT_AMOUNT_NONZERO_RULE = "self.amount.matches('[1-9]')"
"""The CRD's CEL rule on ``spec.limit``: the amount has a non-zero digit, i.e. is greater than zero."""
_LIMIT_AMOUNT_RE = re.compile(LIMIT_AMOUNT_PATTERN)


def parse_limit_amount(value: object) -> Decimal:
    """Read ``spec.limit.amount`` exactly as strictly as the CRD admits it (type, maxLength, pattern, CEL rule).

    An object stored under an older CRD, or written where the schema was not enforced, reaches the operator, so
    the CRD's grammar is checked here again rather than trusted.

    Args:
        value: The field as stored: a string such as ``"250"`` or ``"19.99"``.
    Returns:
        The exact :class:`~decimal.Decimal`, in (0, 999999999999.999999] with at most 6 decimals (18 significant
        digits, well inside the 34 of :data:`~modalscale.costmodel.money.MONEY_CONTEXT`, so no later arithmetic
        or rounding of it can trap).
    Raises:
        ValueError: Not a string, longer than :data:`LIMIT_AMOUNT_MAX_CHARS`, not matching
            :data:`LIMIT_AMOUNT_PATTERN`, or zero; the message shows the value and an example of a valid one.
    """
    if not isinstance(value, str):
        raise ValueError(f"expected a decimal string such as \"250\" or \"19.99\", got {type(value).__name__} "
                         f"{value!r}")
    if len(value) > LIMIT_AMOUNT_MAX_CHARS or _LIMIT_AMOUNT_RE.fullmatch(value) is None:
        raise ValueError(f"{value[:40]!r} is not a plain decimal string: write 1-12 digits, optionally a point and "
                         f"1-6 digits, with no sign, exponent, spaces or separators, e.g. \"250\" or \"19.99\"")
    amount = Decimal(value)
    if amount <= 0:
        raise ValueError("must be greater than zero")
    return amount


class BudgetLimit(_Spec):
    amount: Decimal
    currency: str = "USD"

    @field_validator("amount", mode="before")
    @classmethod
    def _amount(cls, value: object) -> Decimal:
        return parse_limit_amount(value)

    @field_validator("currency")
    @classmethod
    def _usd_only(cls, value: str) -> str:
        if value != "USD":
            raise ValueError(f"only USD is supported (the pricing catalog is in USD), got {value!r}")
        return value


class Threshold(_Spec):
    percent: int = Field(ge=1, le=200)
    actions: tuple[ThresholdAction, ...] = Field(default=(ThresholdAction.ALERT,), min_length=1, max_length=5)
    """At least one: a threshold without actions would do nothing (the CRD says minItems 1)."""
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


SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
"""A key of a Secret's ``data`` (Kubernetes: alphanumerics, ``-``, ``_``, ``.``; at least one), as the CRD says."""


class SecretRef(_Spec):
    name: str = Field(min_length=1, max_length=253)
    url_key: str = Field(default="url", alias="urlKey", min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)
    signing_secret_key: str | None = Field(default=None, alias="signingSecretKey", min_length=1, max_length=253,
                                           pattern=SECRET_KEY_PATTERN)


class Notification(_Spec):
    name: str = Field(min_length=1, max_length=63)
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

    @model_validator(mode="after")
    def _tenant_scope(self) -> "BudgetSpec":
        """The CRD's two CEL rules on ``spec``: Reject needs tenants; a tenant-scoped policy only alerts and
        rejects."""
        for i, t in enumerate(self.thresholds):
            actions = {a.value for a in t.actions}
            if "Reject" in actions and not self.selector.tenants:
                raise ValueError(f"thresholds[{i}].actions: Reject needs spec.selector.tenants (the tenants whose "
                                 f"requests the gateway refuses), e.g. tenants: [acme]")
            if self.selector.tenants and not actions <= TENANT_ACTIONS:
                raise ValueError(f"thresholds[{i}].actions: a policy with spec.selector.tenants may only Alert and "
                                 f"Reject, got {', '.join(sorted(actions - TENANT_ACTIONS))} (replica actions act on "
                                 f"every tenant of a service; put them in a policy without tenants)")
        return self

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


__all__ = ["BudgetLimit", "BudgetSelector", "BudgetSpec", "Enforcement", "EnforcementOrder", "ForecastSpec",
           "InvalidBudgetSpec", "LIMIT_AMOUNT_MAX_CHARS", "LIMIT_AMOUNT_NONZERO_RULE", "LIMIT_AMOUNT_PATTERN",
           "MAX_BUDGET_TENANTS", "LabelSelectorRequirement", "Notification", "NotifierType", "SecretRef",
           "Threshold", "ThresholdAction", "TENANT_ACTIONS", "TENANT_NAME_PATTERN", "parse_budget_spec",
           "parse_limit_amount"]
