"""Steps 1 and 2 of a budget evaluation: the spend of the period so far, the burn rate behind it, and the forecast.

**Forecast** (method ``LinearAtCurrentBurnRate``, :data:`FORECAST_METHOD`): ``spent + burn_rate x hours left in the
period``, where the burn rate is the sum over selected services of running replicas x price per replica-hour now.

**Unknown price or replicas: the known spend is a lower bound.** A service that runs but whose price (or replica
count) cannot be read adds an unknown, non-negative part: the ledger charges it nothing, so ``spent`` and the
known burn rate are lower bounds of the true ones, and so is the forecast made from them;
:attr:`SpendToDate.burn_rate_usd_per_hour` is then unknown (None) and the services are named in
:attr:`SpendToDate.blind_services`.

All money arithmetic is exact in :data:`~modalscale.costmodel.money.MONEY_CONTEXT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from modalscale.api.budgetpolicy import BudgetSpec
from modalscale.costmodel.budget.state import ServiceState
from modalscale.costmodel.money import MONEY_CONTEXT, SECONDS_PER_HOUR, quantize_display_usd, quantize_ledger_usd
from modalscale.costmodel.periods import period_bounds

FORECAST_METHOD = "LinearAtCurrentBurnRate"
"""How :attr:`BudgetPlan.forecast_usd` is computed: spent + current burn rate x hours left in the period."""


def reaches(amount_usd: Decimal, percent: int, limit_usd: Decimal) -> bool:
    """True when ``amount_usd >= percent % x limit_usd``, compared exactly (``amount x 100 >= percent x limit``)."""
    ctx = MONEY_CONTEXT
    return ctx.multiply(amount_usd, Decimal(100)) >= ctx.multiply(Decimal(percent), limit_usd)


@dataclass(frozen=True)
class SpendToDate:
    """The period containing ``now`` and what has been spent in it.

    Attributes:
        period_start, period_end: Bounds of the period (UTC).
        spent_usd: Spend of the period so far (a lower bound when :attr:`blind`).
        limit_usd, currency: ``spec.limit``.
        percent_used: ``spent / limit x 100``, rounded to 0.01.
        known_burn_usd_per_hour: Sum of running replicas x price now over the services whose rate is known.
        max_burn_usd_per_hour: Every selected service at ``max(replicas, maxReplicas)`` x price (unpriced: 0), a
            staged service's image encoder pool at its ``maxReplicas`` too (:func:`_max_usd_per_hour`).
        blind_services: ``namespace/name: reason`` of each service that runs but cannot be priced.
    """

    period_start: datetime
    period_end: datetime
    spent_usd: Decimal
    limit_usd: Decimal
    currency: str
    percent_used: Decimal
    known_burn_usd_per_hour: Decimal
    max_burn_usd_per_hour: Decimal
    blind_services: tuple[str, ...]

    @property
    def blind(self) -> bool:
        """True when part of the spend is not priced (the figures are lower bounds)."""
        return bool(self.blind_services)

    @property
    def burn_rate_usd_per_hour(self) -> Decimal | None:
        """The burn rate now; None when some running service is not priced."""
        return None if self.blind else self.known_burn_usd_per_hour


def _max_usd_per_hour(s: ServiceState) -> Decimal:
    """The most ``s`` can burn before enforcement lowers it: ``max(replicas, maxReplicas)`` x its price (unpriced:
    0), and a staged service's image encoder pool at ``max(its running pods' rate, its maxReplicas x a pod's
    price)``: the pool's pods are in the burn rate that enforced a threshold, so the hold's bound must count them
    too, or it would lift once they are scaled away. Without ``spec.stages``: the replicas' term alone."""
    ctx = MONEY_CONTEXT
    most = ctx.multiply(Decimal(max(s.replicas or 0, s.max_replicas)), s.usd_per_replica_hour or Decimal(0))
    if s.pool_max_replicas:
        for pool in s.pools:
            most = ctx.add(most, max(pool.usd_per_hour or Decimal(0),
                                     ctx.multiply(Decimal(s.pool_max_replicas), pool.usd_per_pod_hour or Decimal(0))))
    return most


def spend_to_date(spec: BudgetSpec, spent_usd: Decimal, services: Sequence[ServiceState],
                  now: datetime, extra_blind: Sequence[str] = ()) -> SpendToDate:
    """Step 1: the period of ``now``, the share of the limit spent, and the burn rates of ``services``.

    Args:
        spent_usd: Spend of the period so far (from the ledger), USD, >= 0.
        services: Every selected service as observed now.
        now: Timezone-aware UTC.
        extra_blind: Further unknown parts of the spend besides unpriced services (e.g. the tenants' usage could
            not be read), as ``what: why``.
    Returns:
        :class:`SpendToDate`.
    """
    ctx = MONEY_CONTEXT
    p_start, p_end = period_bounds(spec.period, spec.time_zone, now)
    limit = spec.limit.amount
    percent_used = quantize_display_usd(ctx.divide(ctx.multiply(spent_usd, Decimal(100)), limit))
    # Services that run but cannot be priced add an unknown, non-negative part: what is known is a lower bound.
    blind = tuple(f"{s.namespace}/{s.name}: {s.unknown_reason or 'price or replicas unknown'}"
                  for s in services if not s.known) + tuple(extra_blind)
    known_burn = quantize_ledger_usd(sum((s.cost_usd_per_hour or Decimal(0) for s in services), Decimal(0)))
    max_burn = sum((_max_usd_per_hour(s) for s in services), Decimal(0))
    return SpendToDate(p_start, p_end, spent_usd, limit, spec.limit.currency, percent_used, known_burn, max_burn,
                       blind)


def forecast_usd(spec: BudgetSpec, spend: SpendToDate, now: datetime) -> Decimal | None:
    """Step 2: the spend at the end of the period (:data:`FORECAST_METHOD`), on the known burn rate.

    Returns:
        ``spent + known burn rate x hours left`` (whole seconds), to the ledger's resolution; a lower bound when
        ``spend.blind``; None when ``spec.forecast.enabled`` is false.
    """
    if not spec.forecast.enabled:
        return None
    ctx = MONEY_CONTEXT
    hours_left = ctx.divide(Decimal(int((spend.period_end - now).total_seconds())), SECONDS_PER_HOUR)
    return quantize_ledger_usd(ctx.add(spend.spent_usd, ctx.multiply(spend.known_burn_usd_per_hour, hours_left)))


__all__ = ["FORECAST_METHOD", "SpendToDate", "forecast_usd", "reaches", "spend_to_date"]
