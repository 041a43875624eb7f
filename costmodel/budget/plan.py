"""A budget evaluation: from spend, services and the alert history to a plan of state, alerts and enforcement.

Why a module: "decide pure, act thin". :func:`plan_budget` is a pure function of the BudgetPolicy spec, the spend
of the current period (from :func:`~modalscale.costmodel.ledger.advance`), the selected services as observed now
and the de-duplication state read back from status; it returns a :class:`BudgetPlan` that the operator applies
(scale, alert, write status) without further decisions. It runs six named steps, each a pure function of its own
module: spend to date and the forecast (:mod:`~modalscale.costmodel.budget.spend`), enforcement
(:mod:`~modalscale.costmodel.budget.enforce`), Spot (:mod:`~modalscale.costmodel.budget.spot`), alerts
(:mod:`~modalscale.costmodel.budget.alerts`) and, here, the state.

**State** (:func:`budget_state`): ``Exceeded`` when spent >= limit (spent being a lower bound when some service is
not priced), else ``Unknown`` when part of the spend is not priced (reason ``GovernanceBlind``), else ``Warning``
when a threshold is crossed (``ThresholdCrossed``), enforced ahead (``ThresholdAhead``) or the forecast crosses
``forecast.alertAtPercent`` (``ForecastOverLimit``), else ``Ok`` (``WithinBudget``).

**Unknown price or replicas: the known spend is a lower bound** (never "do nothing"). A service with no running
pod costs 0 whether or not it has a price. A service that runs but whose price (or whose replica count) cannot be
read adds an unknown, non-negative part: the ledger charges it nothing (it reports it as unpriced), so ``spent``
and the burn rate of the priced services are lower bounds of the true ones. A threshold the lower bound crosses
is crossed, alerted and enforced, on every selected service (the unpriced ones too); an enforcing threshold the
known burn rate alone reaches within the horizon is enforced ahead. Enforcement already in force this period is
held while anything is unknown (lifting would act on data that could not be read). The state is ``Exceeded``
when the lower bound reaches the limit, else ``Unknown``; ``burnRatePerHour`` and ``forecast`` are unknown
(None); a ``GovernanceBlind`` alert names the services once, when the policy starts having any (the forecast
alert is decided on the lower-bound forecast and says "at least").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal

from modalscale.api import conditions as C
from modalscale.api.budgetpolicy import BudgetSpec, Threshold
from modalscale.autoscaler.policy import split_staged_cap
from modalscale.costmodel.budget.alerts import BudgetAlert, action_lines, plan_alerts
from modalscale.costmodel.budget.enforce import (
    EnforcementAction,
    enforcement_horizon_s,
    order_services,
    plan_enforcement,
)
from modalscale.costmodel.budget.reject import RejectPlan, TenantRejection, TenantSpend, plan_rejections
from modalscale.costmodel.budget.spend import FORECAST_METHOD, SpendToDate, forecast_usd, reaches, spend_to_date
from modalscale.costmodel.budget.spot import plan_spot
from modalscale.costmodel.budget.state import (
    AlertState,
    BudgetState,
    EnforcedService,
    PolicyRef,
    ServiceState,
    SpotRecord,
    carried_over,
)
from modalscale.costmodel.ledger import ClosedPeriod, LedgerAdvance, ServiceObservation, format_time
from modalscale.costmodel.money import MONEY_CONTEXT, display_usd, format_usd
from modalscale.costmodel.periods import period_bounds


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
    rejections: tuple[TenantRejection, ...] = ()
    """``Reject`` in force: the (service, tenant) pairs the gateway refuses (``status.rejectedTenants``)."""
    tenant_spent_usd: Decimal | None = None
    """With ``spec.selector.tenants``: the tenants' spend the plan was made on (``status.tenantSpent``)."""
    budgeted: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """With ``spec.selector.tenants``: (namespace, name, tenants) per selected service (the gateway counts those
    tenants by name, never folded into ``other``)."""

    @property
    def blind(self) -> bool:
        """True when some selected service runs but cannot be priced (spend is a lower bound)."""
        return bool(self.blind_services)

    def effective_max_replicas(self) -> dict[tuple[str, str], int]:
        """(namespace, name) -> enforced maximum replicas (not in dry run); what the autoscaler must cap to.

        Includes enforcement held while blind; empty after a new period starts.
        """
        return {(e.namespace, e.name): e.max_replicas for e in self.enforced_services if not e.dry_run}

