"""The typed ``BudgetPolicy.spec``: what a budget is (scope, period, limit, thresholds and their actions,
enforcement, forecast, notifications), parsed and validated once.

Why a module: every later step reads typed fields; the CRD's camelCase names and defaults are applied here, so a
spec that skipped API-server defaulting parses the same, and a bad field is reported by its path.

The grammar is the CRD's (``crds/budgetpolicies.modalscale.io.yaml``), because an object stored under an older CRD, or
written where the schema was not enforced, reaches the operator: the same types (an integer is a JSON number without a
fraction, and a JSON integer where a CEL rule reads it, never a string or a boolean; a boolean is a JSON boolean),
patterns, lengths and bounds, list types (``actions`` and ``selector.namespaces`` are sets, ``notifications`` a map
keyed by name), the CEL rules, an explicit ``null`` read as absent (the apiserver prunes nulls before defaulting),
and an unknown field refused (as kubectl's strict field validation refuses it; the apiserver prunes it from what it
stores). ``tests/integration/test_budget_spec_grammar.py`` submits each edge to a real apiserver and holds the two
verdicts equal. One check goes further than the CRD can: a time zone of the tz database's shape must also be in it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from modalscale.api.errors import InvalidSpec
from modalscale.api.names import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_MAX_CHARS, DNS_SUBDOMAIN_PATTERN


class Period(str, enum.Enum):
    """``spec.period`` of a BudgetPolicy (the bounds in a time zone: :mod:`modalscale.costmodel.periods`)."""

    DAILY = "Daily"
    WEEKLY = "Weekly"
    MONTHLY = "Monthly"


class InvalidTimeZone(ValueError):
    """The time zone is not an IANA name known to the tz database (message names it)."""


def resolve_zone(tz: str | ZoneInfo) -> ZoneInfo:
    """``spec.timeZone``: ``"Europe/Berlin"`` -> ``ZoneInfo`` (IANA tz database, ``tzdata`` where the OS has none).

    Raises:
        InvalidTimeZone: Unknown name, or a folder of the tz database such as ``America/Indiana`` (``ZoneInfo`` raises
            ``IsADirectoryError`` for it, an ``OSError``); the message names the field and gives examples.
    """
    if isinstance(tz, ZoneInfo):
        return tz
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise InvalidTimeZone(f"spec.timeZone: {tz!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None


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


def _json_integer(value: object) -> object:
    """A CRD ``type: integer`` admits a JSON number without a fraction (``60`` or ``60.0``: stored as ``60``), never a
    string or a boolean; pydantic's lax ``int`` would take ``"60"`` and ``true``."""
    if isinstance(value, bool | str | bytes):
        raise ValueError(f"expected an integer, got {type(value).__name__} {value!r}")
    return value


def _cel_integer(value: object) -> object:
    """An integer that a CRD's CEL rule reads: the apiserver refuses ``50.0`` there too ("expected int, got
    float64" while evaluating the rule), so only a JSON integer passes."""
    if isinstance(value, float):
        raise ValueError(f"expected an integer, got float {value!r} (write {value:.0f} without a fraction)"
                         if value.is_integer() else f"expected an integer, got float {value!r}")
    return _json_integer(value)


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
"""An integer as the CRD's ``type: integer`` admits it (:func:`_json_integer`)."""
CelInt = Annotated[int, BeforeValidator(_cel_integer)]
"""An integer inside an object a CEL rule reads (``thresholds[]``): a JSON integer only (:func:`_cel_integer`)."""

TIME_ZONE_AREAS = ("Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Brazil", "Canada",
                   "Chile", "Etc", "Europe", "Indian", "Mexico", "Pacific", "US")
"""The tz database's areas: the first part of every ``Area/Location`` name (``Etc`` holds UTC and the fixed offsets,
``Etc/GMT-2`` = UTC+2)."""
TIME_ZONE_NAMES_WITHOUT_AREA = ("CET", "CST6CDT", "Cuba", "EET", "EST", "EST5EDT", "Egypt", "Eire", "Factory", "GB",
                                "GB-Eire", "GMT", "GMT+0", "GMT-0", "GMT0", "Greenwich", "HST", "Hongkong", "Iceland",
                                "Iran", "Israel", "Jamaica", "Japan", "Kwajalein", "Libya", "MET", "MST", "MST7MDT",
                                "NZ", "NZ-CHAT", "Navajo", "PRC", "PST8PDT", "Poland", "Portugal", "ROC", "ROK",
                                "Singapore", "Turkey", "UCT", "UTC", "Universal", "W-SU", "WET", "Zulu")
