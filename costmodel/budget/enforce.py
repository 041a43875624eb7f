"""Step 3 of a budget evaluation: which thresholds' enforcing actions are in force, and what each service is held
to.

**Enforcement** is level-based: every *enforced* threshold contributes its actions; each service gets the
strongest one (lowest effective maximum): ``CapReplicas`` -> ``min(maxReplicas, capReplicas)``, ``ScaleDown`` ->
``enforcement.floorReplicas``, ``ScaleToZero`` -> 0. A staged service's maximum counts both pools (the front's
``maxReplicas`` plus the image encoder pool's): its cap bounds their sum, the costlier pool giving up replicas
first (``modalscale.autoscaler.policy.split_staged_cap``). Actions are listed in threshold order, services within a
threshold in ``enforcement.order`` (``LowestPriorityFirst``: ascending ``spec.priority``, then higher cost first;
``HighestCostFirst``: current cost rate descending). With ``dryRun`` actions are reported but marked not applied.
Enforcement lifts at the next period (spend resets). ``SwitchToSpot`` sets no replica cap: it is step 4
(:mod:`modalscale.costmodel.budget.spot`), in force by the same rule. ``Reject`` sets none either and is not
anticipated: it is step 4b (:mod:`modalscale.costmodel.budget.reject`).

**Enforcement starts one evaluation and one replica stop ahead** (:data:`ENFORCEMENT_METHOD`): the operator only
acts at evaluations, so a threshold acted on once spend has passed it is overshot by up to one interval of spend
(e.g. a 60 s interval at 84 USD/h is 1.40 USD, 1.4 % of a 100 USD limit). A threshold with an enforcing action
(CapReplicas, ScaleDown, ScaleToZero, SwitchToSpot) is therefore enforced when ``spent >= percent % x limit`` or
when ``spent + burn_rate x horizon >= percent % x limit``: it would be crossed before the next evaluation's action
takes effect. The horizon (:func:`enforcement_horizon_s`) is ``evaluationIntervalSeconds`` plus the longest
``terminationGracePeriodSeconds`` of the selected services' replicas, running or not: a replica scaled away keeps
running, and is charged, until it stops (a BuiltIn runtime replica drains the requests it has for up to 30 s, then
Triton for up to 45 s), and the kubelet stops it by that deadline at the latest. Once enforced it is held for the
period while ``spent + max_rate x horizon`` still reaches it, where ``max_rate`` is every selected service at
``max(replicas, maxReplicas)`` (a staged service's image encoder pool at its ``maxReplicas`` too): enforcement
lowers the burn rate, so re-testing the lowered rate would lift and re-apply the action every other evaluation;
spend only grows, so the hold ends only with the period or a spec change (a raised limit lifts it, as before; a
tightened ``capReplicas``, ``floorReplicas`` or service ``maxReplicas`` holds it at its new target: :func:`_held`).
Enforcement is downward closed (enforcing 100 % enforces every lower enforcing threshold). Thresholds with only
``Alert`` are not anticipated. ``horizon_s=0`` gives the reactive rule (act only after the crossing).

**Unknown price or replicas**: a threshold the known spend (a lower bound) crosses is crossed and enforced, on
every selected service (the unpriced ones too); an enforcing threshold the known burn rate alone reaches within
the horizon is enforced ahead; enforcement already in force this period is held while anything is unknown
(lifting would act on data that could not be read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from modalscale.api.budgetpolicy import BudgetSpec, EnforcementOrder, Threshold, ThresholdAction
from modalscale.autoscaler.policy import describe_cap, replicas_under_cap
from modalscale.costmodel.budget.spend import SpendToDate, reaches
from modalscale.costmodel.budget.state import EnforcedService, ServiceState, SpotRecord
from modalscale.costmodel.money import MONEY_CONTEXT, SECONDS_PER_HOUR

ENFORCEMENT_METHOD = "AheadOfCrossingByOneEvaluationAndStop"
"""When a threshold's enforcement starts: when spent + current burn rate x horizon (the evaluation interval plus
the replicas' longest stop, :func:`enforcement_horizon_s`) reaches it, held while spent + the services' maximum
rate x horizon still does (see the module docstring)."""


def enforcement_horizon_s(evaluation_interval_s: int, services: Sequence[ServiceState]) -> int:
    """Seconds ahead that enforcement looks: until the action an evaluation takes has stopped what it scales away.

    Args:
        evaluation_interval_s: ``spec.evaluationIntervalSeconds`` (the next evaluation acts that much later).
        services: The selected services; ``stop_grace_s`` of each is the longest a replica of it may keep running
            (and being charged) once deleted.
    Returns:
        ``evaluation_interval_s`` + the largest ``stop_grace_s`` (0 when no service runs a replica).
    """
    return evaluation_interval_s + max((s.stop_grace_s for s in services), default=0)


@dataclass(frozen=True)
class EnforcementAction:
    """Scale one service down to at most ``max_replicas`` because a threshold was crossed.

    Attributes:
        threshold_percent: The threshold whose action this is.
        max_replicas: Effective maximum while enforced (``min`` with the service's own maxReplicas).
        current_replicas: Replicas now (None if unknown; never the case in a plan, see the blind rule); a staged
            service's over both pools (:attr:`ServiceState.capped_replicas`).
        desired_replicas: ``min(current, replicas_under_cap)``: what the service should run now (a staged service
            under a cap of 1 keeps 1 front + 1 image encoder replica,
            ``modalscale.autoscaler.policy.replicas_under_cap``).
        dry_run: True when ``spec.enforcement.dryRun``: report only.
        since: When this action first took effect in the period.
        ahead: True when spend has not reached the threshold yet: it is enforced because it would be crossed
            before the next evaluation (see :data:`ENFORCEMENT_METHOD`).
        staged: The service has ``spec.stages``: the cap counts both pools, and what it holds the service to is
            :func:`modalscale.autoscaler.policy.describe_cap`'s (a cap of 1 runs 1 + 1).
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
    staged: bool = False

    @property
    def applied(self) -> bool:
        """False in dry run: the handler must not scale."""
        return not self.dry_run

    def describe(self) -> str:
        """Human text, e.g. ``ScaleDown search/ranker to 1 (running 4, at 100 %)``; where more than the cap runs
        under it (a staged service under a cap of 1), what runs too
        (:func:`modalscale.autoscaler.policy.describe_cap`, as :meth:`enforced` reports it)."""
        ahead = ", ahead of the crossing" if self.ahead else ""
        runs = ("" if replicas_under_cap(self.max_replicas, self.staged) == self.max_replicas
                else f" ({describe_cap(self.max_replicas, self.staged)})")
        text = (f"{self.action.value} {self.namespace}/{self.name} to {self.max_replicas}{runs}"
                f" (running {self.current_replicas}, at {self.threshold_percent} %{ahead})")
        return text + (" [dry run, not applied]" if self.dry_run else "")

    def enforced(self) -> EnforcedService:
        return EnforcedService(self.namespace, self.name, self.action, self.max_replicas, self.since, self.dry_run,
                               describe_cap(self.max_replicas, self.staged))


_NOT_REPLICA = (ThresholdAction.ALERT, ThresholdAction.SWITCH_TO_SPOT, ThresholdAction.REJECT)
"""Actions that set no replica cap (Reject is decided in :mod:`modalscale.costmodel.budget.reject`)."""
_STRENGTH = {ThresholdAction.CAP_REPLICAS: 1, ThresholdAction.SCALE_DOWN: 2, ThresholdAction.SCALE_TO_ZERO: 3}


def order_services(services: Sequence[ServiceState], order: EnforcementOrder) -> list[ServiceState]:
    """``services`` in ``spec.enforcement.order`` (see the module docstring); ties by namespace, name."""

    def cost(s: ServiceState) -> Decimal:
        return s.cost_usd_per_hour or Decimal(0)

    if order is EnforcementOrder.LOWEST_PRIORITY_FIRST:
        return sorted(services, key=lambda s: (s.priority, -cost(s), s.namespace, s.name))
    return sorted(services, key=lambda s: (-cost(s), s.priority, s.namespace, s.name))


def _target(action: ThresholdAction, threshold: Threshold, svc: ServiceState, floor: int) -> int:
    """The effective maximum ``action`` holds ``svc`` to. A staged service's cap counts both its pools
    (``modalscale.autoscaler.policy.split_staged_cap`` splits it), so its own maximum is both pools'
    ``maxReplicas`` together."""
    most = svc.max_replicas + svc.pool_max_replicas
    if action is ThresholdAction.CAP_REPLICAS:
        return min(most, threshold.cap_replicas if threshold.cap_replicas is not None else most)
    if action is ThresholdAction.SCALE_DOWN:
        return min(most, floor)
    if action is ThresholdAction.SWITCH_TO_SPOT:
        raise ValueError("SwitchToSpot sets no replica target (see plan_spot)")
    return 0


def _held(t: Threshold, previous: Mapping[tuple[str, str, ThresholdAction], EnforcedService],
          services: Sequence[ServiceState], floor: int, spot_held: frozenset[int] = frozenset(),
          thresholds: Sequence[Threshold] = ()) -> bool:
    """True when ``t``'s enforcement was in force at the previous evaluation of this period.

    A service's entry in ``status.enforcedServices`` names only its strongest action, so ``t`` counts as in
    force when some still-selected service carries one of ``t``'s actions at or below ``t``'s target; a
    ``SwitchToSpot`` action is in force when ``status.spotServices`` names ``t`` (``spot_held``).

    An entry above the target of every threshold (``thresholds``: the spec's) with its action was tightened since
    (a lower ``capReplicas``, ``floorReplicas`` or service ``maxReplicas``): it is held as the weakest of them (the
    lowest percent with that action, whose target is the highest), at its new target, never lifted by the edit.
    """
    if ThresholdAction.SWITCH_TO_SPOT in t.actions and t.percent in spot_held:
        return True
    for svc in services:
        for action in t.actions:
            if action in _NOT_REPLICA:
                continue
            e = previous.get((svc.namespace, svc.name, action))
            if e is None:
                continue
            if e.max_replicas <= _target(action, t, svc, floor):
                return True
            carriers = [u for u in thresholds if action in u.actions]
            if (carriers and min(carriers, key=lambda u: u.percent).percent == t.percent
                    and all(e.max_replicas > _target(action, u, svc, floor) for u in carriers)):
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
        max_usd_per_hour: Selected services at ``max(replicas, maxReplicas)`` x price, a staged service's image
            encoder pool at its maxReplicas too (bounds the burn rate over the horizon; enforcement never lowers
            it, so a threshold once enforced stays enforced).
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
    enforcing = [t for t in spec.thresholds
                 if any(a not in (ThresholdAction.ALERT, ThresholdAction.REJECT) for a in t.actions)]
    top = max((t.percent for t in enforcing
               if reaches(projected, t.percent, limit)  # also covers spent itself: the burn rate is >= 0
               or ((hold_unconditionally or reaches(bounded, t.percent, limit))
                   and _held(t, previous, services, floor, spot_held, spec.thresholds))),
              default=0)
    return [t for t in enforcing if t.percent <= top]


@dataclass(frozen=True)
class EnforcementPlan:
    """What step 3 decided.

    Attributes:
        in_force: Thresholds whose enforcing actions are in force now (crossed, enforced ahead, or held), ascending.
        ahead: Those of ``in_force`` that spend has not crossed yet.
        actions: The strongest replica action per service, in threshold order, then service order.
    """

    in_force: tuple[Threshold, ...]
    ahead: tuple[Threshold, ...]
    actions: tuple[EnforcementAction, ...]

    @property
    def enforced(self) -> tuple[EnforcedService, ...]:
        """What ``status.enforcedServices`` should say."""
        return tuple(a.enforced() for a in self.actions)


def plan_enforcement(spec: BudgetSpec, spend: SpendToDate, crossed: Sequence[Threshold],
                     services: Sequence[ServiceState], ordered: Sequence[ServiceState],
                     previous: Sequence[EnforcedService], previous_spot: Sequence[SpotRecord], horizon_s: int,
                     now: datetime) -> EnforcementPlan:
    """Step 3: the thresholds in force and the strongest replica action per service (see the module docstring).

    Args:
        spend: Step 1 (enforced on the known spend and burn rate: lower bounds when some service is not priced).
        crossed: Thresholds the spend has reached.
        services: Every selected service as observed now; ``ordered``: the same in enforcement order.
        previous: ``status.enforcedServices`` of this period (empty after a new period started).
        previous_spot: ``status.spotServices`` of this period (empty after a new period started).
        horizon_s: Seconds ahead that enforcement looks (0 = reactive).
        now: This evaluation (UTC): ``since`` of an action that starts now.
    Returns:
        :class:`EnforcementPlan`.
    """
    by_key = {(e.namespace, e.name, e.action): e for e in previous}
    in_force = _enforced_thresholds(spec, spend.spent_usd, spend.known_burn_usd_per_hour, spend.max_burn_usd_per_hour,
                                    horizon_s, by_key, services, hold_unconditionally=spend.blind,
                                    spot_held=frozenset(r.threshold_percent for r in previous_spot))
    best: dict[tuple[str, str], tuple[int, int, Threshold, ThresholdAction]] = {}
    for t in in_force:
        for action in t.actions:
            if action in _NOT_REPLICA:
                continue
            for svc in ordered:
                target = _target(action, t, svc, spec.enforcement.floor_replicas)
                key = (svc.namespace, svc.name)
                candidate = (target, -_STRENGTH[action], t, action)
                if key not in best or (candidate[0], candidate[1]) < (best[key][0], best[key][1]):
                    best[key] = candidate
    rank = {(s.namespace, s.name): i for i, s in enumerate(ordered)}
    actions: list[EnforcementAction] = []
    for key, (target, _, t, action) in sorted(best.items(), key=lambda kv: (kv[1][2].percent, rank[kv[0]])):
        svc = ordered[rank[key]]
        prior = by_key.get((svc.namespace, svc.name, action))
        running = svc.capped_replicas  # a staged service's over both pools, as its target counts them
        staged = svc.pool_max_replicas > 0
        runs = replicas_under_cap(target, staged)  # a staged service under a cap of 1 keeps 1 + 1
        actions.append(EnforcementAction(
            svc.namespace, svc.name, action, t.percent, target, running,
            min(running if running is not None else runs, runs),
            spec.enforcement.dry_run, prior.since if prior else now, ahead=t not in crossed, staged=staged))
    return EnforcementPlan(tuple(in_force), tuple(t for t in in_force if t not in crossed), tuple(actions))


__all__ = ["ENFORCEMENT_METHOD", "EnforcementAction", "EnforcementPlan", "enforcement_horizon_s", "order_services",
           "plan_enforcement"]