def rates_after_enforcement(services: Sequence[ServiceState], plan: BudgetPlan, before: AlertState
                            ) -> list[ServiceObservation]:
    """The services that ``plan``'s enforcement holds below what was observed, as they run once it took effect.

    A service whose pods are listed (``pods`` not None) runs at most its applied cap from now on whenever a cap
    is in force, new or not: a pod still seen mid scale-down is charged by its own timestamps at the next
    evaluation if it is still there (the cap did not take effect), and stops costing when it is gone (ledger
    module docstring). Without a pod list only a cap that is new or lower than the one in force before
    (``before.enforced``, same period, not dry run) counts: a cap that was already in force and still sees more
    replicas did not take effect, and the observed replicas are what is charged.

    A staged service's cap counts both pools (issue 24): the operator's planner splits it
    (:func:`~modalscale.autoscaler.policy.split_staged_cap`, by the price of a replica of each pool), so its front
    runs its share (:func:`front_after_cap`), not the whole cap, and may be lowered while its own count is within
    the cap. Only the front has a rate in the ledger (``LedgerEntry.replicas`` and ``cost_usd_per_hour``: what a
    replica gone unseen is charged at); the image encoder pool is a side pool (``ledger.PodPool``) whose pods are
    charged by their own start and stop at its own price whatever count is in force, so a pool pod the cap removes
    costs until its own stop and nothing is held for the pool.

    Args:
        services: The selected services as observed at this evaluation (the input of :func:`plan_budget`).
        plan: Its plan.
        before: The ``alert_state`` that :func:`plan_budget` was given.
    Returns:
        One observation per service lowered (known replicas above what its enforced maximum leaves it): replicas =
        that count, same price. Pass to ``ledger.with_rates_in_force``.
    """
    caps = plan.effective_max_replicas()
    old = ({(e.namespace, e.name): e.max_replicas for e in before.enforced if not e.dry_run}
           if before.period_start == plan.period_start else {})
    out = []
    for s in services:
        key = (s.namespace, s.name)
        cap = caps.get(key)
        if cap is None or s.replicas is None:
            continue
        runs = front_after_cap(s, cap)
        if s.replicas <= runs:
            continue
        if s.pods is None and key in old and old[key] <= cap:
            continue  # in force since an earlier evaluation and still exceeded: charge what runs
        out.append(ServiceObservation(s.namespace, s.name, runs, s.usd_per_replica_hour))
    return out


def front_after_cap(s: ServiceState, cap: int) -> int:
    """The replicas ``s`` runs under a replica cap of ``cap`` (pure; its known ``replicas``): ``min(replicas,
    cap)``; for a staged service (``pool_max_replicas``) the front's share of the cap over both pools with its
    running image encoder pods, as the operator's planner splits it (``split_staged_cap``, by the price of a
    replica of each pool at the service's tier; a price not known: by the counts)."""
    replicas = s.replicas or 0
    if not s.pool_max_replicas:
        return min(replicas, cap)
    pool = sum(1 for p in s.pools for pod in p.pods if pod.stop is None)
    pool_price = next((p.usd_per_pod_hour for p in s.pools), None)
    return split_staged_cap(replicas, pool, cap, s.usd_per_replica_hour, pool_price).front


def scoped_spend(spec: BudgetSpec, spent: Decimal, closed: ClosedPeriod | None, tenants: TenantSpend | None,
                 now: datetime) -> tuple[Decimal, ClosedPeriod | None]:
    """The spend a policy is evaluated on, and the closed period to quote: the services' (``spent``, ``closed``), or
    with ``spec.selector.tenants`` the tenants' (measured, else the held lower bound; no closed figure is quoted).
    A tenant-scoped policy has no burn rate and no forecast (none is measured per tenant)."""
    if not spec.selector.tenants:
        return spent, closed
    tenants = tenants or TenantSpend(None, unknown_reason="tenant usage not read")
    return tenants.effective_usd(period_bounds(spec.period, spec.time_zone, now)[0]), None