"""The tz database's names without an area (UTC and its aliases, GMT, the POSIX-style US rules such as EST5EDT and
older country names): the tz database adds no new ones (a unit test holds the two lists to the ``tzdata`` package)."""
TIME_ZONE_PATTERN = (f"^({'|'.join(n.replace('+', '[+]') for n in TIME_ZONE_NAMES_WITHOUT_AREA)}"
                     f"|({'|'.join(TIME_ZONE_AREAS)})(/[A-Za-z0-9_+-]+){{1,2}})$")
"""The regex of ``spec.timeZone``'s CEL rule in the CRD, ``self.matches('<this>')`` (``maxLength``
:data:`TIME_ZONE_MAX_CHARS`; a rule, not a ``pattern``, so that the apiserver refuses a name with the rule's short
message in words, not with this regex printed whole): a name of the tz database by its shape, case-sensitive (as
``ZoneInfo`` reads it): one without an area, or an area of :data:`TIME_ZONE_AREAS` and one or two parts
(``America/Argentina/Buenos_Aires``). The pattern cannot tell a location the tz database has from
one it does not (``Europe/Nowhere``): the parser then asks the tz database too. It keeps out what ``ZoneInfo`` would
read from a host's zoneinfo folder but is no zone name: ``localtime``, ``posixrules`` and the ``posix/`` and
``right/`` copies (``right/`` counts leap seconds, which the operator's clock does not)."""
TIME_ZONE_MAX_CHARS = 64
TIME_ZONE_RULE_TEXT = (f"a tz database name, case-sensitive: Area/Location with an area of "
                       f"{', '.join(TIME_ZONE_AREAS)} (e.g. Europe/Berlin, America/Argentina/Buenos_Aires, "
                       f"Etc/GMT-2 for a fixed UTC+2), or one of "
                       f"its names without an area ({', '.join(TIME_ZONE_NAMES_WITHOUT_AREA)}); at most "
                       f"{TIME_ZONE_MAX_CHARS} characters")
"""What ``spec.timeZone`` takes, in words (the parser's message)."""
_TIME_ZONE_RE = re.compile(TIME_ZONE_PATTERN)


