"""The annotations a BudgetPolicy writes on an InferenceService, and the one codec of each.

Why a module: the budget controller writes these annotations and the InferenceService reconcile (and the
autoscaler) read them; one encoder and one decoder here keep the two sides from drifting. Pure: no kopf, no
Kubernetes client.

Two annotations, one of each per (policy, service), keyed by the policy so that several policies can hold the
same service and each lifts only its own:

* ``budget.modalscale.io/cap-<h>``: a replica cap (``CapReplicas``, ``ScaleDown``, ``ScaleToZero``). Value: compact
  JSON ``{"maxReplicas": n, "policy": "ns/name", "action": "..."}``.
* ``budget.modalscale.io/spot-<h>``: run the service on Spot capacity (``SwitchToSpot``). Value: compact JSON
  ``{"policy": "ns/name", "capacityType": "Spot", "thresholdPercent": p}``. Present = the pods get the Spot node
  selector and toleration (:mod:`modalscale.api.capacity`) and are priced at the Spot tier where their node is
  Spot; deleted = back to on-demand (the policy deletes it on fallback, at a new period, or when the threshold
  is no longer enforced).

* ``budget.modalscale.io/reject-<h>``: refuse these tenants' new requests at the gateway (``Reject``, per-tenant
  budgets). Value: compact JSON ``{"policy": "ns/name", "tenants": ["acme"], "until": "<RFC 3339 UTC>",
  "thresholdPercent": p}``. The service's gateway watches it and answers 429 with ``Retry-After`` = seconds to
  ``until``; past ``until`` it admits again on its own; deleted = lifted.

* ``budget.modalscale.io/tenants-<h>``: the tenants a tenant-scoped policy budgets (``spec.selector.tenants``),
  on each service it selects, rejected or not. Value: compact JSON list of names. The gateway counts these tenants
  under their own names however many tenants it has seen (never folded into ``other``), so their spend can be
  measured.

``<h>`` is the first 10 hex digits of ``sha256("<policy namespace>/<policy name>")``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from modalscale.api.isvc_status import parse_time

BUDGET_CAP_PREFIX = "budget.modalscale.io/cap-"
"""Key prefix of a policy's replica-cap annotation."""
BUDGET_SPOT_PREFIX = "budget.modalscale.io/spot-"
"""Key prefix of a policy's Spot-capacity annotation."""
BUDGET_REJECT_PREFIX = "budget.modalscale.io/reject-"
"""Key prefix of a policy's tenant-rejection annotation."""
BUDGET_TENANTS_PREFIX = "budget.modalscale.io/tenants-"
"""Key prefix of a policy's budgeted-tenants annotation."""
CAP_ACTIONS = ("CapReplicas", "ScaleDown", "ScaleToZero")
"""``action`` values of a cap annotation."""
SPOT_CAPACITY_TYPE = "Spot"
"""``capacityType`` of a Spot annotation (the only value written)."""


class InvalidAnnotation(ValueError):
    """An annotation value does not decode; the message names the key and what is wrong."""


def policy_digest(policy_namespace: str, policy_name: str) -> str:
    """First 10 hex digits of ``sha256("<ns>/<name>")``: a policy's part of its annotation keys."""
    return hashlib.sha256(f"{policy_namespace}/{policy_name}".encode()).hexdigest()[:10]


def cap_annotation_key(policy_namespace: str, policy_name: str) -> str:
    """``budget.modalscale.io/cap-<digest>``: this policy's cap key on a service."""
    return BUDGET_CAP_PREFIX + policy_digest(policy_namespace, policy_name)


def spot_annotation_key(policy_namespace: str, policy_name: str) -> str:
    """``budget.modalscale.io/spot-<digest>``: this policy's Spot key on a service."""
    return BUDGET_SPOT_PREFIX + policy_digest(policy_namespace, policy_name)


def reject_annotation_key(policy_namespace: str, policy_name: str) -> str:
    """``budget.modalscale.io/reject-<digest>``: this policy's tenant-rejection key on a service."""
    return BUDGET_REJECT_PREFIX + policy_digest(policy_namespace, policy_name)


def tenants_annotation_key(policy_namespace: str, policy_name: str) -> str:
    """``budget.modalscale.io/tenants-<digest>``: the tenants this policy budgets, on a service it selects."""
    return BUDGET_TENANTS_PREFIX + policy_digest(policy_namespace, policy_name)


def encode_tenants(tenants: Sequence[str]) -> str:
    """The budgeted-tenants annotation's value: compact JSON list, sorted."""
    return json.dumps(sorted(tenants), separators=(",", ":"))