def budgeted(spec: BudgetSpec, services: Sequence[ServiceState]) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(namespace, name, tenants) of each selected service of a tenant-scoped policy, sorted; empty otherwise."""
    if not spec.selector.tenants:
        return ()
    return tuple(sorted((s.namespace, s.name, tuple(sorted(spec.selector.tenants))) for s in services))


def tenant_blind(spec: BudgetSpec, tenants: TenantSpend | None) -> tuple[str, ...]:
    """The unknown part of a tenant-scoped policy's spend, as ``what: why`` (empty when measured or not scoped)."""
    if not spec.selector.tenants or (tenants is not None and tenants.known):
        return ()
    return (f"tenants {', '.join(spec.selector.tenants)}: "
            f"{tenants.unknown_reason if tenants is not None else 'tenant usage not read'}",)


def reject_lines(reject: RejectPlan) -> tuple[str, ...]:
    """The ``Action`` lines of an alert for the tenants refused at admission, one per tenant."""
    by_tenant: dict[str, list[TenantRejection]] = {}
    for r in reject.rejections:
        by_tenant.setdefault(r.tenant, []).append(r)
    return tuple(f"Reject tenant {t} on {', '.join(f'{r.namespace}/{r.name}' for r in rs)} until "
                 f"{format_time(rs[0].until)} (at {rs[0].threshold_percent} %)"
                 + (" [dry run, not applied]" if rs[0].dry_run else "") for t, rs in sorted(by_tenant.items()))


def carried_rejections(rejected: Sequence[TenantRejection], period_end: datetime, now: datetime
                       ) -> tuple[TenantRejection, ...]:
    """``status.rejectedTenants`` of the period in progress (the caller knows no new period started) as pairs of
    its current bounds: ``until`` is its end now, ``since`` kept. A ``spec.timeZone`` change moves that end
    (``state.carried_over``: the period goes on to the new zone's next midnight), and the pairs stored with the
    old one read as another period's: with the usage unknown every rejection was lifted, and read, each started
    over. A pair whose ``until`` has passed is of a period that is over (dropped)."""
    return tuple(replace(r, until=period_end) for r in rejected if r.until > now)


def budget_state(spend: SpendToDate, forecast: Decimal | None, crossed: Sequence[Threshold],
                 ahead: Sequence[Threshold], alert_at_percent: int | None,
                 horizon_s: int) -> tuple[BudgetState, str, str]:
    """Step 6: the budget state, its CamelCase reason and the sentence for the conditions (module docstring).

    Args:
        forecast: The forecast when known (None when disabled or when some service is not priced).
        alert_at_percent: ``spec.forecast.alertAtPercent`` when the forecast is enabled, else None.
    Returns:
        (state, reason from :mod:`modalscale.api.conditions`, message).
    """
    spent, limit, currency = spend.spent_usd, spend.limit_usd, spend.currency
    forecast_warning = (alert_at_percent is not None and forecast is not None
                        and reaches(forecast, alert_at_percent, limit))
    if spent >= limit:
        state, reason = BudgetState.EXCEEDED, C.BUDGET_EXCEEDED
        message = f"Spent {display_usd(spent)} of {format_usd(limit)} {currency}"
    elif crossed or ahead or forecast_warning:
        state = BudgetState.WARNING
        reason = C.THRESHOLD_CROSSED if crossed else C.THRESHOLD_AHEAD if ahead else C.FORECAST_OVER_LIMIT
        message = (f"Spent {display_usd(spent)} of {format_usd(limit)} {currency}"
                   + (f", forecast {display_usd(forecast)}" if forecast is not None else ""))
    else:
        state, reason = BudgetState.OK, C.WITHIN_BUDGET
        message = f"Spent {display_usd(spent)} of {format_usd(limit)} {currency}"
    if spend.blind:
        if state is not BudgetState.EXCEEDED:
            state, reason = BudgetState.UNKNOWN, C.GOVERNANCE_BLIND
        message = (f"Spent at least {display_usd(spent)} of {format_usd(limit)} {currency} "
                   f"(the known part; not priced: {'; '.join(spend.blind_services)})")
    if ahead:
        message += (f"; enforcing {', '.join(f'{t.percent} %' for t in ahead)} ahead: crossed within "
                    f"{horizon_s} s at the {'known ' if spend.blind else ''}current burn rate")
    return state, reason, message


