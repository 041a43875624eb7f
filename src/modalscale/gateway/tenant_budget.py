"""Per-tenant budgets at admission: which tenants the gateway refuses now, and for how long (pure).

The budget planner decides (``modalscale.costmodel.budget.reject``); the operator writes the decision as
``budget.modalscale.io/reject-<h>`` annotations on the InferenceService (``modalscale.api.annotations``); the
gateway watches its InferenceService and hands each new set of annotations to :meth:`TenantGate.update`. Per
request it only looks the tenant up in a dict (:meth:`TenantGate.check`): no API call, no I/O.

The tenant is matched by its cleaned header value (:func:`modalscale.gateway.tenants.clean`), before folding into
``other``: a budgeted tenant stays refused however many tenants the gateway has seen. A rejection ends on its own at
its ``until`` (the budget period's end), before the operator deletes the annotation; ``Retry-After`` is the whole
seconds left until then (at least 1). An annotation whose value does not decode (hand-edited, restored from an old
manifest) changes nothing: the gate keeps what it last read under that key (none since the gateway started: it
refuses no one on it) until the BudgetPolicy rewrites the value (its next evaluation) or the key is deleted, and
:attr:`TenantGate.unreadable` names it (the gateway logs it; the operator's ``BudgetLimited`` condition says it too).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass

from modalscale.api.annotations import BUDGET_REJECT_PREFIX, InvalidAnnotation, TenantReject, latest_rejections

TENANT_BUDGET_EXCEEDED = "TenantBudgetExceeded"
"""The reason the gateway counts (``modalscale_gateway_rejected_total``) for a tenant refused by its budget."""


@dataclass(frozen=True)
class TenantRefusal:
    """Why one request is refused at admission.

    Attributes:
        tenant: The cleaned tenant name.
        retry_after_s: Whole seconds until the rejection ends (>= 1): the ``Retry-After`` header.
        until: When it ends (UTC).
        policy: ``namespace/name`` of the BudgetPolicy behind it.
    """

    tenant: str
    retry_after_s: int
    until: dt.datetime
    policy: str

    @property
    def message(self) -> str:
        return (f"tenant {self.tenant!r} is over its budget (BudgetPolicy {self.policy}): new requests are refused "
                f"until {self.until.strftime('%Y-%m-%dT%H:%M:%SZ')} (the budget period's end) or until the limit is "
                f"raised; retry after {self.retry_after_s} s")


class TenantGate:
    """The tenants refused now, from the InferenceService's annotations."""

    def __init__(self) -> None:
        self._until: dict[str, tuple[float, dt.datetime, str]] = {}
        self._by_key: dict[str, TenantReject] = {}
        self._unreadable: tuple[str, ...] = ()

    @property
    def unreadable(self) -> tuple[str, ...]:
        """The decode errors of the rejection annotations the last :meth:`update` could not read, by key."""
        return self._unreadable

    @property
    def tenants(self) -> tuple[str, ...]:
        """Tenants with a rejection (ended or not), sorted."""
        return tuple(sorted(self._until))

    def update(self, annotations: Mapping[str, str] | None) -> None:
        """Replace the set with what ``annotations`` (the InferenceService's, all of them) say: per rejection key,
        its value, or what the gate last read under that key when the value does not decode (see the module's
        docstring); a deleted key refuses no one. A tenant named under several keys is refused until the latest
        ``until``."""
        by_key: dict[str, TenantReject] = {}
        unreadable = []
        for key, value in sorted((annotations or {}).items()):
            if not key.startswith(BUDGET_REJECT_PREFIX):
                continue
            try:
                by_key[key] = TenantReject.decode(key, value)
            except InvalidAnnotation as exc:
                unreadable.append(str(exc))
                if key in self._by_key:
                    by_key[key] = self._by_key[key]
        self._by_key, self._unreadable = by_key, tuple(unreadable)
        self._until = {t: (until.timestamp(), until, policy)
                       for t, (until, policy) in latest_rejections(by_key.values()).items()}

    def check(self, tenant: str, now_s: float) -> TenantRefusal | None:
        """The refusal of one request of ``tenant`` (cleaned, not folded) at ``now_s`` (Unix seconds), or None."""
        entry = self._until.get(tenant)
        if entry is None or entry[0] <= now_s:
            return None
        return TenantRefusal(tenant, max(1, math.ceil(entry[0] - now_s)), entry[1], entry[2])


__all__ = ["TENANT_BUDGET_EXCEEDED", "TenantGate", "TenantRefusal"]