def _unique(value: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    """An ``x-kubernetes-list-type: set``: the apiserver refuses a value listed twice."""
    twice = sorted({str(getattr(v, "value", v)) for v in value if value.count(v) > 1})
    if twice:
        raise ValueError(f"{what} is a set: {', '.join(twice)} listed twice")
    return value


def _without_nulls(value: object) -> object:
    """``value`` with every ``null`` object member dropped, as the apiserver prunes them before defaulting (a
    non-nullable field set to ``null`` reads as absent: its default, or "required")."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_without_nulls(v) for v in value]
    return value


class _Spec(BaseModel):
    # Unknown fields are refused, as the apiserver's strict field validation (kubectl's default) refuses them; only
    # the CRD's camelCase names are read (a snake_case ``match_labels`` is an unknown field there too).
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)


LabelValue = Annotated[str, Field(max_length=63)]


class LabelSelectorRequirement(_Spec):
    key: str = Field(min_length=1, max_length=316)
    operator: str = Field(pattern="^(In|NotIn|Exists|DoesNotExist)$")
    values: tuple[LabelValue, ...] = Field(default=(), max_length=64)

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

    namespaces: tuple[Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)], ...] = Field(default=(),
                                                                                                  max_length=100)
    match_labels: dict[str, LabelValue] = Field(default_factory=dict, alias="matchLabels", max_length=32)
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(default=(), alias="matchExpressions",
                                                                    max_length=16)
    tenants: tuple[str, ...] = Field(default=(), max_length=MAX_BUDGET_TENANTS)

    @field_validator("namespaces")
    @classmethod
    def _namespaces_set(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _unique(value, "namespaces")

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
    percent: CelInt = Field(ge=1, le=200)
    actions: tuple[ThresholdAction, ...] = Field(default=(ThresholdAction.ALERT,), min_length=1, max_length=5)
    """At least one: a threshold without actions would do nothing (the CRD says minItems 1); a set."""
    cap_replicas: CelInt | None = Field(default=None, alias="capReplicas", ge=0, le=1000, validate_default=True)
    spot_max_priority: CelInt | None = Field(default=None, alias="spotMaxPriority", ge=0, le=1000,
                                              validate_default=True)
    """``SwitchToSpot`` moves the services whose ``spec.priority`` is at most this (lower = less important)."""

    @field_validator("actions")
    @classmethod
    def _actions_set(cls, value: tuple[ThresholdAction, ...]) -> tuple[ThresholdAction, ...]:
        return _unique(value, "actions")

    # The CRD's rules name the field (fieldPath .capReplicas / .spotMaxPriority): so do these (declared after
    # ``actions``, so ``info.data`` holds it when it validated). Each field is read by its action only, so it is
    # required with the action and refused without it (it would never be applied).
    @field_validator("cap_replicas")
    @classmethod
    def _cap_needs_value(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None and ThresholdAction.CAP_REPLICAS in info.data.get("actions", ()):
            raise ValueError("capReplicas is required with the CapReplicas action")
        _only_with_action(value, info, "capReplicas", ThresholdAction.CAP_REPLICAS)
        return value

    @field_validator("spot_max_priority")
    @classmethod
    def _spot_needs_value(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None and ThresholdAction.SWITCH_TO_SPOT in info.data.get("actions", ()):
            raise ValueError("spotMaxPriority is required with the SwitchToSpot action (services with "
                             "spec.priority <= spotMaxPriority move to Spot; e.g. 50)")
        _only_with_action(value, info, "spotMaxPriority", ThresholdAction.SWITCH_TO_SPOT)
        return value


def _only_with_action(value: int | None, info: ValidationInfo, name: str, action: ThresholdAction) -> None:
    """Refuse the threshold field ``name`` set while its ``actions`` (validated: in ``info.data``) lack ``action``,
    the only one that reads it (the CRD's rule ``!has(self.<name>) || (has(self.actions) && '<action>' in
    self.actions)``)."""
    actions = info.data.get("actions")
    if value is not None and actions is not None and action not in actions:
        listed = ", ".join(a.value for a in actions)
        raise ValueError(f"{name} is set but this threshold's actions [{listed}] have no {action.value}, the only "
                         f"action that reads it, so it would never be applied: add {action.value} to actions "
                         f"(e.g. actions: [{listed}, {action.value}]) or remove {name}")


class Enforcement(_Spec):
    floor_replicas: JsonInt = Field(default=1, alias="floorReplicas", ge=0, le=1000)
    order: EnforcementOrder = EnforcementOrder.LOWEST_PRIORITY_FIRST
    dry_run: StrictBool = Field(default=False, alias="dryRun")
    spot_pending_timeout_s: JsonInt = Field(default=300, alias="spotPendingTimeoutSeconds", ge=10, le=86400)
    """Seconds a service's Spot pod may stay Pending before the service falls back to on-demand."""


class ForecastSpec(_Spec):
    enabled: StrictBool = True
    alert_at_percent: JsonInt = Field(default=100, alias="alertAtPercent", ge=1, le=200)


SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
"""A key of a Secret's ``data`` (Kubernetes: alphanumerics, ``-``, ``_``, ``.``; at least one), as the CRD says."""


class SecretRef(_Spec):
    name: str = Field(min_length=1, max_length=DNS_SUBDOMAIN_MAX_CHARS, pattern=DNS_SUBDOMAIN_PATTERN)
    url_key: str = Field(default="url", alias="urlKey", min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)
    signing_secret_key: str | None = Field(default=None, alias="signingSecretKey", min_length=1, max_length=253,
                                           pattern=SECRET_KEY_PATTERN)


class Notification(_Spec):
    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)
    type: NotifierType
    secret_ref: SecretRef = Field(alias="secretRef")

    @property
    def target(self) -> str:
        """Where it posts, whatever its name: ``<type>:<secretRef.name>/<secretRef.urlKey>`` (the platform and the
        Secret key that holds the URL; no URL or secret). Two notifications with one target post to one webhook: a
        pending alert of a renamed notification goes on to the one with its target (``costmodel.outbox``)."""
        return f"{self.type.value}:{self.secret_ref.name}/{self.secret_ref.url_key}"


