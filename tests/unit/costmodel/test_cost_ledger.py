"""Spend ledger arithmetic by hand: integration, period splits, DST days, month ends, reload continuity."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from modalscale.costmodel.ledger import (
    Ledger,
    LedgerFormatError,
    ServiceObservation,
    advance,
    format_time,
    with_rates_in_force,
)
from tests.factories import ledger_json, read_ledger

UTC = timezone.utc
D = Decimal


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def obs(name: str, replicas: int | None, price: str | None, namespace: str = "default") -> ServiceObservation:
    return ServiceObservation(namespace, name, replicas, D(price) if price is not None else None)


def reload(ledger: Ledger) -> Ledger:
    """What a restarted operator reads back: the status written as JSON, parsed again."""
    status = json.loads(json.dumps({"ledger": ledger_json(ledger),
                                    "periodStart": format_time(ledger.period_start) if ledger.period_start else None}))
    return read_ledger(status["ledger"], status["periodStart"])


def run(steps: list[tuple[datetime, list[ServiceObservation]]], period: str = "Daily", tz: str = "UTC",
        via_status: bool = False):
    ledger, result = Ledger(), None
    for now, observations in steps:
        result = advance(reload(ledger) if via_status else ledger, observations, now, period, tz)
        ledger = result.ledger
    return result


def test_first_evaluation_counts_nothing_without_pods() -> None:
    # Without a pod list there is no start time to charge from (with one, see the mid-period tests below).
    result = advance(Ledger(), [obs("a", 4, "2.5")], utc(2026, 5, 1, 12), "Daily")
    assert result.spent_usd == 0
    assert result.ledger.observed_time == utc(2026, 5, 1, 12)
    assert result.ledger.entries[0].cost_usd_per_hour == D("10")


def test_zero_replicas_cost_zero_even_at_unknown_price() -> None:
    result = run([(utc(2026, 5, 1, 0), [obs("a", 0, "3"), obs("b", 0, None)]),
                  (utc(2026, 5, 1, 23, 59, 59), [obs("a", 0, "3"), obs("b", 0, None)])])
    assert result.spent_usd == 0
    assert result.unpriced == ()


def test_rate_in_force_is_integrated_to_the_second() -> None:
    # 2 replicas x 1.5 USD/h for 90 min = 4.5 USD; then 1 s more at 3 USD/h = 0.000833333(3) -> 0.000833333
    result = run([(utc(2026, 5, 1, 10), [obs("a", 2, "1.5")]),
                  (utc(2026, 5, 1, 11, 30), [obs("a", 2, "1.5")]),
                  (utc(2026, 5, 1, 11, 30, 1), [obs("a", 2, "1.5")])])
    assert result.spent_usd == D("4.5") + D("0.000833333")


def test_sub_second_now_is_floored() -> None:
    result = run([(utc(2026, 5, 1, 10), [obs("a", 1, "3600")]),
                  (utc(2026, 5, 1, 10, 0, 1, 999_999), [obs("a", 1, "3600")])])
    assert result.spent_usd == D(1)  # 1 s at 1 USD/s; the 0.999999 s is counted next time
    assert result.ledger.observed_time == utc(2026, 5, 1, 10, 0, 1)


def test_costs_add_up_across_services() -> None:
    t0, t1 = utc(2026, 5, 1, 8), utc(2026, 5, 1, 9, 30)
    together = run([(t0, [obs("a", 2, "1.5"), obs("b", 1, "0.25")]), (t1, [obs("a", 2, "1.5"), obs("b", 1, "0.25")])])
    a_only = run([(t0, [obs("a", 2, "1.5")]), (t1, [obs("a", 2, "1.5")])])
    b_only = run([(t0, [obs("b", 1, "0.25")]), (t1, [obs("b", 1, "0.25")])])
    assert together.spent_usd == D("4.5") + D("0.375") == a_only.spent_usd + b_only.spent_usd
    assert {e.name: e.spent_usd for e in together.ledger.entries} == {"a": D("4.5"), "b": D("0.375")}


def test_the_earlier_rate_applies_until_the_next_observation() -> None:
    # 1 replica x 2 USD/h for 1 h, then 5 replicas for 30 min: 2 + 5 = 7 USD
    result = run([(utc(2026, 5, 1, 0), [obs("a", 1, "2")]),
                  (utc(2026, 5, 1, 1), [obs("a", 5, "2")]),
                  (utc(2026, 5, 1, 1, 30), [obs("a", 0, "2")]),
                  (utc(2026, 5, 1, 5), [obs("a", 0, "2")])])
    assert result.spent_usd == D(7)


def test_interval_straddling_midnight_counts_only_the_new_day_and_closes_the_old() -> None:
    # 1 USD/h from 22:00 (with 3 USD already spent) across midnight to 01:00
    first = run([(utc(2026, 5, 1, 19), [obs("a", 1, "1")]), (utc(2026, 5, 1, 22), [obs("a", 1, "1")])])
    assert first.spent_usd == D(3)
    result = advance(first.ledger, [obs("a", 1, "1")], utc(2026, 5, 2, 1), "Daily", "UTC")
    assert result.new_period
    assert result.spent_usd == D(1)
    assert result.closed_period is not None
    assert (result.closed_period.period_start, result.closed_period.spent_usd) == (utc(2026, 5, 1), D(5))
    assert [s.counted for s in result.segments] == [False, True]


@pytest.mark.parametrize(("day", "hours"), [((2026, 3, 28, 23), 23), ((2026, 10, 24, 22), 25)],
                         ids=["spring-forward", "fall-back"])
def test_a_full_dst_day_in_berlin_costs_23_or_25_hours(day: tuple[int, ...], hours: int) -> None:
    start = utc(*day)
    end = start + timedelta(hours=hours)
    steps = [(start, [obs("a", 1, "1")])]
    steps += [(start + timedelta(minutes=m), [obs("a", 1, "1")]) for m in range(60, hours * 60, 60)]
    before_end = run(steps + [(end - timedelta(seconds=1), [obs("a", 1, "1")])], tz="Europe/Berlin")
    assert before_end.period_start == start and before_end.period_end == end
    # hours-1 whole hours plus 3599/3600 h = 0.999722222(2) rounded to 1e-9
    assert before_end.spent_usd == D(hours - 1) + D("0.999722222")
    at_end = advance(before_end.ledger, [obs("a", 1, "1")], end, "Daily", "Europe/Berlin")
    assert at_end.closed_period.spent_usd == D(hours)
    assert at_end.spent_usd == 0


def test_month_end_splits_january_from_february() -> None:
    result = run([(utc(2026, 1, 31, 23, 30), [obs("a", 1, "2")]), (utc(2026, 2, 1, 0, 30), [obs("a", 1, "2")])],
                 period="Monthly")
    assert result.spent_usd == D(1)
    assert result.closed_period.spent_usd == D(1)
    assert result.period_start == utc(2026, 2, 1)


def test_reload_from_status_counts_nothing_twice_and_loses_nothing() -> None:
    t0 = utc(2026, 5, 1, 6)
    steps = [(t0 + timedelta(minutes=10 * i), [obs("a", 3, "0.704574739"), obs("b", 1, "9.796550569", "ml")])
             for i in range(13)]
    continuous = run(steps)
    restarted = run(steps, via_status=True)
    # 12 intervals of 10 min, each rounded to 1e-9 half-even (money.py):
    #   a: 3 x 0.704574739 / 6 = 0.3522873695 -> 0.352287370;  b: 9.796550569 / 6 = 1.63275842816.. -> 1.632758428
    assert continuous.spent_usd == restarted.spent_usd == 12 * D("0.352287370") + 12 * D("1.632758428")
    # ...which is within the documented drift (0.5e-9 per interval per service) of the exact 2 h integral
    exact = 2 * 3 * D("0.704574739") + 2 * D("9.796550569")
    assert abs(continuous.spent_usd - exact) <= 24 * D("0.5e-9")


def test_rerun_at_the_same_instant_adds_nothing() -> None:
    first = run([(utc(2026, 5, 1, 6), [obs("a", 2, "1")]), (utc(2026, 5, 1, 7), [obs("a", 2, "1")])])
    again = advance(reload(first.ledger), [obs("a", 2, "1")], utc(2026, 5, 1, 7), "Daily", "UTC")
    assert again.spent_usd == first.spent_usd == D(2)
    assert ledger_json(again.ledger) == ledger_json(first.ledger)


def test_a_restart_after_downtime_integrates_the_gap_at_the_last_rate() -> None:
    first = run([(utc(2026, 5, 1, 6), [obs("a", 2, "1")])])
    after = advance(reload(first.ledger), [obs("a", 1, "1")], utc(2026, 5, 1, 9), "Daily", "UTC")
    assert after.spent_usd == D(6)  # 2 replicas x 1 USD/h x 3 h; the new count applies from now on


def test_unknown_rate_counts_nothing_and_is_reported() -> None:
    result = run([(utc(2026, 5, 1, 6), [obs("a", 2, None), obs("b", None, "1"), obs("c", 1, "1")]),
                  (utc(2026, 5, 1, 7), [obs("a", 2, "1"), obs("b", 1, "1"), obs("c", 1, "1")])])
    assert result.spent_usd == D(1)
    assert sorted((u.name, u.seconds) for u in result.unpriced) == [("a", 3600), ("b", 3600)]


def test_a_service_no_longer_observed_keeps_its_spend_until_the_period_ends() -> None:
    mid = run([(utc(2026, 5, 1, 6), [obs("a", 1, "1"), obs("b", 1, "1")]),
               (utc(2026, 5, 1, 8), [obs("a", 1, "1")])])
    assert mid.spent_usd == D(4)
    b = next(e for e in mid.ledger.entries if e.name == "b")
    assert (b.replicas, b.cost_usd_per_hour, b.spent_usd) == (0, 0, D(2))
    later = advance(mid.ledger, [obs("a", 1, "1")], utc(2026, 5, 1, 9), "Daily", "UTC")
    assert later.spent_usd == D(5)
    next_day = advance(later.ledger, [obs("a", 1, "1")], utc(2026, 5, 2, 1), "Daily", "UTC")
    assert [e.name for e in next_day.ledger.entries] == ["a"]


def test_a_clock_stepping_back_neither_goes_negative_nor_double_counts() -> None:
    first = run([(utc(2026, 5, 1, 6), [obs("a", 1, "1")]), (utc(2026, 5, 1, 8), [obs("a", 1, "1")])])
    back = advance(first.ledger, [obs("a", 1, "1")], utc(2026, 5, 1, 7), "Daily", "UTC")
    assert back.spent_usd == D(2) and back.ledger.observed_time == utc(2026, 5, 1, 8)
    forward = advance(back.ledger, [obs("a", 1, "1")], utc(2026, 5, 1, 9), "Daily", "UTC")
    assert forward.spent_usd == D(3)


def test_switching_daily_to_monthly_carries_todays_spend_and_monthly_to_daily_resets() -> None:
    daily = run([(utc(2026, 5, 10, 0), [obs("a", 1, "1")]), (utc(2026, 5, 10, 4), [obs("a", 1, "1")])])
    monthly = advance(daily.ledger, [obs("a", 1, "1")], utc(2026, 5, 10, 5), "Monthly", "UTC")
    assert monthly.spent_usd == D(5) and not monthly.new_period
    back = advance(monthly.ledger, [obs("a", 1, "1")], utc(2026, 5, 10, 6), "Daily", "UTC")
    assert back.new_period and back.spent_usd == D(1)


def test_missing_period_start_is_inferred_from_observed_time() -> None:
    first = run([(utc(2026, 5, 1, 6), [obs("a", 1, "1")]), (utc(2026, 5, 1, 8), [obs("a", 1, "1")])])
    without = read_ledger(ledger_json(first.ledger), None)
    assert advance(without, [obs("a", 1, "1")], utc(2026, 5, 1, 9), "Daily", "UTC").spent_usd == D(3)


def test_status_shape_matches_the_crd() -> None:
    result = run([(utc(2026, 5, 1, 6), [obs("a", 2, "1.5"), obs("b", None, "1")]),
                  (utc(2026, 5, 1, 7), [obs("a", 2, "1.5"), obs("b", None, "1")])])
    status = ledger_json(result.ledger)
    assert status["observedTime"] == "2026-05-01T07:00:00Z"
    assert status["services"][0] == {"namespace": "default", "name": "a", "replicas": 2,
                                     "costUSDPerHour": "3.000000000", "spent": "3.000000000"}
    assert status["services"][1] == {"namespace": "default", "name": "b", "spent": "0.000000000"}


@pytest.mark.parametrize(
    ("ledger", "fragment"),
    [
        ({"observedTime": "yesterday", "services": []}, "status.ledger.observedTime"),
        ({"services": [{"namespace": "a", "name": "b", "spent": "abc"}]}, "status.ledger.services[0].spent"),
        ({"services": [{"namespace": "a", "name": "b", "spent": 1.5}]}, "status.ledger.services[0].spent"),
        ({"services": [{"name": "b"}]}, "status.ledger.services[0].namespace"),
        ({"services": [{"namespace": "a", "name": "b", "replicas": -1}]}, "status.ledger.services[0].replicas"),
        ({"observedTime": "2026-05-01T07:00:00", "services": []}, "no time zone"),
    ],
)
def test_unreadable_status_names_the_field(ledger: dict, fragment: str) -> None:
    with pytest.raises(LedgerFormatError) as info:
        read_ledger(ledger)
    assert fragment in str(info.value)


def test_duplicate_observation_and_naive_now_are_rejected() -> None:
    with pytest.raises(ValueError, match="observed twice"):
        advance(Ledger(), [obs("a", 1, "1"), obs("a", 2, "1")], utc(2026, 5, 1), "Daily")
    with pytest.raises(ValueError, match="timezone-aware"):
        advance(Ledger(), [], datetime(2026, 5, 1), "Daily")


def test_rates_in_force_replace_only_what_the_next_interval_integrates() -> None:
    # a: 4 replicas x 1.5 = 6 USD/h for one hour -> 6; b: 1 x 2 = 2 USD/h -> 2.
    first = advance(Ledger(), [obs("a", 4, "1.5"), obs("b", 1, "2")], utc(2026, 5, 1, 9), "Daily").ledger
    at_10 = advance(first, [obs("a", 4, "1.5"), obs("b", 1, "2")], utc(2026, 5, 1, 10), "Daily").ledger
    lowered = with_rates_in_force(at_10, [obs("a", 1, "1.5")])
    assert lowered.spent_usd == at_10.spent_usd == D(8)  # spend already counted is untouched
    assert [(e.name, e.replicas, e.cost_usd_per_hour) for e in lowered.entries] == [("a", 1, D("1.5")), ("b", 1, D(2))]
    # 10:00 -> 10:30 at a 1 x 1.5 + b 2 = 3.5 USD/h -> 1.75 (at the observed 8 USD/h it would have been 4)
    later = advance(reload(lowered), [obs("a", 1, "1.5"), obs("b", 1, "2")], utc(2026, 5, 1, 10, 30), "Daily")
    assert later.spent_usd == D("9.75")
    with pytest.raises(ValueError, match="default/c"):
        with_rates_in_force(at_10, [obs("c", 1, "1")])


# ------------------------------------------------------------------ pods cost from their own start to their own stop
def test_each_pod_costs_from_its_own_start_to_its_own_stop_not_the_count_seen_at_the_last_evaluation() -> None:
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    long_ago = utc(2026, 5, 1, 9)
    a, b = PodRun("svc-a", long_ago), PodRun("svc-b", long_ago)
    first = advance(Ledger(), [ServiceObservation("default", "svc", 2, D("36"), pods=(a, b))], t0, "Daily")
    assert first.spent_usd == D("216")  # the first evaluation charges a and b from 09:00: 2 x 3 h x 36 USD/h
    # Mid-interval: b is terminating with its deletionTimestamp at t0 + 20 s (still listed at t1), c started at
    # t0 + 30 s. a 60 s + b 20 s + c 30 s = 110 replica-seconds at 36 USD/h (0.01 USD/s) = 1.10 USD; the count
    # seen at t0 held for the whole interval (2 x 60 s) said 1.20.
    b_stopping = PodRun("svc-b", long_ago, t0 + timedelta(seconds=20))
    c = PodRun("svc-c", t0 + timedelta(seconds=30))
    second = advance(reload(first.ledger), [ServiceObservation("default", "svc", 2, D("36"), pods=(a, b_stopping, c))],
                     t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.10")
    (seg,) = second.segments
    assert seg.replica_microseconds == 110_000_000
    # A pod counted at t0 that is gone at t1 without a deletion ever seen stopped somewhere in (t0, t1]: it is
    # charged to t1 (an upper bound; the next case is the exception). 2 pods at t0, only a left: 60 + 60 s.
    gone = advance(first.ledger, [ServiceObservation("default", "svc", 1, D("36"), pods=(a,))], t1, "Daily")
    assert gone.spent_usd - first.spent_usd == D("1.20")


def test_after_an_enforced_scale_to_zero_a_pod_seen_mid_scale_down_is_not_charged_for_the_next_interval() -> None:
    from modalscale.costmodel.ledger import PodRun

    # Issue 12: the enforcing evaluation lowered the ledger to 0 replicas; 1 s later an evaluation woken by the
    # alert still lists one pod not yet marked for deletion. The cap in force is applied, so that evaluation also
    # holds the ledger at the cap; the pod it saw is charged for the second it was seen, and nothing more once gone.
    t0 = utc(2026, 5, 1, 12)
    pod = PodRun("one-0", utc(2026, 5, 1, 11))
    enforcing = advance(Ledger(), [ServiceObservation("default", "one", 1, D("79.42"), pods=(pod,))], t0, "Daily")
    capped = with_rates_in_force(enforcing.ledger, [ServiceObservation("default", "one", 0, D("79.42"))])
    woken = advance(capped, [ServiceObservation("default", "one", 1, D("79.42"), pods=(pod,))],
                    t0 + timedelta(seconds=1), "Daily")
    assert enforcing.spent_usd == D("79.42")  # the first evaluation charges the pod from 11:00
    # 1 s x 79.42 USD/h = 0.022061111 USD
    assert woken.spent_usd - enforcing.spent_usd == D("0.022061111")
    held = with_rates_in_force(woken.ledger, [ServiceObservation("default", "one", 0, D("79.42"))])
    later = advance(held, [ServiceObservation("default", "one", 0, D("79.42"), pods=())], t0 + timedelta(seconds=11),
                    "Daily")
    # the snapshot rule charged 10 s x 79.42 USD/h = 0.220611111 more
    assert later.spent_usd - enforcing.spent_usd == D("0.022061111")


# ------------------------------------------------------------------ a policy created mid-period (user report item 6)
def test_a_policy_created_mid_period_charges_running_pods_from_their_own_start_not_its_first_evaluation() -> None:
    from modalscale.costmodel.ledger import PodRun

    # Daily period from 00:00 UTC; the policy's first evaluation is at 12:00. At 2 USD per replica-hour:
    # a started 09:00 -> 3 h = 6; b started yesterday 20:00 -> from the period start, 12 h = 24; c finished at
    # 10:00 after starting 08:00 (still listed) -> 2 h = 4; d's start is unknown -> nothing before 12:00.
    # 6 + 24 + 4 = 34 USD (the old ledger counted 0 until the next evaluation).
    now = utc(2026, 5, 1, 12)
    pods = (PodRun("s-a", utc(2026, 5, 1, 9)), PodRun("s-b", utc(2026, 4, 30, 20)),
            PodRun("s-c", utc(2026, 5, 1, 8), utc(2026, 5, 1, 10)), PodRun("s-d", None))
    first = advance(Ledger(), [ServiceObservation("default", "s", 3, D("2"), pods=pods)], now, "Daily")
    assert first.spent_usd == D("34")
    (seg,) = first.segments
    assert (seg.start, seg.end, seg.counted) == (utc(2026, 5, 1), now, True)
    assert seg.replica_microseconds == 17 * 3_600_000_000
    # The next minute charges the three running pods (a, b, d) as usual: 3 x 60 s x 2 USD/h = 0.1 USD.
    later = advance(reload(first.ledger), [ServiceObservation("default", "s", 3, D("2"), pods=pods)],
                    now + timedelta(minutes=1), "Daily")
    assert later.spent_usd == D("34.1")


def test_deleting_and_recreating_a_policy_does_not_reset_the_spend_of_pods_still_running() -> None:
    from modalscale.costmodel.ledger import PodRun

    pods = (PodRun("s-a", utc(2026, 5, 1, 6)),)
    steps = [(utc(2026, 5, 1, 8), pods), (utc(2026, 5, 1, 9), pods)]
    old = run([(t, [ServiceObservation("default", "s", 1, D("3"), pods=p)]) for t, p in steps])
    recreated = advance(Ledger(), [ServiceObservation("default", "s", 1, D("3"), pods=pods)], utc(2026, 5, 1, 9),
                        "Daily")
    assert old.spent_usd == recreated.spent_usd == D("9")  # 06:00 -> 09:00 at 3 USD/h


def test_a_service_that_appears_between_evaluations_is_charged_from_its_pods_start() -> None:
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    first = advance(Ledger(), [obs("x", 0, "1")], t0, "Daily")
    # y was created after t0; its pod started at t0 + 30 s: 30 s at 36 USD/h = 0.30. A pod of y that started
    # before t0 (y was selected only from t0 on, e.g. a label added) is charged from t0: 60 s = 0.60.
    y = ServiceObservation("default", "y", 2, D("36"), pods=(PodRun("y-0", t0 + timedelta(seconds=30)),
                                                            PodRun("y-1", utc(2026, 5, 1, 11))))
    second = advance(reload(first.ledger), [obs("x", 0, "1"), y], t1, "Daily")
    assert second.spent_usd == D("0.90")
    assert {(s.name, s.start) for s in second.segments if s.cost_usd} == {("y", t0)}


def test_a_new_services_pods_are_charged_at_the_tier_their_node_ran_them_and_unpriced_ones_are_reported() -> None:
    from modalscale.costmodel.ledger import PodRun

    now = utc(2026, 5, 1, 2)
    spot = ServiceObservation("default", "s", 2, D("4"), pods=(PodRun("s-0", utc(2026, 5, 1, 1), tier="Spot"),
                                                               PodRun("s-1", utc(2026, 5, 1, 1))),
                              tier_prices=(("Spot", D("1")),))
    assert advance(Ledger(), [spot], now, "Daily").spent_usd == D("5")  # 1 h at 1 (Spot) + 1 h at 4
    unknown = ServiceObservation("default", "u", 1, None, pods=(PodRun("u-0", utc(2026, 5, 1, 1)),))
    result = advance(Ledger(), [unknown], now, "Daily")
    assert result.spent_usd == 0 and [u.name for u in result.unpriced] == ["u"]


# ------------------------------------------------------------------ pods charged to when they stopped (issue 22, 1)
def _svc(pods: tuple, stopped: tuple = (), replicas: int | None = None) -> ServiceObservation:
    running = sum(1 for p in pods if p.stop is None)
    return ServiceObservation("default", "svc", running if replicas is None else replicas, D("36"), pods=pods,
                              stopped=stopped)


def test_a_pod_gone_before_the_next_evaluation_is_charged_to_its_recorded_stop_not_to_that_evaluation() -> None:
    from modalscale.costmodel.ledger import PodRun

    # 36 USD/h = 0.01 USD/s. At t0 a and b run (since 09:00). Between t0 and t1 (60 s): b stops at t0 + 20 s and
    # its pod is gone by t1; c starts at t0 + 10 s and stops at t0 + 40 s, never listed by any evaluation. The
    # operator's pod watch recorded both deletions. True run time: a 60 + b 20 + c 30 = 110 s = 1.10 USD.
    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a, b))], t0, "Daily")
    b_gone = replace(b, stop=t0 + timedelta(seconds=20))
    c_gone = PodRun("svc-c", t0 + timedelta(seconds=10), t0 + timedelta(seconds=40))
    second = advance(reload(first.ledger), [_svc((a,), stopped=(b_gone, c_gone))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.10")
    (seg,) = second.segments
    assert seg.replica_microseconds == 110_000_000
    # What the listing alone says (the fault): b charged to t1 (60 s), c never (0 s): 1.20 USD.
    listing_only = advance(reload(first.ledger), [_svc((a,))], t1, "Daily")
    assert listing_only.spent_usd - first.spent_usd == D("1.20")


def test_recorded_stops_passed_again_after_a_restart_or_a_rerun_charge_nothing_twice() -> None:
    from modalscale.costmodel.ledger import PodRun

    t0 = utc(2026, 5, 1, 12)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a, b))], t0, "Daily")
    b_gone = replace(b, stop=t0 + timedelta(seconds=20))
    second = advance(reload(first.ledger), [_svc((a,), stopped=(b_gone,))], t0 + timedelta(seconds=60), "Daily")
    assert second.spent_usd - first.spent_usd == D("0.80")  # a 60 s + b 20 s
    # The same evaluation again (a retry after a failed status write) and a restart that reloads the ledger from
    # status and is handed the same record again: the record lies before observedTime, so it charges nothing.
    rerun = advance(reload(second.ledger), [_svc((a,), stopped=(b_gone,))], t0 + timedelta(seconds=60), "Daily")
    assert rerun.spent_usd == second.spent_usd
    later = advance(reload(second.ledger), [_svc((a,), stopped=(b_gone,))], t0 + timedelta(seconds=120), "Daily")
    assert later.spent_usd - second.spent_usd == D("0.60")  # a alone


def test_a_pod_seen_only_by_its_deletion_is_charged_on_a_services_first_evaluation_too() -> None:
    from modalscale.costmodel.ledger import PodRun

    # The policy's first evaluation at 12:00 (Daily, from 00:00): the service's only pod ran 10:00-11:30 and is
    # gone; the watch recorded its deletion. 1.5 h x 36 USD/h = 54 USD (the listing alone knows nothing: 0).
    gone = PodRun("svc-x", utc(2026, 5, 1, 10), utc(2026, 5, 1, 11, 30))
    first = advance(Ledger(), [_svc((), stopped=(gone,))], utc(2026, 5, 1, 12), "Daily")
    assert first.spent_usd == D("54")
    assert advance(Ledger(), [_svc(())], utc(2026, 5, 1, 12), "Daily").spent_usd == 0


def test_a_stop_recorded_after_the_evaluation_that_missed_it_is_not_charged_again() -> None:
    from modalscale.costmodel.ledger import PodRun

    # b is gone at t1 but its deletion reaches the ledger only at t2 (the watch event came late, or the operator
    # restarted in between): t1 charges b to t1 (an upper bound: it stopped somewhere in (t0, t1]); the record at
    # t2 (stop t0 + 20 s, before observedTime) adds nothing. Never more than the upper bound, never twice.
    t0, t1, t2 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1), utc(2026, 5, 1, 12, 2)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a, b))], t0, "Daily")
    missed = advance(reload(first.ledger), [_svc((a,))], t1, "Daily")
    assert missed.spent_usd - first.spent_usd == D("1.20")
    late = advance(reload(missed.ledger), [_svc((a,), stopped=(replace(b, stop=t0 + timedelta(seconds=20)),))],
                   t2, "Daily")
    assert late.spent_usd - missed.spent_usd == D("0.60")  # a alone


def test_a_recorded_stop_earlier_than_the_listed_deadline_wins_and_clock_order_is_respected() -> None:
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a = PodRun("svc-a", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a,))], t0, "Daily")
    # Listed terminating with its deadline (deletionTimestamp) at t0 + 30 s; the record of its deletion says its
    # containers finished at t0 + 12 s: 12 s = 0.12 USD.
    listed = replace(a, stop=t0 + timedelta(seconds=30))
    finished = replace(a, stop=t0 + timedelta(seconds=12))
    both = advance(first.ledger, [_svc((listed,), stopped=(finished,), replicas=0)], t1, "Daily")
    assert both.spent_usd - first.spent_usd == D("0.12")
    # A kubelet clock ahead of the operator's: the record stops after ``now``. Charged to now, the rest at the next
    # evaluation (t1 + 10 s), never beyond its stop.
    ahead = replace(a, stop=t1 + timedelta(seconds=5))
    at_t1 = advance(first.ledger, [_svc((), stopped=(ahead,), replicas=0)], t1, "Daily")
    assert at_t1.spent_usd - first.spent_usd == D("0.60")
    after = advance(reload(at_t1.ledger), [_svc((), stopped=(ahead,), replicas=0)], t1 + timedelta(seconds=10),
                    "Daily")
    assert after.spent_usd - at_t1.spent_usd == D("0.05")
    # A record that stops before it started (clock skew between nodes) charges nothing, never a negative amount.
    odd = PodRun("svc-odd", t0 + timedelta(seconds=30), t0 + timedelta(seconds=10))
    skewed = advance(first.ledger, [_svc((a,), stopped=(odd,))], t1, "Daily")
    assert skewed.spent_usd - first.spent_usd == D("0.60")


def test_a_stopped_pod_without_a_stop_time_is_refused_naming_the_pod() -> None:
    from modalscale.costmodel.ledger import PodRun

    with pytest.raises(ValueError, match="default/svc: stopped pod svc-a has no stop time"):
        advance(Ledger(), [_svc((), stopped=(PodRun("svc-a", utc(2026, 5, 1, 9)),))], utc(2026, 5, 1, 12), "Daily")


def test_a_pod_listed_running_but_recorded_deleted_is_not_carried_as_a_replica_in_force() -> None:
    from modalscale.costmodel.ledger import PodRun

    # The listing at t1 still shows b running, but its deletion (stop t0 + 50 s) was recorded before the records
    # were read. b costs to its stop and is not among the replicas in force from t1: at t2 only a is charged (a
    # replica carried without a pod would be charged the whole next interval, as if gone unseen).
    t0, t1, t2 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1), utc(2026, 5, 1, 12, 2)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a, b))], t0, "Daily")
    b_gone = replace(b, stop=t0 + timedelta(seconds=50))
    second = advance(reload(first.ledger), [_svc((a, b), stopped=(b_gone,))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.10")  # a 60 s + b 50 s
    (entry,) = second.ledger.entries
    assert entry.replicas == 1 and entry.cost_usd_per_hour == D("36")
    third = advance(reload(second.ledger), [_svc((a,), stopped=(b_gone,))], t2, "Daily")
    assert third.spent_usd - second.spent_usd == D("0.60")


def test_a_pod_deleted_in_the_same_second_as_the_evaluation_that_listed_it_is_not_charged_as_gone_unseen() -> None:
    """Kubernetes stamps whole seconds and the ledger floors observedTime to whole seconds: a pod the evaluation at
    t0 (12:00:00.4) listed running and that was deleted 0.3 s later (grace 0: deletionTimestamp 12:00:00) has its
    recorded stop equal to t0. It was in force at t0; counting it as stopped before t0 made it a replica 'gone
    unseen' and charged it the whole interval (the integration test test_budget_pod_stops: 2.75 USD for 1.38)."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", t0)
    first = advance(Ledger(), [_svc((a, b))], t0 + timedelta(milliseconds=400), "Daily")
    b_gone = replace(b, stop=t0)  # deletionTimestamp 12:00:00Z, seen gone at 12:00:00.7
    second = advance(reload(first.ledger), [_svc((a,), stopped=(b_gone,))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("0.60")  # a for 60 s; b ran [t0, t0] as far as whole seconds say
    (seg,) = second.segments
    assert seg.replica_microseconds == 60_000_000


# ------------------------------------------------- pods bound after the evaluation's instant (issue 21, scenario 3)
def test_a_pod_bound_after_the_instant_of_the_evaluation_that_listed_it_is_not_charged_again_as_gone_unseen() -> None:
    """An evaluation reads its clock, then lists the pods. A pod bound during the listing (its ``PodScheduled``
    stamped the next whole second) is one of that evaluation's replicas, yet bound after its instant; the next
    evaluation charged it by its own run and charged the replica it had been counted as a second time, as one gone
    unseen, for the whole interval (ci58, test_ha's kill: 3 pod-seconds over the meter; here 60 s for a pod that ran
    58). 36 USD/h = 0.01 USD/s."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a = PodRun("svc-a", utc(2026, 5, 1, 9), bound=utc(2026, 5, 1, 9))
    # Listed at 12:00:00.9 + the listing's latency: bound at 12:00:01, its kubelet has not written startTime yet.
    p_listed = PodRun("svc-p", t0 + timedelta(seconds=1), bound=t0 + timedelta(seconds=1))
    p_started = replace(p_listed, start=t0 + timedelta(seconds=2))
    first = advance(Ledger(), [_svc((a, p_listed))], t0 + timedelta(milliseconds=900), "Daily")
    assert first.spent_usd == D("108")  # a since 09:00; p nothing before t0
    (entry,) = reload(first.ledger).entries
    assert entry.replicas == 2 and entry.late == ("svc-p",)
    second = advance(reload(first.ledger), [_svc((a, p_started))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.18")  # a 60 s + p 58 s (not + 60 s as a replica gone)
    (seg,) = second.segments
    assert seg.replica_microseconds == 118_000_000
    # The same pod deleted before the next evaluation, and nobody saw it go: charged as the replica it was counted
    # as, to the next evaluation (an upper bound: it ran at most 59 s), never by nothing.
    unseen = advance(reload(first.ledger), [_svc((a,))], t1, "Daily")
    assert unseen.spent_usd - first.spent_usd == D("1.20")
    # The next evaluation after that: p is no longer named; a alone.
    third = advance(reload(second.ledger), [_svc((a, p_started))], t1 + timedelta(seconds=60), "Daily")
    assert third.spent_usd - second.spent_usd == D("1.20") and third.ledger.entries[0].late == ()


def test_only_pods_counted_among_the_replicas_are_named_bound_after_the_instant() -> None:
    """A pod bound after the instant but already terminating (or finished) is not one of the replicas in force,
    so naming it would hide a replica that did go unseen: b, gone by t1 with nobody seeing it, is charged the whole
    interval beside q's own run to its stop."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    q = PodRun("svc-q", t0 + timedelta(seconds=1), t0 + timedelta(seconds=11), bound=t0 + timedelta(seconds=1))
    first = advance(Ledger(), [_svc((a, b, q))], t0, "Daily")
    assert first.ledger.entries[0].replicas == 2 and first.ledger.entries[0].late == ()
    second = advance(reload(first.ledger), [_svc((a, q))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.30")  # a 60 + b 60 (gone unseen) + q 10


def test_a_pod_listed_terminating_does_not_account_for_a_replica_gone_unseen() -> None:
    """A pod an evaluation listed already terminating (or charged to a silent node) is not among its replicas, yet
    at the next evaluation its deadline (after t0) made it look in force at t0, so it accounted for a replica that
    went unseen (the review of 094fb99: 0.30 charged for 0.90, a scale-down in progress while the operator that
    watches the pods is being replaced). The ledger names such pods (``LedgerEntry.uncounted``)."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a = PodRun("svc-a", utc(2026, 5, 1, 9))
    q = PodRun("svc-q", utc(2026, 5, 1, 9), t0 + timedelta(seconds=30))  # terminating at t0, its deadline t0 + 30 s
    first = advance(Ledger(), [_svc((a, q))], t0, "Daily")
    (entry,) = reload(first.ledger).entries
    assert entry.replicas == 1 and entry.uncounted == ("svc-q",)
    second = advance(reload(first.ledger), [_svc((q,))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("0.90")  # a gone unseen: 60 s (upper bound) + q to its deadline
    assert second.ledger.entries[0].uncounted == ()  # its deadline is before t1: it cannot look in force then
    # A pod listed running at t0 and deleted within that second (deadline = t0) was one of the replicas: named
    # nowhere, it accounts for itself (the grace-0 case above), so nothing is charged twice.
    b = PodRun("svc-b", utc(2026, 5, 1, 9))
    both = advance(Ledger(), [_svc((a, b))], t0, "Daily")
    again = advance(reload(both.ledger), [_svc((a,), stopped=(replace(b, stop=t0),))], t1, "Daily")
    assert again.spent_usd - both.spent_usd == D("0.60")


def test_an_evaluation_that_integrates_nothing_keeps_the_replicas_in_force_since_observed_time() -> None:
    """Two evaluations in one second, or a clock that stepped back, integrate nothing (the ledger stands still at
    observedTime). The second's smaller listing used to replace the replicas in force since observedTime, so a
    replica gone unseen in between was charged nothing at the next evaluation (the review of 094fb99: 0.60 for an
    upper bound of 1.20). Pods that appear meanwhile are charged by their own run whatever is in force."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a, b))], t0 + timedelta(seconds=30), "Daily")
    still = advance(reload(first.ledger), [_svc((b,))], t0 + timedelta(seconds=10), "Daily")  # clock back 20 s
    assert still.ledger.observed_time == t0 + timedelta(seconds=30) and still.ledger.entries[0].replicas == 2
    after = advance(reload(still.ledger), [_svc((b,))], t1 + timedelta(seconds=30), "Daily")
    assert after.spent_usd - first.spent_usd == D("1.20")  # b 60 s + a, gone unseen, 60 s (upper bound)
    # The same within one second: a scale-up seen by the second evaluation adds its pod's own run, nothing else.
    c = PodRun("svc-c", t0 + timedelta(seconds=30), bound=t0 + timedelta(seconds=30))
    same = advance(reload(first.ledger), [_svc((a, b, c))], t0 + timedelta(seconds=30, milliseconds=700), "Daily")
    assert same.ledger.entries[0].replicas == 2
    nxt = advance(reload(same.ledger), [_svc((a, b, c))], t1 + timedelta(seconds=30), "Daily")
    assert nxt.spent_usd - first.spent_usd == D("1.80")  # a, b, c 60 s each; nothing twice


def test_a_replica_gone_unseen_beside_one_at_another_tier_is_charged_its_own_price_not_the_average() -> None:
    """The rate in force was the sum of each pod's price at its tier (b on Spot at 7.2 USD/h, p on demand at 36);
    p went unseen. It was charged the average (21.6 USD/h: 0.36 for 60 s, under what it can have cost); it is
    charged what the rate in force leaves once b is priced, 36 USD/h (0.60). With b gone unseen instead, the two
    are charged the rate in force, 43.2 USD/h (the upper bound), as before."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    b = PodRun("svc-b", utc(2026, 5, 1, 9), tier="Spot")
    p = PodRun("svc-p", utc(2026, 5, 1, 9))

    def seen(pods: tuple) -> ServiceObservation:
        return ServiceObservation("default", "svc", len(pods), D("36"), pods=pods, tier_prices=(("Spot", D("7.2")),))

    first = advance(Ledger(), [seen((b, p))], t0, "Daily")
    assert first.ledger.entries[0].cost_usd_per_hour == D("43.2")
    on_demand_gone = advance(reload(first.ledger), [seen((b,))], t1, "Daily")
    assert on_demand_gone.spent_usd - first.spent_usd == D("0.72")  # b 60 s at 7.2 + p 60 s at 36
    spot_gone = advance(reload(first.ledger), [seen((p,))], t1, "Daily")
    assert spot_gone.spent_usd - first.spent_usd == D("0.72")


def test_a_replica_gone_unseen_is_never_charged_above_the_dearest_price_a_replica_has() -> None:
    """The second review (F1): three Spot pods (7.2 USD/h) of a service priced on demand (36); a cap of 2 sets the
    rate in force to 2 x 36 = 72 USD/h (the cap's rate knows no tiers). Two go unseen, a is listed: what the rate
    leaves once a is priced, 64.8 USD/h, is more than any replica costs; one replica gone unseen is charged at
    most 36 USD/h: a 0.12 + 0.60 = 0.72 (an upper bound; 1.20 without the bound)."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b, c = (PodRun(f"svc-{x}", utc(2026, 5, 1, 9), tier="Spot") for x in "abc")

    def seen(pods: tuple) -> ServiceObservation:
        return ServiceObservation("default", "svc", len(pods), D("36"), pods=pods, tier_prices=(("Spot", D("7.2")),))

    first = advance(Ledger(), [seen((a, b, c))], t0, "Daily")
    capped = with_rates_in_force(first.ledger, [ServiceObservation("default", "svc", 2, D("36"))])
    second = advance(reload(capped), [seen((a,))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("0.72")


def test_a_pod_bound_in_the_second_of_the_instant_accounts_for_a_replica_only_if_that_evaluation_counted_it() -> None:
    """The second review (F2): c is bound within the second of the evaluation at t0 (stamped t0) but after its
    listing, so it is not one of its replicas; at t1, b gone unseen, c looked in force at t0 and stood in for b
    (1.20 charged for an upper bound of 1.80). A pod whose start or binding is in the instant's second accounts for
    a replica only when that evaluation counted it (named in ``late``), as the one bound after it."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    c = PodRun("svc-c", t0, bound=t0)
    first = advance(Ledger(), [_svc((a, b))], t0 + timedelta(milliseconds=100), "Daily")
    second = advance(reload(first.ledger), [_svc((a, c))], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.80")  # a 60 + c 60 + b 60 (gone unseen, upper bound)
    # A second evaluation in the same second that lists c: the replicas in force since t0 are kept (2, c not named).
    again = advance(reload(first.ledger), [_svc((a, b, c))], t0 + timedelta(milliseconds=800), "Daily")
    assert again.ledger.entries[0].replicas == 2
    third = advance(reload(again.ledger), [_svc((a, c))], t1, "Daily")
    assert third.spent_usd - first.spent_usd == D("1.80")
    # Listed by the evaluation at t0, c is one of its replicas: named, it accounts for itself, nothing twice.
    counted = advance(Ledger(), [_svc((a, b, c))], t0 + timedelta(milliseconds=100), "Daily")
    assert counted.ledger.entries[0].late == ("svc-c",)
    fourth = advance(reload(counted.ledger), [_svc((a, b, c))], t1, "Daily")
    assert fourth.spent_usd - counted.spent_usd == D("1.80")


def test_a_pod_bound_before_the_instant_then_cut_at_its_silent_node_still_accounts_for_its_replica() -> None:
    """The third review (r1): p bound at t0 - 1 s is counted at t0 (not named: its binding is before t0's second);
    its kubelet writes startTime t0, and its node, last heard at t0 - 5 s, is marked silent before t1. It is the
    replica it was counted as (charged to its cut), not a new pod beside a replica gone unseen: a 60 s = 0.60."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a = PodRun("svc-a", utc(2026, 5, 1, 9))
    bind = t0 - timedelta(seconds=1)
    first = advance(Ledger(), [_svc((a, PodRun("svc-p", bind, bound=bind)))], t0 + timedelta(milliseconds=200),
                    "Daily")
    assert first.ledger.entries[0].replicas == 2 and first.ledger.entries[0].late == ()
    cut = PodRun("svc-p", t0, bound=bind, unheard_since=t0 - timedelta(seconds=5))
    second = advance(reload(first.ledger), [_svc((a, cut), replicas=2)], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("0.60")


def test_a_replica_gone_unseen_when_a_price_is_unknown_is_not_priced_below_what_the_rate_in_force_leaves() -> None:
    """The third review (r3): b on Spot (7.2 USD/h) and p on demand (36), 43.2 in force; at t1 p is gone unseen and
    the catalog cannot price on demand. The dearest price is not known, so no bound applies: p is charged what the
    rate in force leaves once b is priced (36 USD/h), not the average, and not bounded by the Spot price alone."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    b, p = PodRun("svc-b", utc(2026, 5, 1, 9), tier="Spot"), PodRun("svc-p", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [ServiceObservation("default", "svc", 2, D("36"), pods=(b, p),
                                                  tier_prices=(("Spot", D("7.2")),))], t0, "Daily")
    blind = ServiceObservation("default", "svc", 1, None, pods=(b,), tier_prices=(("OnDemand", None),
                                                                                  ("Spot", D("7.2"))))
    second = advance(reload(first.ledger), [blind], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("0.72")


def test_a_replica_gone_unseen_between_the_instant_and_the_listing_is_charged_to_the_listing() -> None:
    """The evaluation at t1 reads its clock (12:01:00.7), then lists the pods (12:01:01.3); b, deleted at
    12:01:01.2 (grace 0: deletionTimestamp 12:01:01) while nobody recorded deletions, is not listed. It was gone by
    the listing, not by the instant: a replica gone unseen is charged to the listing's whole second (61 s), an
    upper bound; to the instant it was 60 s, under what it ran (the meter property of test_cost_ledger_meter.py)."""
    from modalscale.costmodel.ledger import PodRun

    t0, t1 = utc(2026, 5, 1, 12), utc(2026, 5, 1, 12, 1)
    a, b = PodRun("svc-a", utc(2026, 5, 1, 9)), PodRun("svc-b", utc(2026, 5, 1, 9))
    first = advance(Ledger(), [_svc((a, b))], t0, "Daily")
    listed = t1 + timedelta(seconds=1, milliseconds=300)
    second = advance(reload(first.ledger), [_svc((a,))], t1 + timedelta(milliseconds=700), "Daily", listed_at=listed)
    assert second.spent_usd - first.spent_usd == D("1.21")  # a 60 s + b 61 s
    third = advance(reload(second.ledger), [_svc((a,))], t1 + timedelta(seconds=60), "Daily",
                    listed_at=t1 + timedelta(seconds=60, milliseconds=20))
    assert third.spent_usd - second.spent_usd == D("0.60")  # a alone; b nothing twice
    # Without a listing time (or one in the instant's second) nothing changes.
    assert advance(reload(first.ledger), [_svc((a,))], t1, "Daily").spent_usd - first.spent_usd == D("1.20")


@pytest.mark.parametrize("raw", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_whose_offset_leaves_utcs_years_is_a_ledger_format_error_naming_the_field(raw: str) -> None:
    """Found by an adversarial probe: ``OverflowError`` left ``parse_time`` instead of its declared error, past the
    callers that catch only :class:`LedgerFormatError` (``pod_runs``' unreadable start times)."""
    from modalscale.costmodel.ledger import parse_time

    with pytest.raises(LedgerFormatError, match=r"status\.ledger\.observedTime: .* outside the years 1-9999"):
        parse_time(raw, "status.ledger.observedTime")


def test_taking_back_a_silent_nodes_pod_never_leaves_a_negative_spend() -> None:
    """A pod bound to a node 5 s after its kubelet was last heard (the node is marked Unknown only after the grace
    period, and the scheduler binds to it meanwhile; no kubelet writes its startTime) is charged by its run at two
    60 s evaluations (each rounded to 1e-9, both down: 0.010002087), then taken back whole, 120 s at once (rounded
    once: 0.020004175) when its node is seen silent. The service's spend went to -1e-9, which ``plan_budget``
    refuses ("spend must be >= 0"): the evaluation raised, and every later one that re-read the stored ledger,
    so the policy was not evaluated at all. A service costs 0 or more; what is taken back is at most what it was
    charged this period."""
    from modalscale.api.budgetpolicy import parse_budget_spec
    from modalscale.costmodel.budget import AlertState, ServiceState
    from modalscale.costmodel.evaluation import evaluate_budget
    from modalscale.costmodel.ledger import PodRun

    heard = utc(2026, 11, 30, 10)
    bind = heard + timedelta(seconds=5)
    price = D("0.600125239")  # the catalog's replica of 1 CPU, 2Gi and one nvidia-l4
    pod = PodRun("vc-0", bind, bound=bind)
    ledger = Ledger()
    for k in (1, 2):
        ledger = advance(ledger, [ServiceObservation("ml", "vc", 1, price, (pod,))], bind + timedelta(minutes=k),
                         "Daily").ledger
    assert ledger.spent_usd == D("0.020004174")
    cut = PodRun("vc-0", bind, bound=bind, unheard_since=heard)
    now = bind + timedelta(minutes=3)
    result = advance(reload(ledger), [ServiceObservation("ml", "vc", 0, price, (cut,))], now, "Daily")
    assert result.spent_usd == 0 and all(e.spent_usd >= 0 for e in result.ledger.entries)
    spec = parse_budget_spec({"period": "Daily", "limit": {"amount": "10"}, "thresholds": [{"percent": 50}]})
    evaluation = evaluate_budget(spec, reload(ledger), [ServiceState("ml", "vc", 0, 4, price, pods=(cut,))],
                                 AlertState(), now)
    assert evaluation.plan.spent_usd == 0
