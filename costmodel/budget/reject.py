"""Step 4b of a budget evaluation: per-tenant budgets at admission (the ``Reject`` action).

Why a module: a BudgetPolicy with ``spec.selector.tenants`` counts only those tenants' share of the selected
services' spend, and its ``Reject`` threshold refuses their new requests at the gateway; which (service, tenant)
pairs are refused, since when and until when is decided here, pure. The operator writes the decision as one
annotation per InferenceService (``budget.modalscale.io/reject-<h>``, :mod:`modalscale.api.annotations`) and the
gateway, which watches its InferenceService, answers those tenants 429 with ``Retry-After`` until ``until``.

**A tenant's spend** (:func:`tenant_spend`) is showback's allocation (:func:`modalscale.costmodel.showback.allocate`)
over ``[period start, now)``: each selected service's spend in that window (the ledger's spend series as the operator
exports them) split over (tenant, modality) by the replica-seconds their requests used (the gateway's
``modalscale_gateway_service_seconds_total``), with capacity no request used left as the service's idle row, which
no tenant is charged. The policy's spend is the sum of the rows of its tenants over its selected services: what
``modalscale cost showback --since <period so far> --by tenant`` prints for them. Where the ledger's series cover
only part of the window (an operator younger than the period) the figure is that part's: a lower bound, acted on.

**Spend only grows.** Within a period the figure acted on never falls below the last one stored
(``status.tenantSpent``) while the spec is unchanged, so a reading a little lower than the last (a window edge, a
scrape behind) neither lifts a rejection nor refuses the tenant again an evaluation later; a spec change (a raised
limit, other tenants) measures afresh. **Missing data holds, it never rejects.** When the usage cannot be read
(Prometheus down, a partial answer) or a selected service that the tenants used cannot be priced (no ledger series,
figures refused), the tenants' spend is unknown: the policy uses the last figure known this period
(``status.tenantSpent``, a lower bound because spend only grows) for its state and alerts, rejections in force this
period are held as they are, and no new rejection is decided. The state is then ``Unknown`` (``GovernanceBlind``),
naming why.

**The rule** (:func:`plan_rejections`): when the tenants' spend has reached a threshold with ``Reject`` (reactive:
not anticipated, no burn rate per tenant is measured), every selected service x every listed tenant is rejected,
``until`` the period's end, at the lowest such threshold; ``since`` is kept from the previous evaluation of the
same period. A raised limit that the spend no longer reaches lifts it at the next evaluation; a new period lifts it
(its ``until`` has passed: the gateway admits again on its own at ``until``, before the operator removes the
annotation). ``enforcement.dryRun`` reports the pairs (``dryRun: true``) and writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from modalscale.api.budgetpolicy import BudgetSpec, Threshold, ThresholdAction
from modalscale.costmodel.budget.spend import reaches
from modalscale.costmodel.budget.state import ServiceState
from modalscale.costmodel.ledger import format_time
from modalscale.costmodel.money import quantize_ledger_usd
from modalscale.costmodel.showback import ServiceWindow, ShowbackInputError, TenantUsage, allocate

ServiceKey = tuple[str, str]
"""(namespace, name) of an InferenceService."""


@dataclass(frozen=True)
class TenantSpend:
    """The listed tenants' spend of the current period, as the planner gets it.

    Attributes:
        spent_usd: Their spend so far (USD, 1e-9 resolution); None when it could not be measured.
        by_tenant: Each listed tenant's part (tenants without requests: 0); empty when unknown.
        unknown_reason: Why ``spent_usd`` is None (names the service or the read that failed).
        held_usd: The last figure known this period (``status.tenantSpent``, of the same spec generation), the
            lower bound of the figure acted on.
        held_period_start: The period ``held_usd`` belongs to (None: none stored; a held figure of another period
            counts 0).
    """

    spent_usd: Decimal | None
    by_tenant: Mapping[str, Decimal] = field(default_factory=dict)
    unknown_reason: str | None = None
    held_usd: Decimal = Decimal(0)
    held_period_start: datetime | None = None

    @property
    def known(self) -> bool:
        return self.spent_usd is not None

    def effective_usd(self, period_start: datetime) -> Decimal:
        """The figure the policy is evaluated on: the measured spend, never below the held figure of this period
        (spend only grows within a period, so a lower reading is measurement noise: a window edge, a scrape
        behind; acted on, it would lift a rejection and refuse the tenant again one evaluation later); unknown:
        the held lower bound of this period."""
        held = self.held_usd if self.held_period_start == period_start else Decimal(0)
        if self.spent_usd is not None:
            return max(self.spent_usd, held)
        return held


def tenant_spend(tenants: Sequence[str], services: Sequence[ServiceKey],
                 windows: Mapping[ServiceKey, ServiceWindow] | None,
                 usage: Mapping[ServiceKey, Sequence[TenantUsage]] | None,
                 unavailable: str | None = None) -> TenantSpend:
    """Measure the tenants' spend over the selected services (see the module docstring).

    Args:
        tenants: ``spec.selector.tenants``.
        services: The selected InferenceServices.
        windows: Per service, its spend (USD, 1e-9 multiple) and replica-seconds over ``[period start, now)``.
        usage: Per service, the (tenant, modality) rows of the same window (counter increases).
        unavailable: Why nothing could be read (``windows``/``usage`` are then ignored).
    Returns:
        :class:`TenantSpend` with ``spent_usd`` None when any part could not be measured.
    """
    if unavailable is not None or windows is None or usage is None:
        return TenantSpend(None, unknown_reason=unavailable or "tenant usage not read")
    wanted = set(tenants)
    by_tenant = {t: Decimal(0) for t in tenants}
    for key in sorted(set(services)):
        rows = list(usage.get(key, ()))
        used = [u for u in rows if u.tenant in wanted and _positive(u.service_s)]
        if not used:
            continue  # the tenants did not use it: it costs them nothing, priced or not
        window = windows.get(key)
        ref = f"{key[0]}/{key[1]}"
        if window is None:
            return TenantSpend(None, unknown_reason=f"{ref}: the tenants used it but it has no ledger rate in "
                                                    f"Prometheus over the period (is the operator's /metrics scraped?)")
        try:
            result = allocate(window, rows, accept_counter_resets=True)
        except ShowbackInputError as exc:
            return TenantSpend(None, unknown_reason=f"{ref}: usage refused: {exc}")
        for row in result.rows:
            if row.tenant in wanted:
                by_tenant[row.tenant] += row.usd
    return TenantSpend(quantize_ledger_usd(sum(by_tenant.values(), Decimal(0))), by_tenant)


def _positive(value: Decimal | float | int) -> bool:
    """True when a row used the service, or when its figure is not a finite number (allocate() refuses it)."""
    try:
        return bool(value > 0) or not math.isfinite(value)
    except (TypeError, ValueError):
        return True


@dataclass(frozen=True)
class TenantRejection:
    """One (service, tenant) pair whose new requests the gateway refuses.

    Attributes:
        namespace, name: The InferenceService.
        tenant: The tenant as the gateway names it (``modalscale.gateway.tenants.clean``).
        threshold_percent: The ``Reject`` threshold in force.
        since: When the pair was first rejected in this period (UTC).
        until: The period's end (UTC): the gateway's ``Retry-After`` counts down to it.
        dry_run: ``enforcement.dryRun``: reported, not written for the gateway.
    """

    namespace: str
    name: str
    tenant: str
    threshold_percent: int
    since: datetime
    until: datetime
    dry_run: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.name, self.tenant)

@dataclass(frozen=True)
class RejectPlan:
    """What step 4b decided.

    Attributes:
        rejections: The pairs refused now, sorted by (namespace, name, tenant).
        held: True when they are held from the previous evaluation because the spend is unknown.
        reason: One sentence for messages and alerts ("" when nothing is rejected).
    """

    rejections: tuple[TenantRejection, ...] = ()
    held: bool = False
    reason: str = ""

    @property
    def applied(self) -> tuple[TenantRejection, ...]:
        """The pairs to write for the gateway (not in dry run)."""
        return tuple(r for r in self.rejections if not r.dry_run)


def plan_rejections(spec: BudgetSpec, spend: TenantSpend, services: Sequence[ServiceState],
                    previous: Sequence[TenantRejection], period_start: datetime, period_end: datetime,
                    now: datetime) -> RejectPlan:
    """Step 4b: the (service, tenant) pairs refused at admission now (see the module docstring).

    Args:
        spec: Parsed spec; nothing is rejected without ``selector.tenants`` and a ``Reject`` threshold.
        spend: The tenants' spend (:func:`tenant_spend`); unknown: the previous pairs of this period are held.
        services: The selected services.
        previous: ``status.rejectedTenants`` as read back (of this period: ``until`` its end, ``plan_budget``'s
            ``carried_rejections``).
        period_start, period_end: The current period (UTC).
        now: This evaluation (UTC): ``since`` of a pair that starts now.
    Returns:
        :class:`RejectPlan`.
    """
    thresholds: list[Threshold] = [t for t in spec.thresholds if ThresholdAction.REJECT in t.actions]
    if not spec.selector.tenants or not thresholds:
        return RejectPlan()
    # Those of this period (a pair carried over a spec.timeZone change may have started before its new start).
    this_period = [r for r in previous if r.since < period_end and r.until == period_end]
    if not spend.known:
        held = tuple(sorted(this_period, key=lambda r: r.key))
        return RejectPlan(held, True, (f"tenants' spend unknown ({spend.unknown_reason}); "
                                       f"{len(held)} rejection(s) of this period held, none added") if held else "")
    spent, limit = spend.effective_usd(period_start), spec.limit.amount
    crossed = [t for t in thresholds if reaches(spent, t.percent, limit)]
    if not crossed:
        return RejectPlan()
    first = crossed[0]
    since = {r.key: r.since for r in this_period}
    pairs = tuple(TenantRejection(s.namespace, s.name, tenant, first.percent,
                                  since.get((s.namespace, s.name, tenant), now), period_end,
                                  spec.enforcement.dry_run)
                  for s in sorted(services, key=lambda s: (s.namespace, s.name)) for tenant in sorted(
                      spec.selector.tenants))
    return RejectPlan(pairs, False, f"Reject at {first.percent} %: tenants {', '.join(sorted(spec.selector.tenants))} "
                                    f"refused until {format_time(period_end)}")


__all__ = ["RejectPlan", "ServiceKey", "TenantRejection", "TenantSpend", "plan_rejections",
           "tenant_spend"]
