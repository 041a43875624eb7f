"""Spend ledger: cost rates integrated over time, kept in BudgetPolicy ``status.ledger`` so restarts lose nothing.

Why a module: spend is the integral of (running replicas x price per replica-hour) over time. The operator
observes a service's pods at discrete evaluations. Each pod costs from its own start to its own stop (as
OpenCost charges pods from kube-state-metrics' start/end times), not the count seen at the last evaluation held
for the whole interval. The ledger remembers where integration stopped (``observedTime``) and the replicas (and
rate) in force since then, so an operator that restarts and reloads the ledger from status integrates exactly
the time it has not yet counted: nothing twice, nothing lost.

Rules (all pure; the caller passes ``now``):

* Time is integrated **to the second**: ``now`` is floored to a whole second, so status timestamps are whole
  seconds and a reload is exact.
* ``cost = costUSDPerHour x seconds / 3600`` per interval, quantized to 1e-9 USD half-even
  (``money.LEDGER_QUANTUM_USD``) after every interval, per service.
* An interval that straddles a period boundary is split (:func:`~modalscale.costmodel.periods.split_interval`);
  only the part inside the period containing ``now`` counts toward the current spend. The period the ledger
  was accumulating, when it has just ended, is reported once as :attr:`LedgerAdvance.closed_period`.
* A new period resets every service's ``spent`` to what falls inside the new period. If the policy's period or
  time zone changes, spend already accumulated is carried over only when its window lies inside the new
  period (Daily -> Monthly keeps today's spend; spend earlier in the month was never recorded).
* A rate that was unknown (price or replicas could not be read) integrates to nothing and is reported in
  :attr:`LedgerAdvance.unpriced`; zero replicas always cost zero, even at an unknown price.
* Services that are no longer observed keep their spend for the rest of the period at replicas 0.
* When the evaluation itself lowers a service (budget enforcement), the rate in force from ``now`` is the
  lowered one (:func:`with_rates_in_force`), not the one observed a moment before the action: otherwise the
  ledger charges every enforcing evaluation one interval at the pre-action rate (a hard cap that held would
  read as exceeded). The cap takes effect within the apply latency (seconds); only the evaluation that sets a
  new cap lowers the rate, so a cap that fails to apply is seen, and charged, from the next evaluation on.
* A clock that steps back before ``observedTime`` is treated as standing still until it passes it. An evaluation
  that integrates nothing (standing still, or in the second of ``observedTime``) keeps the replicas in force since
  ``observedTime`` as they were: a smaller listing in their place forgot a replica gone unseen meanwhile.
* **Pods** (:class:`PodRun`, when the observation lists them): the interval ``[t0, t1)`` since ``observedTime``
  costs, per service, ``price x replica-seconds`` where every pod listed at ``t1`` counts its overlap of
  ``[t0, t1)`` with ``[start, stop)`` (``start`` = ``status.startTime``, unknown = before ``t0``; ``stop`` = its
  ``deletionTimestamp`` when terminating, the kubelet's deadline to be gone, else still running), plus, for each of
  the replicas in force since ``t0`` that no listed pod accounts for (a pod gone by ``t1``, whose stop nobody saw),
  the whole interval: an upper bound. Pods gone by ``t1`` whose deletion was recorded
  (``ServiceObservation.stopped``: the operator's pod watch) count as listed, to their own stop, so only a deletion
  nobody saw is charged to ``t1``. The charge is a function of each pod's ``[start, stop)`` and ``observedTime``
  (the watermark): a record passed again after ``observedTime`` passed its stop charges nothing, so replays (a
  rerun, a restart, several evaluations) never charge a pod twice. The replicas in force since ``t0`` are those
  running then, or fewer when budget enforcement applied a cap then (``with_rates_in_force``): a pod removed by an
  enforced cap stops costing when it is gone, and one that is still listed at ``t1`` (the cap did not take effect)
  is charged by its own timestamps anyway. Without a pod list (``pods=None``) the replicas in force are charged for
  the whole interval, as before.
* **Pods bound after the instant** (issue 21, scenario 3): an evaluation reads its clock, then lists the pods, so a
  pod bound during the listing is counted among its replicas though its binding (a whole second) is after
  ``now``. The ledger names such pods (``LedgerEntry.late``, ``status.ledger.services[].lateBoundPods``): at the
  next evaluation each one listed (or recorded gone) is charged by its own run and accounts for the replica it was
  counted as, and one gone unseen is charged as that replica for the whole interval (an upper bound). Without the
  names the replica was charged again as one gone unseen beside the pod's own run (ci58: 3 pod-seconds over an
  independent meter). Reading the clock after the listing instead loses the run of a pod bound between the two.
  Whole-second stamps cannot tell a pod bound in ``now``'s second before the listing from one bound after it, so
  those counted are named too, and one of that second not named accounts for no replica.
  The mirror case: a pod listed but not counted among the replicas (terminating, finished, recorded gone, or on a
  silent node) whose stop is not before ``now`` would look in force at ``now`` to the next evaluation and account
  for a replica gone unseen; such pods are named too (``LedgerEntry.uncounted``, ``uncountedPods``) and account
  for none.
* **Services new to the ledger** (a policy's first evaluation, a policy deleted and created again, a service
  created or selected since the last evaluation) are charged for what their listed pods ran since
  ``max(window start, status.startTime)``: the window starts at the period start on the first evaluation, else at
  ``observedTime``. A pod whose start is unknown is charged from this evaluation on; pods that ended and are no
  longer listed before the policy existed cannot be known unless their deletion is passed in
  ``ServiceObservation.stopped`` (the spend is otherwise a lower bound).
* **Silent nodes** (issue 21, scenario 2): a pod whose node stopped reporting (``PodRun.unheard_since``: the
  node's ``Ready`` is ``Unknown``, set by the node lifecycle controller when the kubelet stops renewing its Lease;
  the instant it was last heard) is charged to that instant, not to its own stop (a pod of a dead kubelet stays
  Running, or Terminating, in the API server until it is removed), and no longer counts in the replicas in force.
  The node is marked only after the controller-manager's grace period, so the evaluation that first sees the pod
  silent takes back what earlier evaluations charged it past that instant, by its own run (inside the current
  period only, and never below 0 for the service: the take-back, rounded once, can exceed the per-interval charges
  by a few 1e-9): a lost pod costs what it ran, not what ran until someone noticed. The ledger remembers each such
  pod with the instant up to which it charged it (``LedgerEntry.unheard``, ``status.ledger.services[].unheardPods``):
  a pod whose node is then deleted (``PodRun.node_gone``) stays charged to it, and a pod whose node reports again
  (its ``Ready`` True or False) is charged the gap from that instant to ``observedTime`` too, by its own run (the
  silence was a missed status, never less than what ran). The gap is added to the first interval of the current
  period, up to what falls inside the period. A pod on a gone node the ledger never saw silent is charged by its
  own stop (its deletion: all that is known).
* **Tiers**: a pod whose ``PodRun.tier`` is set (the capacity type of the node it ran on, e.g. Spot after a
  ``SwitchToSpot``) is charged at that tier's price (``ServiceObservation.tier_prices``); the others at the
  service's price. A pod at a tier with no price is charged nothing and the interval is reported unpriced (the
  spend is then a lower bound).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from modalscale.api.budgetpolicy import Period
from modalscale.costmodel.money import (
    MONEY_CONTEXT,
    quantize_ledger_usd,
)
from modalscale.costmodel.periods import period_bounds, period_in_progress, segment_microseconds, split_interval

MICROSECONDS_PER_HOUR = Decimal(3_600_000_000)
MAX_LEDGER_SERVICES = 500
"""``status.ledger.services`` maxItems in the CRD."""
MAX_UNHEARD_PODS = 100
"""``status.ledger.services[].unheardPods`` maxItems in the CRD: the first 100 by name are remembered (a pod beyond
them whose node reports again is not charged its gap; one whose node is deleted is charged by its own stop)."""
MAX_NAMED_PODS = 100
"""``status.ledger.services[].lateBoundPods`` and ``uncountedPods`` maxItems in the CRD: the first 100 by name are
remembered (a late pod beyond them is charged at the next evaluation as a replica gone unseen besides its own run:
over; an uncounted one beyond them may stand in for a replica gone unseen, as before it was named)."""


class LedgerFormatError(ValueError):
    """``status.ledger`` could not be read back (message names the field path)."""


def format_time(when: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix, e.g. ``2026-03-29T22:00:00Z`` (microseconds only when non-zero)."""
    text = when.astimezone(timezone.utc).replace(tzinfo=None).isoformat()
    return text + "Z"