def _checked_inputs(spec: BudgetSpec, spend: Decimal | LedgerAdvance, services: Sequence[ServiceState],
                    horizon_s: int | None, now: datetime) -> tuple[int, datetime, Decimal, ClosedPeriod | None]:
    """:func:`plan_budget`'s arguments checked: ``(horizon_s, now in UTC, spent_usd, closed period or None)``.

    Raises:
        ValueError: Naive ``now``, negative spend or a negative ``horizon_s``.
    """
    horizon_s = enforcement_horizon_s(spec.evaluation_interval_s, services) if horizon_s is None else horizon_s
    if horizon_s < 0:
        raise ValueError(f"horizon_s must be >= 0, got {horizon_s}")
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware (UTC), got naive {now.isoformat()}")
    closed, spent = (spend.closed_period, spend.spent_usd) if isinstance(spend, LedgerAdvance) else (None, spend)
    if spent < 0:
        raise ValueError(f"spend must be >= 0, got {spent}")
    return horizon_s, now.astimezone(timezone.utc), spent, closed


def plan_budget(spec: BudgetSpec, spend: Decimal | LedgerAdvance,
                services: Sequence[ServiceState] | Iterable[ServiceState], alert_state: AlertState, now: datetime,
                *, policy: PolicyRef = PolicyRef("", ""), horizon_s: int | None = None,
                tenants: TenantSpend | None = None, rejected: Sequence[TenantRejection] = ()) -> BudgetPlan:
    """Decide the budget state, the alerts to send now and the enforcement in force.

    Steps (each pure, see the module docstring):

    1. :func:`~modalscale.costmodel.budget.spend.spend_to_date`: the period, the spend and the burn rates;
    2. :func:`~modalscale.costmodel.budget.spend.forecast_usd`: the spend at the end of the period;
    3. :func:`~modalscale.costmodel.budget.enforce.plan_enforcement`: the thresholds in force, each service's cap;
    4. :func:`~modalscale.costmodel.budget.spot.plan_spot`: the services on Spot capacity;
       4b. :func:`~modalscale.costmodel.budget.reject.plan_rejections`: the (service, tenant) pairs ``Reject`` refuses;
    5. :func:`~modalscale.costmodel.budget.alerts.plan_alerts`: the alerts to send now;
    6. :func:`budget_state`: the state, its reason and message.

    Args:
        spec: Parsed spec (:func:`~modalscale.api.budgetpolicy.parse_budget_spec`).
        spend: Spend of the period containing ``now`` in USD, or the :class:`LedgerAdvance` that computed it
            (then the closed period's final spend is quoted in a recovery notice).
        services: Every selected InferenceService as observed now.
        alert_state: De-duplication state read back from status (``AlertState()`` the first time).
        now: Timezone-aware UTC instant of this evaluation; never read from the clock here.
        policy: Namespace/name of the BudgetPolicy, for messages and alert labels.
        horizon_s: How many seconds ahead enforcement looks
            (:data:`~modalscale.costmodel.budget.enforce.ENFORCEMENT_METHOD`); None = ``enforcement_horizon_s``
            (interval + the replicas' longest stop), 0 = reactive (act only once spend has reached a threshold).
        tenants, rejected: With ``spec.selector.tenants``: the tenants' spend (``reject.tenant_spend``; None: unknown,
            hold), which replaces ``spend``, and ``status.rejectedTenants`` as read back (see :func:`scoped_spend`).
    Returns:
        :class:`BudgetPlan`; persist it (``budget.status``) and apply ``plan.actions`` whose ``applied``.
    Raises:
        ValueError: Naive ``now``, negative spend or a negative ``horizon_s``.
    """
    services = list(services)
    horizon_s, now, spent, closed = _checked_inputs(spec, spend, services, horizon_s, now)
    spent, closed = scoped_spend(spec, spent, closed, tenants, now)

    to_date = spend_to_date(spec, spent, services, now, extra_blind=tenant_blind(spec, tenants))     # 1
    forecast_bound = None if spec.selector.tenants else forecast_usd(spec, to_date, now)             # 2
    crossed = [t for t in spec.thresholds if reaches(spent, t.percent, to_date.limit_usd)]
    alert_state = carried_over(alert_state, spec.period, to_date.period_start, to_date.period_end, now)
    new_period = alert_state.period_start is not None and (
        alert_state.period_start, alert_state.period_end) not in (
        (to_date.period_start, None), (to_date.period_start, to_date.period_end))  # or spec.period changed
    previous, previous_spot = ((), ()) if new_period else (alert_state.enforced, alert_state.spot)
    ordered = order_services(services, spec.enforcement.order)
    enforcement = plan_enforcement(spec, to_date, crossed, services, ordered, previous, previous_spot,  # 3
                                   horizon_s, now)
    spot, spot_skipped = plan_spot(spec, enforcement.in_force, ordered, previous_spot, now)           # 4
    reject = plan_rejections(spec, tenants or TenantSpend(None), services,                            # 4b
                             () if new_period else carried_rejections(rejected, to_date.period_end, now),
                             to_date.period_start, to_date.period_end, now)
    alerts, records = plan_alerts(spec, policy, to_date, forecast_bound, crossed, enforcement.ahead,  # 5
                                  action_lines(enforcement.actions, spot) + reject_lines(reject),
                                  alert_state, new_period,
                                  closed.spent_usd if closed is not None else None, horizon_s, now,
                                  rejected_before=new_period and bool(rejected))
    forecast = None if to_date.blind else forecast_bound
    state, reason, message = budget_state(                                                           # 6
        to_date, forecast, crossed, enforcement.ahead,
        spec.forecast.alert_at_percent if spec.forecast.enabled else None, horizon_s)

    enforced = enforcement.enforced
    # When the GovernanceBlind alert fired (now, when it fires at this evaluation): its resolve's startsAt.
    blind_since = (alert_state.blind_since if alert_state.blind else now) if to_date.blind else None
    new_state = AlertState(tuple(sorted(records, key=lambda r: (r.forecast, r.percent))), to_date.period_start,
                           state, enforced, to_date.blind, spot, blind_since=blind_since)
    return BudgetPlan(
        state=state, reason=reason, message=message, period_start=to_date.period_start,
        period_end=to_date.period_end, currency=to_date.currency, spent_usd=spent, limit_usd=to_date.limit_usd,
        remaining_usd=MONEY_CONTEXT.subtract(to_date.limit_usd, spent), percent_used=to_date.percent_used,
        burn_rate_usd_per_hour=None if spec.selector.tenants else to_date.burn_rate_usd_per_hour, forecast_usd=forecast,
        forecast_method=FORECAST_METHOD, thresholds_crossed=tuple(t.percent for t in crossed), alerts=alerts,
        actions=enforcement.actions, enforced_services=enforced, alert_state=new_state,
        blind_services=to_date.blind_services, evaluated_at=now,
        thresholds_enforced=tuple(t.percent for t in enforcement.in_force), horizon_s=horizon_s, spot=spot,
        spot_skipped=spot_skipped, rejections=reject.rejections,
        tenant_spent_usd=spent if spec.selector.tenants else None, budgeted=budgeted(spec, services))


__all__ = ["BudgetPlan", "budget_state", "budgeted", "carried_rejections", "front_after_cap", "plan_budget",
           "rates_after_enforcement", "reject_lines", "scoped_spend", "tenant_blind"]
