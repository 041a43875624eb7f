"""What one budget evaluation starts from besides the spec: the selected services as observed now, and what
earlier evaluations decided, read back from ``status`` (the de-duplication and enforcement record).

Why a module: these are the planner's inputs and the part of its output that is persisted; each type reads and
writes its own ``status`` item, and an item that does not parse is reported by its path
(:class:`InvalidBudgetStatus`), never guessed.

**Unknown price or replicas**: a service with no running pod costs 0 whether or not it has a price; one that runs
but whose price (or replica count) cannot be read has ``cost_usd_per_hour`` None (:attr:`ServiceState.known` is
False), and the planner treats the known spend as a lower bound.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from modalscale.api.budgetpolicy import Period, ThresholdAction
from modalscale.costmodel.catalog import Catalog, PricingTier, ReplicaResources, UnknownPrice
from modalscale.costmodel.ledger import PodPool, PodRun, ServiceObservation
from modalscale.costmodel.periods import period_in_progress


class BudgetState(str, enum.Enum):
    """``status.state``."""

    OK = "Ok"
    WARNING = "Warning"
    EXCEEDED = "Exceeded"
    UNKNOWN = "Unknown"


class InvalidBudgetStatus(ValueError):
    """The BudgetPolicy status could not be read back; the message names the field."""



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
    stopped: tuple[PodRun, ...] = ()
    """Its pods no longer listed whose stop was recorded when they went (``ServiceObservation.stopped``)."""
    gateway_pods: tuple[PodRun, ...] = ()
    """Its request-gateway pods (``ServiceObservation.gateway_pods``): charged at their own price, not replicas."""
    gateway_usd_per_pod_hour: Decimal | None = None
    """Price of one gateway pod (its CPU and memory requests, on demand); None when not priced."""
    pools: tuple[PodPool, ...] = ()
    """Its other pods at their own prices (``ServiceObservation.pools``: a staged service's image-encoder pool)."""
    stop_grace_s: int = 0
    """Longest ``terminationGracePeriodSeconds`` of its replicas, running or not (the operator gives each 90 s;
    a pod may have a longer one): how long a replica that a budget action scales away may keep running, and being
    charged, after it is deleted. It must not shrink once the replicas are gone, or the hold would lift."""
    pool_max_replicas: int = 0
    """A staged service's image encoder pool at most (``spec.stages.imageEncoder.maxReplicas``; 0 without stages):
    a replica cap counts both pools (``enforce``: the cap's target is at most ``max_replicas`` + this)."""

    def price_at(self, tier: str) -> Decimal | None:
        """Price of one replica at ``tier`` (None: not priced)."""
        if tier == self.tier:
            return self.usd_per_replica_hour
        return dict(self.tier_prices).get(tier)

    @property
    def capped_replicas(self) -> int | None:
        """The replicas a replica cap counts: ``replicas``, and for a staged service (``pool_max_replicas``) its
        running image encoder pool pods too (its cap bounds both pools); None when ``replicas`` is not known."""
        if self.replicas is None or not self.pool_max_replicas:
            return self.replicas
        return self.replicas + sum(1 for pool in self.pools for pod in pool.pods if pod.stop is None)

    @property
    def known(self) -> bool:
        """True when the service's cost rate is known: priced with known replicas, or no running replica (0)."""
        return self.cost_usd_per_hour is not None

    @property
    def cost_usd_per_hour(self) -> Decimal | None:
        """Replicas x price now (0 with zero replicas) plus its running gateway and encoder-pool pods at theirs;
        None when either is not known."""
        obs = self.observation()
        replicas, side = obs.cost_usd_per_hour, obs.side_usd_per_hour
        return None if replicas is None or side is None else replicas + side

    def observation(self) -> ServiceObservation:
        """The ledger's view of this service."""
        return ServiceObservation(self.namespace, self.name, self.replicas, self.usd_per_replica_hour, self.pods,
                                  self.tier_prices, self.stopped, self.gateway_pods, self.gateway_usd_per_pod_hour,
                                  self.pools)


def service_state(namespace: str, name: str, *, replicas: int | None, max_replicas: int,
                  resources: ReplicaResources, tier: PricingTier | str, catalog: Catalog,
                  priority: int = 100, usage: ReplicaResources | None = None,
                  pods: tuple[PodRun, ...] | None = None,
                  spot_pending_since: datetime | None = None,
                  stopped: tuple[PodRun, ...] = (), gateway_pods: tuple[PodRun, ...] = (),
                  gateway_resources: ReplicaResources | None = None, stop_grace_s: int = 0,
                  image_encoder_pods: tuple[PodRun, ...] = (),
                  image_encoder_resources: ReplicaResources | None = None,
                  image_encoder_max_replicas: int = 0) -> ServiceState:
    """Price one service for the budget; an unknown price becomes ``usd_per_replica_hour=None``, not 0.

    Args:
        resources: Requested resources per replica; ``usage`` (observed, per replica) raises them when larger.
        tier: ``spec.pricing.tier``.
        pods: Its pods, each with the tier its node ran it at (``PodRun.tier``; None = ``tier``).
        spot_pending_since: See :attr:`ServiceState.spot_pending_since`.
        stopped: See :attr:`ServiceState.stopped`; ``stop_grace_s``: see :attr:`ServiceState.stop_grace_s`.
        gateway_pods: Its request-gateway pods; ``gateway_resources``: one gateway pod's CPU and memory requests,
            priced at the catalog's on-demand prices whatever the service's tier (the gateway stays on on-demand
            nodes); None: no gateway price (a running gateway pod is then unpriced).
        image_encoder_pods: A staged service's image-encoder pool pods (``PodRun.tier``: their node's);
            ``image_encoder_resources``: one pool replica's requests, priced at ``tier`` (the pool moves with the
            service's tier) and at every other tier for pods whose node says so; None: no pool (its pods, if
            any ran, are unpriced and reported). ``image_encoder_max_replicas``: the pool's ``maxReplicas``
            (:attr:`ServiceState.pool_max_replicas`).
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
    gateway_price: Decimal | None = None
    if gateway_resources is not None:
        try:
            gateway_price = catalog.price_replica(gateway_resources, PricingTier.ON_DEMAND)
        except UnknownPrice as exc:
            if gateway_pods:  # only a gateway pod that ran needs its price (a disabled gateway has none)
                reason = "; ".join(r for r in (reason, f"gateway pods: {exc}") if r)
    pools: tuple[PodPool, ...] = ()
    if image_encoder_resources is not None or image_encoder_pods:
        pool_prices: dict[str, Decimal | None] = {t.value: None for t in PricingTier}
        for t in PricingTier:
            if image_encoder_resources is not None:
                try:
                    pool_prices[t.value] = catalog.price_replica(image_encoder_resources, t)
                except UnknownPrice:
                    pass
        pool = PodPool("image-encoder", image_encoder_pods, pool_prices[tier.value],
                       tuple(sorted(pool_prices.items())))
        if pool.usd_per_hour is None:
            reason = "; ".join(r for r in (reason, "image-encoder pool pods: no price at the tier they run at") if r)
        pools = (pool,)
    return ServiceState(namespace, name, replicas, max_replicas, price, priority, reason, pods, tier.value,
                        tuple(sorted(prices.items())), spot_pending_since, stopped, gateway_pods, gateway_price,
                        stop_grace_s=stop_grace_s, pools=pools, pool_max_replicas=image_encoder_max_replicas)


@dataclass(frozen=True)
class ThresholdRecord:
    """One item of ``status.thresholds``: de-duplication state of a threshold (or of the forecast)."""

    percent: int
    forecast: bool = False
    crossed: bool = False
    last_alert_time: datetime | None = None
    alerted_period_start: datetime | None = None

@dataclass(frozen=True)
class EnforcedService:
    """One item of ``status.enforcedServices``."""

    namespace: str
    name: str
    action: ThresholdAction
    max_replicas: int
    since: datetime
    dry_run: bool = False
    message: str = ""
    """What the cap holds the service to, the replicas that will run
    (``modalscale.autoscaler.policy.describe_cap``: a staged service under a cap of 1 runs 1 + 1); empty when read
    from a status written before this field (:meth:`describe` then says ``at most max_replicas``)."""

    def describe(self) -> str:
        """:attr:`message`, else ``at most N replica(s)`` (an entry stored without one)."""
        return self.message or f"at most {self.max_replicas} replica(s)"


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
    period_end: datetime | None = None
    """``status.periodEnd`` of the last evaluation (None: not known); see :func:`carried_over`."""
    blind_since: datetime | None = None
    """When the ``GovernanceBlind`` alert fired (``status.blindSince``; a status written before that field says
    only ``Ready``'s ``lastTransitionTime``), the ``startsAt`` of its resolve; None when the status does not say
    (the resolve is then dated when sent)."""

    def record(self, percent: int, forecast: bool = False) -> ThresholdRecord | None:
        return next((r for r in self.records if r.percent == percent and r.forecast == forecast), None)

def carried_over(state: AlertState, period: Period, start: datetime, end: datetime, now: datetime) -> AlertState:
    """``state`` as the record of the current period ``[start, end)`` when the period it describes goes on.

    A ``spec.timeZone`` change moves where periods start and end, not which one is in progress
    (:func:`~modalscale.costmodel.periods.period_in_progress`: the stored period, of the same kind, contains
    ``now``): its thresholds already alerted are not alerted again, its enforcement stays in force, and no recovery is
    sent. The stored period start (and each threshold's ``alerted_period_start`` equal to it) is relabelled to
    ``start``, so this and later evaluations in the new zone read them as this period's. Anything else (the same
    period, a period that is over, a ``spec.period`` change) returns ``state`` unchanged.
    """
    old = state.period_start
    if old is None or (old == start and state.period_end in (None, end)):
        return state
    if not period_in_progress(period, old, state.period_end, now):
        return state
    records = tuple(replace(r, alerted_period_start=start) if r.alerted_period_start == old else r
                    for r in state.records)
    return replace(state, records=records, period_start=start, period_end=end)


__all__ = ["AlertState", "BudgetState", "EnforcedService", "InvalidBudgetStatus", "PolicyRef", "ServiceState",
           "SpotRecord", "SpotState", "ThresholdRecord", "carried_over", "service_state"]
