"""The demo's budget story (issue 23 item 0): the budget cannot act before the scale-up is measured, whatever the
set-up took, and once armed it caps and scales down within the replay's slack."""

from __future__ import annotations

from decimal import Decimal

import pytest

from modalscale.demo import budget_story as bs
from modalscale.demo.capacity import SETTLE_S, WINDOW_S, PodRecord, measure, scale_ups
from tests.unit.demo.test_demo_capacity import T0, h, steady

PRICE = Decimal("0.031105")  # USD/h of a 500m / 3Gi replica at catalog prices (order of magnitude is what matters)


def spend(replica_seconds: float) -> Decimal:
    return PRICE * Decimal(repr(replica_seconds)) / 3600


@pytest.mark.parametrize("setup_s", [300.0, 1500.0, 2400.0])
def test_hold_limit_keeps_every_threshold_out_of_reach_whatever_the_set_up_took(setup_s: float) -> None:
    # The cold run of the issue: 37 min of set-up with the first replica charged through part of it; the worst case
    # is every replica running from the demo's start to the replay's end.
    limit = bs.hold_limit_usd(PRICE, 3, setup_s, 540.0 + 60.0)
    worst = spend(3 * (setup_s + 600.0))
    assert worst / limit <= Decimal("0.45") + Decimal("1e-6")
    assert worst / limit < Decimal("0.50")  # the lowest threshold


def test_armed_limit_puts_the_spend_just_under_the_cap() -> None:
    spent = spend(650.0)
    limit = bs.armed_limit_usd(spent)
    share = spent / limit
    assert Decimal("0.50") < share < Decimal(bs.CAP_PERCENT) / 100
    assert float(share) == pytest.approx(float(bs.ARMED_SPEND_SHARE), abs=1e-4)
    # The 80 % cap comes after the spend grows by 2 points of the limit: at three replicas, seconds.
    to_cap_s = float((limit * bs.CAP_PERCENT / 100 - spent) / (PRICE * 3 / 3600))
    assert 0 < to_cap_s < 20
    assert 0 < bs.seconds_to_scale_down(spent, PRICE, 2) <= 60  # a warm run's spend: inside the replay's slack


@pytest.mark.parametrize("bad", [Decimal(0), Decimal("-1"), Decimal("NaN"), Decimal("Infinity")])
def test_armed_limit_refuses_a_spend_it_cannot_size_from(bad: Decimal) -> None:
    with pytest.raises(ValueError, match="spend must be > 0"):
        bs.armed_limit_usd(bad)


def test_hold_limit_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_replicas"):
        bs.hold_limit_usd(PRICE, 0, 1.0, 1.0)
    with pytest.raises(ValueError, match="elapsed_s"):
        bs.hold_limit_usd(PRICE, 3, float("nan"), 1.0)


def test_arm_waits_for_the_last_scale_ups_after_window_then_the_window_is_measured_whole() -> None:
    # The warm run: ScaleUpForPanic 1 -> 3 at 125 s, replicas Ready at 155 s. The old fixed limit capped
    # one at 174 s, before the 'after' window (from 170 s) held a request: "not measured".
    pods = [PodRecord("p0", "real-node-0", True, -300.0, -280.0),
            PodRecord("p1", "real-node-0", True, 126.0, 150.0),
            PodRecord("p2", "real-node-0", True, 126.0, 155.0)]
    history = [h(125.0, 1, 3, "ScaleUpForPanic")]
    ups = scale_ups(history, T0, pods)
    assert [u.ready_s for u in ups] == [155.0]
    closes = 155.0 + SETTLE_S + WINDOW_S + bs.ARM_MARGIN_S
    assert bs.arm_due([], 200.0, fallback_s=270.0)[0] is False
    assert bs.arm_due(ups, 174.0, fallback_s=270.0)[0] is False
    assert bs.arm_due(ups, closes - 0.5, fallback_s=270.0)[0] is False
    due, why = bs.arm_due(ups, closes, fallback_s=270.0)
    assert due and "1->3 measured" in why
    # The cap can come no earlier than the arming: the 'after' window is the whole WINDOW_S.
    records = steady(0, 125, 3.0, 300.0) + steady(125, 155, 9.0, 2500.0) + steady(155, 260, 9.0, 400.0)
    (up,) = measure(ups, records, 300.0, budget_cap_s=closes + 3.0)
    assert up.after is not None and up.after.end_s - up.after.start_s == pytest.approx(WINDOW_S)
    assert up.after.p95_ms is not None and up.before is not None and up.before.p95_ms is not None


def test_arm_waits_for_replicas_still_starting_and_falls_back_at_the_deadline() -> None:
    pods = [PodRecord("p0", "real-node-0", True, -300.0, -280.0), PodRecord("p1", "real-node-0", True, 131.0)]
    ups = scale_ups([h(130.0, 1, 2)], T0, pods)
    due, why = bs.arm_due(ups, 200.0, fallback_s=270.0)
    assert not due and "Ready" in why
    due, why = bs.arm_due(ups, 270.0, fallback_s=270.0)
    assert due and "armed anyway" in why
