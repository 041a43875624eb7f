"""Step 4 of a budget evaluation: which services run on Spot capacity (the ``SwitchToSpot`` action).

**SwitchToSpot** sets no replica cap: it moves the services whose ``spec.priority`` is at most the threshold's
``spotMaxPriority`` to Spot capacity, in force (ahead, held, lifted) like the other enforcing actions (step 3,
:mod:`modalscale.costmodel.budget.enforce`), and falls a service back to on-demand for the period when its Spot pods
stay Pending for ``enforcement.spotPendingTimeoutSeconds``. Pods are priced at the tier their node ran them at
(``ServiceState.tier_prices``, ``PodRun.tier``). The rules in full are :func:`plan_spot`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from modalscale.api.budgetpolicy import BudgetSpec, Threshold, ThresholdAction
from modalscale.costmodel.budget.state import ServiceState, SpotRecord, SpotState
from modalscale.costmodel.catalog import PricingTier
from modalscale.costmodel.ledger import format_time


def plan_spot(spec: BudgetSpec, in_force: Sequence[Threshold], ordered: Sequence[ServiceState],
              previous: Sequence[SpotRecord], now: datetime) -> tuple[tuple[SpotRecord, ...], tuple[str, ...]]:
    """Decide which services run on Spot capacity now (the ``SwitchToSpot`` action), and which fell back.

    Rules:

    * A threshold in force (``in_force``, as for the replica actions: crossed, enforced ahead, or held) with
      ``SwitchToSpot`` selects the services whose ``spec.priority <= spotMaxPriority`` (Kubernetes
      PriorityClass sense: lower = less important), in enforcement order. When several thresholds select a
      service, the lowest one owns it.
    * Not moved (listed in the second result): a service already priced at Spot (``spec.pricing.tier: Spot``)
      and one whose Spot price the catalog lacks (moving it would make its spend unknown).
    * **Fallback**: a switched service whose oldest Spot pod has waited unscheduled for
      ``spec.enforcement.spotPendingTimeoutSeconds`` or more (``ServiceState.spot_pending_since``) goes back to
      on-demand, state ``OnDemandFallback``, and stays there for the rest of the period (no flapping between
      a Spot shortage and on-demand). The Deployment's rollout keeps the on-demand pods until Spot pods are
      Ready (maxUnavailable 0), so a shortage never takes serving capacity away.
    * A switch, and a fallback, lasts for the period (its ``since`` carried over); a new period starts on
      on-demand again (``previous`` is then empty).

    Args:
        in_force: Thresholds whose enforcing actions are in force now, ascending.
        ordered: Selected services in enforcement order.
        previous: ``status.spotServices`` of this period (empty after a new period).
        now: This evaluation (UTC).
    Returns:
        (records for ``status.spotServices``, sorted by namespace/name; "ns/name: why" for services not moved).
    """
    timeout_s = spec.enforcement.spot_pending_timeout_s
    prior = {(r.namespace, r.name): r for r in previous}
    owned: dict[tuple[str, str], tuple[Threshold, ServiceState]] = {}
    for t in in_force:
        if ThresholdAction.SWITCH_TO_SPOT not in t.actions or t.spot_max_priority is None:
            continue
        for svc in ordered:
            if svc.priority <= t.spot_max_priority:
                owned.setdefault((svc.namespace, svc.name), (t, svc))
    out: list[SpotRecord] = []
    skipped: list[str] = []
    for key, (t, svc) in owned.items():
        old = prior.get(key)
        if svc.tier == PricingTier.SPOT.value:
            skipped.append(f"{key[0]}/{key[1]}: already priced at Spot (spec.pricing.tier)")
            continue
        if svc.price_at(PricingTier.SPOT.value) is None:
            skipped.append(f"{key[0]}/{key[1]}: the pricing catalog has no Spot price for it")
            continue
        since = old.since if old is not None else now
        if old is not None and old.state is SpotState.ON_DEMAND_FALLBACK:
            out.append(replace(old, threshold_percent=t.percent, dry_run=spec.enforcement.dry_run))
            continue
        waited = (now - svc.spot_pending_since).total_seconds() if svc.spot_pending_since is not None else None
        if waited is not None and waited >= timeout_s:
            message = (f"Spot pods of {key[0]}/{key[1]} stayed Pending for {int(waited)} s (timeout "
                       f"{timeout_s} s): back on on-demand for the rest of the period")
            out.append(SpotRecord(key[0], key[1], t.percent, SpotState.ON_DEMAND_FALLBACK, since, now,
                                  spec.enforcement.dry_run, message))
            continue
        message = (f"On Spot capacity since {format_time(since)} (priority {svc.priority} <= spotMaxPriority "
                   f"{t.spot_max_priority}, threshold {t.percent} %)")
        if waited is not None:
            message += f"; a Spot pod has waited {int(waited)} s of {timeout_s} s"
        out.append(SpotRecord(key[0], key[1], t.percent, SpotState.SPOT, since, None, spec.enforcement.dry_run,
                              message))
    return tuple(sorted(out, key=lambda r: (r.namespace, r.name))), tuple(skipped)


__all__ = ["plan_spot"]