def parse_time(value: object, field_path: str) -> datetime:
    """Parse an RFC 3339 timestamp from status; raises :class:`LedgerFormatError` naming ``field_path``."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip().replace("z", "Z"))
        except ValueError:
            raise LedgerFormatError(f"{field_path}: {value!r} is not an RFC 3339 date-time") from None
    else:
        raise LedgerFormatError(f"{field_path}: expected an RFC 3339 date-time string, got {type(value).__name__}")
    if when.tzinfo is None:
        raise LedgerFormatError(f"{field_path}: {value!r} has no time zone offset")
    try:
        return when.astimezone(timezone.utc)
    except OverflowError:  # an offset that moves it before year 1 or past 9999
        raise LedgerFormatError(f"{field_path}: {value!r} is outside the years 1-9999 in UTC") from None


def floor_to_second(when: datetime) -> datetime:
    """Drop sub-second precision (the ledger integrates to the second)."""
    return when.replace(microsecond=0)


@dataclass(frozen=True)
class PodRun:
    """One pod of a service as observed: when it started and when it stops costing.

    Attributes:
        name: Pod name.
        start: ``status.startTime`` (UTC); None when unknown: counted as running since before any interval.
        stop: ``metadata.deletionTimestamp`` (UTC) when terminating (the kubelet's deadline to be gone), the
            time its containers finished when Succeeded/Failed; None while it runs.
    """

    name: str
    start: datetime | None
    stop: datetime | None = None
    tier: str | None = None
    """Pricing tier its node ran it at (``"Spot"``/``"OnDemand"``, from the node's capacity-type label); None =
    the service's own tier (``spec.pricing.tier``)."""
    unheard_since: datetime | None = None
    """Its node stopped reporting (``Ready`` Unknown): the node's last heartbeat (UTC), which the ledger charges the
    pod to; None while the node reports (or nothing is known of it)."""
    node_gone: bool = False
    """Its node object is gone: charged to where the ledger stopped charging it when the node was silent
    (``LedgerEntry.unheard``), else by its own stop."""
    bound: datetime | None = None
    """When it was bound to its node (``PodScheduled`` True, else ``metadata.creationTimestamp``; UTC): from then
    on an evaluation counts it among the replicas, though its kubelet may write ``start`` later. None: ``start``."""

    @property
    def first(self) -> datetime | None:
        """The earlier of :attr:`start` and :attr:`bound` (None when neither is known)."""
        return min((t for t in (self.start, self.bound) if t is not None), default=None)

    @property
    def cut(self) -> bool:
        """True when the ledger charges the pod to a silent node's heartbeat rather than to its own stop."""
        return self.unheard_since is not None or self.node_gone

    def in_force_at(self, when: datetime) -> bool:
        """True when the pod had started or been bound (:attr:`bound`) by ``when`` and its stop, if any, is not
        before ``when``: the pods an evaluation at ``when`` counted. Kubernetes stamps whole seconds and
        ``observedTime`` is floored to whole seconds, so a pod deleted within the second of the evaluation that
        listed it running carries a stop equal to ``when`` (a ``deletionTimestamp`` with grace 0); it was one of
        that evaluation's replicas, not one gone before it. A pod that evaluation listed bound whose kubelet wrote
        ``startTime`` after it was one of its replicas too: taken for a new pod, the replica it was counted as was
        charged a second time, as one gone unseen (issue 21: 18 s for a pod that ran 7)."""
        first = self.first
        return (first is None or first <= when) and (self.stop is None or self.stop >= when)

    def microseconds_in(self, start: datetime, end: datetime) -> int:
        """Microseconds of ``[start, end)`` during which the pod ran."""
        a = start if self.start is None else max(start, self.start)
        b = end if self.stop is None else min(end, self.stop)
        return segment_microseconds(a, b) if b > a else 0


@dataclass(frozen=True)
class PodPool:
    """Pods of a service that are not its replicas, charged by their own start and stop at their own price: a
    staged service's image-encoder pool (``modalscale.io/image-encoder=<name>``). Never in the service's
    ``replicas``, replica-seconds or price of a replica.

    Attributes:
        name: What the pods are (``image-encoder``), for reports.
        pods: Its pods now and those recorded gone, with their own timestamps (``PodRun.tier``: the tier their
            node ran them at; None = ``usd_per_pod_hour``).
        usd_per_pod_hour: Price of one pod at the service's tier; None when unknown.
        tier_prices: ``(tier, USD per pod-hour or None)`` for pods whose ``tier`` is set.
    """

    name: str
    pods: tuple[PodRun, ...] = ()
    usd_per_pod_hour: Decimal | None = None
    tier_prices: tuple[tuple[str, Decimal | None], ...] = ()

    def pod_price(self, pod: PodRun) -> Decimal | None:
        """USD per hour of one pod: at its node's tier when known, else ``usd_per_pod_hour`` (None: unknown)."""
        return self.usd_per_pod_hour if pod.tier is None else dict(self.tier_prices).get(pod.tier)

    @property
    def usd_per_hour(self) -> Decimal | None:
        """Rate of its running pods, 1e-9 USD (0 without one; None when one runs unpriced)."""
        prices = [self.pod_price(p) for p in self.pods if p.stop is None]
        if any(p is None for p in prices):
            return None
        return quantize_ledger_usd(sum((p for p in prices if p is not None), Decimal(0)))

    def cost_usd(self, start: datetime, end: datetime) -> Decimal | None:
        """What its pods ran in ``[start, end)`` at their prices (``price x pod-microseconds / 3.6e9`` summed per
        price, then quantized to 1e-9 USD); None when a pod that ran in it is unpriced."""
        by_price: dict[Decimal, int] = {}
        for pod in self.pods:
            us = pod.microseconds_in(start, end)
            if us == 0:
                continue
            price = self.pod_price(pod)
            if price is None:
                return None
            by_price[price] = by_price.get(price, 0) + us
        total = sum((MONEY_CONTEXT.multiply(price, Decimal(us)) for price, us in by_price.items()), Decimal(0))
        return quantize_ledger_usd(MONEY_CONTEXT.divide(total, MICROSECONDS_PER_HOUR))


@dataclass(frozen=True)
class ServiceObservation:
    """What one evaluation saw of one selected service.

    Attributes:
        namespace: Namespace of the InferenceService.
        name: Name of the InferenceService.
        replicas: Running replicas now; None when they could not be read.
        usd_per_replica_hour: Price of one replica (``Catalog.price_replica``); None when unknown
            (``UnknownPrice``).
        pods: The service's pods now (running, terminating or finished) with their own timestamps; None when
            not known (the replicas in force are then charged for the whole interval).
        tier_prices: ``(tier, USD per replica-hour or None)`` for pods whose ``tier`` is set (the tier their node
            ran them at); a pod at a tier missing here is not priced.
        stopped: Pods no longer listed whose stop was recorded when they went (the operator's pod watch records
            each deletion: ``modalscale.operator.budget.podstops``), each with ``stop`` set. Charged like listed
            pods (:func:`advance` merges them by name; a listed pod keeps its own record unless this one says
            it stopped earlier; a pod listed running whose record stopped by ``now`` is not counted in
            ``replicas``). Records whose stop the ledger has already passed charge nothing, so the same records
            may be passed again at every evaluation. Ignored when ``pods`` is None.
        gateway_pods: The service's request-gateway pods now (``modalscale.io/gateway=<name>``), charged by their
            own start and stop at ``gateway_usd_per_pod_hour`` on top of the replicas: not replicas (never in
            ``replicas``, replica-seconds or the price of a replica), a second price of the service.
        gateway_usd_per_pod_hour: Price of one gateway pod (its CPU and memory requests at the catalog's
            on-demand prices); None when unknown (a gateway pod that ran is then unpriced, reported).
        pools: Its other pods charged at their own prices (:class:`PodPool`: a staged service's image-encoder
            pool), on top of the replicas and the gateway.
    """

    namespace: str
    name: str
    replicas: int | None
    usd_per_replica_hour: Decimal | None
    pods: tuple[PodRun, ...] | None = None
    tier_prices: tuple[tuple[str, Decimal | None], ...] = ()
    stopped: tuple[PodRun, ...] = ()
    gateway_pods: tuple[PodRun, ...] = ()
    gateway_usd_per_pod_hour: Decimal | None = None
    pools: tuple[PodPool, ...] = ()

    @property
    def side_pools(self) -> tuple[PodPool, ...]:
        """Every group of its pods that are not replicas: the gateway's (each at the on-demand
        :attr:`gateway_usd_per_pod_hour`, whatever its node) and :attr:`pools`."""
        gateway = tuple(replace(p, tier=None) for p in self.gateway_pods)
        return (PodPool("gateway", gateway, self.gateway_usd_per_pod_hour), *self.pools)

    @property
    def gateway_usd_per_hour(self) -> Decimal | None:
        """Rate of the running gateway pods: their count x :attr:`gateway_usd_per_pod_hour` (0 without one; None
        when some run and the price is unknown)."""
        return self.side_pools[0].usd_per_hour

    @property
    def side_usd_per_hour(self) -> Decimal | None:
        """Rate of every running pod that is not a replica (:attr:`side_pools`); None when one runs unpriced."""
        rates = [p.usd_per_hour for p in self.side_pools]
        return None if any(r is None for r in rates) else sum((r for r in rates if r is not None), Decimal(0))

    def side_cost_usd(self, start: datetime, end: datetime) -> Decimal | None:
        """What the pods that are not replicas ran in ``[start, end)``, 1e-9 USD; None when one ran unpriced."""
        costs = [p.cost_usd(start, end) for p in self.side_pools]
        return None if any(c is None for c in costs) else sum((c for c in costs if c is not None), Decimal(0))

    def charged_pods(self) -> tuple[PodRun, ...] | None:
        """``pods`` and ``stopped`` merged by name (None when ``pods`` is None), sorted by name.

        A pod both listed and recorded takes the earlier stop (the record of its deletion is later news than a
        listing that still showed it running or terminating with its deadline).

        Raises:
            ValueError: A record of ``stopped`` without a stop (names the service and the pod).
        """
        if self.pods is None:
            return None
        merged = {p.name: p for p in self.pods}
        for r in self.stopped:
            if r.stop is None:
                raise ValueError(f"service {self.namespace}/{self.name}: stopped pod {r.name} has no stop time")
            listed = merged.get(r.name)
            if listed is None:
                merged[r.name] = r
            elif listed.stop is None or r.stop < listed.stop:
                merged[r.name] = replace(listed, stop=r.stop)
        return tuple(sorted(merged.values(), key=lambda p: p.name))

    def pod_price(self, pod: PodRun) -> Decimal | None:
        """USD per hour of one pod: at its node's tier when known, else the service's price (None: unknown)."""
        if pod.tier is None:
            return self.usd_per_replica_hour
        return dict(self.tier_prices).get(pod.tier)

    @property
    def cost_usd_per_hour(self) -> Decimal | None:
        """Rate of the whole service: replicas x price, each running pod at its node's tier when the pods say;
        0 with zero replicas even if the price is unknown."""
        if self.replicas == 0:
            return Decimal(0)
        if self.replicas is None:
            return None
        running = [p for p in self.pods or () if p.stop is None]
        if any(p.tier is not None for p in running) and len(running) == self.replicas:
            prices = [self.pod_price(p) for p in running]
            if any(p is None for p in prices):
                return None
            return quantize_ledger_usd(sum((p for p in prices if p is not None), Decimal(0)))
        if self.usd_per_replica_hour is None:
            return None
        return quantize_ledger_usd(MONEY_CONTEXT.multiply(Decimal(self.replicas), self.usd_per_replica_hour))


@dataclass(frozen=True)
class LedgerEntry:
    """One service in ``status.ledger.services``.

    Attributes:
        replicas: Replicas in force since ``observedTime``: observed then, or lowered by the enforcement applied
            then (None = unknown).
        cost_usd_per_hour: Service rate in force since ``observedTime`` (None = unknown).
        spent_usd: Spend of this service in the ledger's period up to ``observedTime``.
        unheard: ``(pod name, UTC instant)`` of each pod charged to a silent node's heartbeat, with the instant up
            to which it is charged (a gap to charge if its node reports it again), sorted by name.
        late: Names of the pods counted in ``replicas`` whose start and binding are both in ``observedTime``'s
            second or after it (bound while the evaluation listed the pods, after it read its clock), sorted: the
            next evaluation charges them by their own run and lets them account for the replicas they were counted
            as (else each was charged again, as a replica gone unseen), and a pod first seen in that second that is
            not named was not counted then and accounts for none.
        uncounted: Names of the pods listed at ``observedTime`` but not counted in ``replicas`` (terminating,
            finished or recorded gone, or charged to a silent node) that could still look in force then (a stop
            not before it, or a silent node's cut), sorted: the next evaluation does not let them account for
            a replica (else a replica gone unseen beside a terminating pod was charged nothing).
    """

    namespace: str
    name: str
    replicas: int | None
    cost_usd_per_hour: Decimal | None
    spent_usd: Decimal
    unheard: tuple[tuple[str, datetime], ...] = ()
    late: tuple[str, ...] = ()
    uncounted: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Ledger:
    """Where integration stopped. Empty (``Ledger()``) before the first evaluation.

    Attributes:
        observed_time: UTC instant up to which spend is counted; None = nothing counted yet.
        period_start: Start of the period that ``spent_usd`` values belong to (``status.periodStart``).
        entries: One entry per service, sorted by (namespace, name).
        period_end: End of that period as stored (``status.periodEnd``; None when not known): a period still in
            progress at the next evaluation goes on when ``spec.timeZone`` changed (:func:`advance`).
    """

    observed_time: datetime | None = None
    period_start: datetime | None = None
    entries: tuple[LedgerEntry, ...] = ()
    period_end: datetime | None = None

    @property
    def spent_usd(self) -> Decimal:
        """Total spend of the period up to ``observed_time``."""
        return sum((e.spent_usd for e in self.entries), Decimal(0))

@dataclass(frozen=True)
class CostSegment:
    """Spend of one service over one interval inside one period (the unit of a FOCUS cost row).

    Attributes:
        start, end: UTC ``[start, end)``.
        replicas: Replicas in force (None = unknown).
        cost_usd_per_hour: Rate in force (None = unknown, then ``cost_usd`` is 0 and the segment is unpriced).
        cost_usd: Rate x hours (or price x the pods' replica-seconds), quantized to 1e-9 USD.
        period_start: Start of the budget period the segment lies in.
        counted: True when the segment belongs to the current period's spend.
        replica_microseconds: What the pods ran in the segment, when charged by pods (None: replicas x length).
    """

    namespace: str
    name: str
    start: datetime
    end: datetime
    replicas: int | None
    cost_usd_per_hour: Decimal | None
    cost_usd: Decimal
    period_start: datetime
    counted: bool
    replica_microseconds: int | None = None

    @property
    def replica_hours(self) -> Decimal | None:
        """Replica-hours run in this segment (None when replicas are unknown)."""
        if self.replica_microseconds is not None:
            return MONEY_CONTEXT.divide(Decimal(self.replica_microseconds), MICROSECONDS_PER_HOUR)
        if self.replicas is None:
            return None
        return MONEY_CONTEXT.divide(MONEY_CONTEXT.multiply(Decimal(self.replicas),
                                                           Decimal(segment_microseconds(self.start, self.end))),
                                    MICROSECONDS_PER_HOUR)


@dataclass(frozen=True)
class ClosedPeriod:
    """The period the ledger was accumulating, reported once when it has ended."""

    period_start: datetime
    period_end: datetime
    spent_usd: Decimal
    spent_by_service: tuple[tuple[tuple[str, str], Decimal], ...] = ()
    """Its final spend per (namespace, name), USD, sorted; they sum to :attr:`spent_usd`."""


@dataclass(frozen=True)
class UnpricedInterval:
    """A service whose rate was unknown for ``seconds`` s since the last observation (spend undercounted)."""

    namespace: str
    name: str
    seconds: int


@dataclass(frozen=True)
class LedgerAdvance:
    """Result of :func:`advance`.

    Attributes:
        ledger: The new ledger to persist (``modalscale.costmodel.budget.status`` writes it).
        spent_usd: Spend in the current period up to ``now``.
        period_start, period_end: Current period (UTC, half-open).
        segments: Every interval integrated by this call, in the current period or not.
        closed_period: The period that just ended, with its final spend; None otherwise.
        unpriced: Services whose rate was unknown over the integrated interval.
        new_period: True when this call started a new period (spend was reset).
    """

    ledger: Ledger
    spent_usd: Decimal
    period_start: datetime
    period_end: datetime
    segments: tuple[CostSegment, ...] = ()
    closed_period: ClosedPeriod | None = None
    unpriced: tuple[UnpricedInterval, ...] = ()
    new_period: bool = False


def _interval_cost(rate_usd_per_hour: Decimal, start: datetime, end: datetime) -> Decimal:
    micro = Decimal(segment_microseconds(start, end))
    return quantize_ledger_usd(MONEY_CONTEXT.divide(MONEY_CONTEXT.multiply(rate_usd_per_hour, micro),
                                                    MICROSECONDS_PER_HOUR))


def advance(ledger: Ledger, observations: Sequence[ServiceObservation] | Iterable[ServiceObservation],
            now: datetime, period: Period | str, tz: str = "UTC", *, listed_at: datetime | None = None
            ) -> LedgerAdvance:
    """Integrate the rates in force since ``ledger.observed_time`` up to ``now`` and start the new rates.

    A pipeline of named steps: check the observations, place ``now`` in its period, list what to integrate, charge
    each service's interval (split at period boundaries), add up the spend of this period and of the one that
    closed, and build the next ledger.

    Args:
        ledger: The ledger read back from status (``Ledger()`` the first time).
        observations: The selected services as seen now; each (namespace, name) at most once.
        now: Timezone-aware instant of this evaluation (floored to the second).
        period: ``spec.period`` (Daily, Weekly, Monthly).
        tz: ``spec.timeZone`` (IANA name).
        listed_at: When the pods were listed (after ``now``: the clock is read first); a replica gone unseen
            (in force since ``observedTime``, not listed) was gone by then, not by ``now``, and is charged to the
            listing's whole second (within the period). None: ``now``.
    Returns:
        :class:`LedgerAdvance` with the new ledger and the spend in the period containing ``now``.
    Raises:
        ValueError: Naive ``now``, a duplicate service, or negative replicas/prices.
        InvalidTimeZone: Unknown ``tz``.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be timezone-aware (UTC), got naive {now.isoformat()}")
    observations = list(observations)
    obs = _checked_observations(observations, now, {e.key: dict(e.unheard) for e in ledger.entries})
    ledger, window = _window(ledger, now, period, tz)
    by_key = {(o.namespace, o.name): o for o in obs}
    segments: list[CostSegment] = []
    unpriced: list[UnpricedInterval] = []
    current_spent: dict[tuple[str, str], Decimal] = {}
    unheard: dict[tuple[str, str], tuple[tuple[str, datetime], ...]] = {}
    closing: dict[tuple[str, str], Decimal] = {}  # per service, the period that closes (a new period only)
    raw = {(o.namespace, o.name): o for o in observations}
    for entry, t0, pods in _integration_work(ledger, obs, by_key, window):
        credit = _credit_microseconds(entry, t0, pods, raw.get(entry.key), window.since)
        charged, missing = _charge(entry, t0, pods, by_key.get(entry.key), window, period, tz, credit,
                                   _listing_second(listed_at, window))
        unheard[entry.key] = _unheard_after(entry, t0, pods, window.now)
        segments += charged
        if missing is not None:
            unpriced.append(missing)
        spent = entry.spent_usd if window.carry else Decimal(0)
        if not window.carry:
            closing[entry.key] = closing.get(entry.key, Decimal(0)) + entry.spent_usd
        for seg in charged:
            if seg.counted:
                spent += seg.cost_usd
            elif not window.carry and seg.period_start == ledger.period_start:
                closing[entry.key] = closing.get(entry.key, Decimal(0)) + seg.cost_usd
        # A take-back (a silent node's pod) is rounded once, its charges once per interval: it can exceed them by a
        # few 1e-9. A service costs 0 or more.
        current_spent[entry.key] = max(spent, Decimal(0))
    closed = _closed_period(ledger, window, period, tz, closing)
    late = {(o.namespace, o.name): _late_bound(o, window.now) for o in obs}
    uncounted = {(o.namespace, o.name): _uncounted(o, window.now) for o in obs}
    entries = _next_entries(ledger, obs, current_spent, unheard, late, uncounted)
    if ledger.observed_time is not None and window.now <= ledger.observed_time:
        entries = _kept_in_force(ledger, entries)
    new_ledger = Ledger(window.now, window.period_start, entries, window.period_end)
    return LedgerAdvance(new_ledger, new_ledger.spent_usd, window.period_start, window.period_end, tuple(segments),
                         closed, tuple(unpriced), window.new_period)


@dataclass(frozen=True)
class _Window:
    """Where one :func:`advance` integrates to (``now``, floored, never before ``observedTime``) and its period."""

    now: datetime
    period_start: datetime
    period_end: datetime
    carry: bool
    """The ledger's spend so far counts in the current period (same period, or one that lies inside it, or the
    stored period still in progress after a ``spec.timeZone`` change: ``periods.period_in_progress``)."""
    new_period: bool
    """The ledger was accumulating an earlier period: its spend is reset (and reported closed)."""
    since: datetime
    """From when spend counts in the current period: its start, or the stored period's start when that period goes
    on under a new zone and started earlier (a charge of ``[t0, now)`` before the new zone's start still counts)."""


_Work = tuple[LedgerEntry, datetime | None, tuple[PodRun, ...] | None]
"""One service to integrate: its entry (rates in force), the start of its window (None: nothing to integrate) and
the pods to charge by their own timestamps (None: the replicas in force for the whole window)."""


def _checked_observations(observations: Iterable[ServiceObservation], now: datetime,
                          unheard: Mapping[tuple[str, str], Mapping[str, datetime]]) -> list[ServiceObservation]:
    """``observations`` with recorded stops merged (``ServiceObservation.stopped``: charged like listed pods) and
    the pods of silent or gone nodes charged to their heartbeat (``unheard``: the stored ledger's records, per
    service).

    Raises:
        ValueError: A service observed twice, or negative replicas or price.
    """
    obs = [_with_recorded_stops(o, now, unheard.get((o.namespace, o.name), {}))
           if o.stopped or any(p.cut for p in o.pods or ()) else o for o in observations]
    seen: set[tuple[str, str]] = set()
    for o in obs:
        if (o.namespace, o.name) in seen:
            raise ValueError(f"service {o.namespace}/{o.name} observed twice")
        seen.add((o.namespace, o.name))
        if ((o.replicas is not None and o.replicas < 0)
                or (o.usd_per_replica_hour is not None and o.usd_per_replica_hour < 0)):
            raise ValueError(f"service {o.namespace}/{o.name}: replicas and price must be non-negative")
    return obs


def _window(ledger: Ledger, now: datetime, period: Period | str, tz: str) -> tuple[Ledger, _Window]:
    """``now`` floored to the second (a clock that stepped back stands still) and placed in its period.

    Returns:
        The ledger (with ``period_start`` filled in from ``observed_time`` when status lacked it) and the window.
    """
    now = floor_to_second(now.astimezone(timezone.utc))
    if ledger.observed_time is not None and now < ledger.observed_time:
        now = ledger.observed_time  # clock stepped back: stand still
    p_start, p_end = period_bounds(period, tz, now)
    if ledger.period_start is None and ledger.observed_time is not None:
        # status.periodStart missing: the spend belongs to the period containing observedTime (invariant).
        ledger = replace(ledger, period_start=period_bounds(period, tz, ledger.observed_time)[0])
    carry = ledger.period_start is not None and (
        ledger.period_start >= p_start or period_in_progress(period, ledger.period_start, ledger.period_end, now))
    new_period = ledger.period_start is not None and not carry
    since = min(p_start, ledger.period_start) if carry and ledger.period_start is not None else p_start
    return ledger, _Window(now, p_start, p_end, carry, new_period, since)


def _integration_work(ledger: Ledger, obs: Sequence[ServiceObservation],
                      by_key: Mapping[tuple[str, str], ServiceObservation], window: _Window) -> list[_Work]:
    """What to integrate: every service in the ledger since ``observedTime``, and every service new to it (the
    policy's first evaluation, or a service that appeared since) from its pods' own start times
    (:func:`_new_service_work`)."""
    work: list[_Work] = []
    for entry in ledger.entries:
        now_seen = by_key.get(entry.key)
        work.append((entry, ledger.observed_time,
                     now_seen.pods if now_seen is not None and entry.replicas is not None else None))
    return work + _new_service_work(ledger, obs, window.now, window.since)


_PodRate = Callable[[PodRun], Decimal | None]


def _pod_prices(entry: LedgerEntry, pods: tuple[PodRun, ...], now_seen: ServiceObservation | None, t0: datetime
                ) -> tuple[Decimal | None, int, _PodRate]:
    """Per pod (see the module docstring): the price of a replica in force that no listed pod accounts for, the
    number of such replicas (charged for the whole interval), and each listed pod's price (that of the tier its
    node ran it at, :attr:`PodRun.tier`; the others at the service's).

    A replica gone unseen is charged the entry's average price, or what the rate in force leaves once the pods that
    account for replicas are priced, when that is more (but never above the dearest price a replica has): with
    mixed tiers, an on-demand replica gone unseen beside a Spot one costs its own price, not the average (never
    less than the average, as before)."""
    # A pod charged to a silent node's heartbeat is accounted for, not a deletion nobody saw; so is one counted at
    # t0 though bound in its second or after it (``entry.late``), charged by its own run. One first seen in t0's
    # second that it did not name may have come after that evaluation's listing, and one listed at t0 but not
    # counted then (``entry.uncounted``: terminating, say) accounts for none.
    late, uncounted = set(entry.late), set(entry.uncounted)
    accounted = [p for p in pods if p.name not in uncounted and (p.name in late or (
        p.in_force_at(t0) and not _first_in(p, t0)) or (p.cut and _first_before(p, t0)))]
    gone = max(0, (entry.replicas or 0) - len(accounted))
    price: Decimal | None = None
    if entry.replicas and entry.cost_usd_per_hour is not None:
        price = MONEY_CONTEXT.divide(entry.cost_usd_per_hour, Decimal(entry.replicas))
    elif now_seen is not None:
        price = now_seen.usd_per_replica_hour
    assert now_seen is not None
    seen_obs = now_seen

    # Mixed tiers: the entry's price is an average, so a pod at the service's own tier takes that price.
    own = seen_obs.usd_per_replica_hour if any(p.tier is not None for p in pods) else price

    def pod_rate(p: PodRun, base: Decimal | None = own) -> Decimal | None:
        return base if p.tier is None else seen_obs.pod_price(p)

    rates = [pod_rate(p) for p in accounted]
    if gone and price is not None and entry.cost_usd_per_hour is not None and all(r is not None for r in rates):
        left = MONEY_CONTEXT.divide(entry.cost_usd_per_hour - sum((r for r in rates if r is not None), Decimal(0)),
                                    Decimal(gone))
        # Never above the dearest price a replica has, when every price is known (a cap's rate knows no tiers: 2 x
        # on-demand for Spot pods); with one unknown, no bound (the known ones may all be cheaper).
        prices = [seen_obs.usd_per_replica_hour, *(v for _, v in seen_obs.tier_prices)]
        if all(v is not None for v in prices):
            left = min(left, max(v for v in prices if v is not None))
        price = max(price, left)
    return price, gone, pod_rate


def _first_before(p: PodRun, when: datetime) -> bool:
    """True when the pod's start or binding, whichever is first, is before ``when`` (or neither is known)."""
    return p.first is None or p.first < when


def _first_in(p: PodRun, second: datetime) -> bool:
    """True when the pod's start or binding, whichever is first, falls in ``[second, second + 1 s)``."""
    return p.first is not None and second <= p.first < second + timedelta(seconds=1)


def _listing_second(listed_at: datetime | None, window: _Window) -> datetime:
    """The whole second of the listing, never before ``window.now`` nor past the period's end."""
    if listed_at is None:
        return window.now
    return max(window.now, min(floor_to_second(listed_at.astimezone(timezone.utc)), window.period_end))


def _charge(entry: LedgerEntry, t0: datetime | None, pods: tuple[PodRun, ...] | None,
            now_seen: ServiceObservation | None, window: _Window, period: Period | str, tz: str,
            credit: Mapping[str, int], listed: datetime | None = None
            ) -> tuple[list[CostSegment], UnpricedInterval | None]:
    """One service's spend over ``[t0, now)``, one :class:`CostSegment` per period it touches, and the interval
    when its rate was unknown (None when known, or when there is nothing to integrate). ``credit``: pod name ->
    microseconds charged before ``t0`` past its silent node's last-heard time (:func:`_credit_microseconds`), taken
    back in the first segment of the current period. ``listed``: the listing's whole second; the replicas gone
    unseen are charged to it, the part after ``now`` in the last segment."""
    now = window.now
    if t0 is None or now <= t0:
        return [], None
    rate = entry.cost_usd_per_hour if entry.replicas != 0 else Decimal(0)
    price: Decimal | None = None
    gone = 0
    pod_rate: _PodRate | None = None
    back: dict[str, int] = {}
    if pods is not None:
        price, gone, pod_rate = _pod_prices(entry, pods, now_seen, t0)
        gap = _gap_microseconds(entry, t0, pods, window.since)
        back = {k: gap.get(k, 0) - credit.get(k, 0) for k in {*gap, *credit}}
        unknown_ran = (price is None and gone > 0) or any(
            pod_rate(p) is None and (p.microseconds_in(t0, now) > 0 or back.get(p.name)) for p in pods)
        rate = None if unknown_ran else (price or Decimal(0))
    side_unpriced = now_seen is not None and now_seen.side_cost_usd(t0, now) is None
    missing = (UnpricedInterval(entry.namespace, entry.name, int((now - t0).total_seconds()))
               if rate is None or side_unpriced else None)
    segments = []
    for seg in split_interval(t0, now, period, tz):
        replica_us: int | None = None
        if pods is not None and pod_rate is not None:
            first = seg.start >= window.since and seg.start == max(t0, window.since)
            gone_until = listed if listed is not None and seg.end == now and listed > now else seg.end
            replica_us, cost = _pods_cost(pods, pod_rate, price, gone, seg.start, seg.end, back if first else {},
                                          gone_until)
        else:
            cost = _interval_cost(rate, seg.start, seg.end) if rate is not None else Decimal(0)
        if now_seen is not None:  # its gateway and encoder-pool pods, at their own prices (not replicas)
            cost += sum((c for p in now_seen.side_pools if (c := p.cost_usd(seg.start, seg.end)) is not None),
                        Decimal(0))
        segments.append(CostSegment(entry.namespace, entry.name, seg.start, seg.end, entry.replicas,
                                    entry.cost_usd_per_hour if pods is not None else rate, cost,
                                    seg.period_start, seg.start >= window.since, replica_us))
    return segments, missing


def _pods_cost(pods: tuple[PodRun, ...], pod_rate: _PodRate, price: Decimal | None, gone: int, start: datetime,
               end: datetime, back: Mapping[str, int], gone_until: datetime | None = None) -> tuple[int, Decimal]:
    """Replica-microseconds and cost of ``[start, end)``: each listed pod by its own timestamps at its price, plus
    ``gone`` replicas for the whole segment at ``price`` (to ``gone_until`` when later: the listing's second),
    plus ``back`` (pod name -> microseconds of a silent node's gap, :func:`_gap_microseconds`). Known pods are
    charged even when another's price is unknown (a lower bound, reported)."""
    gone_us = segment_microseconds(start, max(end, gone_until or end))
    ran = {p.name: p.microseconds_in(start, end) + back.get(p.name, 0) for p in pods}
    replica_us = gone * gone_us + sum(ran.values())
    usd_us = MONEY_CONTEXT.multiply(price or Decimal(0), Decimal(gone * gone_us))
    for p in pods:
        p_rate = pod_rate(p)
        if p_rate is not None:
            usd_us = MONEY_CONTEXT.add(usd_us, MONEY_CONTEXT.multiply(p_rate, Decimal(ran[p.name])))
    return replica_us, quantize_ledger_usd(MONEY_CONTEXT.divide(usd_us, MICROSECONDS_PER_HOUR))


def _gap_microseconds(entry: LedgerEntry, t0: datetime | None, pods: tuple[PodRun, ...], period_start: datetime
                      ) -> dict[str, int]:
    """Pod name -> microseconds it ran in ``[charged until, t0)`` by what is known now, for each pod the ledger had
    charged only to a silent node's heartbeat (``entry.unheard``): all of the gap when its node reports it again,
    up to a later heartbeat while it is still silent, nothing while its node is gone. Only the part inside the
    current period (from ``period_start``) counts; none when nothing is integrated (``t0`` None)."""
    if t0 is None or not entry.unheard:
        return {}
    until = dict(entry.unheard)
    out = {p.name: p.microseconds_in(max(until[p.name], period_start), t0) for p in pods if p.name in until}
    return {k: v for k, v in out.items() if v > 0}


def _credit_microseconds(entry: LedgerEntry, t0: datetime | None, pods: tuple[PodRun, ...] | None,
                         raw: ServiceObservation | None, period_start: datetime) -> dict[str, int]:
    """Pod name -> microseconds the ledger charged a pod before ``t0`` past its silent node's last-heard time, for
    each pod first seen silent now (not in ``entry.unheard``): the node lifecycle controller marks a node only
    after its grace period, and the evaluations meanwhile charged the pod by its own run (``raw``: the observation
    before the cut, with the pod's own stop). Only the part inside the current period (from ``period_start``)
    counts; none when the pods are not charged by their own runs (``pods`` None) or nothing is integrated."""
    if t0 is None or pods is None or raw is None:
        return {}
    own = raw.charged_pods()
    before = dict(entry.unheard)
    out = {p.name: p.microseconds_in(max(p.unheard_since, period_start), t0) for p in own or ()
           if p.unheard_since is not None and p.name not in before}
    return {k: v for k, v in out.items() if v > 0}


def _unheard_after(entry: LedgerEntry, t0: datetime | None, pods: tuple[PodRun, ...] | None, now: datetime
                   ) -> tuple[tuple[str, datetime], ...]:
    """``entry.unheard`` after this evaluation: each pod charged to a silent node's heartbeat (or to its record, its
    node gone) with the instant up to which it is charged now. A pod charged to within ``[t0, now)`` is charged to
    its (cut) stop; one cut before ``t0`` stays where it was, or at its cut when this is its first cut (what was
    charged past it is taken back: :func:`_credit_microseconds`). Pods no longer observed are forgotten; unknown
    pods (``pods`` None) and an evaluation that integrates nothing (``now`` not after ``t0``) keep the records as
    they were."""
    if pods is None or (t0 is not None and now <= t0):
        return entry.unheard
    if t0 is None:
        return ()
    before = dict(entry.unheard)
    out = []
    for p in pods:
        if not p.cut or p.stop is None or (p.unheard_since is None and p.name not in before):
            continue
        was = before.get(p.name)
        out.append((p.name, min(p.stop, now) if p.stop >= t0 else p.stop if was is None else max(was, p.stop)))
    return tuple(sorted(out)[:MAX_UNHEARD_PODS])


def _closed_period(ledger: Ledger, window: _Window, period: Period | str, tz: str,
                   closing: Mapping[tuple[str, str], Decimal]) -> ClosedPeriod | None:
    """The period the ledger was accumulating, with its final spend (in all and per service), when this evaluation
    started a new one."""
    if not window.new_period or ledger.period_start is None:
        return None
    _, closed_end = period_bounds(period, tz, ledger.period_start)
    return ClosedPeriod(ledger.period_start, min(closed_end, window.period_start), sum(closing.values(), Decimal(0)),
                        tuple(sorted(closing.items())))


def _kept_in_force(ledger: Ledger, entries: tuple[LedgerEntry, ...]) -> tuple[LedgerEntry, ...]:
    """``entries`` of an evaluation that integrated nothing (in the second of ``observedTime``, or a clock that
    stepped back) with the replicas in force since ``observedTime`` as the ledger held them, where it knew them:
    pods that appeared since are charged by their own run whatever is in force, but a smaller listing in their
    place would forget a replica gone unseen meanwhile (charged nothing at the next evaluation)."""
    held = {e.key: e for e in ledger.entries if e.replicas is not None}
    return tuple(replace(e, replicas=old.replicas, cost_usd_per_hour=old.cost_usd_per_hour, late=old.late,
                         uncounted=old.uncounted) if (old := held.get(e.key)) is not None else e for e in entries)


def _late_bound(o: ServiceObservation, now: datetime) -> tuple[str, ...]:
    """Names of the pods ``o`` counts among its replicas (listed running: no stop, not cut at a silent node) whose
    start and binding are both in ``now``'s second or after it (:attr:`LedgerEntry.late`: whole-second stamps
    cannot tell them from pods bound after the listing), sorted, at most :data:`MAX_NAMED_PODS`."""
    if o.pods is None or not o.replicas:
        return ()
    return tuple(sorted(p.name for p in o.pods if p.stop is None and not p.cut and (
        not p.in_force_at(now) or _first_in(p, now)))[:MAX_NAMED_PODS])


def _uncounted(o: ServiceObservation, now: datetime) -> tuple[str, ...]:
    """Names of the pods ``o`` lists (recorded stops merged) that it does not count among its replicas yet the next
    evaluation could take for ones in force at ``now``: a stop not before ``now``, or cut at a silent node
    (:attr:`LedgerEntry.uncounted`), sorted, at most :data:`MAX_NAMED_PODS` (one beyond them may account for
    a replica gone unseen, as before it was named)."""
    if o.pods is None:
        return ()
    return tuple(sorted(p.name for p in o.pods
                        if p.stop is not None and (p.stop >= now or p.cut))[:MAX_NAMED_PODS])


def _next_entries(ledger: Ledger, obs: Sequence[ServiceObservation],
                  current_spent: Mapping[tuple[str, str], Decimal],
                  unheard: Mapping[tuple[str, str], tuple[tuple[str, datetime], ...]],
                  late: Mapping[tuple[str, str], tuple[str, ...]],
                  uncounted: Mapping[tuple[str, str], tuple[str, ...]]) -> tuple[LedgerEntry, ...]:
    """The services as observed now with their spend in the period, their pods charged to a silent node's
    heartbeat, those bound after ``now`` (:func:`_late_bound`) and those listed but not counted
    (:func:`_uncounted`); those no longer observed keep their spend at replicas 0 (dropped once it is 0), sorted
    by (namespace, name)."""
    seen = {(o.namespace, o.name) for o in obs}
    entries = [LedgerEntry(o.namespace, o.name, o.replicas, o.cost_usd_per_hour,
                           current_spent.get((o.namespace, o.name), Decimal(0)), unheard.get((o.namespace, o.name), ()),
                           late.get((o.namespace, o.name), ()), uncounted.get((o.namespace, o.name), ()))
               for o in obs]
    for entry in ledger.entries:
        if entry.key not in seen and current_spent.get(entry.key, Decimal(0)) != 0:
            entries.append(replace(entry, replicas=0, cost_usd_per_hour=Decimal(0), spent_usd=current_spent[entry.key],
                                   unheard=(), late=(), uncounted=()))
    entries.sort(key=lambda e: e.key)
    return tuple(entries)


def _with_recorded_stops(o: ServiceObservation, now: datetime, unheard: Mapping[str, datetime]) -> ServiceObservation:
    """``o`` with its recorded stops merged into ``pods`` (:meth:`ServiceObservation.charged_pods`), and each pod of
    a silent node stopped at the node's last heartbeat (of a gone node, at ``unheard``, where the ledger stopped
    charging it while its node was silent).

    A pod the listing showed running whose record says it stopped by ``now`` (its deletion came between the
    listing and the read of the records), or whose node went silent, is not counted in ``replicas`` either: it is
    not in force from ``now`` (``replicas`` is at most the listed pods still running, so a count that already
    left such pods out is not lowered twice).
    """
    pods = o.charged_pods()
    if pods is not None:
        pods = tuple(_cut_run(p, unheard.get(p.name)) for p in pods)
    if pods is None or o.pods is None or o.replicas is None:
        return replace(o, pods=pods, stopped=())
    listed_running = {p.name for p in o.pods if p.stop is None}
    running = sum(1 for p in pods if p.name in listed_running and p.stop is None)
    # At most the listed pods still running: a caller that already left out the pods its records say are gone
    # (the operator's planner) is not lowered twice.
    return replace(o, pods=pods, stopped=(), replicas=min(o.replicas, running))


def _cut_run(p: PodRun, charged_until: datetime | None) -> PodRun:
    """``p`` as the ledger charges it: to its silent node's last heartbeat, or to ``charged_until`` (the ledger's
    record) when its node is gone, whichever is earlier than its own stop."""
    cut = p.unheard_since if p.unheard_since is not None else charged_until if p.node_gone else None
    if cut is None or (p.stop is not None and p.stop <= cut):
        return p
    return replace(p, stop=cut)


def _new_service_work(ledger: Ledger, obs: Sequence[ServiceObservation], now: datetime, p_start: datetime
                      ) -> list[_Work]:
    """The services of ``obs`` that ``ledger`` does not hold yet, each with the window it is charged over.

    A service new to the ledger is charged for what its listed pods ran since ``max(window start,
    status.startTime)``: the window starts at ``ledger.observed_time`` (the service appeared since the last
    evaluation), or at the period start on a policy's first evaluation (a policy created, or re-created, mid-period
    charges the pods running since the period began, as it would have had it existed). Pods with an unknown
    start are charged only from this evaluation on (charging them from the window start could be far too much),
    and pods that ended and are no longer listed cannot be known: the spend is then a lower bound.

    Returns:
        ``(entry with nothing spent and no replicas in force, window start, the pods that ran in the window)``
        per such service with at least one.
    """
    known = {e.key for e in ledger.entries}
    since = ledger.observed_time if ledger.observed_time is not None else p_start
    out: list[_Work] = []
    for o in obs:
        if (o.namespace, o.name) in known or not o.pods or now <= since:
            continue
        ran = tuple(p for p in o.pods if p.start is not None and p.microseconds_in(since, now) > 0)
        if ran:
            out.append((LedgerEntry(o.namespace, o.name, 0, Decimal(0), Decimal(0)), since, ran))
    return out


def with_rates_in_force(ledger: Ledger, observations: Sequence[ServiceObservation] | Iterable[ServiceObservation]
                        ) -> Ledger:
    """The same ledger with the rates in force from ``ledger.observed_time`` replaced for ``observations``.

    Spend is unchanged; only what the next :func:`advance` integrates changes. Used after an evaluation that
    lowered services (``modalscale.costmodel.budget.rates_after_enforcement``).

    Args:
        ledger: The ledger returned by :func:`advance` at this evaluation.
        observations: Services as they run from now on; each must already be in ``ledger``.
    Returns:
        A new :class:`Ledger`.
    Raises:
        ValueError: A service that is not in ``ledger``.
    """
    by_key = {(o.namespace, o.name): o for o in observations}
    unknown = by_key.keys() - {e.key for e in ledger.entries}
    if unknown:
        raise ValueError(f"not in the ledger: {', '.join(f'{ns}/{n}' for ns, n in sorted(unknown))}")
    entries = tuple(replace(e, replicas=by_key[e.key].replicas, cost_usd_per_hour=by_key[e.key].cost_usd_per_hour)
                    if e.key in by_key else e for e in ledger.entries)
    return replace(ledger, entries=entries)


__all__ = [
    "ClosedPeriod", "CostSegment", "Ledger", "LedgerAdvance", "LedgerEntry", "LedgerFormatError", "PodPool", "PodRun",
    "ServiceObservation", "UnpricedInterval", "advance", "floor_to_second", "format_time", "parse_time",
    "with_rates_in_force",
]
