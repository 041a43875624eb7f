"""The demo's budget story, decided from what the demo measured, never from how long set-up took (pure).

The BudgetPolicy charges every pod of the day from its start, set-up included (profiling and the capacity probes
run on the first replica), so a limit sized before the replay from the trace's length alone crossed its cap at a
time that depended on the set-up: a cold run (Prometheus built after the first replica started) began at 60 % of
its limit and capped the scale-up 20 s after it was decided; a warm run whose autoscaler scaled up early (125 s,
``ScaleUpForPanic``) was capped 19 s after its replicas were Ready, before the 'after' window (15 s after Ready)
held a request. Two phases take timing out of the story:

1. **Hold** (:func:`hold_limit_usd`): the policy is applied with a limit that no threshold can reach before the
   replay ends, even with every replica running from the demo's start, so the autoscaler's scale-ups are measured
   with the budget watching only.
2. **Armed** (:func:`armed_limit_usd`): once the last scale-up's 'after' window has closed (:func:`arm_due`), the
   demo lowers the day's limit, as a FinOps owner tightening a budget would, to the spend at that moment divided
   by ``ARMED_SPEND_SHARE``: the 50 % alert fires at once, the 80 % cap within seconds, and the scale-down
   threshold (``SCALE_DOWN_PERCENT``) after the remaining share burns at the capped replicas' rate, or, as
   enforcement looks ahead by the evaluation interval plus a replica's grace period (90 s), usually together
   with the cap in the first evaluation.

Amounts are USD ``Decimal``; times are seconds since the replay started (``t_s``), as in
:mod:`modalscale.demo.capacity`.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal

from modalscale.demo.capacity import SETTLE_S, WINDOW_S, ScaleUp

HOLD_MAX_SHARE = Decimal("0.45")
"""Phase 1: the most the day's spend may reach of the held limit, under the lowest threshold (50 %)."""
ARMED_SPEND_SHARE = Decimal("0.78")
"""Phase 2: the share of the armed limit already spent when the demo arms it: past the 50 % alert, 2 points under
the 80 % cap, so the cap follows within a few evaluations (``evaluationIntervalSeconds`` 5) at three replicas."""
CAP_PERCENT = 80
"""Threshold whose actions cap the service at ``CAP_REPLICAS``."""
CAP_REPLICAS = 2
SCALE_DOWN_PERCENT = 90
"""Threshold whose ScaleDown takes the service to its floor (1). 90 rather than 100: from 80 % the remaining 10 %
of the armed limit burns at two replicas in ``0.1 / ARMED_SPEND_SHARE * spent / burn`` seconds (warm runs: spent
about 600 replica-seconds, so about 40 s), half the time the step to 100 % took, so the replay needs less slack."""
ARM_MARGIN_S = 2.0
"""Seconds after the 'after' window's end before arming (the window's last arrivals answered)."""


def hold_limit_usd(replica_usd_per_hour: Decimal, max_replicas: int, elapsed_s: float, remaining_s: float) -> Decimal:
    """The phase-1 limit: the most the day's spend could reach by the replay's end, if ``max_replicas`` replicas had
    run since the demo started ``elapsed_s`` ago and ran for the ``remaining_s`` still to come, divided by
    ``HOLD_MAX_SHARE`` (so no threshold of 50 % or more can be crossed before the demo arms the budget). An upper
    bound: no pod of the demo's namespace existed before the demo started its cluster.

    Args:
        replica_usd_per_hour: Catalog price of one replica, USD/h (> 0).
        max_replicas: The service's ``maxReplicas`` (>= 1).
        elapsed_s: Seconds since the demo started (>= 0).
        remaining_s: Seconds of replay still to come, slack included (>= 0).

    Returns:
        USD, rounded up to 6 decimals.

    Raises:
        ValueError: an argument is out of range.
    """
    if replica_usd_per_hour <= 0 or max_replicas < 1 or not (elapsed_s >= 0 and remaining_s >= 0):
        raise ValueError(f"hold_limit_usd: price {replica_usd_per_hour} must be > 0, max_replicas {max_replicas} "
                         f">= 1, elapsed_s {elapsed_s} and remaining_s {remaining_s} >= 0")
    worst = replica_usd_per_hour * max_replicas * Decimal(repr(elapsed_s + remaining_s)) / 3600
    return (worst / HOLD_MAX_SHARE).quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


def armed_limit_usd(spent_usd: Decimal) -> Decimal:
    """The phase-2 limit: ``spent_usd / ARMED_SPEND_SHARE`` (the day's spend as the policy's ledger reports it
    now), rounded up to 6 decimals so the spend stays under the cap until it burns a little more.

    Raises:
        ValueError: ``spent_usd`` is not a positive finite amount (the ledger has charged nothing yet).
    """
    if not spent_usd.is_finite() or spent_usd <= 0:
        raise ValueError(f"armed_limit_usd: the policy's spend must be > 0 to size the limit from, got {spent_usd}")
    return (spent_usd / ARMED_SPEND_SHARE).quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


def seconds_to_scale_down(spent_usd: Decimal, replica_usd_per_hour: Decimal, capped_replicas: int) -> float:
    """Seconds from arming until the spend reaches ``SCALE_DOWN_PERCENT`` of the armed limit if ``capped_replicas``
    run from the moment of arming (an upper bound: more replicas run until the cap acts).

    Raises:
        ValueError: a non-positive price or replica count, or see :func:`armed_limit_usd`.
    """
    if replica_usd_per_hour <= 0 or capped_replicas < 1:
        raise ValueError("seconds_to_scale_down: price and replicas must be > 0")
    limit = armed_limit_usd(spent_usd)
    left = limit * SCALE_DOWN_PERCENT / 100 - spent_usd
    return math.ceil(float(left / (replica_usd_per_hour * capped_replicas / 3600)))


def arm_due(ups: list[ScaleUp], now_s: float, fallback_s: float) -> tuple[bool, str]:
    """Whether the demo arms the budget now, and why.

    Due when the autoscaler has scaled up and the last scale-up's 'after' window (``SETTLE_S`` after its replicas
    were Ready, ``WINDOW_S`` long, as :func:`modalscale.demo.capacity.measure` cuts it) closed ``ARM_MARGIN_S``
    ago; or, whatever happened, at ``fallback_s`` (the budget story still runs; the scale-up check then reports
    what was or was not measured).

    Args:
        ups: :func:`modalscale.demo.capacity.scale_ups` of the history so far.
        now_s: Seconds since the replay started.
        fallback_s: Latest time to arm, seconds since the replay started.
    """
    if now_s >= fallback_s:
        return True, f"no measured scale-up by {fallback_s:.0f} s: armed anyway"
    if not ups:
        return False, "waiting for the autoscaler's scale-up"
    last = ups[-1]
    if last.ready_s is None:
        return False, f"waiting for the scale-up {last.from_replicas}->{last.to_replicas} to be Ready"
    closes = last.ready_s + SETTLE_S + WINDOW_S + ARM_MARGIN_S
    if now_s < closes:
        return False, f"measuring the scale-up's 'after' window until {closes:.0f} s"
    return True, (f"scale-up {last.from_replicas}->{last.to_replicas} measured (Ready at {last.ready_s:.0f} s, "
                  f"'after' window closed at {closes - ARM_MARGIN_S:.0f} s)")