def budgeted_tenants(annotations: Mapping[str, str] | None) -> frozenset[str]:
    """Every tenant named by a decodable budgeted-tenants annotation (values that do not decode are skipped)."""
    out: set[str] = set()
    for key, value in (annotations or {}).items():
        if not key.startswith(BUDGET_TENANTS_PREFIX):
            continue
        try:
            names = json.loads(value)
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(names, list):
            out.update(n for n in names if isinstance(n, str) and n)
    return frozenset(out)


def _short(value: object, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters (a message about a huge value stays readable)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _json_object(key: str, value: str) -> dict[str, object]:
    try:
        data = json.loads(value)
    except (ValueError, TypeError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise InvalidAnnotation(f"annotation {key}: {_short(value)} is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidAnnotation(f"annotation {key}: expected a JSON object, got {_short(value)}")
    return data


def _policy(key: str, data: Mapping[str, object]) -> str:
    policy = data.get("policy")
    if not isinstance(policy, str) or not policy:
        raise InvalidAnnotation(f"annotation {key}: 'policy' must be the policy's \"namespace/name\"")
    return policy


@dataclass(frozen=True)
class BudgetCap:
    """The value of a cap annotation.

    Attributes:
        max_replicas: Replicas the service may run at most while the cap holds (>= 0).
        policy: ``namespace/name`` of the BudgetPolicy.
        action: One of :data:`CAP_ACTIONS`.
    """

    max_replicas: int
    policy: str
    action: str

    def encode(self) -> str:
        """Compact JSON ``{"maxReplicas": n, "policy": "ns/name", "action": "..."}``."""
        return json.dumps({"maxReplicas": int(self.max_replicas), "policy": self.policy, "action": self.action},
                          separators=(",", ":"))

    @classmethod
    def decode(cls, key: str, value: str) -> "BudgetCap":
        """Parse a cap annotation's value.

        Raises:
            InvalidAnnotation: Not JSON, ``maxReplicas`` not a whole number >= 0, ``policy`` missing, or an
                unknown ``action``.
        """
        data = _json_object(key, value)
        n = data.get("maxReplicas")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidAnnotation(f"annotation {key}: 'maxReplicas' must be a whole number >= 0, got {n!r}")
        action = data.get("action")
        if action not in CAP_ACTIONS:
            raise InvalidAnnotation(f"annotation {key}: 'action' must be one of {', '.join(CAP_ACTIONS)}, "
                                    f"got {action!r}")
        return cls(n, _policy(key, data), str(action))


@dataclass(frozen=True)
class SpotSwitch:
    """The value of a Spot annotation.

    Attributes:
        policy: ``namespace/name`` of the BudgetPolicy.
        threshold_percent: The threshold whose ``SwitchToSpot`` action this is (1..200).
    """

    policy: str
    threshold_percent: int

    def encode(self) -> str:
        """Compact JSON ``{"policy": "ns/name", "capacityType": "Spot", "thresholdPercent": p}``."""
        return json.dumps({"policy": self.policy, "capacityType": SPOT_CAPACITY_TYPE,
                           "thresholdPercent": int(self.threshold_percent)}, separators=(",", ":"))

    @classmethod
    def decode(cls, key: str, value: str) -> "SpotSwitch":
        """Parse a Spot annotation's value.

        Raises:
            InvalidAnnotation: Not JSON, ``capacityType`` not ``Spot``, ``policy`` missing, or
                ``thresholdPercent`` not a whole number in 1..200.
        """
        data = _json_object(key, value)
        if data.get("capacityType") != SPOT_CAPACITY_TYPE:
            raise InvalidAnnotation(f"annotation {key}: 'capacityType' must be {SPOT_CAPACITY_TYPE!r}, "
                                    f"got {data.get('capacityType')!r}")
        p = data.get("thresholdPercent")
        if not isinstance(p, int) or isinstance(p, bool) or not 1 <= p <= 200:
            raise InvalidAnnotation(f"annotation {key}: 'thresholdPercent' must be a whole number in 1..200, "
                                    f"got {p!r}")
        return cls(_policy(key, data), p)


@dataclass(frozen=True)
class TenantReject:
    """The value of a tenant-rejection annotation.

    Attributes:
        policy: ``namespace/name`` of the BudgetPolicy.
        tenants: The tenants refused (as the gateway names them), sorted.
        until: When the rejection ends (the period's end), timezone-aware UTC, whole seconds.
        threshold_percent: The ``Reject`` threshold in force (1..200).
    """

    policy: str
    tenants: tuple[str, ...]
    until: dt.datetime
    threshold_percent: int

    def encode(self) -> str:
        """Compact JSON ``{"policy": "ns/name", "tenants": [...], "until": "...Z", "thresholdPercent": p}``."""
        return json.dumps({"policy": self.policy, "tenants": sorted(self.tenants),
                           "until": self.until.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           "thresholdPercent": int(self.threshold_percent)}, separators=(",", ":"))

    @classmethod
    def decode(cls, key: str, value: str) -> "TenantReject":
        """Parse a tenant-rejection annotation's value.

        Raises:
            InvalidAnnotation: Not JSON, ``tenants`` not a list of non-empty strings, ``until`` not an RFC 3339
                time with a zone, ``policy`` missing, or ``thresholdPercent`` not a whole number in 1..200.
        """
        data = _json_object(key, value)
        tenants = data.get("tenants")
        if not isinstance(tenants, list) or not all(isinstance(t, str) and t for t in tenants):
            raise InvalidAnnotation(f"annotation {key}: 'tenants' must be a list of tenant names, got {tenants!r}")
        raw = data.get("until")
        until = parse_time(raw)
        if until is None:
            raise InvalidAnnotation(f"annotation {key}: 'until' must be an RFC 3339 time with a zone, got {raw!r}")
        p = data.get("thresholdPercent")
        if not isinstance(p, int) or isinstance(p, bool) or not 1 <= p <= 200:
            raise InvalidAnnotation(f"annotation {key}: 'thresholdPercent' must be a whole number in 1..200, "
                                    f"got {p!r}")
        return cls(_policy(key, data), tuple(sorted(tenants)), until, p)


def tenant_rejections(annotations: Mapping[str, str] | None) -> dict[str, tuple[dt.datetime, str]]:
    """Tenant -> (latest ``until``, ``"ns/name"`` of the policy behind it) over every decodable rejection annotation.

    Values that do not decode are skipped (the BudgetPolicy controller owns and rewrites them): a value that cannot
    be read refuses no one here; the gateway holds what it last read under that key
    (:class:`modalscale.gateway.tenant_budget.TenantGate`).
    """
    decoded = []
    for key, value in (annotations or {}).items():
        if key.startswith(BUDGET_REJECT_PREFIX):
            try:
                decoded.append(TenantReject.decode(key, value))
            except InvalidAnnotation:
                continue
    return latest_rejections(decoded)


def latest_rejections(rejections: Iterable[TenantReject]) -> dict[str, tuple[dt.datetime, str]]:
    """Tenant -> (latest ``until``, ``"ns/name"`` of the policy behind it) over ``rejections``."""
    out: dict[str, tuple[dt.datetime, str]] = {}
    for r in rejections:
        for tenant in r.tenants:
            if tenant not in out or r.until > out[tenant][0]:
                out[tenant] = (r.until, r.policy)
    return out


def same_value(current: str | None, wanted: str | None) -> bool:
    """True when two annotation values say the same (None = absent): the same JSON whatever the spacing and the
    order of object members, and of the same JSON types (``1.0`` and ``true`` are not ``1``: Python's ``==`` takes
    them for it, while the decoders refuse them, so an unreadable value was never rewritten)."""
    if current is None or wanted is None:
        return current is wanted
    try:
        return _canonical(json.loads(current)) == _canonical(json.loads(wanted))
    except (ValueError, RecursionError):
        return False


def _canonical(value: object) -> str:
    """``value`` (decoded JSON) written back with sorted keys and no spaces: equal only for equal JSON of equal
    types (``json.dumps`` writes ``1``, ``1.0`` and ``true`` apart)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def budget_cap(annotations: Mapping[str, str] | None) -> tuple[int | None, str | None]:
    """The tightest cap among ``annotations``: (max replicas, ``"ns/name[, ...]"`` of its policies), or (None, None).

    Values that do not decode are skipped here and named by :func:`unreadable_budget_caps`; while any does, every
    replica decision holds (the reconcile: ``isvc.plan.hold_unreadable_cap``; the autoscaler:
    ``Observation.budget_cap_unreadable``; an activation from 0: :func:`hold_on_unreadable_cap`).
    """
    best: int | None = None
    policies: list[str] = []
    for key, value in (annotations or {}).items():
        if not key.startswith(BUDGET_CAP_PREFIX):
            continue
        try:
            cap = BudgetCap.decode(key, value)
        except InvalidAnnotation:
            continue
        if best is None or cap.max_replicas < best:
            best, policies = cap.max_replicas, [cap.policy]
        elif cap.max_replicas == best:
            policies.append(cap.policy)
    return best, (", ".join(sorted(policies)) if policies else None)


def unreadable_budget_caps(annotations: Mapping[str, str] | None) -> tuple[str, ...]:
    """Messages for the cap annotations (``budget.modalscale.io/cap-*``) whose values do not decode, by key
    (:func:`invalid_budget_annotations` of the cap annotations alone)."""
    return unreadable_budget_annotations(annotations, BUDGET_CAP_PREFIX)


def unreadable_budget_annotations(annotations: Mapping[str, str] | None, *prefixes: str) -> tuple[str, ...]:
    """Messages for the budget annotations under ``prefixes`` (of :data:`BUDGET_CAP_PREFIX`,
    :data:`BUDGET_SPOT_PREFIX`, :data:`BUDGET_REJECT_PREFIX`) whose values do not decode, by key."""
    chosen = {k: v for k, v in sorted((annotations or {}).items()) if k.startswith(prefixes)}
    return tuple(invalid_budget_annotations(chosen))


def hold_on_unreadable_cap(annotations: Mapping[str, str] | None, cap: int | None,
                           current_replicas: int) -> int | None:
    """The cap an activation from 0 is decided under (``autoscale.handlers.activate_once``): ``cap`` (from the
    decodable cap annotations, None = none), and no more than ``current_replicas`` while any cap annotation does not
    decode.

    A cap that cannot be read may be lower than the current count (so no scale-up past it) and is no reason to
    scale down (the brief: never scale on data that could not be read): the count holds until the BudgetPolicy
    controller rewrites the value (its next evaluation) or someone deletes the annotation. A readable cap below
    ``current_replicas`` still applies.
    """
    if not unreadable_budget_caps(annotations):
        return cap
    return current_replicas if cap is None else min(cap, current_replicas)


def spot_switches(annotations: Mapping[str, str] | None) -> tuple[SpotSwitch, ...]:
    """Every decodable Spot annotation in ``annotations``, sorted by policy (empty: run on-demand)."""
    out = []
    for key, value in (annotations or {}).items():
        if key.startswith(BUDGET_SPOT_PREFIX):
            try:
                out.append(SpotSwitch.decode(key, value))
            except InvalidAnnotation:
                continue
    return tuple(sorted(out, key=lambda s: s.policy))


def invalid_budget_annotations(annotations: Mapping[str, str] | None) -> list[str]:
    """Messages for budget annotations whose values do not decode (for logs; they are ignored)."""
    out = []
    for key, value in (annotations or {}).items():
        try:
            if key.startswith(BUDGET_CAP_PREFIX):
                BudgetCap.decode(key, value)
            elif key.startswith(BUDGET_SPOT_PREFIX):
                SpotSwitch.decode(key, value)
            elif key.startswith(BUDGET_REJECT_PREFIX):
                TenantReject.decode(key, value)
        except InvalidAnnotation as exc:
            out.append(str(exc))
    return out


__all__ = [
    "BUDGET_CAP_PREFIX", "BUDGET_REJECT_PREFIX", "BUDGET_SPOT_PREFIX", "BUDGET_TENANTS_PREFIX", "BudgetCap",
    "CAP_ACTIONS", "InvalidAnnotation", "SPOT_CAPACITY_TYPE", "SpotSwitch", "TenantReject", "budget_cap",
    "hold_on_unreadable_cap", "unreadable_budget_annotations", "unreadable_budget_caps",
    "cap_annotation_key", "invalid_budget_annotations", "policy_digest", "budgeted_tenants", "encode_tenants",
    "reject_annotation_key", "same_value", "tenants_annotation_key", "spot_annotation_key", "spot_switches",
    "latest_rejections", "tenant_rejections",
]


# ---------------------------------------------------------------------------------------------- activation
ACTIVATION_ANNOTATION = "modalscale.io/activation-requested-at"
"""Written by the request gateway (``modalscale gateway``) on its InferenceService while it holds requests and no
replica is Ready (at most once a second): an RFC 3339 UTC time. The operator starts one replica at once when it is
newer than the autoscaler's last scale to zero (``modalscale.autoscaler.policy.activate``)."""


def activation_requested_at(annotations: Mapping[str, str] | None) -> dt.datetime | None:
    """The time in :data:`ACTIVATION_ANNOTATION` (timezone-aware UTC), None when absent or unreadable (a value
    that is not an RFC 3339 time with a zone activates nothing: never act on data that cannot be read)."""
    return parse_time((annotations or {}).get(ACTIVATION_ANNOTATION))