class BudgetSpec(_Spec):
    """Typed ``BudgetPolicy.spec`` (field names snake_case; the CRD's camelCase are accepted as aliases)."""

    selector: BudgetSelector = Field(default_factory=BudgetSelector)
    period: Period
    time_zone: str = Field(default="UTC", alias="timeZone")
    limit: BudgetLimit
    thresholds: tuple[Threshold, ...] = Field(min_length=1, max_length=10)
    enforcement: Enforcement = Field(default_factory=Enforcement)
    forecast: ForecastSpec = Field(default_factory=ForecastSpec)
    evaluation_interval_s: JsonInt = Field(default=60, alias="evaluationIntervalSeconds", ge=1, le=3600)
    notifications: tuple[Notification, ...] = Field(default=(), max_length=10)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        # The CRD's pattern and maxLength first (what the apiserver refuses), then the tz database (beyond it).
        if len(value) > TIME_ZONE_MAX_CHARS or _TIME_ZONE_RE.fullmatch(value) is None:
            raise ValueError(f"{value[:80]!r} is not a time zone name: write {TIME_ZONE_RULE_TEXT}")
        try:
            resolve_zone(value)
        except InvalidTimeZone:
            raise ValueError(f"{value!r} is not in the tz database (e.g. UTC, GMT, Europe/Berlin)") from None
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


UNKNOWN_FIELD = "unknown field: the CRD has no such field (check its spelling, case and indentation)"
_ALIASES = {name: field.alias for model in (LabelSelectorRequirement, BudgetSelector, BudgetLimit, Threshold,
                                            Enforcement, ForecastSpec, SecretRef, Notification, BudgetSpec)
            for name, field in model.model_fields.items() if field.alias}
"""snake_case field -> the CRD's name: pydantic names a defaulted field (``capReplicas`` missing) by its own name."""


def parse_budget_spec(spec: Mapping[str, Any]) -> BudgetSpec:
    """Parse ``BudgetPolicy.spec`` (camelCase dict, as kopf gives it) into a typed :class:`BudgetSpec`.

    CRD defaults are applied here too, so a spec that skipped API-server defaulting parses the same; an explicit
    ``null`` member is absent (the apiserver prunes it before defaulting).

    Raises:
        InvalidBudgetSpec: The first field that does not validate, e.g. ``spec.thresholds[1].capReplicas: ...``.
    """
    if not isinstance(spec, Mapping):
        raise InvalidBudgetSpec("spec", f"expected an object, got {type(spec).__name__}")
    try:
        return BudgetSpec.model_validate(_without_nulls(spec))
    except ValidationError as exc:
        messages = []
        errors = exc.errors()
        for err in errors:
            # A list that is "too short" only because its items failed says nothing new.
            if err["type"] == "too_short" and any(len(o["loc"]) > len(err["loc"]) and
                                                  o["loc"][:len(err["loc"])] == err["loc"] for o in errors):
                continue
            path = "spec"
            unknown = err["type"] == "extra_forbidden"  # its last part is the input's own key
            loc = list(err["loc"])
            for i, part in enumerate(loc):
                if part == "[key]":  # pydantic's marker after a map key that failed: written with the key
                    continue
                name = str(part) if unknown else _ALIASES.get(str(part), str(part))
                if i + 1 < len(loc) and loc[i + 1] == "[key]":
                    path += f" (key {part!r})"
                else:
                    path += f"[{part}]" if isinstance(part, int) else f".{name}"
            msg = UNKNOWN_FIELD if unknown else err["msg"].removeprefix("Value error, ")
            messages.append((path, msg))
        first, rest = messages[0], [f"{p}: {m}" for p, m in messages[1:]]
        raise InvalidBudgetSpec(first[0], "; ".join([first[1], *rest])) from None


__all__ = ["BudgetLimit", "BudgetSelector", "BudgetSpec", "Enforcement", "EnforcementOrder", "ForecastSpec",
           "InvalidBudgetSpec", "InvalidTimeZone", "LIMIT_AMOUNT_MAX_CHARS", "LIMIT_AMOUNT_NONZERO_RULE",
           "LIMIT_AMOUNT_PATTERN", "LabelSelectorRequirement", "MAX_BUDGET_TENANTS", "Notification", "NotifierType",
           "Period", "SecretRef", "TENANT_ACTIONS", "TENANT_NAME_PATTERN", "Threshold", "ThresholdAction",
           "parse_budget_spec", "parse_limit_amount", "resolve_zone"]
